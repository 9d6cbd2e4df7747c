//! Comparing a checked tree with the zone and writing the difference beneath the zone's
//! handle. Every path is reached one component at a time with `O_NOFOLLOW | O_DIRECTORY`
//! from the handle; a file is written under a temporary name and renamed over its place, so
//! a reader of the zone sees the old file or the new one, never half of one. A host file
//! that is no longer what the copy was taken from is a conflict, left as it is. Only what
//! the worker's own user could change on the host is changed (`apply`).

use std::collections::{BTreeSet, HashSet};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, Stat};

use super::baseline::Baseline;
use super::collect::{Collected, FileOut};
use super::summary::{Listed, Names, Refusal, Status, Summary};
use super::walk::open_dir;
use super::Reason;
use crate::hostrun::{Kind, Protection};

mod apply;

/// One change a publish would make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Add,
    Change,
    Delete,
    MakeDir,
    RemoveDir,
}

/// One change, as a review goes through them.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub op: Op,
    pub path: &'a [String],
    /// The staged content of an added or changed file.
    pub file: Option<&'a FileOut>,
}

/// What a publish will do: every change by its full name (the summary keeps a bounded
/// sample of names; these lists are what is written).
#[derive(Debug, Default)]
pub struct Changes {
    zone: String,
    writes: Vec<(Vec<String>, FileOut)>,
    mkdirs: Vec<Vec<String>>,
    deletes: Vec<Vec<String>>,
    rmdirs: Vec<Vec<String>>,
    conflicts: Names,
    refused: Listed<Refusal>,
    declined: Names,
    not_copied: Names,
    too_large: Names,
    baseline: Baseline,
}

/// One component as the kernel takes it. The checker has refused these already; refusing
/// them again here keeps a mistake there from turning into a walk out of the zone.
fn cname(s: &str) -> io::Result<CString> {
    if s.is_empty() || s == "." || s == ".." || s.contains('/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    CString::new(s).map_err(|_| io::Error::other("a name with a NUL byte"))
}

/// The parent directory of `path` beneath `zone`, opened without following links; the
/// directories missing on the way made when `create` says so (by whoever calls: on publish,
/// the worker's user, whose they then are).
fn parent(zone: BorrowedFd<'_>, path: &[String], create: bool) -> io::Result<OwnedFd> {
    let mut dir = rustix::fs::openat(zone, c".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    for c in &path[..path.len().saturating_sub(1)] {
        let c = cname(c)?;
        dir = match open_dir(&dir, &c) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                rustix::fs::mkdirat(&dir, &c, Mode::from_raw_mode(0o755))?;
                open_dir(&dir, &c)?
            }
            other => other?,
        };
    }
    Ok(dir)
}

