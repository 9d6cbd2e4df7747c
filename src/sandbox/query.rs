//! The query API's verdicts (`workcell check`): whether a path may be read or written, one
//! at a time ([`Sandbox::verdict`]) or many at a time ([`Querier`]), with the same answers.
//!
//! One verdict at a time resolves the path beneath its area's handle up to three times
//! (`check_beneath`, then `stat`, then the suffix check parses again). A [`Querier`] answers
//! the same question with one lookup per path: it holds a handle of each parent directory it
//! has met (opened once with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` beneath the
//! area's handle, bounded in number: see `dircache`) and looks at the last component beneath
//! it without following it. Whatever that single look cannot decide exactly as the
//! one-at-a-time path would (a symlink, a parent that is not a directory or leads out, a
//! permission error, a retry the kernel asked for) is handed to [`Sandbox::verdict`] itself,
//! so both give the same verdict on the same tree.

mod dircache;

use std::sync::Arc;

use rustix::fs::{AtFlags, FileType};
use rustix::io::Errno;

use super::error::show;
use super::path::VirtualPath;
use super::{deepest, Area, FileKind, Sandbox, SandboxError};
use dircache::{DirCache, Parent};

/// Directory handles a [`Querier`] holds at most: a stream of paths in 200,000 different
/// directories must not exhaust the process's descriptors (a soft limit of 1,024 is usual).
pub const QUERY_HANDLES: usize = 256;

impl Sandbox {
    /// Whether `path` may be read (or written): resolution, then the suffix policy for
    /// anything that is not an existing directory, then, for reading an existing file, the
    /// size policy (`max_file_bytes`). A write is not judged by size: its content is not
    /// known here.
    pub fn verdict(&self, path: &str, write: bool) -> Result<(), SandboxError> {
        if write {
            self.resolve_for_write(path)?;
        } else {
            self.resolve(path)?;
        }
        let stat = self.stat(path).ok();
        let found = stat.as_ref().map(|s| (s.kind, s.size));
        let vp = self.parse(path)?;
        self.judge_found(&vp, path, write, found)
    }

    /// The policy part of a verdict, once the path is known to resolve beneath its area:
    /// what it found there (kind and size), or `None` when nothing could be looked at.
    fn judge_found(&self, vp: &VirtualPath, path: &str, write: bool, found: Option<(FileKind, u64)>) -> Result<(), SandboxError> {
        if !matches!(found, Some((FileKind::Directory, _))) {
            self.check_suffix_vp(vp, path)?;
        }
        if let (false, Some((kind, size))) = (write, found) {
            if kind == FileKind::File {
                self.check_size_vp(vp, path, size, "read")?;
            }
            // The file tools read regular files only (a FIFO would wait for a writer).
            if kind == FileKind::Other {
                return Err(SandboxError::WrongKind { op: "read", path: show(path), found: "special file", expected: "regular file" });
            }
        }
        Ok(())
    }
}

/// Many verdicts of one sandbox, each equal to [`Sandbox::verdict`]'s, with parent
/// directories' handles shared between paths and between threads (`Querier` is `Sync`).
#[derive(Debug)]
pub struct Querier<'a> {
    sandbox: &'a Sandbox,
    write: bool,
    dirs: DirCache,
}

/// What the single look beneath the parent's handle found.
enum Look {
    /// Something that is not a symlink: its kind and size.
    Found(FileKind, u64),
    /// Nothing, below a directory that exists beneath the area.
    Missing,
    /// Only the one-at-a-time path can say (see the module's comment).
    Unsure,
}

impl<'a> Querier<'a> {
    /// A querier for reading (`write == false`) or writing, holding at most
    /// [`QUERY_HANDLES`] directory handles.
    pub fn new(sandbox: &'a Sandbox, write: bool) -> Querier<'a> {
        Querier::with_capacity(sandbox, write, QUERY_HANDLES)
    }

    /// The same with at most `handles` directory handles (at least one).
    pub fn with_capacity(sandbox: &'a Sandbox, write: bool, handles: usize) -> Querier<'a> {
        Querier { sandbox, write, dirs: DirCache::new(handles.max(1)) }
    }

    /// Directory handles held now (never more than the capacity).
    pub fn handles_held(&self) -> usize {
        self.dirs.len()
    }

    /// The verdicts of `paths`, in their order, with the sandbox's identity (the worker's
    /// rights, when it acts as one): one switch for all of them.
    pub fn verdicts(&self, paths: &[&str]) -> Vec<Result<(), SandboxError>> {
        let identity = self.sandbox.identity();
        match identity.run(|| paths.iter().map(|p| self.verdict_here(p)).collect::<Vec<_>>()) {
            Ok(v) => v,
            // The ids could not be taken: each path says so, as one verdict at a time would.
            Err(_) => paths.iter().map(|p| self.sandbox.verdict(p, self.write)).collect(),
        }
    }

    /// One path's verdict, on the calling thread with its rights.
    fn verdict_here(&self, path: &str) -> Result<(), SandboxError> {
        let sb = self.sandbox;
        let vp = sb.parse(path)?;
        let area = if self.write { sb.writable_area(&vp, path)? } else { sb.readable_area(&vp, path)? };
        // `stat` looks beneath the deepest *readable* area: one look answers both questions
        // only when that is the very handle the write check uses.
        if self.write && !deepest(&sb.readable, &vp).is_some_and(|r| Arc::ptr_eq(&r.dir, &area.dir)) {
            return sb.verdict(path, true);
        }
        let found = match self.look(area, &vp) {
            Look::Found(kind, size) => Some((kind, size)),
            Look::Missing => None,
            Look::Unsure => return sb.verdict(path, self.write),
        };
        sb.judge_found(&vp, path, self.write, found)
    }

    /// The last component of `vp`, looked at beneath its parent's handle without following
    /// it. Exact where it answers: a name that is not a symlink is the same object whether
    /// reached by a walk from the area's root or from its parent (already resolved beneath
    /// that root), and a missing name below an existing directory makes the walk up of
    /// `check_beneath` stop there, allowed.
    fn look(&self, area: &Area, vp: &VirtualPath) -> Look {
        let Some((name, parent)) = Sandbox::inner(area, vp).split_last() else {
            // The area's root itself: rare, and the one-at-a-time path knows it.
            return Look::Unsure;
        };
        let looked = |dir: std::os::fd::BorrowedFd<'_>| match rustix::fs::statat(dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::Symlink => Look::Unsure,
                FileType::Directory => Look::Found(FileKind::Directory, st.st_size as u64),
                FileType::RegularFile => Look::Found(FileKind::File, st.st_size as u64),
                _ => Look::Found(FileKind::Other, st.st_size as u64),
            },
            Err(Errno::NOENT) => Look::Missing,
            // Permission, a name too long, …: `check_beneath` has rules of its own for them.
            Err(_) => Look::Unsure,
        };
        if parent.is_empty() {
            return looked(std::os::fd::AsFd::as_fd(&*area.dir));
        }
        match self.dirs.parent(area, parent) {
            Parent::Dir(fd) => looked(std::os::fd::AsFd::as_fd(&*fd)),
            Parent::Missing => Look::Missing,
            Parent::Unsure => Look::Unsure,
        }
    }
}
