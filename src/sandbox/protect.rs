//! The project's control files, out of reach of the tool service.
//!
//! Inside a worker, the project's `workcell.yaml`, `workers/`, `.workcell/` and `build:`
//! folders are bound read-only when a writable zone contains them (`plan::control`). The tool
//! service, though, writes on the host through the zone's handle, with workcell's own rights:
//! without this check a worker could ask it to rewrite the config that decides its next
//! sandbox. Entries are recognised by identity (device and inode), not by path, so a link
//! or another name for the same directory does not get past.

use std::path::Path;
use std::sync::Arc;

use cap_std::fs::Dir;

use super::error::show;
use super::{Area, Sandbox, SandboxError};

/// Identities of what the tool service may not change.
#[derive(Debug, Default)]
pub(crate) struct Protected {
    /// The project directory: these names may not be created, replaced or deleted in it.
    project: Option<(u64, u64)>,
    names: Vec<String>,
    /// Directories nothing may be written into, at any depth.
    dirs: Vec<(u64, u64)>,
}

fn identity(fd: impl std::os::fd::AsFd) -> Option<(u64, u64)> {
    rustix::fs::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
}

impl Sandbox {
    /// This sandbox with the control files of the project in `project_dir` (config file
    /// `config_name`, plus `extra` directories such as `build:` folders) protected from the
    /// tool service, in it and in every sandbox derived from it.
    pub fn protecting(mut self, project_dir: &Path, config_name: &str, extra: &[&Path]) -> Sandbox {
        let mut p = Protected { names: vec![config_name.to_string(), "workers".into(), ".workcell".into()], ..Protected::default() };
        if let Ok(dir) = std::fs::File::open(project_dir) {
            p.project = identity(&dir);
        }
        let dirs = [project_dir.join("workers"), project_dir.join(".workcell")];
        for d in dirs.iter().map(|d| d.as_path()).chain(extra.iter().copied()) {
            if let Some(id) = std::fs::File::open(d).ok().and_then(identity) {
                p.dirs.push(id);
            }
            // A build folder directly in the project may not be created or replaced either.
            if d.parent() == Some(project_dir) {
                if let Some(name) = d.file_name() {
                    p.names.push(name.to_string_lossy().into_owned());
                }
            }
        }
        self.protected = Arc::new(p);
        self
    }

    /// Gives this sandbox the same protection as `other` (after `other` learned more).
    pub fn protected_like(mut self, other: &Sandbox) -> Sandbox {
        self.protected = other.protected.clone();
        self
    }

    /// Refuses a write or delete of `name` in the directory `parent` (path components below
    /// `area`) when it would change a control file. Checked before anything is created.
    pub(super) fn refuse_control(&self, area: &Area, parent: &[String], name: &str, shown: &str) -> Result<(), SandboxError> {
        let p = &self.protected;
        if p.project.is_none() && p.dirs.is_empty() {
            return Ok(());
        }
        let refuse = || SandboxError::Protected { path: show(shown) };
        // Each existing directory from the area's root down to the parent: none may be
        // protected, and none may be the project directory with a protected name below it.
        let mut dir: Option<Dir> = None;
        for i in 0..=parent.len() {
            let id = match &dir {
                None => identity(&*area.dir),
                Some(d) => identity(d),
            };
            let Some(id) = id else { break };
            if p.dirs.contains(&id) {
                return Err(refuse());
            }
            let next = parent.get(i).map(String::as_str).unwrap_or(name);
            if Some(id) == p.project && p.names.iter().any(|n| n == next) {
                return Err(refuse());
            }
            if i == parent.len() {
                break;
            }
            let opened = match &dir {
                None => area.dir.open_dir(&parent[i]),
                Some(d) => d.open_dir(&parent[i]),
            };
            match opened {
                Ok(d) => dir = Some(d),
                // Missing below here: whatever gets created is new, hence not protected.
                Err(_) => break,
            }
        }
        Ok(())
    }
}
