//! Dynamic expansion (`dynamic: true`, the `request_access` tool): a session-scoped extra mount, granted after consent.

use std::path::Path;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::{Addressing, Approvals, Area, AreaKey, Delivery, Mount, Sandbox, SandboxError, ZoneMode};

/// A host directory opened once for an expansion: the handle every later use goes through,
/// and the path it had when opened (shown in the prompt, the audit log and the plan).
#[derive(Debug)]
pub struct OpenedDir {
    pub dir: Dir,
    pub path: std::path::PathBuf,
}

/// Opens the directory `host_path` names (a file stands for its directory), resolving it
/// exactly once: the result is a handle, and its path is read back from the handle, so a
/// link swapped in afterwards changes nothing.
pub fn open_for_expansion(host_path: &Path) -> std::io::Result<OpenedDir> {
    use cap_std::fs::MetadataExt as _;
    use std::os::unix::fs::MetadataExt as _;
    let f = std::fs::File::open(host_path)?;
    let meta = f.metadata()?;
    let path_of = |fd: &dyn std::os::fd::AsRawFd| std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    if meta.is_dir() {
        let path = path_of(&f)?;
        return Ok(OpenedDir { dir: Dir::from_std_file(f), path });
    }
    // A file: its directory, opened by the file's own (current) path and checked to still
    // hold the very file that was opened.
    let file_path = path_of(&f)?;
    let parent = file_path.parent().ok_or_else(|| std::io::Error::other("the file has no directory"))?;
    let name = file_path.file_name().ok_or_else(|| std::io::Error::other("the file has no name"))?;
    let dir = Dir::open_ambient_dir(parent, ambient_authority())?;
    let inside = dir.symlink_metadata(name)?;
    if (inside.dev(), inside.ino()) != (meta.dev(), meta.ino()) {
        return Err(std::io::Error::other("the file was moved while it was being opened"));
    }
    let path = path_of(&dir)?;
    Ok(OpenedDir { dir, path })
}

impl Sandbox {
    /// A copy of this sandbox with `opened` added as zone `name` (readable; writable for
    /// `rw`, writes pre-approved since the person just approved them). The handle is the
    /// grant: nothing is resolved again by name. Only for zones addressing; never persisted.
    pub fn with_extra_mount(&self, name: &str, opened: OpenedDir, mode: ZoneMode) -> Result<Sandbox, SandboxError> {
        let point = format!("/{name}");
        let refuse = |reason: &str| SandboxError::InvalidPath { path: point.clone(), reason: reason.into(), readable: self.readable_list() };
        if self.addressing() != Addressing::Zones {
            return Err(refuse("a root-form sandbox cannot take extra directories"));
        }
        if self.mounts().iter().any(|m| m.mount_point == point) {
            return Err(refuse("a zone with this name already exists"));
        }
        let OpenedDir { dir, path: host_dir } = opened;
        // A person's yes does not make `/` or the docker socket's directory a safe grant.
        super::hostdir::check(name, std::os::fd::AsFd::as_fd(&dir), mode, &host_dir)?;
        let mut mounts: Vec<Mount> = self.mounts().to_vec();
        let index = mounts.len();
        let approval = match mode {
            ZoneMode::Rw => Approvals { read: super::Approval::PreApproved, write: super::Approval::PreApproved, delete: super::Approval::Ask },
            ZoneMode::Ro => Approvals::default(),
        };
        mounts.push(Mount {
            name: name.to_string(),
            host_path: host_dir,
            mount_point: point,
            mode,
            suffixes: None,
            max_file_bytes: None,
            approval,
            delivery: Delivery::Bind,
            // The project's entries: a person's yes to a directory does not turn any off.
            protection: self.host_protection().clone(),
        });
        let root = super::hostfiles::root_identity(&dir);
        let area = Area { key: AreaKey { mount: index, prefix: Vec::new() }, dir: Arc::new(dir) };
        let mut next = self.clone();
        next.hostfiles = Arc::new(self.hostfiles.with_root(index, root));
        next.mounts = Arc::new(mounts);
        if mode == ZoneMode::Rw {
            next.writable.push(area.clone());
        }
        next.readable.push(area);
        Ok(next)
    }
}
