//! The project's control files, out of reach of the tool service.
//!
//! Inside a worker, the project's `workcell.yaml`, `workers/`, `.workcell/` and `build:`
//! folders are bound read-only when a writable zone contains them (`plan::control`). The tool
//! service, though, writes on the host through the zone's handle (as the worker's user, who
//! may well own those files): without this check a worker could ask it to rewrite the config
//! that decides its next sandbox. The directory a write lands in is judged by what it *is*: its physical ancestors
//! (followed with `..` from the open handle, so no link or other name gets past) are compared,
//! by device and inode, with the control directories as they are at the time of the write.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::fs::{Dir, MetadataExt};

use super::error::show;
use super::{Sandbox, SandboxError};

/// What the tool service may not change, relative to the held project directory.
#[derive(Debug, Default)]
pub(crate) struct Protected {
    project: Option<Dir>,
    /// Names directly in the project directory that may not be created, replaced or deleted.
    names: Vec<String>,
    /// Directories (relative to the project) nothing may be written into, at any depth.
    dirs: Vec<PathBuf>,
}

fn identity(fd: impl AsFd) -> Option<(u64, u64)> {
    rustix::fs::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
}

impl Sandbox {
    /// This sandbox with the control files of the project in `project_dir` (config file
    /// `config_name`, plus `builds`, the `build:` folders of its workers) protected from the
    /// tool service, in it and in every sandbox derived from it.
    pub fn protecting(mut self, project_dir: &Path, config_name: &str, builds: &[&Path]) -> Sandbox {
        let mut p = Protected {
            project: Dir::open_ambient_dir(project_dir, cap_std::ambient_authority()).ok(),
            names: vec![config_name.to_string(), "workers".into(), ".workcell".into()],
            dirs: vec!["workers".into(), ".workcell".into()],
        };
        for b in builds {
            // Only folders inside the project (`plan::control` refuses a writable zone that
            // a build folder contains or equals).
            let Some(rel) = super::inside(project_dir, b) else { continue };
            if let Some(first) = rel.components().next() {
                p.names.push(first.as_os_str().to_string_lossy().into_owned());
            }
            p.dirs.push(rel);
        }
        self.protected = Arc::new(p);
        self
    }

    /// Gives this sandbox the same protection as `other`: its control files, and its
    /// project's files the host runs for mounts added later.
    pub fn protected_like(mut self, other: &Sandbox) -> Sandbox {
        self.protected = other.protected.clone();
        self.hostrun = other.hostrun.clone();
        self
    }

    /// This sandbox with `protection` in force for the files the host runs in the mount at
    /// `mount_point` (the plan found the zone a home at launch: `crate::hostrun::home`), so
    /// that the run's tool service refuses what the walk binds and the sweep moves aside.
    pub fn protecting_zone(mut self, mount_point: &str, protection: &crate::hostrun::Protection) -> Sandbox {
        if let Some(i) = self.mounts.iter().position(|m| m.mount_point == mount_point) {
            Arc::make_mut(&mut self.mounts)[i].protection = protection.clone();
        }
        self
    }

    /// Refuses a write or delete of `name` in the open directory `dir` when it would change a
    /// control file: `dir` is, or lies below, a control directory, or `dir` is the project
    /// directory and `name` a control entry.
    pub(super) fn refuse_control(&self, dir: &Dir, name: &str, shown: &str) -> Result<(), SandboxError> {
        // With workcell's rights even when acting as the worker: a control directory or a
        // directory above the zone the worker may not search must not weaken the check (nor
        // make it refuse everything).
        crate::identity::with_own_rights(|| self.refuse_control_here(dir, name, shown))
    }

    fn refuse_control_here(&self, dir: &Dir, name: &str, shown: &str) -> Result<(), SandboxError> {
        let p = &self.protected;
        let Some(project) = &p.project else { return Ok(()) };
        let refuse = || SandboxError::Protected { path: show(shown) };
        let project_id = identity(project);
        // The control directories as they are now (one created since the project was loaded
        // counts too).
        let dirs: Vec<(u64, u64)> = p.dirs.iter().filter_map(|d| project.symlink_metadata(d).ok().filter(|m| m.is_dir()).map(|m| (m.dev(), m.ino()))).collect();
        let mut cur: OwnedFd = dir.as_fd().try_clone_to_owned().map_err(|_| refuse())?;
        let mut first = true;
        for _ in 0..4096 {
            let Some(id) = identity(&cur) else { return Err(refuse()) };
            if dirs.contains(&id) {
                return Err(refuse());
            }
            if Some(id) == project_id {
                if first && p.names.iter().any(|n| n == name) {
                    return Err(refuse());
                }
                return Ok(());
            }
            let parent = rustix::fs::openat(
                &cur,
                "..",
                rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|_| refuse())?;
            if identity(&parent) == Some(id) {
                // The file system's root: the directory is not in the project.
                return Ok(());
            }
            cur = parent;
            first = false;
        }
        Err(refuse())
    }
}
