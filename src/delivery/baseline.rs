//! The copy a worker gets, and what the zone held when it was taken. The zone is walked
//! beneath its held handle (nothing followed) as the worker's user ([`crate::identity`]):
//! plain files and directories with names the checker would accept, and that the worker may
//! read, are copied, owned by the worker's user. Everything else (links, special files, odd
//! names, what the worker's user cannot read or enter) is left out of the copy and
//! therefore never touched on publish; what the worker could not read is named
//! ([`Baseline::not_copied`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use sha2::{Digest, Sha256};

use super::walk::{names, open_dir, open_file};
use super::DeliveryError;
use crate::identity::Identity;
use crate::plan::UserSpec;

/// How a host file was when the copy was taken: its identity and times (to notice a change
/// on the host during the run) and its content's hash (to notice the worker's change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
    pub sha256: [u8; 32],
    pub executable: bool,
}

impl Seen {
    /// True when `st` is still the very file that was copied, unchanged.
    pub fn same(&self, st: &Stat) -> bool {
        FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
            && (st.st_dev, st.st_ino, st.st_size as u64) == (self.dev, self.ino, self.size)
            && (st.st_mtime, st.st_mtime_nsec as i64) == self.mtime
            && (st.st_ctime, st.st_ctime_nsec as i64) == self.ctime
    }
}

/// What the zone held at run start, by path components.
#[derive(Debug, Default, Clone)]
pub struct Baseline {
    pub files: BTreeMap<Vec<String>, Seen>,
    pub dirs: BTreeSet<Vec<String>>,
    /// Files and directories (with `true`) the worker's user may not read or enter: not
    /// copied, and on publish nothing at or beneath them is written or deleted. The empty
    /// path is the zone itself.
    pub not_copied: BTreeMap<Vec<String>, bool>,
}

impl Baseline {
    /// True when `path` is at or beneath an entry that was not copied.
    pub fn beneath_not_copied(&self, path: &[String]) -> bool {
        (0..=path.len()).any(|n| self.not_copied.contains_key(&path[..n]))
    }

    /// What was not copied, for a summary (directories end in `/`, the zone itself is `./`).
    pub fn not_copied_names(&self) -> super::summary::Names {
        let mut out = super::summary::Names::default();
        for (p, dir) in &self.not_copied {
            out.name(&if p.is_empty() { "./".into() } else { format!("{}{}", p.join("/"), if *dir { "/" } else { "" }) });
        }
        out
    }
}

/// A zone's private copy: removed when dropped.
#[derive(Debug)]
pub struct Copy {
    _tmp: tempfile::TempDir,
    path: PathBuf,
    root: OwnedFd,
    pub baseline: Baseline,
}

