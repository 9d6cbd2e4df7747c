//! Files the host runs (`crate::hostrun`), kept read-only in every writable, bind-delivered
//! mount: each protected path that exists at launch is found by a bounded walk beneath the
//! mount's held handle and bound read-only over itself, its parents pinned (`pin`).
//!
//! The walk never follows a link and does not descend into a protected match (it is bound
//! whole), nor into another mount's target (a nested zone has its own walk; the control
//! files are bound already). Past its bounds (entries looked at, depth, paths to bind) the
//! run is refused rather than started with some of them left writable.
//!
//! A git directory named by a `.git` pointer or `commondir` file is protected wherever it
//! lies in a writable mount, whatever its name (`gitdir`).
//!
//! A protected path that is a symbolic link refuses the run: a bind would follow the link,
//! the worker could replace a link in a writable directory anyway, and the sweep after the
//! run would move a person's own link aside (`.bashrc` -> dotfiles) as if a worker had
//! planted it. The refusal says how to keep it (`unprotect:`) or replace it.
//!
//! A regular file with more than one hard link is refused: a read-only bind of one name
//! does not stop writes through another name elsewhere in a writable zone, and such a link
//! can only have been made before the run (a link across mounts fails with `EXDEV`).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

use super::hookspath::{self, Target};
use super::pin::{pin, within, zone_dir, Opened, Pinned};
use super::{BoundPath, PlanMount, ProtectedArea};
use crate::hostrun::home::{self, Home};
use crate::hostrun::looked::{self, Looked, Looking, Records};
use crate::hostrun::tally::{self, Over, Tally};
use crate::hostrun::{Kind, Protection};
use crate::sandbox::{Delivery, Sandbox};

/// Entries (files, directories, links) the walk of one run looks at, at most: the same
/// bound as the sweep after a run, so a zone it accepted is not refused by the next plan.
pub const MAX_ENTRIES: usize = crate::hostrun::quarantine::MAX_ENTRIES as usize;
/// Directories below a mount the walk goes, at most: the sweep moves anything deeper aside,
/// so what a worker leaves never refuses the next run.
pub const MAX_DEPTH: usize = crate::hostrun::quarantine::MAX_DEPTH;
/// Protected paths one run binds, at most (each holds a descriptor until the launch).
pub const MAX_BOUND: usize = 256;

/// Why the protected paths of a mount could not all be found or kept read-only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtectError {
    #[error("more than {MAX_ENTRIES} files and directories")]
    TooManyEntries,
    /// The walk's tally reached its bound (`hostrun::tally`).
    #[error("{0}; move part of it out of the zone, or give it as a zone of its own")]
    TooMany(Over),
    /// A directory holding more names than one may (`hostrun::tally::max_dir_entries`).
    #[error("the directory '{}' holds more than {} names; a folder that crowded is not checked. Split it into smaller folders, or move it out of the zone (into a read-only zone of its own)", crate::term::escape(.0), .1)]
    Crowded(String, u64),
    #[error("directories nested {MAX_DEPTH} levels deep or deeper (at '{}')", crate::term::escape(.0))]
    TooDeep(String),
    #[error("more than {MAX_BOUND} files the host runs to keep read-only")]
    TooManyBound,
    #[error("the directory '{}' cannot be read ({})", crate::term::escape(.0), .1)]
    Unreadable(String, String),
    #[error(
        "'{}' has {} hard links: a worker could change it through another of its names. Remove the other names (`find ZONE -samefile PATH`), or copy the file over itself (`cp -p f f.tmp && mv f.tmp f`)",
        crate::term::escape(.0),
        .1
    )]
    HardLinked(String, u64),
    #[error(
        "'{}' is a symbolic link (protected by '{}'): a link cannot be bound read-only, and a worker could replace it or change what it leads to, which git or the shell would then run. Replace the link by the file it names, or, if you trust where it leads, add `unprotect: ['{}']` to the zone",
        crate::term::escape(.0),
        .1,
        .1
    )]
    Link(String, String),
    #[error("a git configuration's core.hooksPath names hooks in this zone that cannot be protected: {0}. Move the hooks to a plainer path and set core.hooksPath to it")]
    HooksPath(String),
    #[error("the zone is a home directory, and its home entries cannot be protected: {0}")]
    Home(String),
}

