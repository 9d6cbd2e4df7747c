//! What the walks of a zone saw of each directory, so that the next walk lists only the
//! directories that changed (issue 38). The launch walk (`plan::protected`) and the sweep
//! after a run ([`super::quarantine`]) both list every directory of a writable zone; in a
//! checkout of 200,000 files that cost 150 ms each, although a worker's command typically
//! changes a handful.
//!
//! **Why a directory's ctime.** Every change of a directory's entries (a name created,
//! removed, renamed in or out, a hard link made) sets its ctime to the current time; no call
//! lets a process set a ctime (`utimensat` sets atime and mtime, and itself moves ctime to
//! now), and setting the clock needs `CAP_SYS_TIME`, which no worker has. So a directory
//! whose (device, inode, ctime) is the same as when it was listed holds the same names, each
//! the same object it was then (a name points at another object only through a change of
//! this directory). A record says exactly that: "the directory at this path, this object,
//! with this ctime, held these names". It stays true until the ctime moves, so an old record
//! is never wrong, only useless; nothing a worker does later can make one lie.
//!
//! **Keyed by path as well as identity.** What is protected depends on where a path is
//! (`protect: [ci/hooks]`), so a record is used only for the same object at the same path:
//! a directory moved in from elsewhere in the zone has no record at its new path and is
//! listed, all of it. Its contents' records are looked up at their new paths too, and there
//! are none.
//!
//! **Racy records.** A file system keeps timestamps coarser than a change takes (a clock
//! tick, a second on old ext4 inodes): a change in the same tick as the listing can leave
//! the ctime as it was. A record is used only when its ctime is at least [`MARGIN_NS`]
//! older than the walk that made it (the stat comes before the listing, the walk's time
//! before the stat), so any later change shows as a later ctime; a directory changed just
//! before a walk is listed again next time. A clock set back since a record was made drops
//! every record ([`Looking::new`]).
//!
//! **Only where the file system keeps ctimes as the kernel does.** Records are used only
//! for directories on the zone's own device, and only when that is a local file system of
//! [`LOCAL_FS`]; on anything else (NFS, FUSE, 9p) every directory is listed.
//!
//! What a record keeps of a directory is what the walks act on ([`interesting`]): its
//! subdirectories, the names protection matches, the names that mark a git directory and
//! the shell start-up files; the other names are only counted. A record depends on the
//! protection it was made with (matches), so records are kept per [`key`]. Records live in
//! memory for a session and in the project's `.workcell/looked/` between runs ([`store`]).

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rustix::fs::{FileType, Stat};
use serde::{Deserialize, Serialize};

use super::Protection;

pub mod store;

/// How much older than the walk that made it a record's ctime must be to be used.
pub const MARGIN_NS: i128 = 2_000_000_000;
/// How many directories one zone's records hold, at most (beyond: listed every time).
pub const MAX_DIRS: usize = 200_000;

/// File systems whose ctimes the kernel keeps (`statfs` magic numbers): ext2/3/4, XFS,
/// Btrfs, tmpfs, F2FS, ZFS, overlayfs.
const LOCAL_FS: &[i64] = &[0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994, 0xF2F5_2010, 0x2FC1_2FC1, 0x794C_7630];

/// One directory as a walk listed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// (device, inode).
    pub id: (u64, u64),
    /// Its ctime when it was listed, in nanoseconds since the epoch.
    pub ctime: i128,
    /// When the walk that listed it began, in nanoseconds since the epoch.
    pub at: i128,
    /// The names a walk acts on ([`interesting`]): name, whether a directory, inode.
    pub names: Vec<(String, bool, u64)>,
    /// How many other names it held.
    pub others: u64,
}

/// The records of one zone for one protection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Looked {
    /// The protection they were made with ([`key`]).
    pub key: String,
    /// By path relative to the zone (`""`: the zone's own directory).
    pub dirs: HashMap<String, Seen>,
}

/// What makes records of one protection the same: the entries, and the binary that matches
/// them (a rebuilt workcell may match differently).
pub fn key(protection: &Protection) -> String {
    static EXE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let exe = EXE.get_or_init(|| {
        let st = std::fs::File::open("/proc/self/exe").ok().and_then(|f| rustix::fs::fstat(&f).ok());
        st.map(|s| format!("{}:{}:{}:{}", s.st_dev, s.st_ino, s.st_mtime, s.st_size)).unwrap_or_default()
    });
    format!("{} {exe}\n{}", env!("CARGO_PKG_VERSION"), protection.entries().join("\n"))
}

/// A protected area's records, shared by the launch walk that made them and every sweep
/// after (a session sweeps after each call): the ones of each protection the zone was
/// walked with, and whether they changed since they were last kept.
#[derive(Debug, Clone, Default)]
pub struct Records(Arc<Mutex<(Vec<Looked>, bool)>>);

impl Records {
    pub fn new(looks: Vec<Looked>, changed: bool) -> Records {
        Records(Arc::new(Mutex::new((looks, changed))))
    }

    /// The records of the protection `key`, taken out (a sweep puts back what it made).
    pub fn take(&self, key: &str) -> Option<Looked> {
        let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let i = inner.0.iter().position(|l| l.key == key)?;
        Some(inner.0.swap_remove(i))
    }

    /// Puts back the records a walk made; `changed` when it listed anything.
    pub fn put(&self, looked: Looked, changed: bool) {
        let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        inner.0.retain(|l| l.key != looked.key);
        inner.0.push(looked);
        inner.1 |= changed;
    }

