//! Records between runs (`super`): one file per zone in the project's `.workcell/looked/`,
//! named by the zone directory's device and inode, holding the records of the last few
//! protections the zone was walked with. Where no worker can write them (`crate::statedir`);
//! still, a record only ever saves a listing whose directory has not changed since, so one
//! that is lost, old or unreadable costs a full walk, never a missed file.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Looked;

/// Where the records live, beneath the project directory.
pub const DIR: &str = ".workcell/looked";
/// The largest records file read back.
const FILE_MAX: u64 = 64 << 20;
/// How many protections' records one zone keeps (a launch may walk twice, with two).
const KEYS_KEPT: usize = 4;

#[derive(Default, Serialize, Deserialize)]
struct Stored {
    looks: Vec<Looked>,
}

/// The records of the zone `zone` for the protection `key`, when there are any.
pub fn load(project_dir: &Path, zone: BorrowedFd<'_>, key: &str) -> Option<Looked> {
    stored(project_dir, zone).looks.into_iter().find(|l| l.key == key)
}

/// Keeps `looks` as the zone's records (each replacing the ones of its protection), with
/// those of up to [`KEYS_KEPT`] protections in all. Best effort: a record not kept costs
/// the next walk time, nothing else.
pub fn save(project_dir: &Path, zone: BorrowedFd<'_>, looks: &[Looked]) {
    if let Err(e) = try_save(project_dir, zone, looks) {
        tracing::debug!(error = %e, "the walk's records were not kept");
    }
}

fn try_save(project_dir: &Path, zone: BorrowedFd<'_>, looks: &[Looked]) -> std::io::Result<()> {
    let mut stored = stored(project_dir, zone);
    stored.looks.retain(|old| !looks.iter().any(|l| l.key == old.key));
    let mut all: Vec<Looked> = looks.to_vec();
    all.append(&mut stored.looks);
    all.truncate(KEYS_KEPT);
    let bytes = serde_json::to_vec(&Stored { looks: all }).map_err(std::io::Error::other)?;
    let dir = crate::statedir::open(project_dir, DIR, true)?;
    crate::statedir::replace(dir.as_fd(), &name_of(zone)?, &bytes, false)
}

/// What the zone's file holds (nothing when it is missing or cannot be read).
fn stored(project_dir: &Path, zone: BorrowedFd<'_>) -> Stored {
    let read = || -> std::io::Result<Option<Vec<u8>>> {
        let dir = crate::statedir::open(project_dir, DIR, false)?;
        crate::statedir::read(dir.as_fd(), &name_of(zone)?, FILE_MAX)
    };
    match read() {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes).unwrap_or_default(),
        _ => Stored::default(),
    }
}

/// The file's name for the zone directory `zone`: its device and inode.
fn name_of(zone: BorrowedFd<'_>) -> std::io::Result<String> {
    let st = rustix::fs::fstat(zone)?;
    Ok(format!("{}-{}.json", st.st_dev, st.st_ino))
}
