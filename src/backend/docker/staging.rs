//! Binding checked handles under Docker.
//!
//! The daemon binds a mount's source by path, resolved when the container starts. A worker
//! that can rename directories inside a zone (a parent worker while its child starts, or any
//! worker while a person reads an expansion prompt) could re-aim that path between workcell's
//! check and the start. So, as root, workcell first bind-mounts every held handle
//! (`/proc/self/fd/N`, the very object that was checked) at a staging path inside a
//! directory only root can change, and gives Docker that path. The staging mounts are
//! detached as soon as the container has started: the container keeps its own copies.
//!
//! Without root (no mount privilege) the path read from the handle is bound, after checking
//! that it still names the held object; the window between that check and the daemon's
//! start is documented in docs/security.md ("Limits — what this does not protect against").

use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::DockerError;
use crate::plan::{Held, LaunchPlan};

/// Where staging directories live: root-only, on the host's runtime tmpfs.
const STAGING_BASE: &str = "/run/workcell-staging";

/// A run's staging directory and the mounts in it; dropping it detaches and removes them.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    points: Vec<PathBuf>,
    /// Whether `dir` is a (private) mount of its own, to be detached last.
    private: bool,
}

/// `plan` with every held mount's source replaced by a path that names exactly the held
/// object, and the staging that keeps those paths valid until the container has started.
pub fn stage(plan: &LaunchPlan) -> Result<(LaunchPlan, Option<Staging>), DockerError> {
    let mut staged = plan.clone();
    if rustix::process::geteuid().as_raw() != 0 {
        for m in &staged.mounts {
            if let Some(held) = &m.held {
                still_names(held, &m.source, &m.target)?;
            }
        }
        return Ok((staged, None));
    }
    let fail =
        |what: &str, p: &Path, source: std::io::Error| DockerError::Io { what: format!("cannot stage the mounts for docker: {what} {}", p.display()), source };
    let base = Path::new(STAGING_BASE);
    match std::fs::DirBuilder::new().mode(0o700).create(base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail("create", base, e)),
    }
    // Not a link, root's, closed to others: nobody else may place anything on the way.
    let meta = std::fs::symlink_metadata(base).map_err(|e| fail("inspect", base, e))?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        return Err(DockerError::Local(format!("cannot stage the mounts for docker: {STAGING_BASE} is not a directory that only root may change; remove it")));
    }
    let dir = base.join(&plan.run_id);
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| fail("create", &dir, e))?;
    let mut staging = Staging { dir, points: Vec::new(), private: false };
    // A private mount of its own, so that the staging mounts made inside it do not
    // propagate to other mount namespaces where the host's mounts are shared (systemd).
    if rustix::mount::mount_bind(&staging.dir, &staging.dir).is_ok() {
        staging.private = true;
        rustix::mount::mount_change(&staging.dir, rustix::mount::MountPropagationFlags::PRIVATE).map_err(|e| fail("make private", &staging.dir, e.into()))?;
    }
    for (i, m) in staged.mounts.iter_mut().enumerate() {
        let Some(held) = &m.held else { continue };
        let point = staging.dir.join(i.to_string());
        let is_dir =
            rustix::fs::fstat(&*held.0).map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir()).map_err(|e| fail("inspect", &m.source, e.into()))?;
        if is_dir {
            std::fs::DirBuilder::new().mode(0o700).create(&point)
        } else {
            std::fs::OpenOptions::new().write(true).create_new(true).open(&point).map(drop)
        }
        .map_err(|e| fail("create", &point, e))?;
        let source = format!("/proc/self/fd/{}", held.0.as_raw_fd());
        match rustix::mount::mount_bind_recursive(source.as_str(), &point) {
            Ok(()) => {}
            // A root without mount privilege (inside a container): bind the path instead,
            // checked as without root.
            Err(rustix::io::Errno::PERM) => {
                let _ = std::fs::remove_file(&point).or_else(|_| std::fs::remove_dir(&point));
                still_names(held, &m.source, &m.target)?;
                continue;
            }
            Err(e) => return Err(fail("bind the checked directory at", &point, e.into())),
        }
        staging.points.push(point.clone());
        m.source = point;
    }
    Ok((staged, Some(staging)))
}

/// Refuses a mount whose path no longer names the object that was checked.
fn still_names(held: &Held, path: &Path, target: &str) -> Result<(), DockerError> {
    let now = std::fs::metadata(path).map(|m| (m.dev(), m.ino())).ok();
    if now.is_some() && now == held.identity().ok() {
        return Ok(());
    }
    Err(DockerError::Local(format!(
        "refusing to start: the host directory for {target} ({}) changed after it was checked (was it renamed or replaced by a link while the run was prepared?)",
        path.display()
    )))
}

impl Staging {
    /// Detaches the staging mounts (the started container keeps its own) and removes them.
    pub fn release(mut self) {
        self.cleanup();
    }

    fn cleanup(&mut self) {
        for p in self.points.drain(..) {
            let _ = rustix::mount::unmount(&p, rustix::mount::UnmountFlags::DETACH);
            let _ = std::fs::remove_dir(&p).or_else(|_| std::fs::remove_file(&p));
        }
        if std::mem::take(&mut self.private) {
            let _ = rustix::mount::unmount(&self.dir, rustix::mount::UnmountFlags::DETACH);
        }
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let _ = std::fs::remove_dir(e.path()).or_else(|_| std::fs::remove_file(e.path()));
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// Removes the staging of runs killed before they could (`workcell gc`): every run directory
/// under the staging base whose mounts are detached first. Returns what was removed.
pub fn remove_stale() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(STAGING_BASE) else { return Vec::new() };
    let mut removed = Vec::new();
    for e in entries.flatten() {
        let dir = e.path();
        let old = e.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok()).is_some_and(|a| a > std::time::Duration::from_secs(60));
        if !old {
            continue;
        }
        let points = std::fs::read_dir(&dir).map(|r| r.flatten().map(|x| x.path()).collect()).unwrap_or_default();
        let mut s = Staging { dir: dir.clone(), points, private: true };
        s.cleanup();
        if !dir.exists() {
            removed.push(dir);
        }
    }
    removed
}
