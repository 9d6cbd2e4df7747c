//! Replacing and removing one host file so that a host change is never lost: the file is
//! judged again at the moment it is replaced, not seconds earlier when its new content
//! started to be written.
//!
//! - A new file is renamed into place with `RENAME_NOREPLACE`: a file the host created
//!   meanwhile makes the rename fail, and the host's file stays (a conflict).
//! - A changed file is swapped with `RENAME_EXCHANGE`: the old file, now under the
//!   temporary name and out of reach of anyone opening it by name, is compared with what
//!   the copy was taken from (identity, size, times and content hash); if the host changed
//!   it, it is swapped back (a conflict).
//! - A deleted file is renamed aside first and judged the same way before it is unlinked.
//!
//! What no rename can catch is a host process that holds the old file open and writes
//! into it after the swap: it writes into a file that is no longer in the zone.

use std::ffi::{CStr, CString};
use std::io::{self, Read};
use std::os::fd::BorrowedFd;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, Stat};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use super::baseline::Seen;
use super::collect::FileOut;

/// What became of one change.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It is on the host.
    Landed,
    /// The host's entry is not what the copy was taken from: left as the host has it.
    Conflict,
}

/// A fresh name for a temporary entry beside the target.
fn temp_name(kind: &str) -> io::Result<CString> {
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| io::Error::other(e.to_string()))?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    CString::new(format!(".workcell-{kind}-{hex}")).map_err(io::Error::other)
}

fn stat_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<Stat>> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// True when `name` beneath `dir`, just renamed there by us, is still the file `seen`
/// describes with the same content. Its change time is not compared: the rename itself
/// sets it (the full status, change time included, was compared just before the rename).
fn unchanged_after_rename(dir: BorrowedFd<'_>, name: &CStr, seen: &Seen) -> io::Result<bool> {
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    let same = (st.st_dev, st.st_ino, st.st_size as u64, (st.st_mtime, st.st_mtime_nsec as i64)) == (seen.dev, seen.ino, seen.size, seen.mtime);
    if !same || rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Ok(false);
    }
    let mut file = std::fs::File::from(fd);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(<[u8; 32]>::from(hasher.finalize()) == seen.sha256)
}

/// Whether a file of mode `mode` counts as executable (any execute bit), as a staged file's
/// `executable` is taken.
pub fn is_executable(mode: impl Into<u32>) -> bool {
    mode.into() & 0o111 != 0
}

/// Writes `f` (its staged content: `src`) as `name` beneath `dir`: new when `seen` is
/// `None`, else replacing the file the copy was taken from. A changed file keeps the owner
/// and mode of the host file it replaces; a new one is its maker's (on publish, the worker's
/// user).
pub fn write(dir: BorrowedFd<'_>, name: &CStr, f: &FileOut, seen: Option<&Seen>, src: std::fs::File) -> io::Result<Outcome> {
    let now = stat_at(dir, name)?;
    let (owner, mode) = match (seen, &now) {
        (Some(s), Some(st)) if s.same(st) => {
            // Its mode as it was, unless the change made it executable or took that away.
            let mut mode = st.st_mode & 0o777;
            if f.executable != is_executable(st.st_mode) {
                if f.executable {
                    mode |= (mode & 0o444) >> 2;
                } else {
                    mode &= !0o111;
                }
            }
            (Some((st.st_uid, st.st_gid)), mode)
        }
        (None, None) => (None, if f.executable { 0o755 } else { 0o644 }),
        _ => return Ok(Outcome::Conflict),
    };
    let tmp = temp_name("publish")?;
    let fd = rustix::fs::openat(
        dir,
        tmp.as_c_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let out = std::fs::File::from(fd);
    let result = (|| {
        // Its data only: a staged file's holes (runs of zeros) stay holes on the host.
        if super::sparse::copy(&src, &out, f.size)? != f.sha256 {
            return Err(io::Error::other("the staged content changed before it was published"));
        }
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&out, Some(uid), Some(gid))?;
        }
        rustix::fs::fchmod(&out, Mode::from_raw_mode(mode))?;
        match seen {
            None => match rustix::fs::renameat_with(dir, tmp.as_c_str(), dir, name, RenameFlags::NOREPLACE) {
                Ok(()) => Ok(Outcome::Landed),
                // The host made a file (or anything else) there meanwhile.
                Err(Errno::EXIST) => Ok(Outcome::Conflict),
                Err(e) => Err(e.into()),
            },
            Some(seen) => swap_in(dir, &tmp, name, seen),
        }
    })();
    // After a landed swap the temporary name holds the old file, judged unchanged: it goes.
    // Otherwise it should hold our own file; if the host's file ended up there (it changed
    // the file during the check and then replaced the target before the swap back), it is
    // kept and named.
    let ours = rustix::fs::fstat(&out).map(|st| (st.st_dev, st.st_ino));
    let at_tmp = stat_at(dir, tmp.as_c_str()).ok().flatten().map(|st| (st.st_dev, st.st_ino));
    match (&result, at_tmp) {
        (_, None) => result,
        (Ok(Outcome::Landed), Some(_)) => {
            let _ = rustix::fs::unlinkat(dir, tmp.as_c_str(), AtFlags::empty());
            result
        }
        (_, Some(id)) if ours.is_ok_and(|o| o == id) => {
            let _ = rustix::fs::unlinkat(dir, tmp.as_c_str(), AtFlags::empty());
            result
        }
        (_, Some(_)) => Err(io::Error::other(format!(
            "the host changed this file twice during its publish; the host's earlier version is kept as {}",
            tmp.to_string_lossy()
        ))),
    }
}

