//! Files the host runs that a worker left behind. After a run, every writable area is walked
//! beneath its held handle, and each protected path the worker created or swapped in (one
//! that is not a path bound read-only at launch, with the identity it had) is moved aside
//! into `.workcell/quarantine/RUN_ID/` of that area, under a name no entry matches. When it
//! cannot be moved, it is removed; it is never left in place silently.
//!
//! The walk never follows a link and never names a path from the area's root: each
//! directory is opened beneath its parent's handle with `O_NOFOLLOW | O_DIRECTORY`, the
//! kind of an entry comes from the directory listing (a `stat` only where the file system
//! does not say). It is iterative, and bounded against a hostile tree:
//!
//! - at most [`MAX_DEPTH`] directories are open at once: a directory deeper than that is
//!   not checked but moved into the quarantine whole (fail closed), and reported;
//! - a directory holding more names than [`tally::max_dir_entries`] is not read to its end
//!   but moved into the quarantine whole (fail closed), and reported;
//! - at most [`MAX_ENTRIES`] entries are looked at, hard links counted once (what is counted
//!   and why: [`tally`]): past that, the walk stops and the report says the area was not
//!   fully checked (`Report::incomplete`; a tree that big is not moved: it is more likely
//!   the person's data than a plant). The run then fails and the zone stays unverified
//!   until a person has looked (`crate::run::unverified`).
//!
//! A directory that cannot be opened (a worker's `chmod 000`, when workcell is not root) is
//! moved into the quarantine whole as well.
//!
//! A protected directory moved whole (`.vscode/`, `sub/.git/hooks`) is then walked where it
//! now is, as an area of its own: whatever the worker put inside it that the host runs (a
//! whole repository with its config, an `.envrc`) is moved out of it too, so that a person
//! looking at the quarantine with git, or with a git-aware prompt, runs nothing, and the
//! next run's plan finds no protected path (or link) in it to refuse. Entries renamed while the walk runs (a parent
//! worker is still alive while its child's run ends) are skipped when gone, and looked at
//! again as what they now are.

use std::collections::HashSet;
use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, RenameFlags};
use rustix::io::Errno;
use serde::Serialize;

mod frame;
mod made;

use super::area::{BoundPath, ProtectedArea};
use super::looked::Looking;
use super::tally::{self, Tally};
use super::{remove, Kind};
use frame::Frame;
use made::make_quarantine;

/// How many directories the walk holds open at once (the depth it checks).
pub const MAX_DEPTH: usize = 128;
/// How many entries the walk looks at in one run before it stops ([`tally`]).
pub const MAX_ENTRIES: u64 = tally::MAX_ENTRIES;
/// How many items a report keeps (the counts go on beyond it).
pub const KEPT: usize = 100;
/// How many existing protected paths [`existing`] notes (beyond them, they are moved).
pub const KEPT_EXISTING: usize = 100_000;
/// Where the quarantine lives in an area.
pub const DIR: &str = ".workcell/quarantine";
/// The longest path a report shows of an item.
pub const PATH_SHOWN: usize = 512;
/// The longest name given to a moved item (file systems allow 255 bytes).
const NAME_MAX: usize = 200;

/// Why an item was moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum Why {
    /// A protected path, and the entry that protects it.
    Protected { entry: String },
    /// A directory deeper than the walk checks.
    TooDeep,
    /// A directory the walk could not open or read.
    Unreadable { error: String },
    /// A directory holding more than `entries` names, not read to its end.
    Crowded { entries: u64 },
}

/// What became of an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// Moved to `to` (relative to the area).
    Quarantined { to: String },
    /// Removed, because it could not be moved (`error` says why not).
    Removed { error: String },
    /// Still in place: it could be neither moved nor removed.
    Left { error: String },
}

