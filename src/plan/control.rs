//! The project's control files inside a worker's zones.
//!
//! With the root form (`root: .`) or a zone that is the project directory, the project's
//! `workcell.yaml`, `workers/`, `.workcell/` and the `build:` folders of its workers lie
//! inside what the worker sees. A worker that could rewrite them would widen its own sandbox
//! for the next run, plant a link where workcell writes its audit log, or have its own
//! Dockerfile built. So, in every writable mount, they are bound again read-only, by
//! handle, over themselves. (The tool service refuses them too: `sandbox::protect`.)
//!
//! A writable mount that strictly contains the project directory is refused outright: the
//! worker could rename the project directory itself (a directory holding mount points may
//! be renamed) and put a config of its own in its place.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Held, PlanError, PlanMount};
use crate::config::{Project, CONFIG_FILE};

/// The directories workcell keeps in a project (the audit log, worker files).
const CONTROL_DIRS: &[&str] = &[".workcell", "workers"];

/// Read-only mounts that cover the control files of `project` inside `mounts`. Missing
/// control directories are created first (owned like the project directory), so that a
/// worker cannot create them either.
pub fn control_mounts(project: &Project, mounts: &[PlanMount]) -> Result<Vec<PlanMount>, PlanError> {
    let mut out = Vec::new();
    let config = project.file.as_deref().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| CONFIG_FILE.into());
    let entries: Vec<PathBuf> = CONTROL_DIRS.iter().chain([&config.as_str()]).map(|n| project.dir.join(n)).collect();
    // Build folders with `.` and `..` folded, as the build will see them.
    let builds: Vec<(PathBuf, &str)> =
        project.build_folders().into_iter().map(|(d, name)| (super::inside(Path::new("/"), &d).map(|r| Path::new("/").join(r)).unwrap_or(d), name)).collect();
    for m in mounts.iter().filter(|m| !m.read_only) {
        if project.dir.starts_with(&m.source) && project.dir != m.source {
            return Err(PlanError::ZoneContainsProject { zone: m.target.clone(), dir: m.source.clone() });
        }
        if let Some(e) = entries.iter().find(|e| m.source.starts_with(e)) {
            return Err(PlanError::ZoneInsideControl { zone: m.target.clone(), entry: e.clone() });
        }
        for (b, worker) in &builds {
            if m.source.starts_with(b) {
                // The whole zone would be the build's context: nothing in it could be kept
                // from the worker.
                return Err(PlanError::BuildFolderWritable { worker: worker.to_string(), zone: m.target.clone() });
            }
        }
        if !project.dir.starts_with(&m.source) && !builds.iter().any(|(b, _)| b.starts_with(&m.source)) {
            continue;
        }
        if project.dir == m.source {
            if !project.dir.join(&config).is_file() {
                return Err(PlanError::WritableProjectWithoutConfig { zone: m.target.clone() });
            }
            for dir in CONTROL_DIRS {
                ensure_dir(&project.dir, Path::new(dir));
            }
        }
        let mut here: Vec<PathBuf> = Vec::new();
        for (b, _) in &builds {
            if let Ok(rel) = b.strip_prefix(&m.source) {
                // Created (empty) when missing, so that the worker cannot create it.
                ensure_dir(&m.source, rel);
                here.push(b.clone());
            }
        }
        let entries: Vec<PathBuf> = entries.iter().cloned().chain(here).collect();
        for entry in &entries {
            let Ok(rel) = entry.strip_prefix(&m.source) else { continue };
            if rel.as_os_str().is_empty() {
                continue;
            }
            // Not followed: a link is left as it is (the README names this limit).
            let Some(f) = open_nofollow(entry) else { continue };
            // A directory that holds mount points can still be renamed: each directory
            // between the zone and the entry (`images` of `images/tool`) is pinned by a
            // read-write bind onto itself, which makes it a mount point, which cannot be.
            let mut pins = Vec::new();
            let mut prefix = m.source.clone();
            let parents: Vec<_> = rel.parent().map(|p| p.components().collect()).unwrap_or_default();
            for c in parents {
                prefix.push(c);
                let Some(d) = open_nofollow(&prefix) else { break };
                let target = format!("{}/{}", m.target.trim_end_matches('/'), prefix.strip_prefix(&m.source).unwrap_or(&prefix).display());
                pins.push(PlanMount { source: prefix.clone(), target, read_only: false, held: Some(Held(Arc::new(d))) });
            }
            if pins.len() != rel.components().count() - 1 {
                continue;
            }
            for pin in pins {
                if !out.iter().any(|o: &PlanMount| o.target == pin.target) {
                    out.push(pin);
                }
            }
            let target = format!("{}/{}", m.target.trim_end_matches('/'), rel.display());
            out.push(PlanMount { source: entry.clone(), target, read_only: true, held: Some(Held(Arc::new(f))) });
        }
    }
    Ok(out)
}

/// `p` opened as a handle, unless it is missing or a symlink.
fn open_nofollow(p: &Path) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(p, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let link = rustix::fs::fstat(&fd).is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink());
    (!link).then_some(fd)
}

/// Creates `dir/rel` and its missing parents, each owned by the owner of `dir` (a root
/// workcell must not leave root-owned directories in a user's project). Never follows a link:
/// an existing entry of any kind is left as it is.
fn ensure_dir(dir: &Path, rel: &Path) {
    let owner = std::fs::metadata(dir).ok().map(|m| (rustix::process::Uid::from_raw(m.uid()), rustix::process::Gid::from_raw(m.gid())));
    let mut p = dir.to_path_buf();
    for c in rel.components() {
        p.push(c);
        if std::fs::symlink_metadata(&p).is_ok() {
            continue;
        }
        if std::fs::DirBuilder::new().mode(0o755).create(&p).is_err() {
            return;
        }
        if let Some((uid, gid)) = owner {
            let _ = rustix::fs::chown(&p, Some(uid), Some(gid));
        }
    }
}
