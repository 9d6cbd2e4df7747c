//! `workcell doctor` (why Docker does or does not work here) and `workcell gc` (remove
//! what interrupted runs left behind: containers, proxied runs' networks and firewall rules,
//! stale images).

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::query_parameters::{ListImagesOptions, ListNetworksOptions, RemoveContainerOptions, RemoveImageOptions};
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
    /// Which engine answered: "Docker" or "Podman" (its Docker-compatible service).
    pub engine: Option<String>,
    /// Engine version, when the daemon answered.
    pub version: Option<String>,
    /// What differs on this engine and matters here (Podman: a missing init, rootless).
    pub engine_notes: Vec<String>,
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
        engine: None,
        version: None,
        engine_notes: Vec::new(),
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
        let (docker, engine) = match super::connect_engine().await {
            Ok(found) => found,
            Err(e) => {
                d.error = Some(e.to_string());
                return;
            }
        };
        d.engine = Some(engine.label().to_string());
        d.engine_notes = super::engine::notes(&engine, d.address.as_deref().unwrap_or_default());
        d.engine_notes.extend(super::placement::describe(d.address.as_deref().unwrap_or_default()));
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
    /// Run networks removed (proxied runs), by name.
    pub networks: Vec<String>,
    /// Volumes of runs on a remote engine (shipped zones) whose workcell is gone, by name.
    pub volumes: Vec<String>,
    /// Runs whose host firewall rules were removed, by name.
    pub firewall: Vec<String>,
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
    let pid: u32 = labels.get(LABEL_PID)?.parse().ok()?;
    (pid > 1).then(|| pid_alive(pid))
}

/// Whether process `pid` exists (one of another user's counts).
fn pid_alive(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) else { return false };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

/// Removes leftovers labelled `dev.workcell.managed=true`:
/// containers that are not running or whose owning workcell process is gone (a container
/// a live workcell owns is never touched), the networks and firewall rules of proxied runs
/// whose workcell is gone, dangling images, host base images of layouts
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
    let containers = super::listing::containers(&docker, vec![format!("{LABEL_MANAGED}=true")]).await?;
    for c in containers {
        let (name, state, labels) = (c.name, c.state, c.labels);
        // Pooled containers wait for their run with no owner: `pool::gc` judges them.
        if labels.contains_key(super::pooled::LABEL_POOL) {
            continue;
        }
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
        if c.id.is_empty() {
            continue;
        }
        match docker.remove_container(&c.id, Some(RemoveContainerOptions { force: true, v: true, ..Default::default() })).await {
            Ok(()) => report.containers.push(format!("{name} ({state})")),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => report.errors.push(format!("container {name}: {}", api_message(&e))),
        }
    }

    networks(&docker, &mut report).await?;
    volumes(&docker, &mut report).await?;

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
        let tags: Vec<String> = img.repo_tags.iter().filter(|t| t.as_str() != "<none>:<none>").map(|t| short_tag(t).to_string()).collect();
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

/// The volumes of shipped zones (`ship`) whose workcell is gone, or that name no owner.
async fn volumes(docker: &bollard::Docker, report: &mut GcReport) -> Result<(), DockerError> {
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_MANAGED}=true")])]);
    let list = docker
        .list_volumes(Some(bollard::query_parameters::ListVolumesOptions { filters: Some(filters) }))
        .await
        .map_err(|e| DockerError::Api { what: "list volumes".into(), source: e })?;
    for v in list.volumes.unwrap_or_default() {
        if owner_alive(&v.labels) == Some(true) {
            continue;
        }
        let opts = bollard::query_parameters::RemoveVolumeOptions { force: true };
        match docker.remove_volume(&v.name, Some(opts)).await {
            Ok(()) => report.volumes.push(v.name),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404 | 409, .. }) => {}
            Err(e) => report.errors.push(format!("volume {}: {}", v.name, api_message(&e))),
        }
    }
    Ok(())
}

/// A `build:` image is current when its folder still exists and still hashes to its tag.
/// A tag as workcell names it: Podman lists `workcell-host:…` as
/// `docker.io/library/workcell-host:…` (or `localhost/…`), and takes the short form back.
fn short_tag(tag: &str) -> &str {
    tag.strip_prefix("docker.io/library/").or_else(|| tag.strip_prefix("localhost/")).unwrap_or(tag)
}

fn build_is_current(labels: &HashMap<String, String>, tags: &[String]) -> bool {
    let Some(dir) = labels.get(image::LABEL_SOURCE).map(PathBuf::from) else { return false };
    match image::folder_context(&dir) {
        Ok((hash, _)) => tags.iter().any(|t| *t == image::folder_tag(&dir, &hash)),
        Err(_) => false,
    }
}

/// Removes the networks of proxied runs whose workcell is gone, with their firewall rules,
/// and rules whose network is gone. The rules are listed before the networks: a run sets
/// its rules only once its network exists, so a rule listed first whose network is missing
/// afterwards belongs to a run that has ended (a run starting meanwhile is never touched) —
/// or to a run on another engine (the rules are the host's, the networks each engine's): a
/// rule whose recorded owner still lives is left alone.
async fn networks(docker: &bollard::Docker, report: &mut GcReport) -> Result<(), DockerError> {
    use super::firewall;
    // Only root can have set rules (and read them).
    let root = rustix::process::geteuid().is_root();
    let tagged = if root {
        firewall::tagged().unwrap_or_else(|e| {
            report.errors.push(format!("firewall rules: {e}"));
            Vec::new()
        })
    } else {
        Vec::new()
    };
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_MANAGED}=true")])]);
    let networks = docker
        .list_networks(Some(ListNetworksOptions { filters: Some(filters) }))
        .await
        .map_err(|e| DockerError::Api { what: "list networks".into(), source: e })?;
    let names: Vec<String> = networks.iter().filter_map(|n| n.name.clone()).collect();
    for n in networks {
        let Some(name) = n.name else { continue };
        // Owned by a live workcell, or made by hand (no owner): left alone.
        if owner_alive(&n.labels.unwrap_or_default()) != Some(false) {
            continue;
        }
        if root {
            match firewall::remove(&name) {
                Ok(()) => report.firewall.push(name.clone()),
                Err(e) => report.errors.push(format!("firewall rules of {name}: {e}")),
            }
        }
        match docker.remove_network(&name).await {
            Ok(()) => report.networks.push(name),
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
            Err(e) => report.errors.push(format!("network {name}: {}", api_message(&e))),
        }
    }
    let orphan = |t: &firewall::Tagged| !names.contains(&t.name) && t.owner.is_none_or(|pid| !pid_alive(pid));
    for name in tagged.into_iter().filter(orphan).map(|t| t.name) {
        match firewall::remove(&name) {
            Ok(()) => report.firewall.push(name),
            Err(e) => report.errors.push(format!("firewall rules of {name}: {e}")),
        }
    }
    Ok(())
}
