//! `workcell doctor` (why Docker does or does not work here) and `workcell gc` (remove
//! what interrupted runs left behind).

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::query_parameters::{ListContainersOptions, ListImagesOptions, RemoveContainerOptions, RemoveImageOptions};
use serde::Serialize;

use super::image::{self, LABEL_KIND};
use super::render::LABEL_MANAGED;
use super::runner::LABEL_PID;
use super::{api_message, DockerError};
use crate::plan::{host_system_layout, UserSpec};

/// One socket `doctor` looked at.
#[derive(Debug, Clone, Serialize)]
pub struct SocketState {
    /// Socket path.
    pub path: PathBuf,
    /// Whether something exists at that path.
    pub exists: bool,
}

/// What `workcell doctor` found out about Docker.
#[derive(Debug, Clone, Serialize)]
pub struct DockerDiagnosis {
    /// `DOCKER_HOST`, when set (it wins over the sockets).
    pub docker_host: Option<String>,
    /// The well-known sockets, in the order they are tried.
    pub sockets: Vec<SocketState>,
    /// The address workcell connects to.
    pub address: Option<String>,
    /// Engine version, when the daemon answered.
    pub version: Option<String>,
    /// The daemon's API version.
    pub api_version: Option<String>,
    /// The API version workcell speaks after negotiation.
    pub negotiated_api: Option<String>,
    /// The host base image tag for this machine and user, and whether it is built.
    pub host_image: Option<(String, bool)>,
    /// The daemon's runtimes (what `runtime:` may name) and its default one.
    pub runtimes: Option<super::runtimes::Runtimes>,
    /// Why the runtimes could not be listed.
    pub runtimes_error: Option<String>,
    /// Why Docker cannot be used, with the fix.
    pub error: Option<String>,
}

/// Asks the daemon what `doctor` reports. Never fails: failures are part of the answer.
pub fn diagnose() -> DockerDiagnosis {
    let mut d = DockerDiagnosis {
        docker_host: std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()),
        sockets: super::candidate_sockets().into_iter().map(|p| SocketState { exists: p.exists(), path: p }).collect(),
        address: None,
        version: None,
        api_version: None,
        negotiated_api: None,
        host_image: None,
        runtimes: None,
        runtimes_error: None,
        error: None,
    };
    let rt = match super::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            d.error = Some(e.to_string());
            return d;
        }
    };
    rt.block_on(async {
        d.address = super::client().ok().map(|(a, _)| a);
        let docker = match super::connect().await {
            Ok(docker) => docker,
            Err(e) => {
                d.error = Some(e.to_string());
                return;
            }
        };
        let v = docker.client_version();
        d.negotiated_api = Some(format!("{}.{}", v.major_version, v.minor_version));
        match docker.version().await {
            Ok(v) => {
                d.version = v.version;
                d.api_version = v.api_version;
            }
            Err(e) => d.error = Some(format!("the daemon answered but `version` failed: {}", api_message(&e))),
        }
        match super::runtimes::list(&docker).await {
            Ok(r) => d.runtimes = Some(r),
            Err(e) => d.runtimes_error = Some(super::runtimes::describe(&e)),
        }
        let cwd = std::env::current_dir().unwrap_or_default();
        if let Ok((tag, _)) = image::host_base(&host_system_layout(), crate::plan::worker_user(&cwd, None)) {
            let built = docker.inspect_image(&tag).await.is_ok();
            d.host_image = Some((tag, built));
        }
    });
    rt.shutdown_background();
    d
}

/// What `workcell gc` removed (or failed to remove).
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    /// Containers removed: `name (state)`.
    pub containers: Vec<String>,
    /// Images removed, by tag or id.
    pub images: Vec<String>,
    /// Things that could not be removed, with the reason.
    pub errors: Vec<String>,
    /// Containers left alone because a live workcell process still owns them.
    pub kept: Vec<String>,
    /// Stale images left alone because a container still uses them.
    pub images_in_use: Vec<String>,
    /// Host leftovers removed (cgroups, broker and staging directories): `what path`.
    pub host: Vec<String>,
    /// Why Docker was not cleaned, when it could not be reached (the host is cleaned anyway).
    pub docker_unavailable: Option<String>,
}

fn owner_alive(labels: &HashMap<String, String>) -> Option<bool> {
    let pid: i32 = labels.get(LABEL_PID)?.parse().ok()?;
    let pid = rustix::process::Pid::from_raw(pid).filter(|p| p.as_raw_nonzero().get() > 1)?;
    Some(match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    })
}

