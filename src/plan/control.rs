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

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::pin::{pin, zone_dir, Opened, Pinned};
use super::{PlanError, PlanMount};
use crate::config::{Project, CONFIG_FILE};

/// The directories workcell keeps in a project (the audit log, worker files).
const CONTROL_DIRS: &[&str] = &[".workcell", "workers"];

/// The control files of `project` inside the writable `mounts`, each to be bound read-only
/// over itself with its parents pinned (`pin`). Missing control directories are created
/// first (owned like the project directory), so that a worker cannot create them either.
pub(super) fn control_mounts(project: &Project, mounts: &[PlanMount]) -> Result<Vec<Pinned>, PlanError> {
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
        let Some(zone) = zone_dir(m) else { continue };
        if project.dir == m.source {
            if !project.dir.join(&config).is_file() {
                return Err(PlanError::WritableProjectWithoutConfig { zone: m.target.clone() });
            }
            for dir in CONTROL_DIRS {
                ensure_dir(&zone, Path::new(dir));
            }
        }
        let mut here: Vec<PathBuf> = Vec::new();
        for (b, _) in &builds {
            if let Ok(rel) = b.strip_prefix(&m.source) {
                // Created (empty) when missing, so that the worker cannot create it.
                ensure_dir(&zone, rel);
                here.push(b.clone());
            }
        }
        let entries: Vec<PathBuf> = entries.iter().cloned().chain(here).collect();
        for entry in &entries {
            let Ok(rel) = entry.strip_prefix(&m.source) else { continue };
            if rel.as_os_str().is_empty() {
                continue;
            }
            // Not followed: a link is left as it is (docs/security.md names this limit).
            if let Opened::Found(p) = pin(m, &zone, rel) {
                out.push(p);
            }
        }
    }
    Ok(out)
}

/// The control files of `project` inside the mount `m`, as paths relative to it, whether
/// they exist or not: what a zone shipped to a remote engine never publishes (`ship`).
pub(super) fn control_names(project: &Project, m: &PlanMount) -> Vec<String> {
    let config = project.file.as_deref().and_then(Path::file_name).map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| CONFIG_FILE.into());
    let entries = CONTROL_DIRS.iter().map(|n| project.dir.join(n)).chain([project.dir.join(&config)]);
    let builds = project.build_folders().into_iter().map(|(d, _)| super::inside(Path::new("/"), &d).map(|r| Path::new("/").join(r)).unwrap_or(d));
    entries.chain(builds).filter_map(|e| e.strip_prefix(&m.source).ok().map(|r| r.to_string_lossy().into_owned())).filter(|r| !r.is_empty()).collect()
}

/// Creates `rel` beneath the zone handle `zone` and its missing parents, one name at a time,
/// each owned by the owner of the zone's directory (a root workcell must not leave root-owned
/// directories in a user's project). Never follows a link: a link (or file) on the way stops
/// it, so nothing is created or given away outside the zone.
fn ensure_dir(zone: &OwnedFd, rel: &Path) {
    let Ok(st) = rustix::fs::fstat(zone) else { return };
    let owner = (rustix::process::Uid::from_raw(st.st_uid), rustix::process::Gid::from_raw(st.st_gid));
    let me = rustix::process::geteuid().as_raw();
    let Ok(mut cur) = zone.try_clone() else { return };
    for c in rel.components() {
        let name = c.as_os_str();
        let created = match rustix::fs::mkdirat(&cur, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => true,
            Err(Errno::EXIST) => false,
            Err(_) => return,
        };
        let Ok(next) = rustix::fs::openat(&cur, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) else { return };
        if created {
            // Given away only while it is the empty directory just made (a worker sharing
            // the zone could rename another directory into this name in between).
            let ours = rustix::fs::fstat(&next).is_ok_and(|st| st.st_uid == me);
            let empty = rustix::fs::Dir::read_from(&next).is_ok_and(|mut d| d.all(|e| e.is_ok_and(|e| matches!(e.file_name().to_bytes(), b"." | b".."))));
            if !ours || !empty {
                return;
            }
            let _ = rustix::fs::fchown(&next, Some(owner.0), Some(owner.1));
        }
        cur = next;
    }
}
