//! Paths inside a writable mount bound read-only over themselves, by handle, with the
//! directories between the mount and each of them pinned.
//!
//! A read-only bind alone is not enough: a directory that holds a mount point can still be
//! renamed, so a worker could move `.git` aside (taking the bound `.git/config` with it) and
//! put a `.git` of its own in its place. Each directory from the mount down to the path is
//! therefore bound read-write onto itself, which makes it a mount point, and a mount point
//! cannot be renamed or removed. Used for the project's control files (`control`) and the
//! files the host runs (`protected`).

use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{Mode, OFlags};

use super::{Held, PlanMount};

/// One path to bind read-only, with the pins above it.
#[derive(Debug, Clone)]
pub(super) struct Pinned {
    /// Read-write binds of each directory between the mount and the path, outer first.
    pub pins: Vec<PlanMount>,
    /// The read-only bind of the path itself.
    pub bind: PlanMount,
    /// Device and inode of what is bound.
    pub identity: (u64, u64),
    /// The target of the mount it was found beneath.
    pub zone: String,
}

/// What stands at a path beneath a mount, opened without following links.
pub(super) enum Opened {
    Found(Pinned),
    /// A component is missing (or not a directory where one is needed).
    Missing,
    /// The path itself, or a directory above it, is a symbolic link: nothing to bind.
    Link,
}

/// A handle of `zone`'s own directory: its held handle, else (plans made without handles,
/// in tests) its path, opened once.
pub(super) fn zone_dir(zone: &PlanMount) -> Option<OwnedFd> {
    match &zone.held {
        Some(h) => h.0.try_clone().ok(),
        None => rustix::fs::open(&zone.source, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok(),
    }
}

/// The target inside the worker of `rel` beneath `zone`.
pub(super) fn target_of(zone: &PlanMount, rel: &Path) -> String {
    format!("{}/{}", zone.target.trim_end_matches('/'), rel.display())
}

/// Opens `rel` beneath the zone's handle `dir`, one component at a time, never following a
/// link, and returns the binds that keep it read-only.
pub(super) fn pin(zone: &PlanMount, dir: &OwnedFd, rel: &Path) -> Opened {
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, parents)) = names.split_last() else { return Opened::Missing };
    let mut cur: Arc<OwnedFd> = match dir.try_clone() {
        Ok(fd) => Arc::new(fd),
        Err(_) => return Opened::Missing,
    };
    let mut pins = Vec::new();
    let mut prefix = PathBuf::new();
    for name in parents {
        prefix.push(name);
        match rustix::fs::openat(&*cur, *name, OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => cur = Arc::new(fd),
            // O_PATH|O_NOFOLLOW opens a link itself; with O_DIRECTORY that is ENOTDIR, as a file.
            Err(rustix::io::Errno::NOTDIR) if is_link(&cur, name) => return Opened::Link,
            Err(_) => return Opened::Missing,
        }
        pins.push(PlanMount { source: zone.source.join(&prefix), target: target_of(zone, &prefix), read_only: false, held: Some(Held(cur.clone())) });
    }
    let fd = match rustix::fs::openat(&*cur, *last, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(_) => return Opened::Missing,
    };
    let Ok(st) = rustix::fs::fstat(&fd) else { return Opened::Missing };
    // A link cannot be bound over itself (a bind follows it).
    if rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink() {
        return Opened::Link;
    }
    let bind = PlanMount { source: zone.source.join(rel), target: target_of(zone, rel), read_only: true, held: Some(Held(Arc::new(fd))) };
    Opened::Found(Pinned { pins, bind, identity: (st.st_dev, st.st_ino), zone: zone.target.clone() })
}

fn is_link(dir: &OwnedFd, name: &std::ffi::OsStr) -> bool {
    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink())
}

/// True when `target` is `base` or lies beneath it (whole components).
pub(super) fn within(target: &str, base: &str) -> bool {
    let base = base.trim_end_matches('/');
    base.is_empty() || target == base || target.strip_prefix(base).is_some_and(|r| r.starts_with('/'))
}

/// Adds to `mounts` (the zones) the mounts that carry out `items`, and puts the whole list
/// in mount order: outer before inner, whatever each is, so that a pin goes on before a
/// zone nested beneath it (a pin mounted later would cover it, as it would cover anything
/// bound beneath it). A read-only bind beneath another is dropped (already read-only), and
/// so are its pins: a read-write pin inside a read-only bind would open it again. Nothing is
/// bound twice at one target, nor at a zone's own target.
pub(super) fn assemble(mounts: &mut Vec<PlanMount>, items: &[Pinned]) {
    let depth = |m: &PlanMount| m.target.matches('/').count();
    let mut binds: Vec<&Pinned> = items.iter().collect();
    binds.sort_by(|a, b| depth(&a.bind).cmp(&depth(&b.bind)).then(a.bind.target.cmp(&b.bind.target)));
    let mut kept: Vec<&Pinned> = Vec::new();
    for p in binds {
        // The zone it lies in is the deepest one containing it.
        let zone = mounts.iter().filter(|z| within(&p.bind.target, &z.target)).max_by_key(|z| depth(z));
        // Beneath another mount nested in its own, the path shows that mount's object, not
        // the one that was opened: nothing to bind there.
        let covered =
            kept.iter().any(|k| within(&p.bind.target, &k.bind.target)) || zone.is_none_or(|z| z.read_only || z.target == p.bind.target || z.target != p.zone);
        if !covered {
            kept.push(p);
        }
    }
    let mut added: Vec<PlanMount> = Vec::new();
    for p in &kept {
        for pin in &p.pins {
            if !added.iter().any(|o| o.target == pin.target) && !mounts.iter().any(|z| z.target == pin.target) {
                added.push(pin.clone());
            }
        }
    }
    added.extend(kept.into_iter().map(|p| p.bind.clone()));
    mounts.extend(added);
    // Stable: at one depth no two targets nest, so their order does not matter.
    mounts.sort_by_key(|m| depth(m));
}
