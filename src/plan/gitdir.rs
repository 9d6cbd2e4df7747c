//! Git directories named by a file rather than found by name (the walk also knows one by
//! its contents: `HEAD`, `objects/` and `refs/`): a `.git` pointer file
//! (`gitdir: …`, written by `git worktree`, submodules and `git init --separate-git-dir`) and
//! a `commondir` file. Git takes its config and hooks from the directory they name, wherever
//! it is, so when that directory lies in a writable mount its `config`, `hooks`, `commondir`
//! and `config.worktree` are protected there too, whatever the directory is called.
//!
//! The files are read beneath the mount's handle without following links. Where they point
//! is resolved by path (a link on the way is followed): that only decides which paths are
//! *also* bound read-only, and each is then opened beneath a mount's handle like any other.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};

use super::protected::Walked;

/// Git directories followed from pointer files, at most, per run.
const MAX_GIT_DIRS: usize = 64;
/// Longest pointer file read.
const MAX_POINTER: usize = 4096;
/// What git reads from a git directory and runs or obeys.
pub(super) const INSIDE: &[&str] = crate::hostrun::GIT_DIR_INSIDE;

/// Adds to each walked mount the protected paths of the git directories that the pointer
/// and `commondir` files found in any of them name.
pub(super) fn add_named_git_dirs(walked: &mut [Walked]) {
    let mut queue: Vec<PathBuf> = Vec::new();
    for w in walked.iter() {
        for (rel, entry) in &w.found {
            let named = match (entry.as_str(), rel.file_name().and_then(|n| n.to_str())) {
                (".git", _) => read_small(&w.dir, rel).and_then(|t| t.lines().next().and_then(|l| l.strip_prefix("gitdir:")).map(|g| g.trim().to_string())),
                (_, Some("commondir")) => read_small(&w.dir, rel).map(|t| t.trim().to_string()),
                _ => None,
            };
            if let Some(named) = named.filter(|n| !n.is_empty()) {
                queue.push(w.m.source.join(rel.parent().unwrap_or(Path::new(""))).join(named));
            }
        }
    }
    let mut seen: Vec<PathBuf> = Vec::new();
    while let Some(g) = queue.pop() {
        if seen.len() >= MAX_GIT_DIRS {
            break;
        }
        let Ok(g) = std::fs::canonicalize(&g) else { continue };
        if seen.contains(&g) {
            continue;
        }
        seen.push(g.clone());
        for w in walked.iter_mut() {
            let Ok(rel) = g.strip_prefix(&w.m.source) else { continue };
            let rel = rel.to_path_buf();
            for name in INSIDE {
                let p = rel.join(name);
                if !w.found.iter().any(|(f, _)| p.starts_with(f)) {
                    w.found.push((p, ".git".into()));
                }
            }
            if let Some(common) = read_small(&w.dir, &rel.join("commondir")).map(|t| t.trim().to_string()).filter(|t| !t.is_empty()) {
                queue.push(g.join(common));
            }
        }
    }
}

/// The start of the regular file `rel` beneath `dir`, opened one name at a time without
/// following links (`None` for anything else: missing, a link, a FIFO, unreadable).
fn read_small(dir: &OwnedFd, rel: &Path) -> Option<String> {
    read_beneath(dir, rel, MAX_POINTER)
}

/// The first `max` bytes of the regular file `rel` beneath `dir`, as [`read_small`] opens it.
pub(super) fn read_beneath(dir: &OwnedFd, rel: &Path, max: usize) -> Option<String> {
    let names: Vec<_> = rel.components().map(|c| c.as_os_str()).collect();
    let (last, parents) = names.split_last()?;
    let mut cur = dir.try_clone().ok()?;
    for name in parents {
        cur = rustix::fs::openat(&cur, *name, OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).ok()?;
    }
    // Only a regular file is opened at all (opening a device or FIFO can do things).
    let before = rustix::fs::statat(&cur, *last, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok()?;
    if FileType::from_raw_mode(before.st_mode) != FileType::RegularFile {
        return None;
    }
    let fd = rustix::fs::openat(&cur, *last, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut buf = vec![0u8; max];
    let mut n = 0;
    while n < max {
        match rustix::io::read(&fd, &mut buf[n..]).ok()? {
            0 => break,
            got => n += got,
        }
    }
    buf.truncate(n);
    Some(String::from_utf8_lossy(&buf).into_owned())
}
