//! One directory of the sweep's walk: its names as a listing gives them, or, for a directory
//! unchanged since a walk listed it (`crate::hostrun::looked`), as that walk's record has
//! them (the names a walk acts on; the others only counted).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{Dir, FileType};

use crate::hostrun::looked::{Listing, Looking};

/// A directory being walked, the length of its path in the walk's path buffer, its device
/// and how many names it has given so far.
pub(super) struct Frame {
    source: Source,
    pub rel_len: usize,
    pub dev: u64,
    pub listed: u64,
    /// Names of a recorded directory not given one by one: counted before the first name.
    pub unlisted: u64,
    /// The record being made of a listed directory.
    pub listing: Option<Listing>,
}

enum Source {
    Listed(Dir),
    Recorded(OwnedFd, std::vec::IntoIter<(CString, FileType, u64)>),
}

impl Frame {
    /// The directory `fd` at `rel`: listed, unless `looking`
    /// (the area's own tree only) trusts a record of it.
    pub fn new(fd: OwnedFd, rel: &[u8], looking: Option<&mut Looking>) -> io::Result<Frame> {
        // The status before the listing: a change after it shows as a later ctime.
        let st = rustix::fs::fstat(&fd)?;
        let (mut listing, mut unlisted, mut recorded) = (None, 0, None);
        if let Some(looking) = looking {
            match looking.trusted(rel, &st) {
                Some(seen) => {
                    unlisted = seen.others;
                    recorded = Some(seen.entries().filter_map(|(n, t, ino)| CString::new(n).ok().map(|n| (n, t, ino))).collect::<Vec<_>>());
                }
                None => listing = Some(looking.listing(rel, &st)),
            }
        }
        let source = match recorded {
            Some(names) => Source::Recorded(fd, names.into_iter()),
            None => Source::Listed(Dir::new(fd)?),
        };
        let frame = Frame { source, rel_len: rel.len(), dev: st.st_dev, listed: 0, unlisted, listing };
        Ok(frame)
    }

    /// The directory's descriptor.
    pub fn fd(&self) -> io::Result<BorrowedFd<'_>> {
        match &self.source {
            Source::Listed(dir) => Ok(dir.fd()?),
            Source::Recorded(fd, _) => Ok(fd.as_fd()),
        }
    }

    /// Its next name: name, kind as the listing says (`Unknown` where the file system does
    /// not), inode.
    pub fn next(&mut self) -> Option<io::Result<(CString, FileType, u64)>> {
        match &mut self.source {
            Source::Listed(dir) => dir.read().map(|e| e.map(|e| (e.file_name().to_owned(), e.file_type(), e.ino())).map_err(io::Error::from)),
            Source::Recorded(_, names) => names.next().map(Ok),
        }
    }
}
