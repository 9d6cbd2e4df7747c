//! Whether a run's working directory exists inside the worker, decided before anything
//! starts, so every backend answers the same: Docker would silently create a missing one
//! (even inside a zone, on the host), bwrap would fail to start.

use std::path::Path;

use cap_std::fs::Dir;

use super::{PlanMount, SystemEntry};

/// Why a working directory cannot be used, in words for the person who chose it (shown
/// after "the working directory '...' cannot be used: ").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkdirError {
    #[error("it must be an absolute path inside the worker")]
    NotAbsolute,
    #[error("it must not contain '..'")]
    ParentDir,
    /// Inside the zone mounted at `target`, which has no directory `rel`.
    #[error("{target} has no directory {rel}")]
    NotInZone { target: String, rel: String },
    #[error("it is in no zone and is not a system directory; use a zone's mount point, a directory in a zone, or /tmp")]
    Outside,
}

/// Whether `workdir` exists inside the worker.
pub(super) fn check(workdir: &str, mounts: &[PlanMount], system: Option<&[SystemEntry]>) -> Result<(), WorkdirError> {
    if !workdir.starts_with('/') {
        return Err(WorkdirError::NotAbsolute);
    }
    if workdir.split('/').any(|c| c == "..") {
        return Err(WorkdirError::ParentDir);
    }
    let parts: Vec<&str> = workdir.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    // The deepest mount containing it decides (the worker sees that mount there).
    let under = |m: &&PlanMount| {
        let t: Vec<&str> = m.target.split('/').filter(|c| !c.is_empty()).collect();
        parts.starts_with(&t)
    };
    if let Some(m) = mounts.iter().filter(under).max_by_key(|m| m.target.len()) {
        let depth = m.target.split('/').filter(|c| !c.is_empty()).count();
        let rel = parts[depth..].join("/");
        if rel.is_empty() {
            return Ok(());
        }
        // Looked up beneath the handle that is bound (never by path on the host).
        let found = match &m.held {
            Some(h) => h.0.try_clone().ok().map(|fd| Dir::from_std_file(std::fs::File::from(fd))).and_then(|d| d.metadata(&rel).ok()).map(|md| md.is_dir()),
            None => Some(true),
        };
        return match found {
            Some(true) => Ok(()),
            _ => Err(WorkdirError::NotInZone { target: m.target.clone(), rel }),
        };
    }
    if parts.is_empty() || parts == ["tmp"] {
        return Ok(());
    }
    // Outside the zones: with the host's system (`image: host`) only a bound system
    // directory exists; a named image's own directories are the image's business.
    let Some(system) = system else { return Ok(()) };
    let bound = system.iter().any(|e| match e {
        SystemEntry::Bind { path } => Path::new(workdir).starts_with(path),
        SystemEntry::Symlink { .. } => false,
    });
    if bound && Path::new(workdir).is_dir() {
        return Ok(());
    }
    Err(WorkdirError::Outside)
}
