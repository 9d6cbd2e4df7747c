//! Files the host runs (`crate::hostrun`), out of reach of the tool service.
//!
//! The tool service writes on the host through a zone's handle, with workcell's rights; a
//! worker that could have it write `.git/hooks/pre-commit` or `.git/config` would run code
//! on the host the next time a person types `git commit`. A write or delete is judged on
//! where its directory *physically* is inside the zone, never on the name the worker gave:
//! from the open directory handle, `..` is followed up to the zone's root (compared by
//! device and inode) and each directory's name is read from its parent. So an in-zone link
//! (`foo -> .git`) or any other alias leads to the same answer as the real path.
//!
//! Two more things are judged on what a directory *is*, because a worker can move
//! directories around between calls:
//! - a git directory (it holds `HEAD` and `objects` or `commondir`, what git itself looks
//!   for) counts as `.git` whatever it is called: `.git` renamed to `foo` and back again
//!   cannot launder a write to `foo/hooks/pre-commit`;
//! - the identities of the protected paths bound read-only at launch (`pinning`): a write
//!   into one of them, or beneath, is refused wherever it has been moved.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::error::show;
use super::path::VirtualPath;
use super::{Area, AreaKey, PathList, Sandbox, SandboxError};
use crate::hostrun::Kind;

/// Deepest directory chain walked before giving up (a zone deeper than this is refused).
const MAX_DEPTH: usize = 4096;
/// Walks retried when a directory on the way was renamed meanwhile.
const WALK_ATTEMPTS: usize = 16;

/// What the sandbox knows to judge a physical position: each mount's root identity (by
/// mount index) and the identities pinned at launch with the entry that protects each.
#[derive(Debug, Default)]
pub(crate) struct HostFiles {
    pub(super) roots: Vec<Option<(u64, u64)>>,
    pub(super) pinned: HashMap<(u64, u64), String>,
    /// The writable areas that are a run's private copy (`copied`), with their copy's root
    /// identity: a place in them is judged from that root, the area's prefix before it.
    pub(super) copies: Vec<(AreaKey, (u64, u64))>,
}

impl HostFiles {
    /// The same, with mount `index`'s root identity set (an expansion's new mount).
    pub(super) fn with_root(&self, index: usize, root: Option<(u64, u64)>) -> HostFiles {
        let mut roots = self.roots.clone();
        if roots.len() <= index {
            roots.resize(index + 1, None);
        }
        roots[index] = root;
        HostFiles { roots, pinned: self.pinned.clone(), copies: self.copies.clone() }
    }
}

fn identity(fd: impl AsFd) -> Option<(u64, u64)> {
    rustix::fs::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
}

/// The identity of a mount's directory, as its handle has it.
pub(super) fn root_identity(dir: &Dir) -> Option<(u64, u64)> {
    identity(dir)
}

/// One directory between the zone's root and the judged directory.
struct Level {
    name: OsString,
    id: (u64, u64),
    git: bool,
}

/// Why a directory's place in its zone could not be told.
enum Lost {
    /// It (or a parent) was moved while it was being walked.
    Moved,
    /// The walk reached the file system's root, or went too deep, without meeting the zone.
    NotInZone,
    Io(rustix::io::Errno),
}

