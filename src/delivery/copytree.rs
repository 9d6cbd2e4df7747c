//! The walk of [`super::baseline::copy_in`], as the worker's user: first a tally of what
//! the copy would take ([`Tally`]: entries, bytes, blocks), then the copy itself
//! ([`Copier`]), both within the zone's bounds. Plain files and directories with names the
//! checker would accept are copied; links, special files and odd names are not (and never
//! touched on publish); what the worker may not read, and files over `max_file_bytes`, are
//! named in [`Baseline::not_copied`].

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use super::baseline::{Baseline, NotCopied, Seen};
use super::walk::{names, open_dir, open_file, Budget, TooManyNames};
use super::{DeliveryError, Policy};
use crate::identity::UserSpec;

/// Why a copy was not taken.
#[derive(Debug, thiserror::Error)]
pub(super) enum CopyError {
    #[error("more than {max} entries")]
    Entries { max: u64 },
    #[error("{found} bytes, more than {max}")]
    Bytes { max: u64, found: u64 },
    #[error("{needed} bytes needed, {free} free")]
    NoSpace { needed: u64, free: u64 },
    #[error(transparent)]
    Io(io::Error),
}

impl From<io::Error> for CopyError {
    fn from(e: io::Error) -> Self {
        match TooManyNames::of(&e) {
            Some(max) => CopyError::Entries { max },
            None => CopyError::Io(e),
        }
    }
}

impl CopyError {
    pub(super) fn into_delivery(self, zone: &str, dir: &Path) -> DeliveryError {
        let zone = zone.to_string();
        match self {
            CopyError::Entries { max } => DeliveryError::ZoneTooManyEntries { zone, max },
            CopyError::Bytes { max, found } => DeliveryError::ZoneTooManyBytes { zone, max, found },
            CopyError::NoSpace { needed, free } => DeliveryError::NoSpace { zone, needed, free, dir: dir.parent().unwrap_or(dir).to_path_buf() },
            CopyError::Io(source) => DeliveryError::Io { op: "copy the zone", zone, source },
        }
    }
}

/// True when the operating system refused the worker's user (not an error of the copy).
pub(super) fn refused(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied
}

/// A read of the zone: `Ok(None)` when the worker's user may not.
fn readable<T>(r: io::Result<T>) -> Result<Option<T>, CopyError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if refused(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The name `n` beneath `at`, when the checker would accept it there.
fn accepted(at: &[String], n: &CStr) -> Option<String> {
    let name = n.to_str().ok()?.to_string();
    let mut path = at.join("/");
    if !path.is_empty() {
        path.push('/');
    }
    path.push_str(&name);
    super::name::components(path.as_bytes()).is_ok().then_some(name)
}

/// What a copy takes, counted against the zone's bounds.
pub(super) struct Tally {
    budget: Budget,
    max_file: Option<u64>,
    max_bytes: u64,
    /// Apparent bytes of the files to copy (holes included).
    pub bytes: u64,
    /// Bytes the files to copy take on disk (their data, not their holes).
    pub allocated: u64,
}

impl Tally {
    pub fn new(policy: &Policy) -> Tally {
        Tally { budget: Budget::new(policy.max_entries), max_file: policy.max_file_bytes, max_bytes: policy.max_total_bytes, bytes: 0, allocated: 0 }
    }

    /// True when a file of `size` bytes is copied (not over `max_file_bytes`).
    fn fits(&self, size: u64) -> bool {
        self.max_file.is_none_or(|m| size <= m)
    }

    /// Counts a file to copy; over the byte bound is an error.
    fn add(&mut self, st: &Stat) -> Result<(), CopyError> {
        self.bytes = self.bytes.saturating_add(st.st_size as u64);
        self.allocated = self.allocated.saturating_add((st.st_blocks as u64).saturating_mul(512));
        if self.bytes > self.max_bytes {
            return Err(CopyError::Bytes { max: self.max_bytes, found: self.bytes });
        }
        Ok(())
    }

    /// Counts the tree beneath `dir` (what the worker cannot read is skipped, as the copy
    /// skips it). Stops at the entry bound; goes on past the byte bound to say how much.
    pub fn tree(&mut self, dir: BorrowedFd<'_>, at: &mut Vec<String>) -> Result<(), CopyError> {
        let Some(listed) = readable(names(dir, &mut self.budget))? else { return Ok(()) };
        for n in listed {
            let Some(name) = accepted(at, &n) else { continue };
            let Some(st) = readable(rustix::fs::statat(dir, &n, AtFlags::SYMLINK_NOFOLLOW).map_err(io::Error::from))? else { continue };
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    let Some(sub) = readable(open_dir(dir, &n))? else { continue };
                    at.push(name);
                    self.tree(sub.as_fd(), at)?;
                    at.pop();
                }
                FileType::RegularFile if self.fits(st.st_size as u64) => match self.add(&st) {
                    Err(CopyError::Bytes { .. }) | Ok(()) => {}
                    Err(e) => return Err(e),
                },
                _ => {}
            }
        }
        if self.bytes > self.max_bytes {
            return Err(CopyError::Bytes { max: self.max_bytes, found: self.bytes });
        }
        Ok(())
    }
}

