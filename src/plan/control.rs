//! The project's control files inside a worker's zones.
//!
//! With the root form (`root: .`) or any zone that contains the project directory, the
//! project's `workcell.yaml`, `workers/` and `.workcell/` lie inside what the worker sees. A
//! worker that could rewrite them would widen its own sandbox for the next run, or plant a
//! link where workcell writes its audit log. So, in every writable mount that contains the
//! project, they are bound again read-only, by handle, over themselves.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use super::{Held, PlanMount};
use crate::config::{Project, CONFIG_FILE};

/// The directories workcell keeps in a project (the audit log, worker files).
const CONTROL_DIRS: &[&str] = &[".workcell", "workers"];

/// Read-only mounts that cover the control files of `project` inside `mounts`. Missing
/// control directories are created first (owned like the project directory), so that a
/// worker cannot create them either.
pub fn control_mounts(project: &Project, mounts: &[PlanMount]) -> Vec<PlanMount> {
    let mut out = Vec::new();
    for m in mounts.iter().filter(|m| !m.read_only) {
        let Ok(rel) = project.dir.strip_prefix(&m.source) else { continue };
        let base = if rel.as_os_str().is_empty() { m.target.clone() } else { format!("{}/{}", m.target.trim_end_matches('/'), rel.display()) };
        let config = project.file.as_deref().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| CONFIG_FILE.into());
        for dir in CONTROL_DIRS {
            ensure_dir(&project.dir, dir);
        }
        for name in CONTROL_DIRS.iter().copied().chain([config.as_str()]) {
            // Not followed: a link is left as it is (the README names this limit).
            let Ok(f) = open_nofollow(&project.dir.join(name)) else { continue };
            if rustix::fs::fstat(&f).is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink()) {
                continue;
            }
            let target = format!("{}/{name}", base.trim_end_matches('/'));
            out.push(PlanMount { source: project.dir.join(name), target, read_only: true, held: Some(Held(Arc::new(f))) });
        }
    }
    out
}

fn open_nofollow(p: &Path) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    Ok(rustix::fs::open(p, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?)
}

/// Creates `dir/name` if missing, owned by the owner of `dir` (a root workcell must not
/// leave root-owned directories in a user's project).
fn ensure_dir(dir: &Path, name: &str) {
    let p = dir.join(name);
    if std::fs::DirBuilder::new().mode(0o755).create(&p).is_err() {
        return;
    }
    if let Ok(meta) = std::fs::metadata(dir) {
        let _ = rustix::fs::chown(&p, Some(rustix::process::Uid::from_raw(meta.uid())), Some(rustix::process::Gid::from_raw(meta.gid())));
    }
}
