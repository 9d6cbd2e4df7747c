//! An open descriptor of a checked directory or file (`Held`): what a plan binds, the
//! sandbox's zones hand out and the walks start from, held so that no path is resolved again.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

/// An open descriptor of a checked directory or file. Two are equal only when they are the
/// same handle.
#[derive(Clone)]
pub struct Held(pub Arc<OwnedFd>);

impl Held {
    /// A handle of its own for `fd` (a duplicate, close-on-exec).
    pub fn dup(fd: impl AsFd) -> std::io::Result<Held> {
        Ok(Held(Arc::new(fd.as_fd().try_clone_to_owned()?)))
    }

    /// The handle's current host path, for messages and plans (`None` when the kernel has
    /// no name for it, e.g. after its directory was removed).
    pub fn current_path(&self) -> Option<PathBuf> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", self.0.as_raw_fd())).ok()?;
        (link.is_absolute() && !link.to_string_lossy().ends_with(" (deleted)")).then_some(link)
    }

    /// Device and inode of the held object.
    pub fn identity(&self) -> std::io::Result<(u64, u64)> {
        let st = rustix::fs::fstat(&*self.0)?;
        Ok((st.st_dev, st.st_ino))
    }
}

impl PartialEq for Held {
    fn eq(&self, other: &Held) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Held {}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Held(fd {})", self.0.as_raw_fd())
    }
}