/// One path found and dealt with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// Relative to the area, as the file system has it (lossy UTF-8; escape to show it).
    pub path: String,
    #[serde(flatten)]
    pub why: Why,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// What the check of one area found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The area's mount target.
    pub target: String,
    /// The area's directory on the host, when the kernel still has a name for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The first [`KEPT`] items.
    pub items: Vec<Item>,
    /// How many items there were in all.
    pub total: u64,
    /// How many of them are still in place.
    pub left: u64,
    /// Why the area was not fully checked, when it was not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<String>,
}

impl Report {
    /// Whether there is anything to tell.
    pub fn is_empty(&self) -> bool {
        self.total == 0 && self.incomplete.is_none()
    }
}

/// Checks `area` after run `run_id`: moves aside every protected path the worker left.
pub fn sweep(area: &ProtectedArea, run_id: &str) -> Report {
    let report = Report { target: area.target.clone(), ..Report::default() };
    let Some(held) = &area.held else {
        return Report { incomplete: Some("the area was not held open, so it could not be checked".into()), ..report };
    };
    let report = Report { host: held.current_path().map(|p| p.to_string_lossy().into_owned()), ..report };
    let bound = area.bound.iter().map(|b| b.identity).collect();
    let mut s = Sweep {
        area,
        run_id,
        root: held.0.as_fd(),
        quarantine: None,
        tally: Tally::default(),
        next: 1,
        report,
        found: None,
        bound,
        base_len: 0,
        pending: Vec::new(),
        looking: Some(Looking::new(held.0.as_fd(), &area.protection, |key| area.looked.take(key))),
    };
    if let Err(e) = s.walk(held.0.as_fd(), &[]) {
        s.report.incomplete = Some(format!("cannot read the area: {e}"));
    }
    // The records of a walk that went to its end, for the next one (`super::looked`).
    if let Some(looking) = s.looking.take().filter(|_| s.report.incomplete.is_none()) {
        area.looked.put(looking.after, looking.listed);
    }
    // Directories moved whole, walked in the quarantine; each entry is still looked at once.
    while let Some(moved) = s.pending.pop() {
        let opened = match &s.quarantine {
            Some(Ok((q, _))) => open_dir(q.as_fd(), &moved),
            _ => break,
        };
        let Ok(dir) = opened else { continue };
        let base = format!("{DIR}/{run_id}/{}", moved.to_string_lossy());
        if let Err(e) = s.walk(dir.as_fd(), base.as_bytes()) {
            s.report.incomplete = Some(format!("cannot read {}: {e}", crate::term::escape(&base)));
        }
    }
    s.report
}

/// The protected paths in `area` now (before a run), with their identities, as the same
/// walk finds them (at most [`KEPT_EXISTING`]); moves nothing. A path found here and still
/// the same object after the run is not moved by [`sweep`].
pub fn existing(area: &ProtectedArea) -> Vec<BoundPath> {
    let Some(held) = &area.held else { return Vec::new() };
    let mut s = Sweep {
        area,
        run_id: "",
        root: held.0.as_fd(),
        quarantine: None,
        tally: Tally::default(),
        next: 1,
        report: Report::default(),
        found: Some(Vec::new()),
        bound: HashSet::new(),
        base_len: 0,
        pending: Vec::new(),
        looking: None,
    };
    let _ = s.walk(held.0.as_fd(), &[]);
    s.found.unwrap_or_default()
}

struct Sweep<'a> {
    area: &'a ProtectedArea,
    run_id: &'a str,
    root: BorrowedFd<'a>,
    /// This run's quarantine directory and its identity, made on first need (or why not).
    quarantine: Option<io::Result<Made>>,
    tally: Tally,
    /// The number of the next moved item.
    next: u64,
    report: Report,
    /// Collecting what exists (for [`existing`]) instead of moving it.
    found: Option<Vec<BoundPath>>,
    /// The identities of the area's bound paths. The identity alone decides: a bound object
    /// cannot be moved (it is a mount point in the sandbox, its parents pinned) nor linked
    /// elsewhere (a link across mounts fails), and it is held open, so its inode is not
    /// reused; and a path need not be UTF-8.
    bound: HashSet<(u64, u64)>,
    /// How much of a walk's path is the place its root has in the area (a directory moved
    /// into the quarantine): what follows is matched as if that root were an area's.
    base_len: usize,
    /// Directories moved into the quarantine whole for being protected, not walked yet.
    pending: Vec<CString>,
    /// The records this walk trusts and makes (the area's own tree only, not what it moved).
    looking: Option<Looking>,
}