/// The host entry at `path` now (`None` when there is none); an error when a directory on
/// the way is a link or not a directory.
fn host_state(zone: BorrowedFd<'_>, path: &[String]) -> io::Result<Option<Stat>> {
    let dir = match parent(zone, path, false) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        other => other?,
    };
    match rustix::fs::statat(&dir, cname(&path[path.len() - 1])?.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Compares the checked tree with the baseline and the zone as it is now.
pub fn diff(zone_name: &str, zone: impl AsFd, baseline: &Baseline, collected: &Collected) -> Changes {
    let zone = zone.as_fd();
    let mut c = Changes {
        zone: zone_name.to_string(),
        refused: collected.refusals(),
        not_copied: baseline.not_copied_names(),
        too_large: baseline.too_large_names(),
        ..Changes::default()
    };
    let show = |p: &[String]| p.join("/");
    let mut clashed: BTreeSet<Vec<String>> = BTreeSet::new();
    let beneath_clash = |clashed: &BTreeSet<Vec<String>>, p: &[String]| !clashed.is_empty() && (1..=p.len()).any(|n| clashed.contains(&p[..n]));
    for (path, f) in &collected.files {
        // The worker never had what it could not read: nothing it leaves there replaces it.
        if let Some(why) = baseline.not_copied_reason(path) {
            c.refused.refuse(&show(path), why);
            continue;
        }
        let before = baseline.files.get(path);
        if before.is_some_and(|s| s.sha256 == f.sha256 && s.executable == f.executable) {
            continue;
        }
        // A file where the copy had a directory: the worker's change of type, not the
        // host's. Refused like a link in its place, and the host's directory stays whole.
        if before.is_none() && baseline.dirs.contains(path) {
            c.refused.refuse(&show(path), Reason::TypeClash);
            clashed.insert(path.clone());
            continue;
        }
        let now = host_state(zone, path);
        let unchanged = match (before, &now) {
            (Some(seen), Ok(Some(st))) => seen.same(st),
            (None, Ok(None)) => true,
            _ => false,
        };
        if !unchanged {
            c.conflicts.name(&show(path));
            continue;
        }
        c.writes.push((path.clone(), f.clone()));
    }
    for path in collected.dirs.iter().filter(|d| !baseline.dirs.contains(*d)) {
        if let Some(why) = baseline.not_copied_reason(path) {
            c.refused.refuse(&format!("{}/", show(path)), why);
            continue;
        }
        c.mkdirs.push(path.clone());
    }
    for (path, seen) in &baseline.files {
        if collected.files.contains_key(path) || collected.dirs.contains(path) || collected.covered_by_refusal(path) || beneath_clash(&clashed, path) {
            continue;
        }
        match host_state(zone, path) {
            Ok(Some(st)) if seen.same(&st) => c.deletes.push(path.clone()),
            Ok(None) => {}
            _ => c.conflicts.name(&show(path)),
        }
    }
    // Directories the worker removed, deepest first; one the host filled meanwhile stays.
    let mut gone: Vec<_> =
        baseline.dirs.iter().filter(|d| !collected.dirs.contains(*d) && !collected.covered_by_refusal(d) && !beneath_clash(&clashed, d)).cloned().collect();
    gone.sort_by_key(|d| std::cmp::Reverse(d.len()));
    c.rmdirs = gone;
    c.baseline = baseline.clone();
    c
}

impl Changes {
    /// Withholds every change to a file the host runs (`crate::hostrun`): a new or changed
    /// protected file is not published, a protected directory not created, and a protected
    /// file or directory the worker deleted in its copy stays on the host; each is named in
    /// the summary's refusals. A git directory counts as `.git` whatever it is called (what
    /// git itself looks for: `HEAD` and `objects` or `commondir`), so a repository renamed in
    /// the copy, or a bare one, keeps its hooks and config protected; names are also judged
    /// in lower case (`.Git/CONFIG` is `.git/config` on a case-insensitive file system).
    pub fn withhold_hostrun(&mut self, collected: &Collected, protection: &Protection) {
        if protection.entries().is_empty() {
            return;
        }
        let base = &self.baseline;
        let is_git = |d: &[String]| {
            let with = |n: &str| d.iter().cloned().chain([n.to_string()]).collect::<Vec<_>>();
            let file = |n: &str| collected.files.contains_key(&with(n)) || base.files.contains_key(&with(n));
            let dir = |n: &str| collected.dirs.contains(&with(n)) || base.dirs.contains(&with(n));
            file("HEAD") && (dir("objects") || file("commondir"))
        };
        // The entry that covers `path` (a directory when `dir`), judging git directories on
        // the way as `.git`.
        let entry = |path: &[String], dir: bool| -> Option<String> {
            let mut judged = std::path::PathBuf::new();
            if is_git(&[]) {
                judged.push(".git");
            }
            for (i, c) in path.iter().enumerate() {
                let last = i + 1 == path.len();
                judged.push(if !last && is_git(&path[..=i]) { ".git" } else { c.as_str() });
            }
            protection.matches_any_case(&judged, if dir { Kind::Dir } else { Kind::Other }).map(str::to_string)
        };
        // What makes a directory a git directory (`HEAD`, `commondir`, `objects/`), new here,
        // in one that is not a git directory on the host but holds config or hooks there
        // (published by an earlier run, when they were nothing to git): git would run them
        // for anyone in that directory (a shell prompt's `git status`). The entry that
        // protects what is inside is the one named.
        let base_git = |d: &[String]| {
            let with = |n: &str| d.iter().cloned().chain([n.to_string()]).collect::<Vec<_>>();
            base.files.contains_key(&with("HEAD")) && (base.dirs.contains(&with("objects")) || base.files.contains_key(&with("commondir")))
        };
        let maker = |path: &[String]| -> Option<String> {
            (0..path.len()).find_map(|i| {
                let (d, n, last) = (&path[..i], path[i].as_str(), i + 1 == path.len());
                let makes = n == "objects" || (last && (n == "HEAD" || n == "commondir"));
                let new = !base.files.contains_key(&path[..=i]) && !base.dirs.contains(&path[..=i]);
                if !makes || !new || !is_git(d) || base_git(d) {
                    return None;
                }
                crate::hostrun::GIT_DIR_INSIDE.iter().find_map(|inside| {
                    let p: Vec<String> = d.iter().cloned().chain([inside.to_string()]).collect();
                    let dir = base.dirs.contains(&p);
                    (dir || base.files.contains_key(&p)).then(|| entry(&p, dir)).flatten()
                })
            })
        };
        let show = |p: &[String]| p.join("/");
        let refused = &mut self.refused;
        self.writes.retain(|(path, _)| match entry(path, false).or_else(|| maker(path)) {
            Some(entry) => {
                refused.refuse(&show(path), Reason::Protected { entry });
                false
            }
            None => true,
        });
        self.mkdirs.retain(|path| match entry(path, true).or_else(|| maker(path)) {
            Some(entry) => {
                refused.refuse(&format!("{}/", show(path)), Reason::Protected { entry });
                false
            }
            None => true,
        });
        self.deletes.retain(|path| match entry(path, false) {
            Some(entry) => {
                refused.refuse(&show(path), Reason::ProtectedDelete { entry });
                false
            }
            None => true,
        });
        self.rmdirs.retain(|path| match entry(path, true) {
            Some(entry) => {
                refused.refuse(&format!("{}/", show(path)), Reason::ProtectedDelete { entry });
                false
            }
            None => true,
        });
    }

    /// Withholds every change at or beneath one of `control` (paths relative to the zone):
    /// the project's control files, which a zone shipped to a remote engine carries in its
    /// copy instead of binding them read-only.
    pub fn withhold_control(&mut self, control: &[Vec<String>]) {
        if control.is_empty() {
            return;
        }
        let hit = |p: &[String]| control.iter().find(|c| p.starts_with(c)).map(|c| c.join("/"));
        let refused = &mut self.refused;
        let mut keep = |p: &[String], dir: bool| match hit(p) {
            Some(path) => {
                refused.refuse(&format!("{}{}", p.join("/"), if dir { "/" } else { "" }), Reason::Control { path });
                false
            }
            None => true,
        };
        self.writes.retain(|(p, _)| keep(p, false));
        self.mkdirs.retain(|p| keep(p, true));
        self.deletes.retain(|p| keep(p, false));
        self.rmdirs.retain(|p| keep(p, true));
    }

    /// Every change, in the order a publish makes them.
    pub fn entries(&self) -> impl Iterator<Item = Entry<'_>> {
        fn plain(op: Op) -> impl Fn(&Vec<String>) -> Entry<'_> {
            move |p| Entry { op, path: p.as_slice(), file: None }
        }
        self.mkdirs
            .iter()
            .map(plain(Op::MakeDir))
            .chain(self.writes.iter().map(|(p, f)| Entry {
                op: if self.baseline.files.contains_key(p) { Op::Change } else { Op::Add },
                path: p,
                file: Some(f),
            }))
            .chain(self.deletes.iter().map(plain(Op::Delete)))
            .chain(self.rmdirs.iter().map(plain(Op::RemoveDir)))
    }

    /// Keeps the changes `keep` says yes to; the others are not published and the summary
    /// names them as declined. A declined directory keeps what would go beneath it, and a new
    /// directory whose every entry was declined is declined with them (not made empty).
    pub fn decline(&mut self, mut keep: impl FnMut(&Entry<'_>) -> bool) {
        let show = |p: &[String], dir: bool| format!("{}{}", p.join("/"), if dir { "/" } else { "" });
        let mut no: Vec<Vec<String>> = Vec::new();
        let files = &self.baseline.files;
        let declined = &mut self.declined;
        let mut judge = |op: Op, p: &[String], file: Option<&FileOut>, dir: bool| {
            let below_no = no.iter().any(|d| p.starts_with(d) && d.len() < p.len());
            if below_no || !keep(&Entry { op, path: p, file }) {
                declined.name(&show(p, dir));
                if dir {
                    no.push(p.to_vec());
                }
                return false;
            }
            true
        };
        self.mkdirs.retain(|p| judge(Op::MakeDir, p, None, true));
        let new_dirs: HashSet<Vec<String>> = self.mkdirs.iter().cloned().collect();
        let had = holding(&new_dirs, self.writes.iter().map(|(p, _)| p.as_slice()).chain(self.mkdirs.iter().map(Vec::as_slice)));
        self.writes.retain(|(p, f)| judge(if files.contains_key(p) { Op::Change } else { Op::Add }, p, Some(f), false));
        self.deletes.retain(|p| judge(Op::Delete, p, None, false));
        self.rmdirs.retain(|p| judge(Op::RemoveDir, p, None, true));
        // A new directory that had something of the plan beneath it and has nothing left
        // (the reviewer said no to all of it) is not made either: nobody accepted anything
        // for it. Deepest first, so that a parent whose only child directory goes goes too.
        let mut alive = holding(&new_dirs, self.writes.iter().map(|(p, _)| p.as_slice()));
        let mut order: Vec<usize> = (0..self.mkdirs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.mkdirs[i].len()));
        let mut emptied = vec![false; self.mkdirs.len()];
        for i in order {
            let p = &self.mkdirs[i];
            if had.contains(p) && !alive.contains(p) {
                emptied[i] = true;
                declined.name(&show(p, true));
                continue;
            }
            alive.extend(holding(&new_dirs, std::iter::once(p.as_slice())));
        }
        let mut i = 0;
        self.mkdirs.retain(|_| {
            i += 1;
            !emptied[i - 1]
        });
    }

    /// What publishing would do, for a review (status `pending`, or `no_changes`).
    pub fn summary(&self) -> Summary {
        let mut s = self.fixed();
        for e in self.entries() {
            record(&mut s, &e);
        }
        s.status = if s.is_empty() { Status::NoChanges } else { Status::Pending };
        s
    }

    /// True when publishing would change nothing on the host.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.mkdirs.is_empty() && self.deletes.is_empty() && self.rmdirs.is_empty()
    }

    /// The parts of a summary that do not depend on what lands.
    fn fixed(&self) -> Summary {
        Summary {
            conflicts: self.conflicts.clone(),
            refused: self.refused.clone(),
            declined: self.declined.clone(),
            not_copied: self.not_copied.clone(),
            too_large: self.too_large.clone(),
            ..Summary::new(&self.zone)
        }
    }
}

