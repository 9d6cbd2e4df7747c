//! Whether the engine sees this host's files: a bind mount names a host path, and an engine
//! on another host (or in another mount namespace) would bind whatever that path is there,
//! or nothing. Decided, never guessed:
//!
//! - an address over the network (`tcp://`, `http(s)://`, `ssh://`) is remote;
//! - a unix socket whose listening process is the engine itself (`dockerd`, `podman`) in
//!   workcell's own mount namespace sees exactly what workcell sees: local;
//! - otherwise (a forwarded socket: `ssh -L`, socat; a socket passed in from another
//!   namespace; rootless engines in a namespace of their own) workcell asks the engine: it creates a container, never started, binding a
//!   fresh directory holding a random token, and reads the token back through the archive
//!   API. Only the token read back makes the engine local. The answer is kept for the
//!   process (an MCP server runs many commands).
//!
//! A remote engine gets zones shipped (`plan::ship`, [`super::ship`]).

use std::sync::Mutex;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{CreateContainerOptions, DownloadFromContainerOptions};
use bollard::Docker;
use futures_util::StreamExt;

use super::{image, render, DockerError};
use crate::plan::LaunchPlan;

/// Answers already found in this process, by address: `Some(description)` when remote.
static KNOWN: Mutex<Vec<(String, Option<String>)>> = Mutex::new(Vec::new());

/// Where the probe's directory appears in its container.
const PROBE_POINT: &str = "/.workcell-probe";

/// `None` when the engine workcell would use for `plan` sees this host's files; else what
/// it is, for messages ("the engine at tcp://10.0.0.2:2375 is on another host").
pub fn remote(plan: &LaunchPlan) -> Result<Option<String>, DockerError> {
    let (address, _) = super::client()?;
    if let Some(known) = KNOWN.lock().ok().and_then(|k| k.iter().find(|(a, _)| *a == address).map(|(_, r)| r.clone())) {
        return Ok(known);
    }
    let answer = match by_address(&address) {
        Some(answer) => answer,
        None => {
            let rt = super::runtime()?;
            let seen = rt.block_on(async {
                let docker = super::connect().await?;
                sees_host_files(&docker, plan).await
            });
            rt.shutdown_background();
            (!seen?).then(|| format!("the engine at {address} cannot see this host's files (it is in another mount namespace)"))
        }
    };
    if let Ok(mut k) = KNOWN.lock() {
        k.push((address, answer.clone()));
    }
    Ok(answer)
}

/// What `doctor` says about how zones reach the engine at `address`.
pub fn describe(address: &str) -> Option<String> {
    match by_address(address) {
        Some(Some(why)) => Some(format!(
            "{why}: zones are shipped to it (copied in; writable ones brought back, checked and published as with `delivery: copy`); `image: host` and network rules are refused there"
        )),
        Some(None) => None,
        None => Some("the engine is in another mount namespace: the first run asks it whether it sees this host's files, and ships the zones if not".into()),
    }
}

/// What the address alone proves: `Some(Some(_))` remote, `Some(None)` local, `None` unknown.
fn by_address(address: &str) -> Option<Option<String>> {
    let scheme = address.split("://").next().unwrap_or_default();
    if matches!(scheme, "tcp" | "http" | "https" | "ssh") {
        return Some(Some(format!("the engine at {address} is reached over the network")));
    }
    let path = address.strip_prefix("unix://")?;
    let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
    let pid = rustix::net::sockopt::socket_peercred(&stream).ok()?.pid.as_raw_nonzero().get();
    // The listener must be the engine itself: a forwarder in this namespace (`ssh -L` of a
    // remote socket, socat) proves nothing about where the engine is.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    if !ENGINES.contains(&comm.trim_end()) {
        return None;
    }
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()?;
    let ours = std::fs::read_link("/proc/self/ns/mnt").ok()?;
    (theirs == ours).then_some(None)
}

/// The names (`/proc/PID/comm`) of engines that serve the API themselves.
const ENGINES: &[&str] = &["dockerd", "podman"];

/// Asks the engine to bind a fresh host directory and reads back the token in it.
async fn sees_host_files(docker: &Docker, plan: &LaunchPlan) -> Result<bool, DockerError> {
    let io = |what: &str| {
        let what = format!("cannot ask the engine whether it sees this host's files: {what}");
        move |source| DockerError::Io { what, source }
    };
    let dir = tempfile::Builder::new().prefix("workcell-probe-").tempdir().map_err(io("create a directory"))?;
    let token = format!("{}-{}", plan.run_id, crate::plan::new_run_id());
    std::fs::write(dir.path().join("token"), &token).map_err(io("write the token"))?;
    let image = image::ensure(docker, plan).await?;
    let name = format!("{}-probe", render::container_name(plan));
    let body = ContainerCreateBody {
        image: Some(image),
        cmd: Some(vec![format!("{PROBE_POINT}/never-started")]),
        labels: Some(render::labels(plan)),
        host_config: Some(HostConfig {
            mounts: Some(vec![Mount {
                target: Some(PROBE_POINT.into()),
                source: Some(dir.path().to_string_lossy().into_owned()),
                typ: Some(MountType::BIND),
                read_only: Some(true),
                ..Default::default()
            }]),
            network_mode: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = docker.create_container(Some(CreateContainerOptions { name: Some(name.clone()), ..Default::default() }), body).await;
    match created {
        Ok(_) => {}
        // The engine has no such path: Docker refuses the bind source, Podman its statfs.
        Err(bollard::errors::Error::DockerResponseServerError { message, .. }) if missing_source(&message) => return Ok(false),
        Err(e) => return Err(DockerError::Api { what: "create the probe container".into(), source: e }),
    }
    let read = read_file(docker, &name, &format!("{PROBE_POINT}/token")).await;
    super::container::remove(docker, &name).await;
    Ok(read.as_deref() == Some(token.as_bytes()))
}

fn missing_source(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("does not exist") || m.contains("no such file or directory")
}

/// The content of the small file `path` in container `name` (at most 4 KiB), if it is there.
async fn read_file(docker: &Docker, name: &str, path: &str) -> Option<Vec<u8>> {
    let mut stream = docker.download_from_container(name, Some(DownloadFromContainerOptions { path: path.into() }));
    let mut archive = Vec::new();
    while let Some(chunk) = stream.next().await {
        archive.extend_from_slice(&chunk.ok()?);
        if archive.len() > 64 << 10 {
            return None;
        }
    }
    let mut entries = tar::Archive::new(archive.as_slice());
    let mut entry = entries.entries().ok()?.next()?.ok()?;
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(&mut entry, 4096), &mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_addresses_are_remote_without_asking() {
        for a in ["tcp://10.0.0.2:2375", "https://engine:2376", "ssh://user@engine", "http://127.0.0.1:2375"] {
            assert!(matches!(by_address(a), Some(Some(_))), "{a}");
        }
        // A socket nobody listens on proves nothing.
        assert_eq!(by_address("unix:///nonexistent/workcell.sock"), None);
    }
}
