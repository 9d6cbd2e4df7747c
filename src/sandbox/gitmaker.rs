//! The tool service never completes a git directory (issue 37): a directory that holds
//! `config` or `hooks` is nothing to git until it also holds `HEAD` and `objects` (or
//! `commondir`); then the person's next `git status` in it reads that config (and runs its
//! `core.fsmonitor`) and its hooks. The protected list judges what is written into a git
//! directory; this judges the write that would make one, in whatever order the pieces come,
//! as copy delivery does on publish (`delivery::publish`): the piece (`HEAD`, `objects`,
//! `commondir`) that would make a plain directory a git directory while it holds a
//! protected `config`, `hooks`, `commondir` or `config.worktree` is refused.
//!
//! Judged beneath the held directory handle, before the write and again after it landed:
//! the worker's own processes (or a second tool call) may add the other pieces meanwhile, so
//! a piece that made the directory such a git directory by the time it is there is taken
//! away again and the write refused.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use cap_std::fs::Dir;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags};

use super::error::{show, GitPiece};
use super::path::{join_display, VirtualPath};
use super::{Sandbox, SandboxError};
use crate::hostrun::{Kind, GIT_DIR_INSIDE};

/// The names whose arrival can make a directory a git directory (`hostrun::is_git_dir`).
const MAKERS: &[&str] = &["HEAD", "objects", "commondir"];

/// A piece of a git directory a write adds, noted before the write to judge it again after.
#[derive(Debug)]
pub(super) struct Piece {
    name: String,
    /// Which of git's names it is.
    maker: &'static str,
    /// Where the directory it goes into is, as the sandbox shows it.
    dir: String,
}

/// Whether an entry `name` is in `dir` (anything, a link too, dangling or not).
fn present(dir: BorrowedFd<'_>, name: &str) -> bool {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).is_ok()
}

/// Whether `name` is `want`. Without regard to case: on a case-insensitive file system (macOS)
/// `head` is `HEAD` to git, and a wider answer only refuses more.
fn is(name: &str, want: &str) -> bool {
    name.eq_ignore_ascii_case(want)
}

/// Whether `dir` would be a git directory with `added` in it (as `hostrun::is_git_dir`).
fn git_with(dir: BorrowedFd<'_>, added: &str) -> bool {
    let has = |n: &str| is(added, n) || present(dir, n);
    has("HEAD") && (has("objects") || has("commondir"))
}

impl Sandbox {
    /// Refuses adding the entry `added` to `dir` (the directory the first `depth` components
    /// of `vp` lead to) when that would make `dir` a git directory holding what git runs. The
    /// piece to judge again once the write landed ([`Sandbox::recheck_git_piece`]), when the
    /// write creates one.
    pub(super) fn refuse_git_piece(
        &self,
        vp: &VirtualPath,
        dir: &Dir,
        depth: usize,
        added: &str,
        op: &'static str,
        shown: &str,
    ) -> Result<Option<Piece>, SandboxError> {
        let fd = dir.as_fd();
        let Some(maker) = MAKERS.iter().find(|m| is(added, m)) else { return Ok(None) };
        // Already there, the write adds nothing; a git directory already, what is written into
        // it is the protected list's to judge (`hostfiles`).
        if present(fd, added) || crate::hostrun::is_git_dir(fd) {
            return Ok(None);
        }
        let piece = Piece { name: added.to_string(), maker, dir: join_display(&self.mounts()[vp.mount].mount_point, &vp.rel[..depth.min(vp.rel.len())]) };
        if git_with(fd, added) {
            if let Some((inside, entry)) = self.protected_inside(vp, fd, added) {
                return Err(self.completes(vp, &piece, inside, &entry, op, shown));
            }
        }
        Ok(Some(piece))
    }

    /// The same judgment once the piece is in `dir`: when `dir` is now a git directory holding
    /// what git runs (the other pieces came meanwhile), the piece is taken away again and the
    /// write refused.
    pub(super) fn recheck_git_piece(&self, vp: &VirtualPath, dir: &Dir, piece: Option<Piece>, op: &'static str, shown: &str) -> Result<(), SandboxError> {
        let Some(piece) = piece else { return Ok(()) };
        let fd = dir.as_fd();
        if !crate::hostrun::is_git_dir(fd) {
            return Ok(());
        }
        let Some((inside, entry)) = self.protected_inside(vp, fd, "") else { return Ok(()) };
        take_away(fd, &piece.name);
        Err(self.completes(vp, &piece, inside, &entry, op, shown))
    }

    /// The first of git's files in `dir` (or `added`, about to be) that a git directory's
    /// protection covers, with the entry that covers it.
    fn protected_inside(&self, vp: &VirtualPath, dir: BorrowedFd<'_>, added: &str) -> Option<(&'static str, String)> {
        let protection = &self.mounts()[vp.mount].protection;
        GIT_DIR_INSIDE.iter().find_map(|inside| {
            let st = rustix::fs::statat(dir, *inside, AtFlags::SYMLINK_NOFOLLOW).ok();
            if st.is_none() && !is(added, inside) {
                return None;
            }
            let kind = match st {
                Some(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Kind::Dir,
                _ => Kind::Other,
            };
            // Judged as it will be: inside a git directory, whatever this one is called.
            protection.matches_any_case(&Path::new(".git").join(inside), kind).map(|e| (*inside, e.to_string()))
        })
    }

    fn completes(&self, vp: &VirtualPath, piece: &Piece, inside: &'static str, entry: &str, op: &'static str, shown: &str) -> SandboxError {
        let m = &self.mounts()[vp.mount];
        SandboxError::CompletesGitDir(Box::new(GitPiece {
            op,
            path: show(shown),
            dir: show(&piece.dir),
            piece: piece.maker,
            inside,
            entry: show(entry),
            zone: if m.mount_point == "/" { "the root: entry".to_string() } else { format!("zone {}", show(&m.name)) },
        }))
    }
}

/// Takes the entry `name` out of `dir` again: removed, or, a directory something was put
/// into meanwhile, renamed aside under a name git does not look for. Whatever is there now
/// goes, the worker's own too: the directory must not stay a git directory.
fn take_away(dir: BorrowedFd<'_>, name: &str) {
    if rustix::fs::unlinkat(dir, name, AtFlags::empty()).is_ok() || remove_empty(dir, name, 0) {
        return;
    }
    for n in 0..100 {
        let aside = format!(".workcell-refused-{name}-{}-{n}", std::process::id());
        match rustix::fs::renameat_with(dir, name, dir, aside.as_str(), RenameFlags::NOREPLACE) {
            Err(rustix::io::Errno::EXIST) => continue,
            _ => return,
        }
    }
}

/// Removes the directory `name` of `parent` when nothing but empty directories are beneath it
/// (those a write made on its way, `objects/info/`), no deeper than a path can be; true when
/// it is gone. Nothing is followed.
fn remove_empty(parent: BorrowedFd<'_>, name: &str, depth: usize) -> bool {
    const DEEPEST: usize = 64;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(parent, name, flags, Mode::empty()) else { return false };
    let Ok(mut entries) = rustix::fs::Dir::read_from(&fd) else { return false };
    let mut subdirs = Vec::new();
    while let Some(Ok(e)) = entries.read() {
        let n = e.file_name();
        if n == c"." || n == c".." {
            continue;
        }
        match n.to_str() {
            Ok(n) if depth < DEEPEST && e.file_type() == FileType::Directory => subdirs.push(n.to_string()),
            _ => return false,
        }
    }
    subdirs.iter().all(|s| remove_empty(fd.as_fd(), s, depth + 1)) && rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR).is_ok()
}