    /// The records to keep, when they changed since they were last kept.
    pub fn to_keep(&self) -> Option<Vec<Looked>> {
        let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut inner.1).then(|| inner.0.clone())
    }
}

/// Records are workcell's own state, not part of what a plan says.
impl PartialEq for Records {
    fn eq(&self, _: &Records) -> bool {
        true
    }
}

/// Whether a walk acts on the name at `rel` (a directory, a protected path, a name that
/// makes its directory a git directory, a shell start-up file): a record keeps it.
pub fn interesting(rel: &Path, name: &[u8], dir: bool, matched: bool) -> bool {
    // The start-up file's last name first: most names are none of them, and this is asked
    // of every name a walk lists.
    let startup = || super::home::STARTUP.iter().any(|s| s.rsplit('/').next().is_some_and(|last| last.as_bytes() == name)) && super::home::is_startup(rel);
    dir || matched || matches!(name, b"HEAD" | b"objects" | b"refs" | b"commondir") || startup()
}

/// One walk's use of records: the ones it may trust, and the ones it makes.
pub struct Looking {
    before: Option<Looked>,
    /// The records this walk makes and keeps.
    pub after: Looked,
    /// The device records are used on, when the zone's file system keeps ctimes.
    dev: Option<u64>,
    /// When this walk began.
    now: i128,
    /// Whether this walk listed any directory (its records differ from the ones before).
    pub listed: bool,
}

impl Looking {
    /// A walk of the zone at `root` with `protection`, trusting the records of `before`
    /// made for the same protection. None of them is trusted when the clock is behind the
    /// newest of them (set back since).
    pub fn new(root: BorrowedFd<'_>, protection: &Protection, load: impl FnOnce(&str) -> Option<Looked>) -> Looking {
        let key = key(protection);
        let now = now();
        let before = load(&key).filter(|b| b.key == key && b.dirs.values().all(|s| s.at <= now));
        let dev = local_dev(root);
        Looking { before, after: Looked { key, dirs: HashMap::new() }, dev, now, listed: false }
    }

    /// The record of the directory at `rel` with the status `st`, when it may be trusted:
    /// same device (a local one), same object, same ctime, and that ctime older than the
    /// walk that listed it by the margin. A trusted record is kept for the next walk.
    pub fn trusted(&mut self, rel: &[u8], st: &Stat) -> Option<Seen> {
        if self.dev != Some(st.st_dev) {
            return None;
        }
        let rel = std::str::from_utf8(rel).ok()?;
        let seen = self.before.as_ref()?.dirs.get(rel)?;
        if seen.id != (st.st_dev, st.st_ino) || seen.ctime != ctime(st) || seen.ctime + MARGIN_NS > seen.at {
            return None;
        }
        let seen = seen.clone();
        self.keep(rel, seen.clone());
        Some(seen)
    }

    /// Begins the record of the directory at `rel` with the status `st`, about to be listed.
    /// A directory of `.workcell/` listed again is no reason to keep the records anew: in a
    /// zone that is the project, keeping them changes `.workcell/looked/` itself, and each
    /// run would otherwise rewrite them for that alone.
    pub fn listing(&mut self, rel: &[u8], st: &Stat) -> Listing {
        self.listed |= !(rel == b".workcell" || rel.starts_with(b".workcell/"));
        Listing { seen: Some(Seen { id: (st.st_dev, st.st_ino), ctime: ctime(st), at: self.now, names: Vec::new(), others: 0 }) }
    }

    /// Keeps the record of a directory listed to its end.
    pub fn listed(&mut self, rel: &[u8], listing: Listing) {
        if let (Ok(rel), Some(seen)) = (std::str::from_utf8(rel), listing.seen) {
            self.keep(rel, seen);
        }
    }

    fn keep(&mut self, rel: &str, seen: Seen) {
        if self.dev == Some(seen.id.0) && self.after.dirs.len() < MAX_DIRS {
            self.after.dirs.insert(rel.to_string(), seen);
        }
    }
}

/// The record of one directory being listed.
pub struct Listing {
    /// `None` once a name could not be kept (not UTF-8): no record then.
    seen: Option<Seen>,
}

impl Listing {
    /// Notes one name of the directory.
    pub fn note(&mut self, rel: &Path, name: &[u8], dir: bool, ino: u64, matched: bool) {
        let Some(seen) = &mut self.seen else { return };
        if !interesting(rel, name, dir, matched) {
            seen.others += 1;
            return;
        }
        match std::str::from_utf8(name) {
            Ok(name) => seen.names.push((name.to_string(), dir, ino)),
            Err(_) => self.seen = None,
        }
    }
}

impl Seen {
    /// Its names as a listing gives them: name, kind, inode.
    pub fn entries(&self) -> impl Iterator<Item = (&str, FileType, u64)> {
        self.names.iter().map(|(n, dir, ino)| (n.as_str(), if *dir { FileType::Directory } else { FileType::RegularFile }, *ino))
    }
}

/// The zone's device, when its file system is one whose ctimes records may rely on.
fn local_dev(root: BorrowedFd<'_>) -> Option<u64> {
    let fs = rustix::fs::fstatfs(root).ok()?;
    #[allow(clippy::unnecessary_cast)]
    let magic = fs.f_type as i64;
    if !LOCAL_FS.contains(&magic) {
        return None;
    }
    rustix::fs::fstat(root).ok().map(|st| st.st_dev)
}

#[allow(clippy::unnecessary_cast)]
fn ctime(st: &Stat) -> i128 {
    st.st_ctime as i128 * 1_000_000_000 + st.st_ctime_nsec as i128
}

fn now() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0)
}

#[cfg(test)]
mod tests;