/// Takes the copy into `to`, recording the baseline.
pub(super) struct Copier<'a> {
    pub owner: UserSpec,
    pub tally: Tally,
    pub baseline: &'a mut Baseline,
}

impl Copier<'_> {
    /// Copies the zone `from` into `to` (the copy's root).
    pub fn root(&mut self, from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> Result<(), CopyError> {
        match readable(names(from, &mut self.tally.budget))? {
            Some(listed) => self.entries(from, listed, to, &mut Vec::new()),
            None => {
                self.baseline.not_copied.insert(Vec::new(), NotCopied::Unreadable { dir: true });
                Ok(())
            }
        }
    }

    /// Copies the entries `listed` of `from` (listed first, so that a directory the worker
    /// may read but not search is refused before anything of it is made).
    fn entries(&mut self, from: BorrowedFd<'_>, listed: Vec<CString>, to: BorrowedFd<'_>, at: &mut Vec<String>) -> Result<(), CopyError> {
        for n in listed {
            // A name the checker would refuse is not copied: the worker never sees it, and
            // its absence from the copy is not read as a deletion.
            let Some(name) = accepted(at, &n) else { continue };
            at.push(name);
            if let Some(why) = self.entry(from, to, &n, at)? {
                self.baseline.not_copied.insert(at.clone(), why);
            }
            at.pop();
        }
        Ok(())
    }

    fn entry(&mut self, from: BorrowedFd<'_>, to: BorrowedFd<'_>, n: &CStr, at: &mut Vec<String>) -> Result<Option<NotCopied>, CopyError> {
        let (file, dir) = (NotCopied::Unreadable { dir: false }, NotCopied::Unreadable { dir: true });
        let Some(st) = readable(rustix::fs::statat(from, n, AtFlags::SYMLINK_NOFOLLOW).map_err(io::Error::from))? else { return Ok(Some(file)) };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => {
                let Some(src) = readable(open_dir(from, n))? else { return Ok(Some(dir)) };
                let Some(listed) = readable(names(&src, &mut self.tally.budget))? else { return Ok(Some(dir)) };
                rustix::fs::mkdirat(to, n, Mode::from_raw_mode(0o700)).map_err(io::Error::from)?;
                let dst = open_dir(to, n)?;
                own(&dst, self.owner, st.st_mode | 0o700)?;
                self.baseline.dirs.insert(at.clone());
                self.entries(src.as_fd(), listed, dst.as_fd(), at)?;
                Ok(None)
            }
            FileType::RegularFile => {
                let Some((src, st)) = readable(open_file(from, n))? else { return Ok(Some(file)) };
                let size = st.st_size as u64;
                if let Some(max) = self.tally.max_file.filter(|m| size > *m) {
                    return Ok(Some(NotCopied::TooLarge { size, max }));
                }
                self.tally.add(&st)?;
                let seen = copy_file(&src, &st, to, n, self.owner)?;
                self.baseline.files.insert(at.to_vec(), seen);
                Ok(None)
            }
            // Links and special files stay on the host only.
            _ => Ok(None),
        }
    }
}

fn copy_file(src: &std::fs::File, st: &Stat, to: BorrowedFd<'_>, n: &CStr, owner: UserSpec) -> io::Result<Seen> {
    let dst = rustix::fs::openat(to, n, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    let dst = std::fs::File::from(dst);
    let sha256 = super::sparse::copy(src, &dst, st.st_size as u64)?;
    own(&dst, owner, st.st_mode | 0o600)?;
    Ok(Seen {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        ctime: (st.st_ctime, st.st_ctime_nsec as i64),
        sha256,
        executable: st.st_mode & 0o111 != 0,
    })
}

pub(super) fn own(fd: impl AsFd, owner: UserSpec, mode: u32) -> io::Result<()> {
    std::os::unix::fs::fchown(&fd, Some(owner.uid), Some(owner.gid))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o777))?;
    Ok(())
}
