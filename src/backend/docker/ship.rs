//! Zones shipped to an engine that cannot see this host's files (`plan::ship` made every zone
//! a private copy; [`super::placement`] decided the engine is remote).
//!
//! Each mount gets a volume of the run's own on the engine (`workcell-RUN-N`, labelled like
//! the container). The copy reaches it through a *carrier*: a container that is created,
//! never started, with every volume mounted writable at `/.workcell-ship/N`; the archive API
//! extracts into a created container's volumes. (The worker's own container mounts a
//! read-only zone read-only, where the engine would refuse the extraction.) The tar is the
//! copy walked through handles (`delivery::walk`), owned by the worker's uid and gid: Docker
//! keeps the owners in the tar when extracting beneath the mount point's parent, Podman
//! applies the carrier's user (`copyUIDGID`) to the tree it extracts at the mount point.
//!
//! After a run that ended by itself, each writable volume is read back through the carrier,
//! one zone at a time, and checked as it arrives (`delivery::shipped`) against the zone's
//! policy, which the run registered in [`Returns`]: only what passes is kept (staged, bounded
//! by the zone's limits and the staging's room), for the run's delivery to review and
//! publish. Carrier and volumes go with the container: the run, its watchdog
//! ([`super::reaper`]) and `workcell gc` remove them.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType, MountVolumeOptions, VolumeCreateRequest};
use bollard::query_parameters::{CreateContainerOptions, DownloadFromContainerOptions, ListVolumesOptions, RemoveVolumeOptions, UploadToContainerOptions};
use bollard::Docker;
use bytes::Bytes;
use futures_util::StreamExt;

use super::engine::Engine;
use super::render::{DockerSettings, LABEL_RUN};
use super::DockerError;
use crate::delivery::collect::{Collected, Staging};
use crate::delivery::walk::{self, Shape};
use crate::delivery::{shipped, DeliveryError, Policy};
use crate::plan::LaunchPlan;

/// Where the carrier mounts the volumes.
const CARRIER_ROOT: &str = "/.workcell-ship";

/// The most one zone's archive may hold as it comes back: the zone's bytes and a tar
/// header's worth for each entry, and a little more (the checker judges the rest).
fn return_cap(policy: &Policy) -> u64 {
    policy.max_total_bytes.saturating_add(policy.max_entries.saturating_mul(2048)).saturating_add(1 << 20)
}

/// One writable zone's tree as the engine returned it, checked: what passed, staged.
#[derive(Debug)]
pub struct Checked {
    pub collected: Collected,
    pub staging: Staging,
}

/// One writable zone to bring back: its policy, and once brought back, the result.
#[derive(Debug)]
struct Expected {
    /// The mount's target (as in the plan's `copies`).
    target: String,
    policy: Policy,
    returned: Option<Result<Checked, DeliveryError>>,
}

/// What a shipped run brings back: the run registers each writable zone's policy
/// ([`Returns::expect`]), the backend fills in what came back, the run's delivery takes it.
#[derive(Debug, Default)]
pub struct Returns(Mutex<Vec<Expected>>);

impl Returns {
    /// The zone mounted at `target` is to be brought back and checked against `policy`.
    pub fn expect(&self, target: &str, policy: Policy) {
        if let Ok(mut all) = self.0.lock() {
            all.push(Expected { target: target.to_string(), policy, returned: None });
        }
    }

    /// The checked tree of the mount at `target`, taken out; `None` when nothing came back.
    pub fn take(&self, target: &str) -> Option<Result<Checked, DeliveryError>> {
        let mut all = self.0.lock().ok()?;
        all.iter_mut().find(|r| r.target == target)?.returned.take()
    }

    fn expected(&self) -> Vec<(String, Policy)> {
        self.0.lock().map(|all| all.iter().map(|e| (e.target.clone(), e.policy.clone())).collect()).unwrap_or_default()
    }

    fn put(&self, target: &str, returned: Result<Checked, DeliveryError>) {
        if let Ok(mut all) = self.0.lock() {
            if let Some(e) = all.iter_mut().find(|e| e.target == target) {
                e.returned = Some(returned);
            }
        }
    }
}

fn carrier_name(run_id: &str) -> String {
    format!("workcell-{run_id}-ship")
}

fn volume_name(run_id: &str, i: usize) -> String {
    format!("workcell-{run_id}-{i}")
}