/// The protected areas of the writable, bind-delivered mounts of `zones`, and the mounts
/// that keep their existing protected paths read-only. `other` are the mounts already
/// bound over the zones (the control files), whose insides are not walked.
pub(super) fn protected_areas(
    sandbox: &Sandbox,
    project_dir: &Path,
    zones: &[(PlanMount, String)],
    other: &[Pinned],
) -> Result<(Vec<ProtectedArea>, Vec<Pinned>), super::PlanError> {
    // Hook directories named by the person's own git configuration, then by the protected
    // configurations the walk finds (one more walk when those name others).
    let mut hooks: Vec<Target> = hookspath::host_configs().iter().flat_map(|f| hookspath::values_in_host_file(f)).collect();
    // Zones that are a home by where they are, then those whose walk met a start-up file
    // (`hostrun::home`): one more walk with the home entries.
    let mut homes: Vec<(String, Home)> = zones.iter().filter_map(|(m, _)| home::by_path(&m.source).map(|h| (m.target.clone(), h))).collect();
    let mut walked = walk_zones(sandbox, project_dir, zones, other, &hooks, &homes)?;
    let named: Vec<Target> = hookspath::in_walked(&walked).into_iter().filter(|t| !hooks.contains(t)).collect();
    let found_homes: Vec<(String, Home)> = walked
        .iter()
        .filter(|w| !homes.iter().any(|(t, _)| *t == w.m.target))
        .filter_map(|w| w.startup.clone().map(|rel| (w.m.target.clone(), Home::Startup(rel))))
        .collect();
    // A zone its configuration made a home already was walked with the home entries.
    let rewalk = found_homes.iter().any(|(t, _)| walked.iter().any(|w| w.m.target == *t && !home::widened(&w.protection)));
    homes.extend(found_homes);
    let mut first: Vec<(String, Looked, bool)> = Vec::new();
    if !named.is_empty() || rewalk {
        hooks.extend(named);
        // The first walk's records are kept too: the next launch walks with both again.
        first = walked.into_iter().map(|w| (w.m.target.clone(), w.looking.after, w.looking.listed)).collect();
        walked = walk_zones(sandbox, project_dir, zones, other, &hooks, &homes)?;
    }
    let mut budget = Budget::default();
    let mut areas = Vec::new();
    let mut binds = Vec::new();
    for w in walked {
        let refused = |reason| super::PlanError::Protected { zone: w.m.target.clone(), reason };
        let mut bound = Vec::new();
        for (rel, entry) in w.found {
            match pin(w.m, &w.dir, &rel) {
                Opened::Found(p) => {
                    check_links(&p, &rel).map_err(refused)?;
                    budget.bound += 1;
                    if budget.bound > MAX_BOUND {
                        return Err(refused(ProtectError::TooManyBound));
                    }
                    bound.push(BoundPath { path: rel.to_string_lossy().into_owned(), entry, identity: p.identity });
                    binds.push(p);
                }
                // A link cannot be bound over itself and the sweep after the run would move
                // a person's own link aside: refused before anything starts instead.
                Opened::Link => return Err(refused(ProtectError::Link(rel.to_string_lossy().into_owned(), entry))),
                // Gone since the walk: nothing to keep; the sweep judges whatever is there.
                Opened::Missing => {}
            }
        }
        let unprotected = sandbox.host_protection().entries().iter().filter(|e| !w.protection.entries().contains(e)).cloned().collect();
        let home = homes.iter().find(|(t, _)| *t == w.m.target).map(|(_, h)| h.to_string());
        areas.push(ProtectedArea {
            target: w.m.target.clone(),
            home,
            held: w.m.held.clone(),
            entries: w.protection.entries().to_vec(),
            unprotected,
            by_family: w.protection.families().to_vec(),
            bound,
            protection: w.protection.clone(),
            looked: {
                let first: Vec<&(String, Looked, bool)> = first.iter().filter(|(t, _, _)| *t == w.m.target).collect();
                let listed = w.looking.listed || first.iter().any(|(_, _, listed)| *listed);
                Records::new(first.into_iter().map(|(_, l, _)| l.clone()).chain([w.looking.after.clone()]).collect(), listed)
            },
        });
    }
    Ok((areas, binds))
}