/// The name under which `id` is an entry of `parent`: `hint` (the name the request used,
/// usually right) when it is, else found among all of `parent`'s entries.
fn name_in(parent: BorrowedFd<'_>, id: (u64, u64), hint: Option<&str>) -> Result<OsString, Lost> {
    if let Some(h) = hint {
        if let Ok(st) = rustix::fs::statat(parent, h, AtFlags::SYMLINK_NOFOLLOW) {
            if (st.st_dev, st.st_ino) == id {
                return Ok(OsString::from(h));
            }
        }
    }
    let fd = rustix::fs::openat(parent, c".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(Lost::Io)?;
    let mut names = Vec::new();
    let mut entries = rustix::fs::Dir::read_from(&fd).map_err(Lost::Io)?;
    while let Some(e) = entries.read() {
        let e = e.map_err(Lost::Io)?;
        let n = e.file_name();
        if n == c"." || n == c".." {
            continue;
        }
        // `d_ino` is the inode beneath a mount point, not the mounted one: a name that does
        // not match here is still asked below.
        if e.ino() == id.1 {
            names.insert(0, n.to_owned());
        } else if e.file_type() == FileType::Directory || e.file_type() == FileType::Unknown {
            names.push(n.to_owned());
        }
    }
    for n in names {
        if let Ok(st) = rustix::fs::statat(parent, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            if (st.st_dev, st.st_ino) == id {
                return Ok(OsStr::from_bytes(n.to_bytes()).to_os_string());
            }
        }
    }
    Err(Lost::Moved)
}

/// The directories from just below the zone's root (`root`) down to `dir`, and a handle of
/// the root as the walk met it. `hints` are the names the request used on the way to `dir`,
/// from the root: tried first, never trusted.
fn walk(dir: BorrowedFd<'_>, root: (u64, u64), hints: &[String]) -> Result<(Vec<Level>, OwnedFd), Lost> {
    let mut levels = Vec::new();
    let mut cur: OwnedFd = dir.try_clone_to_owned().map_err(|e| Lost::Io(rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO)))?;
    for _ in 0..MAX_DEPTH {
        let id = identity(&cur).ok_or(Lost::NotInZone)?;
        if id == root {
            levels.reverse();
            return Ok((levels, cur));
        }
        let parent = rustix::fs::openat(&cur, c"..", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).map_err(Lost::Io)?;
        if identity(&parent) == Some(id) {
            return Err(Lost::NotInZone);
        }
        let hint = hints.len().checked_sub(levels.len() + 1).map(|i| hints[i].as_str());
        let name = name_in(parent.as_fd(), id, hint)?;
        levels.push(Level { name, id, git: crate::hostrun::is_git_dir(cur.as_fd()) });
        cur = parent;
    }
    Err(Lost::NotInZone)
}

impl Sandbox {
    /// This sandbox with the protected paths bound read-only at launch, by identity
    /// (device, inode) and the entry that protects each: the tool service refuses to write
    /// into them wherever they have been moved since.
    pub fn pinning(mut self, pinned: impl IntoIterator<Item = ((u64, u64), String)>) -> Sandbox {
        let mut next = HostFiles { roots: self.hostfiles.roots.clone(), pinned: self.hostfiles.pinned.clone(), copies: self.hostfiles.copies.clone() };
        next.pinned.extend(pinned);
        self.hostfiles = Arc::new(next);
        self
    }

