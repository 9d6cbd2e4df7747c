//! The private temporary directories of `delivery: copy` (a zone's copy, `workcell-copy-*`,
//! and the staging of checked files, `workcell-delivery-*`), made so that `workcell gc` can
//! tell a live run's directory from a dead run's and removal never depends on depth.
//!
//! Liveness: each directory holds a lock file, `flock`ed by the run that made it for as long
//! as the directory is in use. The lock file is locked *before* it gets its name (made as
//! `.workcell-lock.new`, locked, renamed), so `gc` never finds an unlocked lock file of a
//! live run; a lock `gc` can take belongs to a process that is gone (the kernel releases a
//! `flock` when its holder dies, however it dies). The worker never sees the lock: it gets a
//! directory beneath this one.
//!
//! Removal goes through [`crate::hostrun::remove::remove_tree`] (bounded descriptors, any
//! depth), and a failure is said on stderr, never dropped.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

use crate::hostrun::remove::remove_tree;

/// The prefixes of the directories made here.
pub const PREFIXES: [&str; 2] = ["workcell-copy-", "workcell-delivery-"];
/// The lock file inside each directory.
const LOCK: &CStr = c".workcell-lock";
const LOCK_NEW: &CStr = c".workcell-lock.new";
/// A directory without its lock file is left alone this long (its run may be between
/// making the directory and locking it).
const GRACE: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A private directory (mode 0700) in the temporary directory (`TMPDIR`), locked while it
/// lives, removed when dropped.
#[derive(Debug)]
pub struct ScratchDir {
    base: OwnedFd,
    name: CString,
    path: PathBuf,
    dir: OwnedFd,
    _lock: OwnedFd,
}

impl ScratchDir {
    /// Makes `PREFIX…` in the temporary directory, and locks it.
    pub fn new(prefix: &str) -> io::Result<ScratchDir> {
        let path = tempfile::Builder::new().prefix(prefix).tempdir()?.keep();
        let made = Self::lock(&path);
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&path);
        }
        made
    }

    fn lock(path: &Path) -> io::Result<ScratchDir> {
        let (parent, name) = (path.parent().unwrap_or(Path::new("/")), path.file_name().unwrap_or_default());
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let base = rustix::fs::open(parent, dir_flags, Mode::empty())?;
        let name = CString::new(name.as_bytes())?;
        let dir = rustix::fs::openat(&base, &name, dir_flags, Mode::empty())?;
        let lock =
            rustix::fs::openat(&dir, LOCK_NEW, OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
        rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive)?;
        rustix::fs::renameat(&dir, LOCK_NEW, &dir, LOCK)?;
        Ok(ScratchDir { base, name, path: path.to_path_buf(), dir, _lock: lock })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // Removed while still locked: gc does not race this removal.
        if let Err(e) = remove_tree(self.base.as_fd(), &self.name) {
            eprintln!("workcell: cannot remove {}: {e} (`workcell gc` removes it once this run is over)", crate::term::escape(&self.path.to_string_lossy()));
        }
    }
}

/// What [`remove_stale`] did.
#[derive(Debug, Default)]
pub struct Stale {
    pub removed: Vec<PathBuf>,
    /// Directories of dead runs that could not be removed, with the reason.
    pub errors: Vec<String>,
}

/// Removes the directories of [`PREFIXES`] whose run is over, in the temporary directory
/// (`TMPDIR`), `/tmp`, `/var/tmp` and `/dev/shm`: yours, or anyone's as root. A live run's
/// directory (its lock held) is never removed.
pub fn remove_stale() -> Stale {
    let mut bases = vec![std::env::temp_dir()];
    bases.extend(["/tmp", "/var/tmp", "/dev/shm"].map(PathBuf::from));
    let bases: Vec<PathBuf> = bases.into_iter().filter_map(|b| std::fs::canonicalize(b).ok()).collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Stale::default();
    for base in bases.into_iter().filter(|b| seen.insert(b.clone())) {
        remove_stale_in(&base, &mut out);
    }
    out
}