impl Copy {
    /// The copy's directory (what the worker gets instead of the zone).
    pub fn root(&self) -> &OwnedFd {
        &self.root
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Copies the zone held by `zone` into a new private directory owned by `owner`, reading it
/// as `owner`: what that user may not read is not copied (see [`Baseline::not_copied`]).
pub fn copy_in(zone: impl AsFd, zone_name: &str, owner: UserSpec) -> Result<Copy, DeliveryError> {
    let err = |op| DeliveryError::io(op, zone_name);
    let tmp = tempfile::Builder::new().prefix("workcell-copy-").tempdir().map_err(err("create the private copy"))?;
    let zst = rustix::fs::fstat(&zone).map_err(|e| err("read the zone")(e.into()))?;
    let path = tmp.path().join("zone");
    std::fs::create_dir(&path).map_err(err("create the private copy"))?;
    let root = rustix::fs::open(&path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| err("open the private copy")(e.into()))?;
    // The copy's own directory is the worker's (made by workcell in its private temporary
    // directory); everything beneath it is made by the worker's user.
    own(&root, owner, zst.st_mode | 0o700).map_err(err("own the private copy"))?;
    let (zone, root_fd) = (zone.as_fd(), root.as_fd());
    let baseline = Identity::of(owner)
        .run(move || {
            let mut baseline = Baseline::default();
            // The held handle may be an O_PATH one: a readable handle of the same directory,
            // opened as the worker (a zone it may not list is not copied at all).
            let listed = rustix::fs::openat(zone, c".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(io::Error::from)
                .and_then(|zone| Ok((names(&zone)?, zone)));
            match listed {
                Ok((listed, zone)) => copy_tree(zone.as_fd(), listed, root_fd, owner, &mut Vec::new(), &mut baseline)?,
                Err(e) if refused(&e) => {
                    baseline.not_copied.insert(Vec::new(), true);
                }
                Err(e) => return Err(e),
            }
            Ok(baseline)
        })
        .map_err(|e| err("copy the zone")(io::Error::other(e)))?
        .map_err(err("copy the zone"))?;
    Ok(Copy { _tmp: tmp, path, root, baseline })
}

/// True when the operating system refused the worker's user (not an error of the copy).
fn refused(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
}

fn own(fd: impl AsFd, owner: UserSpec, mode: u32) -> io::Result<()> {
    std::os::unix::fs::fchown(&fd, Some(owner.uid), Some(owner.gid))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o777))?;
    Ok(())
}

/// Copies the entries `listed` of `from` (listed first, so that a directory the worker may
/// read but not search is refused before anything of it is made).
fn copy_tree(
    from: std::os::fd::BorrowedFd<'_>,
    listed: Vec<std::ffi::CString>,
    to: std::os::fd::BorrowedFd<'_>,
    owner: UserSpec,
    at: &mut Vec<String>,
    b: &mut Baseline,
) -> io::Result<()> {
    for n in listed {
        let Some(name) = n.to_str().ok().map(str::to_string) else { continue };
        at.push(name);
        // A name the checker would refuse is not copied: the worker never sees it, and its
        // absence from the copy is not read as a deletion.
        if super::name::components(at.join("/").as_bytes()).is_ok() {
            match copy_entry(from, to, &n, owner, at, b) {
                Ok(()) => {}
                Err(EntryError::Unreadable { dir }) => {
                    b.not_copied.insert(at.clone(), dir);
                }
                Err(EntryError::Io(e)) => return Err(e),
            }
        }
        at.pop();
    }
    Ok(())
}

/// Why an entry was not copied.
enum EntryError {
    /// The worker's user may not read it (a directory: may not list or enter it).
    Unreadable { dir: bool },
    /// The copy failed.
    Io(io::Error),
}

impl From<io::Error> for EntryError {
    fn from(e: io::Error) -> Self {
        EntryError::Io(e)
    }
}

/// A result of reading the zone: only its refusals mean "the worker may not read it"; a
/// failure writing the copy is an error of the copy.
fn source<T>(r: io::Result<T>, dir: bool) -> Result<T, EntryError> {
    r.map_err(|e| if refused(&e) { EntryError::Unreadable { dir } } else { EntryError::Io(e) })
}

fn copy_entry(
    from: std::os::fd::BorrowedFd<'_>,
    to: std::os::fd::BorrowedFd<'_>,
    n: &CStr,
    owner: UserSpec,
    at: &mut Vec<String>,
    b: &mut Baseline,
) -> Result<(), EntryError> {
    let st = source(rustix::fs::statat(from, n, AtFlags::SYMLINK_NOFOLLOW).map_err(io::Error::from), false)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {
            let src = source(open_dir(from, n), true)?;
            let listed = source(names(&src), true)?;
            rustix::fs::mkdirat(to, n, Mode::from_raw_mode(0o700)).map_err(io::Error::from)?;
            let dst = open_dir(to, n)?;
            own(&dst, owner, st.st_mode | 0o700)?;
            b.dirs.insert(at.clone());
            Ok(copy_tree(src.as_fd(), listed, dst.as_fd(), owner, at, b)?)
        }
        FileType::RegularFile => Ok(copy_file(source(open_file(from, n), false)?, to, n, owner, at, b)?),
        // Links and special files stay on the host only.
        _ => Ok(()),
    }
}

fn copy_file(
    (mut src, st): (std::fs::File, Stat),
    to: std::os::fd::BorrowedFd<'_>,
    n: &CStr,
    owner: UserSpec,
    at: &[String],
    b: &mut Baseline,
) -> io::Result<()> {
    let dst = rustix::fs::openat(to, n, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    let mut dst = std::fs::File::from(dst);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let k = src.read(&mut buf)?;
        if k == 0 {
            break;
        }
        hasher.update(&buf[..k]);
        dst.write_all(&buf[..k])?;
    }
    own(&dst, owner, st.st_mode | 0o600)?;
    let executable = st.st_mode & 0o111 != 0;
    let seen = Seen {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        sha256: hasher.finalize().into(),
        executable,
    };
    b.files.insert(at.to_vec(), seen);
    Ok(())
}