/// The walks of the writable, bind-delivered mounts of `zones`, each with its protection
/// plus the hook directories of `hooks`, and the home entries where `homes` names it.
fn walk_zones<'a>(
    sandbox: &Sandbox,
    project_dir: &Path,
    zones: &'a [(PlanMount, String)],
    other: &[Pinned],
    hooks: &[Target],
    homes: &[(String, Home)],
) -> Result<Vec<Walked<'a>>, super::PlanError> {
    let mut budget = Budget::default();
    let mut walked: Vec<Walked> = Vec::new();
    for (m, name) in zones.iter().filter(|(m, _)| !m.read_only) {
        let Some(mount) = sandbox.mounts().iter().find(|x| &x.name == name) else { continue };
        // Copy delivery publishes a checked copy instead (its checks refuse these paths).
        if mount.delivery == Delivery::Copy {
            continue;
        }
        let Some(dir) = zone_dir(m) else { continue };
        // Targets beneath this mount that something else is bound at.
        let skip: Vec<PathBuf> = zones
            .iter()
            .map(|(z, _)| z.target.as_str())
            .chain(other.iter().map(|p| p.bind.target.as_str()))
            .filter(|t| *t != m.target && within(t, &m.target))
            .filter_map(|t| t.strip_prefix(m.target.trim_end_matches('/')).map(|r| PathBuf::from(r.trim_start_matches('/'))))
            .collect();
        let mut protection = hookspath::with_hooks(&mount.protection, hooks, &m.source)
            .map_err(|e| super::PlanError::Protected { zone: m.target.clone(), reason: ProtectError::HooksPath(e.to_string()) })?;
        if homes.iter().any(|(t, _)| *t == m.target) && !home::widened(&protection) {
            protection =
                home::widen(&protection).map_err(|e| super::PlanError::Protected { zone: m.target.clone(), reason: ProtectError::Home(e.to_string()) })?;
        }
        let mut startup = None;
        let mut looking = Looking::new(dir.as_fd(), &protection, |key| looked::store::load(project_dir, dir.as_fd(), key));
        let found = walk(&dir, &protection, &skip, &mut budget, &mut startup, &mut looking)
            .map_err(|reason| super::PlanError::Protected { zone: m.target.clone(), reason })?;
        walked.push(Walked { m, protection, dir, found, startup, looking });
    }
    super::gitdir::add_named_git_dirs(&mut walked);
    Ok(walked)
}

/// One writable mount after its walk: the protected paths found in it (relative, with the
/// entry protecting each).
pub(super) struct Walked<'a> {
    pub m: &'a PlanMount,
    pub protection: Protection,
    pub dir: OwnedFd,
    pub found: Vec<(PathBuf, String)>,
    /// The first shell start-up file the walk met (`hostrun::home`): the zone is a home.
    pub startup: Option<PathBuf>,
    /// The records the walk trusted and made (`hostrun::looked`).
    pub looking: Looking,
}

/// A name of a directory: the name, its kind as the listing says, its inode.
type Name = (Vec<u8>, FileType, u64);

/// What the walks of one run have used.
#[derive(Default)]
struct Budget {
    /// Counted as the sweep after the run counts, so a zone accepted here is swept whole.
    tally: Tally,
    bound: usize,
}

