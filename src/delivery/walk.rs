//! A directory tree streamed as a tar archive, walked through handles only: every entry is
//! looked at with `AT_SYMLINK_NOFOLLOW` and opened with `O_NOFOLLOW` beneath its parent's
//! handle, so a link in the tree is reported as a link and never followed. Links, hard
//! links and special files become tar entries of their own type (without contents), so that
//! the checker ([`super::collect`]) decides about them, the same code the fuzz test drives.

use std::ffi::{CStr, CString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::{collect, DeliveryError, Policy};

/// More names than the walk's entry budget allows: the walk stops instead of reading the
/// rest of the directory into memory.
#[derive(Debug, thiserror::Error)]
#[error("more than {max} entries (the limit of a copy-delivered zone); the walk stopped there")]
pub struct TooManyNames {
    pub max: u64,
}

impl TooManyNames {
    /// The limit when `e` is this error.
    pub fn of(e: &io::Error) -> Option<u64> {
        e.get_ref().and_then(|i| i.downcast_ref::<TooManyNames>()).map(|t| t.max)
    }
}

/// An entry budget shared by a whole walk: each name read takes one, whatever directory it
/// is in, so neither one huge directory nor many small ones hold more than `max` names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub max: u64,
    pub used: u64,
}

impl Budget {
    pub fn new(max: u64) -> Budget {
        Budget { max, used: 0 }
    }

    fn take(&mut self) -> io::Result<()> {
        self.used += 1;
        if self.used > self.max {
            return Err(io::Error::other(TooManyNames { max: self.max }));
        }
        Ok(())
    }
}

/// The names in the directory `dir`, sorted (without `.` and `..`); each takes one of
/// `budget`, and reading stops with [`TooManyNames`] once it is spent (a directory of a
/// million names is not read into memory first).
pub(crate) fn names(dir: impl AsFd, budget: &mut Budget) -> io::Result<Vec<CString>> {
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(dir)? {
        let e = e?;
        let n = e.file_name();
        if n != c"." && n != c".." {
            budget.take()?;
            out.push(n.to_owned());
        }
    }
    out.sort();
    Ok(out)
}

/// Opens the directory `name` beneath `dir` without following a link.
pub(crate) fn open_dir(dir: impl AsFd, name: &CStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// Opens the regular file `name` beneath `dir` for reading, without following a link and
/// without blocking on a fifo; checks that what was opened is a regular file.
pub(crate) fn open_file(dir: impl AsFd, name: &CStr) -> io::Result<(std::fs::File, rustix::fs::Stat)> {
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(io::Error::other("not a regular file"));
    }
    Ok((std::fs::File::from(fd), st))
}

/// Writes the tree beneath `dir` to `out` as a tar archive (names relative, directories
/// with a trailing `/`; owners, times and modes beyond the permission bits left out).
/// A file larger than `cap` is sent without its content, its size in a PAX record
/// ([`collect::OVERSIZE_KEY`]), so that a huge (or sparse) file costs nothing to refuse.
/// More than `max_entries` entries end the walk with [`TooManyNames`].
pub fn archive(dir: impl AsFd, out: impl Write, cap: u64, max_entries: u64) -> io::Result<()> {
    archive_as(dir, out, cap, max_entries, &Shape::default())
}

/// How [`archive_as`] names and owns its entries.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    /// Put before every name (`0/`), and given as a directory entry of its own first.
    pub prefix: String,
    /// The owner (uid, gid) written into every entry; root when `None`.
    pub owner: Option<(u32, u32)>,
}

/// [`archive`] with names under `shape.prefix` and entries owned by `shape.owner`: what a
/// container engine extracts as the tree's copy (`backend::docker::ship`).
pub fn archive_as(dir: impl AsFd, out: impl Write, cap: u64, max_entries: u64, shape: &Shape) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    let prefix = shape.prefix.as_bytes();
    if !prefix.is_empty() {
        let st = rustix::fs::fstat(dir.as_fd())?;
        let mut h = tar::Header::new_gnu();
        h.set_mode(st.st_mode & 0o7777);
        h.set_size(0);
        h.set_entry_type(tar::EntryType::Directory);
        if let Some((uid, gid)) = shape.owner {
            h.set_uid(uid.into());
            h.set_gid(gid.into());
        }
        builder.append_data(&mut h, std::path::Path::new(std::ffi::OsStr::from_bytes(prefix)), io::empty())?;
    }
    walk(&mut builder, dir.as_fd(), prefix, cap, &mut Budget::new(max_entries), shape.owner)?;
    builder.into_inner()?.flush()
}

