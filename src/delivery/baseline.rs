//! The copy a worker gets, and what the zone held when it was taken. The zone is walked
//! beneath its held handle (nothing followed) as the worker's user ([`crate::identity`],
//! [`super::copytree`]): plain files and directories with names the checker would accept,
//! and that the worker may read, are copied, owned by the worker's user. Everything else
//! (links, special files, odd names, what the worker's user cannot read or enter, files over
//! the zone's `max_file_bytes`) is left out of the copy and therefore never touched on
//! publish; what the worker could not read and what was too large are named
//! ([`Baseline::not_copied`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags, Stat};

use super::copytree::{own, refused, Copier, CopyError, Tally};
use super::scratch::ScratchDir;
use super::{DeliveryError, Policy};
use crate::identity::Identity;
use crate::identity::UserSpec;

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

/// Why an entry of the zone is not in the copy (and so is never written over or deleted
/// on publish).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotCopied {
    /// The worker's user may not read it (a directory: may not list or enter it).
    Unreadable { dir: bool },
    /// A file over the zone's `max_file_bytes` (its apparent size, holes included).
    TooLarge { size: u64, max: u64 },
}

/// What the zone held at run start, by path components.
#[derive(Debug, Default, Clone)]
pub struct Baseline {
    pub files: BTreeMap<Vec<String>, Seen>,
    pub dirs: BTreeSet<Vec<String>>,
    /// Files and directories that were not copied, and why: on publish nothing at or
    /// beneath them is written or deleted. The empty path is the zone itself.
    pub not_copied: BTreeMap<Vec<String>, NotCopied>,
}

impl Baseline {
    /// Why the worker's entry at `path` is refused: it lies at or beneath an entry that was
    /// not copied.
    pub fn not_copied_reason(&self, path: &[String]) -> Option<super::Reason> {
        (0..=path.len()).find_map(|n| self.not_copied.get(&path[..n])).map(|why| match *why {
            NotCopied::Unreadable { .. } => super::Reason::NotCopied,
            NotCopied::TooLarge { size, max } => super::Reason::TooLargeToCopy { size, max },
        })
    }

    /// What was not copied because the worker's user may not read it, for a summary
    /// (directories end in `/`, the zone itself is `./`).
    pub fn not_copied_names(&self) -> super::summary::Names {
        let mut out = super::summary::Names::default();
        for (p, why) in &self.not_copied {
            if let NotCopied::Unreadable { dir } = why {
                out.name(&if p.is_empty() { "./".into() } else { format!("{}{}", p.join("/"), if *dir { "/" } else { "" }) });
            }
        }
        out
    }

    /// The files not copied for their size, for a summary.
    pub fn too_large_names(&self) -> super::summary::Names {
        let mut out = super::summary::Names::default();
        for (p, why) in &self.not_copied {
            if let NotCopied::TooLarge { .. } = why {
                out.name(&p.join("/"));
            }
        }
        out
    }
}

/// A zone's private copy: removed when dropped (at any depth; `workcell gc` removes it
/// when its run died).
#[derive(Debug)]
pub struct Copy {
    path: PathBuf,
    root: OwnedFd,
    pub baseline: Baseline,
    _dir: ScratchDir,
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
/// The zone's bounds hold while it is copied: a file over `policy.max_file_bytes` is not
/// copied ([`NotCopied::TooLarge`]); more than `policy.max_entries` entries or
/// `policy.max_total_bytes` bytes to copy, or more than the temporary directory's free
/// space, refuse the copy before a byte is written. Files are copied sparse.
pub fn copy_in(zone: impl AsFd, zone_name: &str, owner: UserSpec, policy: &Policy) -> Result<Copy, DeliveryError> {
    let err = |op| DeliveryError::io(op, zone_name);
    let dir = ScratchDir::new("workcell-copy-").map_err(err("create the private copy"))?;
    let zst = rustix::fs::fstat(&zone).map_err(|e| err("read the zone")(e.into()))?;
    let path = dir.path().join("zone");
    rustix::fs::mkdirat(dir.fd(), c"zone", Mode::from_raw_mode(0o700)).map_err(|e| err("create the private copy")(e.into()))?;
    let root = rustix::fs::openat(dir.fd(), c"zone", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| err("open the private copy")(e.into()))?;
    // The copy's own directory is the worker's (made by workcell in its private temporary
    // directory); everything beneath it is made by the worker's user.
    own(&root, owner, zst.st_mode | 0o700).map_err(err("own the private copy"))?;
    let (zone, root_fd, dir_fd) = (zone.as_fd(), root.as_fd(), dir.fd());
    let baseline = Identity::of(owner)
        .run(move || -> Result<Baseline, CopyError> {
            let mut baseline = Baseline::default();
            // The held handle may be an O_PATH one: a readable handle of the same directory,
            // opened as the worker (a zone it may not list is not copied at all).
            let zone = match rustix::fs::openat(zone, c".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) {
                Ok(z) => z,
                Err(e) if refused(&e.into()) => {
                    baseline.not_copied.insert(Vec::new(), NotCopied::Unreadable { dir: true });
                    return Ok(baseline);
                }
                Err(e) => return Err(CopyError::Io(e.into())),
            };
            // First what it would take, so a zone over its bounds (or over the free space)
            // is refused before anything is written; then the copy, bounded again (the zone
            // may grow meanwhile).
            let mut need = Tally::new(policy);
            need.tree(zone.as_fd(), &mut Vec::new())?;
            let st = rustix::fs::fstatvfs(dir_fd).map_err(|e| CopyError::Io(e.into()))?;
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            if need.allocated > free {
                return Err(CopyError::NoSpace { needed: need.allocated, free });
            }
            Copier { owner, tally: Tally::new(policy), baseline: &mut baseline }.root(zone.as_fd(), root_fd)?;
            Ok(baseline)
        })
        .map_err(|e| err("copy the zone")(io::Error::other(e)))?
        .map_err(|e| e.into_delivery(zone_name, dir.path()))?;
    Ok(Copy { path, root, baseline, _dir: dir })
}