/// This run's quarantine directory, and its identity (device, inode).
type Made = (OwnedFd, (u64, u64));

impl Sweep<'_> {
    /// Walks beneath `root`, which is at `base` in the area (empty: the area's root).
    fn walk(&mut self, root: BorrowedFd<'_>, base: &[u8]) -> io::Result<()> {
        let mut rel: Vec<u8> = base.to_vec();
        self.base_len = if base.is_empty() { 0 } else { base.len() + 1 };
        let records = base.is_empty();
        let mut stack = vec![Frame::new(open_dir(root, c".")?, &rel, self.looking.as_mut().filter(|_| records))?];
        self.git_dir_inside(stack[0].fd()?, &rel);
        loop {
            let depth = stack.len();
            let Some(top) = stack.last_mut() else { break };
            if top.unlisted > 0 {
                if let Err(over) = self.tally.count_unlisted(std::mem::take(&mut top.unlisted)) {
                    self.report.incomplete = Some(format!("it stopped at {over}"));
                    return Ok(());
                }
            }
            let entry = match top.next() {
                None => {
                    if let (Some(frame), Some(looking)) = (stack.pop(), &mut self.looking) {
                        if let Some(listing) = frame.listing {
                            looking.listed(&rel[..frame.rel_len], listing);
                        }
                    }
                    continue;
                }
                // A directory that stops reading part-way: what it still holds is unknown.
                Some(Err(e)) => {
                    let dir = stack.pop().map(|f| f.rel_len);
                    self.set_aside_below(&stack, &mut rel, dir, Why::Unreadable { error: e.to_string() });
                    continue;
                }
                Some(Ok(e)) => e,
            };
            let (name, file_type, ino) = (entry.0.as_c_str(), entry.1, entry.2);
            if name == c"." || name == c".." {
                continue;
            }
            top.listed += 1;
            // Not read to its end: what it still holds is unknown, so it goes whole.
            if top.listed > tally::max_dir_entries() {
                let dir = stack.pop().map(|f| f.rel_len);
                self.set_aside_below(&stack, &mut rel, dir, Why::Crowded { entries: tally::max_dir_entries() });
                continue;
            }
            if let Err(over) = self.tally.count(top.dev, ino, file_type == FileType::Directory) {
                self.report.incomplete = Some(format!("it stopped at {over}"));
                return Ok(());
            }
            rel.truncate(top.rel_len);
            if !rel.is_empty() {
                rel.push(b'/');
            }
            rel.extend_from_slice(name.to_bytes());
            let mut kind = match file_type {
                FileType::Directory => Kind::Dir,
                FileType::Unknown => match rustix::fs::statat(top.fd()?, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Kind::Dir,
                    Ok(_) => Kind::Other,
                    Err(_) => continue,
                },
                _ => Kind::Other,
            };
            let (area, base_len) = (self.area, self.base_len);
            let judged = |kind| area.protection.matches_any_case(Path::new(OsStr::from_bytes(&rel[base_len..])), kind);
            let mut matched = judged(kind);
            if let Some(listing) = &mut top.listing {
                listing.note(Path::new(OsStr::from_bytes(&rel[base_len..])), name.to_bytes(), kind == Kind::Dir, ino, matched.is_some());
            }
            let parent = top.fd()?;
            loop {
                if let Some(entry) = matched {
                    if !self.was_bound(parent, name) {
                        let entry = entry.to_string();
                        self.neutralise(parent, name, &rel, Why::Protected { entry });
                    }
                    break;
                }
                if kind == Kind::Other {
                    break;
                }
                if depth >= MAX_DEPTH {
                    self.neutralise(parent, name, &rel, Why::TooDeep);
                    break;
                }
                match open_dir(parent, name) {
                    Ok(fd) => {
                        if self.is_quarantine(&fd) {
                            break;
                        }
                        match Frame::new(fd, &rel, self.looking.as_mut().filter(|_| records)) {
                            Ok(frame) => {
                                self.git_dir_inside(frame.fd()?, &rel);
                                stack.push(frame);
                            }
                            Err(e) => self.neutralise(parent, name, &rel, Why::Unreadable { error: e.to_string() }),
                        }
                    }
                    // Gone meanwhile.
                    Err(Errno::NOENT) => {}
                    // Swapped for a link or a file meanwhile: judged again as what it is.
                    Err(Errno::NOTDIR | Errno::LOOP) => {
                        kind = Kind::Other;
                        matched = judged(kind);
                        continue;
                    }
                    Err(e) => self.neutralise(parent, name, &rel, Why::Unreadable { error: e.to_string() }),
                }
                break;
            }
        }
        Ok(())
    }

    /// A directory (at `rel[..len]`) not read to its end (its listing failed, or it is
    /// crowded): it is moved whole. The area's own root cannot be: the area is incomplete.
    fn set_aside_below(&mut self, stack: &[Frame], rel: &mut Vec<u8>, len: Option<usize>, why: Why) {
        let (Some(len), Some(parent)) = (len, stack.last()) else {
            self.report.incomplete = Some(match why {
                Why::Crowded { entries } => format!("its top directory holds more than {entries} names, so it was not read to its end"),
                Why::Unreadable { error } => format!("cannot list the area: {error}"),
                _ => "cannot list the area".to_string(),
            });
            return;
        };
        rel.truncate(len);
        let name_start = rel.iter().rposition(|b| *b == b'/').map_or(0, |i| i + 1);
        let (Ok(name), Ok(pfd)) = (CString::new(&rel[name_start..]), parent.fd()) else { return };
        let path = rel.clone();
        self.neutralise(pfd, &name, &path, why);
    }

    /// A git directory by its contents, whatever its name (a bare repository the worker made,
    /// where git run inside it reads its `config`): what git reads from it is protected as
    /// in a `.git`, unless it was bound at launch.
    fn git_dir_inside(&mut self, dir: BorrowedFd<'_>, rel: &[u8]) {
        if !crate::hostrun::is_git_dir(dir) {
            return;
        }
        for inside in crate::hostrun::GIT_DIR_INSIDE {
            let Ok(name) = CString::new(*inside) else { continue };
            if rustix::fs::statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW).is_err() {
                continue;
            }
            let mut path = rel.to_vec();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(inside.as_bytes());
            if !self.was_bound(dir, &name) {
                self.neutralise(dir, &name, &path, Why::Protected { entry: "a git directory's ".to_string() + inside });
            }
        }
    }

    /// Whether `rel` is a path that was bound read-only at launch and is still that object.
    fn was_bound(&self, parent: BorrowedFd<'_>, name: &CStr) -> bool {
        !self.bound.is_empty() && rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| self.bound.contains(&(st.st_dev, st.st_ino)))
    }

    /// Whether `dir` is this run's own quarantine (not walked: what is there was moved by
    /// this walk, under names no entry matches, or is a subtree it did not check).
    fn is_quarantine(&self, dir: &OwnedFd) -> bool {
        let Some(Ok((_, id))) = &self.quarantine else { return false };
        rustix::fs::fstat(dir).is_ok_and(|st| (st.st_dev, st.st_ino) == *id)
    }

    /// Moves `name` beneath `parent` into the quarantine; removes it when that fails.
    fn neutralise(&mut self, parent: BorrowedFd<'_>, name: &CStr, rel: &[u8], why: Why) {
        if let Some(found) = &mut self.found {
            // Before the run nothing is moved: a protected path is noted, the rest (too
            // deep, unreadable) is judged after the run.
            let (Why::Protected { entry }, Ok(path)) = (why, std::str::from_utf8(rel)) else { return };
            if found.len() < KEPT_EXISTING {
                if let Ok(st) = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    found.push(BoundPath { path: path.to_string(), entry, identity: (st.st_dev, st.st_ino) });
                }
            }
            return;
        }
        self.report.total += 1;
        let outcome = match self.move_aside(parent, name, rel) {
            Ok((to, moved)) => {
                if matches!(why, Why::Protected { .. }) {
                    self.walk_later(moved);
                }
                Outcome::Quarantined { to }
            }
            Err(moving) => match remove::remove_tree(parent, name) {
                Ok(()) => Outcome::Removed { error: moving.to_string() },
                Err(e) => {
                    self.report.left += 1;
                    Outcome::Left { error: format!("cannot move it ({moving}) nor remove it ({e})") }
                }
            },
        };
        if self.report.items.len() < KEPT {
            self.report.items.push(Item { path: shown(rel), why, outcome });
        }
    }

    /// Notes `moved` (a name in the quarantine) to be walked, when it is a directory.
    fn walk_later(&mut self, moved: CString) {
        let Some(Ok((q, _))) = &self.quarantine else { return };
        if rustix::fs::statat(q, &moved, AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory) {
            self.pending.push(moved);
        }
    }

    /// Moves `name` beneath `parent` into the quarantine: where it is now (relative to the
    /// area) and its name there.
    fn move_aside(&mut self, parent: BorrowedFd<'_>, name: &CStr, rel: &[u8]) -> io::Result<(String, CString)> {
        if self.quarantine.is_none() {
            self.quarantine = Some(make_quarantine(self.root, self.run_id));
        }
        let q = match &self.quarantine {
            Some(Ok((fd, _))) => fd.as_fd(),
            Some(Err(e)) => return Err(io::Error::other(format!("cannot make {DIR}/{}: {e}", self.run_id))),
            None => unreachable!("made above"),
        };
        let moved = item_name(self.next, rel);
        self.next += 1;
        let to = format!("{DIR}/{}/{moved}", self.run_id);
        // An added entry could match the quarantine's own names (`*`): such a name is not used.
        if [Kind::Dir, Kind::Other].iter().any(|k| self.area.protection.matches_any_case(Path::new(&to), *k).is_some()) {
            return Err(io::Error::other(format!("{to} would itself be protected")));
        }
        let moved = CString::new(moved).map_err(io::Error::other)?;
        rustix::fs::renameat_with(parent, name, q, &moved, RenameFlags::NOREPLACE)?;
        Ok((to, moved))
    }
}

