//! A bound on the container starts and removals that this user's workcell processes have in
//! flight at once on this host. Docker 20.10's network controller deadlocks when many
//! containers start while others' endpoints are deleted (moby/moby#42545, fixed after
//! 20.10.24): 50 concurrent runs wedged this machine's daemon until it was restarted. A run
//! holds a slot from its container's create until its start returned, and again while it
//! removes it; everything else (waiting, output) needs none.
//!
//! A slot is an `flock` on one of [`SLOTS`] files in a directory of this user's own (root's
//! `/run/workcell/docker-slots`, else `$XDG_RUNTIME_DIR/workcell-docker-slots`); the kernel
//! lets go of it however its holder ends. Without such a directory nothing is bounded.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::time::Duration;

/// Starts and removals in flight at once.
const SLOTS: usize = 4;
/// How often a waiting run tries the slots again.
const RETRY: Duration = Duration::from_millis(5);

/// A held slot; released when dropped.
#[derive(Debug)]
pub struct Slot(#[allow(dead_code)] OwnedFd);

fn dir() -> Option<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let euid = rustix::process::geteuid().as_raw();
    let path = if euid == 0 {
        PathBuf::from("/run/workcell/docker-slots")
    } else {
        let runtime = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
        let m = std::fs::symlink_metadata(&runtime).ok()?;
        if !runtime.is_absolute() || !m.is_dir() || m.uid() != euid || m.mode() & 0o077 != 0 {
            return None;
        }
        runtime.join("workcell-docker-slots")
    };
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&path).ok()?;
    let m = std::fs::symlink_metadata(&path).ok()?;
    (m.is_dir() && m.uid() == euid && m.mode() & 0o077 == 0).then_some(path)
}

/// Waits for a free slot (cancelled with the future); `None` when slots cannot be used here.
pub async fn acquire() -> Option<Slot> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let dir = dir()?;
    let files: Vec<OwnedFd> = (0..SLOTS)
        .filter_map(|i| {
            rustix::fs::open(dir.join(i.to_string()), OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC | OFlags::NOFOLLOW, Mode::from_raw_mode(0o600)).ok()
        })
        .collect();
    if files.is_empty() {
        return None;
    }
    loop {
        for f in &files {
            if rustix::fs::flock(f, FlockOperation::NonBlockingLockExclusive).is_ok() {
                return f.try_clone().ok().map(Slot);
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}
