//! What [`super::Watch::take`] reads of a repository before the worker starts, and the check
//! after the run first compares: `HEAD`, its branch's loose ref, and the identity of
//! `packed-refs`, `reftable/tables.list` and the index, read beneath the held git directory
//! one name at a time (no link followed, no git run); the commit `HEAD` resolved to then, and
//! whether those files see every change to it ([`plain`]).

use std::io::{BufRead, Read};
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags};

use super::git::Repo;

pub(super) const MAX_REF: usize = 4096;
/// The longest `packed-refs` scanned for the branch at launch (past it, git is asked).
pub(super) const MAX_PACKED: u64 = 64 << 20;
/// The identity of a file: a change to it changes one of these.
pub(super) type Stamp = (u64, u64, i64, i64, i64, i64, i64);

/// What the check after a run looks at first: equal, nothing to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Looks {
    pub(super) head: Option<Vec<u8>>,
    pub(super) branch: Option<Vec<u8>>,
    pub(super) packed: Option<Stamp>,
    pub(super) reftable: Option<Stamp>,
    pub(super) index: Option<Stamp>,
}

impl Looks {
    /// `HEAD` and the index from `dir`, the branch's ref from `refs` (the same directory, or
    /// a linked worktree's repository).
    pub(super) fn read(dir: BorrowedFd<'_>, refs: BorrowedFd<'_>) -> Looks {
        let head = read_beneath(dir, "HEAD", MAX_REF);
        let branch = head.as_deref().and_then(symbolic).and_then(|b| read_beneath(refs, &b, MAX_REF));
        Looks { head, branch, packed: stamp(refs, "packed-refs"), reftable: stamp(refs, "reftable/tables.list"), index: stamp(dir, "index") }
    }
}

/// The commit `HEAD` resolves to at launch: read from the loose ref or `packed-refs` when
/// they say, else asked of git (a symbolic branch, a reftable repository).
pub(super) fn launch_tip(repo: &Repo, refs: BorrowedFd<'_>, looks: &Looks, branch: Option<&str>) -> Option<String> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    match (branch, looks.head.as_deref()) {
        (None, Some(head)) if is_id(text(head).as_bytes()) => return Some(text(head)),
        // The branch's own file only when `HEAD` was read as one (not when git named it).
        (Some(_), Some(_)) if looks.reftable.is_none() => {
            if let Some(loose) = looks.branch.as_deref().map(text) {
                if is_id(loose.as_bytes()) {
                    return Some(loose);
                }
            } else if let Some(id) = branch.and_then(|b| packed(refs, b)) {
                return Some(id);
            } else if looks.packed.is_none() {
                return None;
            }
        }
        _ => {}
    }
    let out = repo.run(&["rev-parse", "-q", "--verify", "HEAD^{commit}"], b"", true).ok().flatten()?;
    Some(text(&out)).filter(|s| is_id(s.as_bytes()))
}

/// Whether `HEAD` (read as `looks`) and the branch it names are what [`Looks`] follows: see
/// [`Watched::plain`].
pub(super) fn plain(refs: BorrowedFd<'_>, looks: &Looks, branch: Option<&str>) -> bool {
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    let Some(head) = looks.head.as_deref() else { return false };
    if is_id(text(head).as_bytes()) {
        return true;
    }
    let Some(branch) = branch else { return false };
    match &looks.branch {
        Some(loose) => is_id(text(loose).as_bytes()),
        // No regular file there: plain only when nothing is there (a link, or a folder on the
        // way that is one, is not).
        None => {
            let (parent, name) = branch.rsplit_once('/').unwrap_or(("", branch));
            open_dir(refs, parent).is_some_and(|p| rustix::fs::statat(&p, name, AtFlags::SYMLINK_NOFOLLOW).is_err_and(|e| e == rustix::io::Errno::NOENT))
        }
    }
}

/// The branch a `HEAD` text names (`ref: refs/heads/…`), when it is a plain one.
pub(super) fn symbolic(head: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(head).ok()?.trim_end_matches('\n');
    let name = text.strip_prefix("ref: ")?.trim();
    let plain = name.starts_with("refs/heads/") && !name.contains("..") && !name.split('/').any(|c| c.is_empty() || c.starts_with('.'));
    (plain && !name.bytes().any(|b| b.is_ascii_control() || b == b' ')).then(|| name.to_string())
}

/// Whether `s` is a full object id (SHA-1 or SHA-256).
pub(super) fn is_id(s: &[u8]) -> bool {
    (s.len() == 40 || s.len() == 64) && s.iter().all(|b| b.is_ascii_hexdigit())
}

/// The id `packed-refs` gives `name`, scanned line by line (at most [`MAX_PACKED`] bytes).
pub(super) fn packed(dir: BorrowedFd<'_>, name: &str) -> Option<String> {
    let file = open_file(dir, "packed-refs")?;
    let reader = std::io::BufReader::new(std::fs::File::from(file).take(MAX_PACKED));
    reader.split(b'\n').map_while(Result::ok).find_map(|line| {
        let (id, r) = line.split_at(line.iter().position(|b| *b == b' ')?);
        (r.get(1..) == Some(name.as_bytes()) && is_id(id)).then(|| String::from_utf8_lossy(id).into_owned())
    })
}

/// The directory `rel` beneath `dir`, one name at a time, no link followed.
pub(super) fn open_dir(dir: BorrowedFd<'_>, rel: &str) -> Option<OwnedFd> {
    let mut cur = rustix::fs::openat(dir, ".", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    for name in rel.split('/').filter(|n| !n.is_empty()) {
        if name == ".." {
            return None;
        }
        cur = rustix::fs::openat(&cur, name, OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).ok()?;
    }
    Some(cur)
}

/// The regular file `rel` beneath `dir`, opened for reading as [`open_dir`] walks.
pub(super) fn open_file(dir: BorrowedFd<'_>, rel: &str) -> Option<OwnedFd> {
    let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let parent = open_dir(dir, parent)?;
    let fd = rustix::fs::openat(&parent, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let st = rustix::fs::fstat(&fd).ok()?;
    (rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile).then_some(fd)
}

/// The first `max` bytes of the regular file `rel` beneath `dir`.
pub(super) fn read_beneath(dir: BorrowedFd<'_>, rel: &str, max: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    std::fs::File::from(open_file(dir, rel)?).take(max as u64).read_to_end(&mut out).ok()?;
    Some(out)
}

/// The identity of `rel` beneath `dir` (not followed if a link: a link's own identity).
pub(super) fn stamp(dir: BorrowedFd<'_>, rel: &str) -> Option<Stamp> {
    let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
    let parent = open_dir(dir, parent)?;
    let st = rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
    Some((st.st_dev, st.st_ino, st.st_size, st.st_mtime, st.st_mtime_nsec as i64, st.st_ctime, st.st_ctime_nsec as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_branches_are_read_by_name() {
        assert_eq!(symbolic(b"ref: refs/heads/main\n").as_deref(), Some("refs/heads/main"));
        assert_eq!(symbolic(b"ref: refs/heads/a/b\n").as_deref(), Some("refs/heads/a/b"));
        for bad in [&b"ref: refs/heads/../../config\n"[..], b"ref: refs/tags/x\n", b"ref: refs/heads/.x\n", b"0123\n", b"ref: refs/heads//x"] {
            assert_eq!(symbolic(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