/// The protected paths beneath the directory `dir`, relative to it, with the entry that
/// protects each, outer first. Never follows a link; does not descend into a match or a
/// path of `skip`. `startup` is set to the first shell start-up file met. A directory that
/// `looking` has a trusted record of is not listed: its record says what it holds.
fn walk(
    dir: &OwnedFd,
    protection: &Protection,
    skip: &[PathBuf],
    budget: &mut Budget,
    startup: &mut Option<PathBuf>,
    looking: &mut Looking,
) -> Result<Vec<(PathBuf, String)>, ProtectError> {
    let mut found = Vec::new();
    // Each directory still to read: its parent's handle, its name and its path. A parent's
    // handle lives as long as one of its children waits, so at most one per level is open.
    let root = open_dir(dir, Path::new(".")).map_err(|e| ProtectError::Unreadable(".".into(), e.to_string()))?;
    let mut stack: Vec<(Arc<OwnedFd>, PathBuf)> = vec![(Arc::new(root), PathBuf::new())];
    while let Some((fd, rel)) = stack.pop() {
        // The sweep holds at most MAX_DEPTH directories open, the zone's own among them: it
        // moves aside a directory MAX_DEPTH levels down, so one that deep is refused here.
        if rel.components().count() >= MAX_DEPTH {
            // A subtree the sweep moved whole for its depth lies three levels down in the
            // quarantine: not bound, moved whole again by this run's sweep (as the sweep
            // does with any subtree that deep), never a reason to refuse every later run.
            if rel.starts_with(crate::hostrun::quarantine::DIR) {
                continue;
            }
            return Err(ProtectError::TooDeep(rel.to_string_lossy().into_owned()));
        }
        let unreadable = |e: &dyn std::fmt::Display| ProtectError::Unreadable(shown(&rel), e.to_string());
        // The status before the listing: a change after it shows as a later ctime.
        let st = rustix::fs::fstat(&*fd).map_err(|e| unreadable(&e))?;
        let dev = st.st_dev;
        let trusted = looking.trusted(rel.as_os_str().as_bytes(), &st);
        let mut listing = None;
        let names: Box<dyn Iterator<Item = Result<Name, ProtectError>>> = match &trusted {
            Some(seen) => {
                budget.tally.count_unlisted(seen.others).map_err(ProtectError::TooMany)?;
                Box::new(seen.entries().map(|(n, t, ino)| Ok((n.as_bytes().to_vec(), t, ino))))
            }
            None => {
                listing = Some(looking.listing(rel.as_os_str().as_bytes(), &st));
                let entries = rustix::fs::Dir::read_from(&*fd).map_err(|e| unreadable(&e))?;
                Box::new(entries.map(|e| e.map(|e| (e.file_name().to_bytes().to_vec(), e.file_type(), e.ino())).map_err(|e| unreadable(&e))))
            }
        };
        // What makes this directory a git directory, whatever its name (a bare repository:
        // git uses the config of one it finds itself in).
        let mut git_marks = 0u8;
        let mut listed = 0u64;
        for e in names {
            let (name, file_type, ino) = e?;
            if name == b"." || name == b".." {
                continue;
            }
            listed += 1;
            if listed > tally::max_dir_entries() {
                // One the sweep moved into the quarantine for this: moved again by this run's
                // sweep, never a reason to refuse every later run.
                if rel.starts_with(crate::hostrun::quarantine::DIR) {
                    listing = None;
                    break;
                }
                return Err(ProtectError::Crowded(shown(&rel), tally::max_dir_entries()));
            }
            budget.tally.count(dev, ino, file_type == FileType::Directory).map_err(ProtectError::TooMany)?;
            let name = std::ffi::OsStr::from_bytes(&name);
            let path = rel.join(name);
            let kind = match file_type {
                FileType::Unknown => {
                    rustix::fs::statat(&*fd, name, AtFlags::SYMLINK_NOFOLLOW).map(|st| FileType::from_raw_mode(st.st_mode)).unwrap_or(FileType::Unknown)
                }
                other => other,
            };
            let is_dir = kind == FileType::Directory;
            if startup.is_none() && home::is_startup(&path) {
                *startup = Some(path.clone());
            }
            git_marks |= match (name.as_bytes(), is_dir) {
                (b"HEAD", false) => 1,
                (b"objects", true) => 2,
                (b"refs", true) => 4,
                _ => 0,
            };
            let matched = protection.matches_any_case(&path, if is_dir { Kind::Dir } else { Kind::Other });
            if let Some(l) = &mut listing {
                l.note(&path, name.as_bytes(), is_dir, ino, matched.is_some());
            }
            if let Some(entry) = matched {
                found.push((path, entry.to_string()));
                continue;
            }
            if !is_dir || skip.iter().any(|s| s == &path) {
                continue;
            }
            match rustix::fs::openat(&*fd, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
                Ok(child) => stack.push((Arc::new(child), path)),
                // Replaced by a link or a file, or removed, since it was listed: nothing to
                // walk there.
                Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR | rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(ProtectError::Unreadable(shown(&path), e.to_string())),
            }
        }
        if let Some(l) = listing {
            looking.listed(rel.as_os_str().as_bytes(), l);
        }
        if git_marks == 7 {
            found.extend(super::gitdir::INSIDE.iter().map(|n| (rel.join(n), ".git".to_string())));
        }
    }
    found.sort_by(|a, b| a.0.components().count().cmp(&b.0.components().count()).then(a.0.cmp(&b.0)));
    // Outer first: a path beneath one already kept is covered by it.
    let mut kept: Vec<(PathBuf, String)> = Vec::new();
    for f in found {
        if !kept.iter().any(|(k, _)| f.0.starts_with(k)) {
            kept.push(f);
        }
    }
    Ok(kept)
}