/// Exchanges the written `tmp` with `name`; swaps back when what was at `name` is not
/// `seen` any more.
fn swap_in(dir: BorrowedFd<'_>, tmp: &CStr, name: &CStr, seen: &Seen) -> io::Result<Outcome> {
    if !stat_at(dir, name)?.is_some_and(|st| seen.same(&st)) {
        return Ok(Outcome::Conflict);
    }
    match rustix::fs::renameat_with(dir, tmp, dir, name, RenameFlags::EXCHANGE) {
        Ok(()) => {}
        // Removed meanwhile: the host's deletion stands.
        Err(Errno::NOENT) => return Ok(Outcome::Conflict),
        Err(e) => return Err(e.into()),
    }
    let judged = unchanged_after_rename(dir, tmp, seen);
    if matches!(judged, Ok(true)) {
        return Ok(Outcome::Landed);
    }
    // Changed at the last moment, or it could not be read to tell: the host's version goes
    // back into place (what is then at `tmp` is ours; `write` removes it).
    rustix::fs::renameat_with(dir, tmp, dir, name, RenameFlags::EXCHANGE)?;
    judged.map(|_| Outcome::Conflict)
}

/// Removes `name` beneath `dir` when it is still exactly `seen`.
pub fn delete(dir: BorrowedFd<'_>, name: &CStr, seen: &Seen) -> io::Result<Outcome> {
    match stat_at(dir, name)? {
        None => return Ok(Outcome::Landed),
        Some(st) if !seen.same(&st) => return Ok(Outcome::Conflict),
        Some(_) => {}
    }
    let aside = temp_name("delete")?;
    match rustix::fs::renameat_with(dir, name, dir, aside.as_c_str(), RenameFlags::NOREPLACE) {
        Ok(()) => {}
        // Removed on the host already: nothing to do, and nothing lost.
        Err(Errno::NOENT) => return Ok(Outcome::Landed),
        Err(e) => return Err(e.into()),
    }
    let judged = unchanged_after_rename(dir, aside.as_c_str(), seen);
    if matches!(judged, Ok(true)) {
        rustix::fs::unlinkat(dir, aside.as_c_str(), AtFlags::empty())?;
        return Ok(Outcome::Landed);
    }
    // Changed, or unreadable: it goes back where it was.
    match rustix::fs::renameat_with(dir, aside.as_c_str(), dir, name, RenameFlags::NOREPLACE) {
        Ok(()) => judged.map(|_| Outcome::Conflict),
        // The host made a new file there meanwhile; its changed old one stays beside it.
        Err(Errno::EXIST) => {
            Err(io::Error::other(format!("the host changed it and made a new one meanwhile; its changed old version is kept as {}", aside.to_string_lossy())))
        }
        Err(e) => Err(e.into()),
    }
}