fn walk<W: Write>(
    b: &mut tar::Builder<W>,
    dir: std::os::fd::BorrowedFd<'_>,
    prefix: &[u8],
    cap: u64,
    budget: &mut Budget,
    owner: Option<(u32, u32)>,
) -> io::Result<()> {
    for n in names(dir, budget)? {
        let st = rustix::fs::statat(dir, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)?;
        let mut path = prefix.to_vec();
        path.extend_from_slice(n.as_bytes());
        let mut h = tar::Header::new_gnu();
        h.set_mode(st.st_mode & 0o7777);
        h.set_size(0);
        if let Some((uid, gid)) = owner {
            h.set_uid(uid.into());
            h.set_gid(gid.into());
        }
        let ty = FileType::from_raw_mode(st.st_mode);
        let kind = match ty {
            FileType::Directory => tar::EntryType::Directory,
            FileType::RegularFile if st.st_nlink > 1 => tar::EntryType::Link,
            FileType::RegularFile => tar::EntryType::Regular,
            FileType::Symlink => tar::EntryType::Symlink,
            FileType::Fifo => tar::EntryType::Fifo,
            FileType::CharacterDevice => tar::EntryType::Char,
            FileType::BlockDevice => tar::EntryType::Block,
            // A socket: tar has no type for it; the checker refuses what it does not know.
            _ => tar::EntryType::new(b'S'),
        };
        h.set_entry_type(kind);
        let name = std::path::Path::new(std::ffi::OsStr::from_bytes(&path));
        match kind {
            tar::EntryType::Directory => {
                b.append_data(&mut h, name, io::empty())?;
                // The checker refuses anything deeper; no need to walk on.
                if prefix.iter().filter(|c| **c == b'/').count() <= super::name::MAX_DEPTH {
                    let sub = open_dir(dir, &n)?;
                    let mut p = path.clone();
                    p.push(b'/');
                    walk(b, sub.as_fd(), &p, cap, budget, owner)?;
                }
            }
            tar::EntryType::Regular => {
                let (file, st) = open_file(dir, &n)?;
                let size = st.st_size as u64;
                if size > cap {
                    b.append_pax_extensions([(collect::OVERSIZE_KEY, size.to_string().as_bytes())])?;
                    b.append_data(&mut h, name, io::empty())?;
                    continue;
                }
                h.set_size(size);
                let mut body = file.take(size);
                b.append_data(&mut h, name, &mut body)?;
                if body.limit() != 0 {
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a file shrank while it was read"));
                }
            }
            _ => b.append_data(&mut h, name, io::empty())?,
        }
    }
    Ok(())
}

/// Collects the tree beneath `dir` through the checker: [`archive`] on one thread writes the
/// tar stream into a pipe, [`collect::collect_tar`] reads it. A walk that fails is an error
/// as a whole (a partial tree would read as deletions).
pub fn collect_dir(dir: impl AsFd + Send, policy: &Policy, staging: &mut collect::Staging) -> Result<collect::Collected, DeliveryError> {
    let (reader, writer) = io::pipe().map_err(DeliveryError::io("open a pipe", ""))?;
    std::thread::scope(|s| {
        let cap = policy.max_file_bytes.unwrap_or(u64::MAX).min(policy.max_total_bytes);
        let max = policy.max_entries;
        let walker = s.spawn(move || archive(dir, writer, cap, max));
        let collected = collect::collect_tar(reader, policy, staging);
        let walked = walker.join().unwrap_or_else(|_| Err(io::Error::other("the walk panicked")));
        // The walk stopped at the entry limit: that, not the archive it cut short, is why.
        if let Some(max) = walked.as_ref().err().and_then(TooManyNames::of) {
            return Err(DeliveryError::TooManyEntries { max });
        }
        let collected = collected?;
        walked.map_err(DeliveryError::io("read the worker's copy", ""))?;
        Ok(collected)
    })
}