fn open_dir(dir: &OwnedFd, rel: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(dir, rel, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
}

fn shown(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        ".".into()
    } else {
        rel.to_string_lossy().into_owned()
    }
}

/// Refuses a bound regular file with other names, and one inside a bound directory (looked
/// at to the same bounds as the walk).
fn check_links(p: &Pinned, rel: &Path) -> Result<(), ProtectError> {
    let Some(held) = &p.bind.held else { return Ok(()) };
    let st = rustix::fs::fstat(&*held.0).map_err(|e| ProtectError::Unreadable(shown(rel), e.to_string()))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile if st.st_nlink > 1 => Err(ProtectError::HardLinked(shown(rel), links(st.st_nlink))),
        FileType::Directory => {
            let dir = open_dir(&held.0, Path::new(".")).map_err(|e| ProtectError::Unreadable(shown(rel), e.to_string()))?;
            let mut stack = vec![(dir, rel.to_path_buf())];
            let mut seen = 0usize;
            while let Some((fd, at)) = stack.pop() {
                if at.components().count() > MAX_DEPTH {
                    return Err(ProtectError::TooDeep(shown(&at)));
                }
                for e in rustix::fs::Dir::read_from(&fd).map_err(|e| ProtectError::Unreadable(shown(&at), e.to_string()))? {
                    let e = e.map_err(|e| ProtectError::Unreadable(shown(&at), e.to_string()))?;
                    let name = e.file_name().to_bytes();
                    if name == b"." || name == b".." {
                        continue;
                    }
                    seen += 1;
                    if seen > MAX_ENTRIES {
                        return Err(ProtectError::TooManyEntries);
                    }
                    let name = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name);
                    let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) else { continue };
                    match FileType::from_raw_mode(st.st_mode) {
                        FileType::RegularFile if st.st_nlink > 1 => return Err(ProtectError::HardLinked(shown(&at.join(name)), links(st.st_nlink))),
                        FileType::Directory => {
                            if let Ok(child) = open_dir(&fd, Path::new(name)) {
                                stack.push((child, at.join(name)));
                            }
                        }
                        _ => {}
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A link count as `u64` (`nlink_t` is narrower on some architectures).
#[allow(clippy::unnecessary_cast)]
fn links(n: libc::nlink_t) -> u64 {
    n as u64
}