/// `rel` as text for a report: lossy UTF-8, at most [`PATH_SHOWN`] bytes (then `…`).
fn shown(rel: &[u8]) -> String {
    let mut s = String::from_utf8_lossy(rel).into_owned();
    if s.len() > PATH_SHOWN {
        let mut cut = PATH_SHOWN;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// `NNNN-` and `rel` with every byte but letters, digits, `.`, `_` and `-` written `%XX`:
/// no `/`, no control character, bounded, and never a protected name by itself.
pub fn item_name(n: u64, rel: &[u8]) -> String {
    let mut s = format!("{n:04}-");
    for &b in rel {
        if s.len() + 3 > NAME_MAX {
            s.push('~');
            break;
        }
        if b.is_ascii_alphanumeric() || b"._-".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// Opens the directory `name` beneath `dir` without following a link.
pub(super) fn open_dir(dir: BorrowedFd<'_>, name: &CStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
}

/// A listing of the directory `dir` (which may be an `O_PATH` handle, as the plan holds),
/// through a descriptor of its own.
pub(super) fn list(dir: BorrowedFd<'_>) -> io::Result<Dir> {
    Ok(Dir::new(open_dir(dir, c".")?)?)
}

#[cfg(test)]
#[path = "quarantine_tests.rs"]
mod tests;
