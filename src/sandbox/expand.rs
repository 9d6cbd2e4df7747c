//! Dynamic expansion (seed 000): a session-scoped extra mount, granted after consent.

use std::path::Path;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::{Addressing, Approvals, Area, AreaKey, Delivery, Mount, Sandbox, SandboxError, ZoneMode};

impl Sandbox {
    /// A copy of this sandbox with `host_dir` added as zone `name` (readable; writable for
    /// `rw`, writes pre-approved since the person just approved them). Only for zones
    /// addressing; never persisted.
    pub fn with_extra_mount(&self, name: &str, host_dir: &Path, mode: ZoneMode) -> Result<Sandbox, SandboxError> {
        let point = format!("/{name}");
        let refuse = |reason: &str| SandboxError::InvalidPath { path: point.clone(), reason: reason.into(), readable: self.readable_list() };
        if self.addressing() != Addressing::Zones {
            return Err(refuse("a root-form sandbox cannot take extra directories"));
        }
        if self.mounts().iter().any(|m| m.mount_point == point) {
            return Err(refuse("a zone with this name already exists"));
        }
        let cannot_open = |e: std::io::Error| SandboxError::Io { op: "open", path: point.clone(), message: super::io::describe_io(&e) };
        // Mounts hold canonical host directories (launchers bind them as they are).
        let host_dir = &std::fs::canonicalize(host_dir).map_err(cannot_open)?;
        let dir = Dir::open_ambient_dir(host_dir, ambient_authority()).map_err(cannot_open)?;
        let mut mounts: Vec<Mount> = self.mounts().to_vec();
        let index = mounts.len();
        let approval = match mode {
            ZoneMode::Rw => Approvals { read: super::Approval::PreApproved, write: super::Approval::PreApproved, delete: super::Approval::Ask },
            ZoneMode::Ro => Approvals::default(),
        };
        mounts.push(Mount {
            name: name.to_string(),
            host_path: host_dir.to_path_buf(),
            mount_point: point,
            mode,
            suffixes: None,
            max_file_bytes: None,
            approval,
            delivery: Delivery::Bind,
        });
        let area = Area { key: AreaKey { mount: index, prefix: Vec::new() }, dir: Arc::new(dir) };
        let mut next = self.clone();
        next.mounts = Arc::new(mounts);
        if mode == ZoneMode::Rw {
            next.writable.push(area.clone());
        }
        next.readable.push(area);
        Ok(next)
    }
}