/// [`remove_stale`] in one directory.
pub fn remove_stale_in(base: &Path, out: &mut Stale) {
    let uid = rustix::process::geteuid().as_raw();
    let Ok(basefd) = rustix::fs::open(base, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) else { return };
    let Ok(entries) = std::fs::read_dir(base) else { return };
    for e in entries.flatten() {
        let file_name = e.file_name();
        if !PREFIXES.iter().any(|p| file_name.as_bytes().starts_with(p.as_bytes())) {
            continue;
        }
        let Ok(name) = CString::new(file_name.as_bytes()) else { continue };
        let path = base.join(&file_name);
        match stale(basefd.as_fd(), &name, uid) {
            // Removed while the dead run's lock is held here: no run takes an old lock.
            Ok(Some(_lock)) => match remove_tree(basefd.as_fd(), &name) {
                Ok(()) => out.removed.push(path),
                Err(e) => out.errors.push(format!("{}: {e}", path.display())),
            },
            Ok(None) => {}
            Err(e) => out.errors.push(format!("{}: {e}", path.display())),
        }
    }
}

/// `Some(lock)` when `name` beneath `base` is a directory of ours whose run is over (the
/// lock, held until it is removed); `None` when it is live, young, a link, or another user's.
fn stale(base: BorrowedFd<'_>, name: &CStr, uid: u32) -> io::Result<Option<Option<OwnedFd>>> {
    let dir = match rustix::fs::openat(base, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
        Ok(d) => d,
        Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&dir)?;
    if uid != 0 && st.st_uid != uid {
        return Ok(None);
    }
    // Not blocking on a fifo, not following a link: whoever can write the temporary
    // directory could have put either there.
    match rustix::fs::openat(&dir, LOCK, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()) {
        Ok(lock) if !rustix::fs::fstat(&lock).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile) => Ok(None),
        Err(Errno::LOOP) => Ok(None),
        Ok(lock) => match rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(Some(Some(lock))),
            Err(Errno::WOULDBLOCK) => Ok(None),
            Err(e) => Err(e.into()),
        },
        // No lock (a run between making and locking it, or one of a workcell before locks):
        // only an old one is taken for dead.
        Err(Errno::NOENT) => {
            let age = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() as i64 - st.st_mtime;
            Ok((age > GRACE.as_secs() as i64).then_some(None))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_directory_is_kept_and_a_dead_one_removed() {
        let base = tempfile::tempdir().unwrap();
        let live_path = {
            let live = tempfile::Builder::new().prefix("workcell-copy-").tempdir_in(base.path()).unwrap().keep();
            let live = ScratchDir::lock(&live).unwrap();
            // A dead run's directory (as after SIGKILL): its lock file there, nobody holding it.
            let dead = tempfile::Builder::new().prefix("workcell-delivery-").tempdir_in(base.path()).unwrap().keep();
            std::fs::create_dir_all(dead.join("a/b/c")).unwrap();
            std::fs::write(dead.join(".workcell-lock"), "").unwrap();
            // Not ours to judge: a fifo or a link where the lock should be (gc neither hangs
            // nor removes it).
            let odd = base.path().join("workcell-copy-fifo");
            std::fs::create_dir(&odd).unwrap();
            rustix::fs::mknodat(rustix::fs::CWD, odd.join(".workcell-lock").as_path(), FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
            let link = base.path().join("workcell-copy-link");
            std::fs::create_dir(&link).unwrap();
            std::os::unix::fs::symlink(dead.join(".workcell-lock"), link.join(".workcell-lock")).unwrap();
            let mut out = Stale::default();
            remove_stale_in(base.path(), &mut out);
            assert!(odd.exists() && link.exists() && out.errors.is_empty(), "{:?}", out.errors);
            assert_eq!(out.removed, std::slice::from_ref(&dead), "{:?}", out.errors);
            assert!(live.path().exists() && !dead.exists());
            live.path().to_path_buf()
        };
        assert!(!live_path.exists(), "removed when dropped");
    }
}