/// The new directories (of `new_dirs`) that directly hold one of `paths`. Only the parent
/// is looked up (a deeper ancestor holds the parent, itself a new directory): hashing every
/// ancestor of 100,000 deep names would cost the square of their length.
fn holding<'p>(new_dirs: &HashSet<Vec<String>>, paths: impl Iterator<Item = &'p [String]>) -> HashSet<Vec<String>> {
    let mut out = HashSet::new();
    for p in paths {
        if let Some((_, parent)) = p.split_last().filter(|(_, parent)| new_dirs.contains(*parent)) {
            out.insert(parent.to_vec());
        }
    }
    out
}

/// Adds one change to the lists of `s`.
fn record(s: &mut Summary, e: &Entry<'_>) {
    let name = e.path.join("/");
    match (e.op, e.file) {
        (Op::Add, Some(f)) => s.added.file(&name, f.size, f.executable),
        (Op::Change, Some(f)) => s.changed.file(&name, f.size, f.executable),
        (Op::Delete, _) => s.deleted.name(&name),
        (Op::MakeDir, _) => s.dirs_added.name(&format!("{name}/")),
        (Op::RemoveDir, _) => s.dirs_deleted.name(&format!("{name}/")),
        _ => {}
    }
    if e.file.is_some_and(|f| f.bits_dropped) {
        s.bits_dropped.name(&name);
    }
}