/// Removes leftovers labelled `dev.workcell.managed=true`:
/// containers that are not running or whose owning workcell process is gone (a container
/// a live workcell owns is never touched), dangling images, host base images of layouts
/// that are no longer current, `build:` images whose folder changed or vanished, and
/// images labelled `dev.workcell.kind=temporary`. `all` also removes the current host base image and
/// every `build:` image.
pub fn gc(all: bool) -> Result<GcReport, DockerError> {
    let rt = super::runtime()?;
    let r = rt.block_on(gc_async(all));
    rt.shutdown_background();
    r
}

async fn gc_async(all: bool) -> Result<GcReport, DockerError> {
    let docker = super::connect().await?;
    let mut report = GcReport::default();
    let filter = |extra: Option<&str>| {
        let mut f = HashMap::new();
        let mut labels = vec![format!("{LABEL_MANAGED}=true")];
        labels.extend(extra.map(str::to_string));
        f.insert("label".to_string(), labels);
        f
    };
    let containers = docker
        .list_containers(Some(ListContainersOptions { all: true, filters: Some(filter(None)), ..Default::default() }))
        .await
        .map_err(|e| DockerError::Api { what: "list containers".into(), source: e })?;
    for c in containers {
        let name = c.names.as_ref().and_then(|n| n.first()).map(|n| n.trim_start_matches('/').to_string()).or(c.id.clone()).unwrap_or_default();
        let state = c.state.as_ref().map(|s| s.to_string()).unwrap_or_default();
        let labels = c.labels.clone().unwrap_or_default();
        let remove = match owner_alive(&labels) {
            Some(true) => false,
            Some(false) => true,
            // No owner recorded (made by hand or by an older workcell): only if stopped.
            None => state != "running",
        };
        if !remove {
            report.kept.push(format!("{name} ({state})"));
            continue;
        }
        let Some(id) = c.id else { continue };
        match docker.remove_container(&id, Some(RemoveContainerOptions { force: true, v: true, ..Default::default() })).await {
            Ok(()) => report.containers.push(format!("{name} ({state})")),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => report.errors.push(format!("container {name}: {}", api_message(&e))),
        }
    }

    // Base images are per worker user: keep the ones of every user a run from here would use
    // (this user, the current directory's owner as root, the fallback user).
    let cwd = std::env::current_dir().unwrap_or_default();
    let me = UserSpec { uid: rustix::process::getuid().as_raw(), gid: rustix::process::getgid().as_raw() };
    let layout = host_system_layout();
    let current_host: Vec<String> = [me, crate::plan::worker_user(&cwd, None), crate::plan::FALLBACK_USER]
        .into_iter()
        .filter_map(|u| image::host_base(&layout, u).ok().map(|(t, _)| t))
        .collect();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    let images = docker
        .list_images(Some(ListImagesOptions { all: false, filters: Some(filter(None)), ..Default::default() }))
        .await
        .map_err(|e| DockerError::Api { what: "list images".into(), source: e })?;
    for img in images {
        let tags: Vec<String> = img.repo_tags.iter().filter(|t| t.as_str() != "<none>:<none>").cloned().collect();
        let kind = img.labels.get(LABEL_KIND).map(String::as_str);
        let remove = if tags.is_empty() {
            // An untagged image this young may be a step of a build in progress.
            now - img.created > 600
        } else {
            match kind {
                Some("host-base") => all || !tags.iter().any(|t| current_host.contains(t)),
                Some("build") => all || !build_is_current(&img.labels, &tags),
                Some("temporary") => true,
                // Managed images of other kinds (made by tests or by hand) are left alone.
                _ => false,
            }
        };
        if !remove {
            continue;
        }
        let targets = if tags.is_empty() { vec![img.id.clone()] } else { tags };
        for t in targets {
            match docker.remove_image(&t, Some(RemoveImageOptions { force: false, noprune: false, ..Default::default() }), None).await {
                Ok(_) => report.images.push(t),
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
                // A container (a run in progress) still uses it: kept, not a failure.
                Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => report.images_in_use.push(t),
                Err(e) => report.errors.push(format!("image {t}: {}", api_message(&e))),
            }
        }
    }
    Ok(report)
}

/// A `build:` image is current when its folder still exists and still hashes to its tag.
fn build_is_current(labels: &HashMap<String, String>, tags: &[String]) -> bool {
    let Some(dir) = labels.get(image::LABEL_SOURCE).map(PathBuf::from) else { return false };
    match image::folder_context(&dir) {
        Ok((hash, _)) => tags.iter().any(|t| *t == image::folder_tag(&dir, &hash)),
        Err(_) => false,
    }
}