/// Makes the volumes and the carrier, ships every mount's copy into its volume, and points
/// the container's mounts at the volumes. On error, what was made is left to [`remove`].
pub async fn send(docker: &Docker, engine: &Engine, plan: &LaunchPlan, settings: &mut DockerSettings) -> Result<(), DockerError> {
    let labels = settings.create.labels.clone().unwrap_or_default();
    let mut carried = Vec::new();
    let mut mounts = Vec::new();
    for (i, m) in plan.mounts.iter().enumerate() {
        let volume = volume_name(&plan.run_id, i);
        let request = VolumeCreateRequest { name: Some(volume.clone()), labels: Some(labels.clone()), ..Default::default() };
        docker.create_volume(request).await.map_err(|e| DockerError::Api { what: format!("create the volume for {}", m.target), source: e })?;
        carried.push(volume_mount(&volume, &format!("{CARRIER_ROOT}/{i}"), false));
        mounts.push(volume_mount(&volume, &m.target, m.read_only));
    }
    let carrier = carrier_name(&plan.run_id);
    let body = ContainerCreateBody {
        image: settings.create.image.clone(),
        cmd: Some(vec![format!("{CARRIER_ROOT}/never-started")]),
        user: Some(format!("{}:{}", plan.user.uid, plan.user.gid)),
        labels: Some(labels),
        host_config: Some(HostConfig { mounts: Some(carried), network_mode: Some("none".into()), ..Default::default() }),
        ..Default::default()
    };
    let options = CreateContainerOptions { name: Some(carrier.clone()), ..Default::default() };
    docker
        .create_container(Some(options), body)
        .await
        .map_err(|e| DockerError::Api { what: "create the container that carries the zones".into(), source: e })?;
    for (i, m) in plan.mounts.iter().enumerate() {
        let held = m.held.clone().ok_or_else(|| DockerError::Local(format!("cannot ship {}: workcell holds no copy of it", m.target)))?;
        let owner = Some((plan.user.uid, plan.user.gid));
        let (path, shape, copy_uidgid) = if engine.is_podman() {
            (format!("{CARRIER_ROOT}/{i}"), Shape { prefix: "./".into(), owner }, Some("true".to_string()))
        } else {
            (CARRIER_ROOT.to_string(), Shape { prefix: format!("{i}/"), owner }, None)
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(4);
        let walker = tokio::task::spawn_blocking(move || walk::archive_as(&*held.0, ChunkWriter { tx, buf: Vec::new() }, u64::MAX, u64::MAX, &shape));
        let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let options = UploadToContainerOptions { path, copy_uidgid, ..Default::default() };
        let sent = docker.upload_to_container(&carrier, Some(options), bollard::body_stream(body)).await;
        let walked = walker.await.unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        walked.map_err(|source| DockerError::Io { what: format!("cannot read the copy of {} to ship it", m.target), source })?;
        sent.map_err(|e| DockerError::Api { what: format!("ship {} to the engine", m.target), source: e })?;
    }
    if let Some(hc) = settings.create.host_config.as_mut() {
        hc.mounts = Some(mounts);
    }
    Ok(())
}

fn volume_mount(volume: &str, target: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(target.into()),
        source: Some(volume.into()),
        typ: Some(MountType::VOLUME),
        read_only: Some(read_only),
        // The image's files at the target never mix into the zone.
        volume_options: Some(MountVolumeOptions { no_copy: Some(true), ..Default::default() }),
        ..Default::default()
    }
}

/// A `Write` that sends the tar in 64 KiB chunks to the upload.
struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<Bytes>,
    buf: Vec<u8>,
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 64 << 10 {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if !self.buf.is_empty() {
            let chunk = Bytes::from(std::mem::take(&mut self.buf));
            self.tx.blocking_send(chunk).map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the engine stopped reading the upload"))?;
        }
        Ok(())
    }
}

/// Brings every zone `returns` expects back from `plan`'s volumes, one at a time, each
/// checked as it arrives.
pub async fn bring_back(docker: &Docker, plan: &LaunchPlan, returns: &Returns) {
    for (target, policy) in returns.expected() {
        let Some(i) = plan.mounts.iter().position(|m| m.target == target) else { continue };
        let checked = download(docker, &carrier_name(&plan.run_id), &format!("{CARRIER_ROOT}/{i}"), policy).await;
        returns.put(&target, checked);
    }
}

/// Streams the archive of `path` in the carrier through the checker (on a blocking thread);
/// stops when the checker does (a limit reached) or the archive is over [`return_cap`].
async fn download(docker: &Docker, carrier: &str, path: &str, policy: Policy) -> Result<Checked, DeliveryError> {
    let cap = return_cap(&policy);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let checker = tokio::task::spawn_blocking(move || {
        let mut staging = Staging::new().map_err(DeliveryError::io("create the staging directory", ""))?;
        let collected = shipped::collect(ChunkReader { rx, chunk: Bytes::new() }, &policy, &mut staging)?;
        Ok(Checked { collected, staging })
    });
    let mut stream = docker.download_from_container(carrier, Some(DownloadFromContainerOptions { path: path.into() }));
    let mut failed = None;
    let mut total = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                failed = Some(DeliveryError::Download(std::io::Error::other(super::api_message(&e))));
                break;
            }
        };
        total = total.saturating_add(chunk.len() as u64);
        if total > cap {
            failed = Some(DeliveryError::TooManyBytes { max: cap });
            break;
        }
        // The checker stopped reading: its result says why.
        if tx.send(chunk).await.is_err() {
            break;
        }
    }
    // The checker sees the end of the archive (a download cut short is an error either way).
    drop((tx, stream));
    let checked = checker.await.unwrap_or_else(|e| Err(DeliveryError::Archive(std::io::Error::other(e.to_string()))));
    match failed {
        Some(e) => Err(e),
        None => checked,
    }
}

/// The download's chunks as a `Read`, for the checker's thread.
struct ChunkReader {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    chunk: Bytes,
}

impl std::io::Read for ChunkReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                Some(c) => self.chunk = c,
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.chunk.len());
        out[..n].copy_from_slice(&self.chunk.split_to(n));
        Ok(n)
    }
}

/// Removes the carrier and every volume of run `run_id` (none is fine).
pub async fn remove(docker: &Docker, run_id: &str) {
    super::container::remove(docker, &carrier_name(run_id)).await;
    let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_RUN}={run_id}")])]);
    let Ok(list) = docker.list_volumes(Some(ListVolumesOptions { filters: Some(filters) })).await else { return };
    for v in list.volumes.unwrap_or_default() {
        remove_volume(docker, &v.name).await;
    }
}

/// Force-removes one volume; errors are said, `workcell gc` finishes the job.
pub(super) async fn remove_volume(docker: &Docker, name: &str) {
    match docker.remove_volume(name, Some(RemoveVolumeOptions { force: true })).await {
        Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
        Err(e) => eprintln!("workcell: could not remove volume {name}: {}; run `workcell gc` to clean up", super::api_message(&e)),
    }
}