    /// Refuses writing or deleting `vp` when it is a file the host runs: `dir` is the open
    /// directory the first `depth` components of `vp` led to; the components after those,
    /// up to the last, are directories still to be created. The last is judged as a file (the
    /// tool service writes and deletes files only).
    pub(super) fn refuse_hostrun(&self, vp: &VirtualPath, dir: &Dir, depth: usize, op: &'static str, shown: &str) -> Result<(), SandboxError> {
        let Some((name, parent)) = vp.rel.split_last() else { return Ok(()) };
        let between = parent.get(depth..).unwrap_or_default();
        let name = name.as_str();
        let m = &self.mounts()[vp.mount];
        let pinned = &self.hostfiles.pinned;
        if m.protection.entries().is_empty() && pinned.is_empty() {
            return Ok(());
        }
        let lost = |why: &str| SandboxError::Io {
            op,
            path: show(shown),
            message: format!("workcell cannot tell where it is in its zone ({why}), so it does not change it"),
        };
        // In a run's private copy of the zone, the walk ends at the copy's root: the area's
        // prefix is the place of that root in the zone.
        let copy = self
            .hostfiles
            .copies
            .iter()
            .filter(|(k, _)| k.mount == vp.mount && k.prefix.len() <= depth && vp.rel.starts_with(&k.prefix))
            .max_by_key(|(k, _)| k.prefix.len());
        let (base, root) = match copy {
            Some((k, id)) => (k.prefix.as_slice(), Some(*id)),
            None => (&[][..], self.hostfiles.roots.get(vp.mount).copied().flatten()),
        };
        let Some(root) = root else { return Err(lost("the zone's directory cannot be read")) };
        // A directory renamed during the walk loses its name for a moment: walked again, a
        // few times, before the caller is told to try again.
        let mut attempt = 0;
        let (levels, root_fd) = loop {
            match walk(dir.as_fd(), root, &vp.rel[base.len()..depth]) {
                Ok(found) => break found,
                Err(Lost::Moved) if attempt < WALK_ATTEMPTS => attempt += 1,
                Err(Lost::Moved) => {
                    return Err(SandboxError::NotFound {
                        path: show(shown),
                        hint: " A directory on its way was moved while workcell checked where it is; try again.".into(),
                    })
                }
                Err(Lost::NotInZone) => {
                    return Err(SandboxError::OutsideSandbox {
                        path: show(shown),
                        detail: " (its directory was moved out of its zone)".into(),
                        readable: PathList(self.readable_roots()),
                    })
                }
                Err(Lost::Io(e)) => return Err(lost(&e.to_string())),
            }
        };
        let refuse = |entry: &str, physical: String| SandboxError::HostRuns {
            op,
            path: show(shown),
            physical: show(&bounded(&physical)),
            entry: show(entry),
            zone: if m.mount_point == "/" { "the root: entry".to_string() } else { format!("zone {}", show(&m.name)) },
        };
        // Every name as it is on disk, and as it is judged (git directories as `.git`).
        // A zone that is a repository's `.git`, or a bare repository.
        let root_git = crate::hostrun::is_git_dir(root_fd.as_fd());
        let mut physical: Vec<OsString> = base.iter().map(OsString::from).collect();
        let mut judged = PathBuf::new();
        match base.split_last() {
            Some((_, above)) if root_git => judged.extend(above.iter().map(String::as_str).chain([".git"])),
            _ if root_git => judged.push(".git"),
            _ => judged.extend(base),
        }
        for l in &levels {
            physical.push(l.name.clone());
            judged.push(if l.git { OsStr::new(".git") } else { &l.name });
        }
        let shown_physical = |tail: &[&str]| {
            let mut p: Vec<String> = physical.iter().map(|n| n.to_string_lossy().into_owned()).collect();
            p.extend(tail.iter().map(|s| s.to_string()));
            p.join("/")
        };
        for l in &levels {
            if let Some(entry) = pinned.get(&l.id) {
                return Err(refuse(entry, shown_physical(&[name])));
            }
        }
        if let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            if let Some(entry) = pinned.get(&(st.st_dev, st.st_ino)) {
                return Err(refuse(entry, shown_physical(&[name])));
            }
        }
        for b in between {
            judged.push(b);
        }
        judged.push(name);
        if let Some(entry) = m.protection.matches_any_case(&judged, Kind::Other) {
            let mut tail: Vec<&str> = between.iter().map(String::as_str).collect();
            tail.push(name);
            return Err(refuse(entry, shown_physical(&tail)));
        }
        Ok(())
    }

    /// Refuses a write of `vp` (in the writable `area`) when it would land on a file the
    /// host runs, judged from the deepest directory that exists on its way: what
    /// [`Sandbox::write`] checks again on the directory it opens, said before anybody is
    /// asked and before any directory is created.
    pub(super) fn refuse_hostrun_path(&self, area: &Area, vp: &VirtualPath, op: &'static str, shown: &str) -> Result<(), SandboxError> {
        let inner = &vp.rel[area.key.prefix.len()..];
        let Some((name, parent)) = inner.split_last() else { return Ok(()) };
        let mut existing = 0;
        while existing < parent.len() && area.dir.open_dir(super::io::rel_path(&parent[..=existing])).is_ok() {
            existing += 1;
        }
        let base = area.dir.open_dir(super::io::rel_path(&parent[..existing])).map_err(|e| self.io_error(op, shown, &e))?;
        let depth = area.key.prefix.len() + existing;
        self.refuse_hostrun(vp, &base, depth, op, shown)?;
        // The first entry the write would add to `base`: a piece of a git directory, maybe.
        self.refuse_git_piece(vp, &base, depth, parent.get(existing).unwrap_or(name), op, shown).map(drop)
    }

    /// Refuses a write to `path` that would land on a file the host runs (see
    /// `hostfiles`); the tool service asks this before a person is asked.
    pub fn check_hostrun(&self, path: &str) -> Result<(), SandboxError> {
        let vp = self.parse(path)?;
        let area = self.writable_area(&vp, path)?;
        self.refuse_hostrun_path(area, &vp, "write", path)
    }
}

/// A physical path as shown in a message: its last 300 bytes at most.
fn bounded(p: &str) -> String {
    const MAX: usize = 300;
    if p.len() <= MAX {
        return p.to_string();
    }
    let mut start = p.len() - MAX;
    while !p.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &p[start..])
}
