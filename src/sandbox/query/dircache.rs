//! Handles of the parent directories a [`super::Querier`] has met, bounded in number and
//! shared between its threads: the least recently used one is closed when a new one is
//! needed and the cache is full.
//!
//! A handle is opened once, with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` beneath
//! the area's own handle, so it is exactly the directory a walk from the area's root reaches
//! (symlinks inside the area followed, none leading out of it, no magic links). A parent
//! found missing is remembered too (no handle: a bounded set of names, emptied when full);
//! anything else is not cached and is left to the one-at-a-time path.
//!
//! Like the areas' own handles, a cached handle keeps answering for the directory it opened
//! if that directory is later moved or replaced (and a missing parent stays missing): the
//! verdicts are those of the tree as the querier first met each directory. Nothing is ever read or written through these handles;
//! every file operation resolves its path again.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::super::Area;

/// The parent directory of a path, as a walk from the area's root finds it.
pub(super) enum Parent {
    /// A directory beneath the area: its handle.
    Dir(Arc<OwnedFd>),
    /// It does not exist, but every directory the walk reached before it did.
    Missing,
    /// Something else (not a directory, leading out, not searchable, a rename during the
    /// lookup): the one-at-a-time path decides.
    Unsure,
}

/// Which area (its handle's address: the sandbox holds it for the querier's lifetime) and
/// the parent's components joined by `/` (a component never holds `/` or NUL).
type Key = (usize, String);

#[derive(Debug)]
struct Slot {
    fd: Arc<OwnedFd>,
    used: u64,
}

/// Missing parents remembered at most, and the bytes of their names at most (a name the
/// kernel looked up is under PATH_MAX, 4 KiB, so 8,192 long ones would be 32 MiB).
const MISSING: usize = 8192;
const MISSING_BYTES: usize = 1 << 20;

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<Key, Slot>,
    /// Parents found missing: a hostile stream of new names only empties it more often.
    missing: std::collections::HashSet<Key>,
    missing_bytes: usize,
    clock: u64,
}

/// At most `capacity` handles (plus, for a moment, one per thread still using a handle it
/// got just before it was evicted: an `Arc` closes it when the last user lets go).
#[derive(Debug)]
pub(super) struct DirCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

impl DirCache {
    pub fn new(capacity: usize) -> DirCache {
        DirCache { capacity, inner: Mutex::default() }
    }

    /// Handles held now.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere leaves the map consistent (every change is one call).
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The directory `parent` (components below `area`'s root, not empty).
    pub fn parent(&self, area: &Area, parent: &[String]) -> Parent {
        let key: Key = (Arc::as_ptr(&area.dir) as usize, parent.join("/"));
        {
            let mut inner = self.lock();
            inner.clock += 1;
            let now = inner.clock;
            if let Some(slot) = inner.map.get_mut(&key) {
                slot.used = now;
                return Parent::Dir(slot.fd.clone());
            }
            if inner.missing.contains(&key) {
                return Parent::Missing;
            }
        }
        // Opened without the lock held: the other threads go on meanwhile.
        let opened = rustix::fs::openat2(
            &*area.dir,
            key.1.as_str(),
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
        );
        match opened {
            Ok(fd) => {
                let fd = Arc::new(fd);
                self.insert(key, fd.clone());
                Parent::Dir(fd)
            }
            // The walk stopped at a missing name, every directory before it resolved
            // beneath the area: the walk up of `check_beneath` ends at one of those.
            Err(Errno::NOENT) => {
                let mut inner = self.lock();
                if inner.missing.len() >= MISSING || inner.missing_bytes + key.1.len() > MISSING_BYTES {
                    inner.missing.clear();
                    inner.missing_bytes = 0;
                }
                let bytes = key.1.len();
                if inner.missing.insert(key) {
                    inner.missing_bytes += bytes;
                }
                Parent::Missing
            }
            Err(_) => Parent::Unsure,
        }
    }

    fn insert(&self, key: Key, fd: Arc<OwnedFd>) {
        let mut inner = self.lock();
        inner.clock += 1;
        let used = inner.clock;
        if !inner.map.contains_key(&key) && inner.map.len() >= self.capacity {
            // A scan of at most `capacity` stamps, on a miss only.
            if let Some(oldest) = inner.map.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| k.clone()) {
                inner.map.remove(&oldest);
            }
        }
        // Another thread may have opened the same directory meanwhile: one handle stays.
        inner.map.insert(key, Slot { fd, used });
    }
}
