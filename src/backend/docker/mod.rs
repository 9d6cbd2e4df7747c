//! Docker backend: one hardened container per run, through the Engine API (bollard).
//!
//! [`render`] turns a plan into the create body (pure, snapshot-tested), given the init that
//! [`choose_init`] picked from the host; [`image`] makes sure the image exists locally (never
//! pulling); the runner creates, attaches, starts, waits for and always removes the
//! container, with [`reaper`] as the watchdog that removes it if workcell is killed (both
//! remove through `container`); a proxied run also gets a [`network`] of its own, closed to
//! the host by [`firewall`] rules, removed the same ways; [`maintenance`] holds `doctor`
//! and `gc`.

pub mod access;
mod container;
pub mod engine;
pub mod firewall;
pub mod image;
mod init;
mod init_error;
pub mod leftovers;
mod listing;
pub mod maintenance;
pub mod network;
pub mod placement;
pub mod pooled;
mod rawhttp;
pub mod reaper;
pub mod render;
mod runner;
pub mod runtimes;
pub mod ship;
mod slots;
pub mod staging;

use std::path::PathBuf;
use std::time::Duration;

use bollard::Docker;

use super::egress::EgressProxy;
use super::BackendError;
use crate::plan::LaunchPlan;

pub use init::choose_init;
pub use render::{render, DockerSettings};

/// How long `probe` waits for a daemon that accepted the connection but does not answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The same over TLS or ssh, where the answer takes two calls of `/version` (which Podman
/// answers in up to a second when idle) and a handshake.
const REMOTE_PROBE_TIMEOUT: Duration = Duration::from_secs(10);

const UNREACHABLE_FIX: &str =
    "Start it (e.g. `systemctl start docker`), or point DOCKER_HOST at a running daemon (Podman: unix://$XDG_RUNTIME_DIR/podman/podman.sock)";
/// Added where a run failed, not in `doctor`, which shows what was tried itself.
const SEE_DOCTOR: &str = "; `workcell doctor` shows what was tried";

/// What went wrong talking to Docker. Every message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// No daemon at the address tried.
    #[error("cannot reach the Docker daemon at {address}: {reason}. {}", unreachable_fix(address))]
    Unreachable { address: String, reason: String },
    /// The socket is there, but this user may not connect to it.
    #[error("{}. {}", .0.reason(), .0.fix())]
    Denied(access::Denied),
    /// An API call failed.
    #[error("docker: {what} failed: {}", api_message(source))]
    Api { what: String, source: bollard::errors::Error },
    /// The image is missing or could not be built.
    #[error("{0}")]
    Image(String),
    /// A local check refused the run, or the daemon behaved unexpectedly.
    #[error("{0}")]
    Local(String),
    /// Local I/O (terminal, signals, runtime, staging): `what` failed because of `source`.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The worker's `build:` folder cannot be read.
    #[error("cannot read the build folder {}: {source}; check the worker's `build:` path (relative to the project directory)", dir.display())]
    BuildFolder {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The plan names a runtime the daemon does not list.
    #[error(
        "the Docker daemon has no runtime '{wanted}' (it lists: {}). To use it, {}; then check with `workcell doctor`",
        if available.is_empty() { "none".to_string() } else { available.join(", ") },
        runtimes::install_hint(wanted)
    )]
    MissingRuntime { wanted: String, available: Vec<String> },
    /// The host's base image (for `image: host`) cannot be assembled.
    #[error("cannot assemble the host base image: {0}")]
    HostBase(#[source] std::io::Error),
    /// The firewall rules that confine a proxied run cannot be set or checked.
    #[error(transparent)]
    Firewall(#[from] firewall::FirewallError),
}

impl From<DockerError> for BackendError {
    fn from(e: DockerError) -> Self {
        match e {
            DockerError::Unreachable { address, reason } => BackendError::Unavailable {
                backend: "docker",
                reason: format!("cannot reach the Docker daemon at {address}: {reason}"),
                fix: format!("{}{SEE_DOCTOR}", unreachable_fix(&address)),
            },
            DockerError::Denied(d) => BackendError::Unavailable { backend: "docker", reason: d.reason(), fix: d.fix() },
            other => BackendError::Docker(other),
        }
    }
}

/// What to do about an engine that does not answer at `address`: for one over the network,
/// also how workcell speaks TLS to it.
fn unreachable_fix(address: &str) -> String {
    if address.starts_with("tcp://") && std::env::var_os("DOCKER_TLS_VERIFY").is_none() {
        return format!("{UNREACHABLE_FIX}. An engine that requires TLS needs DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH (a directory with ca.pem, cert.pem and key.pem; default ~/.docker)");
    }
    UNREACHABLE_FIX.to_string()
}

/// The daemon's own message for an API error, without bollard's wrapping.
pub(crate) fn api_message(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, message } => format!("{message} (HTTP {status_code})"),
        other => other.to_string(),
    }
}

/// Where workcell looks for a daemon, in order: `DOCKER_HOST` if set, else the first
/// existing socket among Docker's system socket, rootless Docker's, and Podman's.
pub fn candidate_sockets() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("/var/run/docker.sock")];
    let runtime =
        std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(format!("/run/user/{}", rustix::process::getuid().as_raw())));
    out.push(runtime.join("docker.sock"));
    out.push(runtime.join("podman/podman.sock"));
    out.push(PathBuf::from("/run/podman/podman.sock"));
    out
}

/// The address [`connect`] uses and a client for it (no traffic yet).
pub fn client() -> Result<(String, Docker), DockerError> {
    let unreachable = |address: &str, e: bollard::errors::Error| DockerError::Unreachable { address: address.to_string(), reason: e.to_string() };
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        if !host.is_empty() {
            // connect_with_defaults understands unix://, tcp://, http:// and npipe://.
            return Docker::connect_with_defaults().map(|d| (host.clone(), d)).map_err(|e| unreachable(&host, e));
        }
    }
    let socket = candidate_sockets().into_iter().find(|p| p.exists());
    match socket {
        None => Docker::connect_with_local_defaults()
            .map(|d| ("unix:///var/run/docker.sock".to_string(), d))
            .map_err(|e| unreachable("unix:///var/run/docker.sock", e)),
        Some(p) => {
            let addr = format!("unix://{}", p.display());
            Docker::connect_with_unix(&addr, 120, bollard::API_DEFAULT_VERSION).map(|d| (addr.clone(), d)).map_err(|e| unreachable(&addr, e))
        }
    }
}

/// Connects and negotiates the API version down to what the daemon speaks (20.10 speaks
/// 1.41, older than bollard's default), failing within [`PROBE_TIMEOUT`] when nothing answers.
pub async fn connect() -> Result<Docker, DockerError> {
    connect_engine().await.map(|(docker, _)| docker)
}

/// [`connect`], also telling which engine answered. On a unix socket or plain TCP one
/// `/_ping` tells both (Podman's `/version` is slow: see [`rawhttp`]); over TLS or ssh,
/// `/version` does.
pub async fn connect_engine() -> Result<(Docker, engine::Engine), DockerError> {
    let (address, docker) = client()?;
    let unreachable = |reason: String| DockerError::Unreachable { address: address.clone(), reason };
    let too_slow = || format!("no answer within {}s", PROBE_TIMEOUT.as_secs());
    if let Some(at) = rawhttp::Endpoint::of(&address) {
        let pong = match tokio::time::timeout(PROBE_TIMEOUT, rawhttp::ping_recent(&address, at)).await {
            Ok(Ok(p)) => p,
            Ok(Err(e)) => {
                return Err(match at {
                    rawhttp::Endpoint::Unix(socket) if e.kind() == std::io::ErrorKind::PermissionDenied => DockerError::Denied(access::Denied::of(socket)),
                    _ => unreachable(e.to_string()),
                })
            }
            Err(_) => return Err(unreachable(too_slow())),
        };
        if let Some((major, minor)) = pong.api_version {
            let server = bollard::ClientVersion { major_version: major, minor_version: minor };
            let version = if server < *bollard::API_DEFAULT_VERSION { server } else { *bollard::API_DEFAULT_VERSION };
            let docker = match at {
                rawhttp::Endpoint::Unix(_) => Docker::connect_with_unix(&address, 120, &version),
                rawhttp::Endpoint::Tcp(_) => Docker::connect_with_http(&address, 120, &version),
            }
            .map_err(|e| unreachable(e.to_string()))?;
            return Ok((docker, pong.engine));
        }
    }
    // TLS or ssh: bollard's own calls (Podman's `/version` is slow: a longer wait).
    let docker = match tokio::time::timeout(REMOTE_PROBE_TIMEOUT, docker.negotiate_version()).await {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return Err(unreachable(e.to_string())),
        Err(_) => return Err(unreachable(format!("no answer within {}s", REMOTE_PROBE_TIMEOUT.as_secs()))),
    };
    let engine = engine::Engine::detect(&docker).await;
    Ok((docker, engine))
}

/// A single-threaded runtime: a run is a handful of sequential API calls plus output
/// copying; one thread keeps start-up cheap.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, DockerError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| DockerError::Io { what: "cannot start the async runtime".into(), source })
}

/// Whether the Docker daemon answers; `Ok` holds its version and API version, `Err` says
/// why not and how to fix it. Fast when no daemon exists (a missing socket fails at once;
/// a silent one after two seconds).
pub fn probe() -> Result<String, BackendError> {
    let rt = runtime()?;
    let r = rt.block_on(async {
        let (docker, engine) = connect_engine().await?;
        let v = docker.client_version();
        Ok::<_, DockerError>(format!("{} (API {}.{})", engine.label(), v.major_version, v.minor_version))
    });
    rt.shutdown_background();
    Ok(r?)
}

/// Runs the plan in a container, its output to `output`; the exit status is the worker's
/// (124 on timeout, 130/143/129 when workcell is interrupted, 126/127 when the command cannot
/// be run). The container is removed on every path that workcell survives.
/// With `egress` (a proxied plan) the container gets a network of the run's own and firewall
/// rules, removed with it ([`network`]).
/// A shipped plan (`plan.shipped`: the engine cannot see this host's files) has its zones
/// shipped ([`ship`]), and its writable zones brought back into `returns` after a run that
/// ended by itself.
pub fn run(
    plan: &LaunchPlan,
    output: super::Output,
    egress: Option<&dyn EgressProxy>,
    returns: Option<&ship::Returns>,
) -> Result<super::Finished, BackendError> {
    let sink = match output {
        super::Output::Inherit => runner::Sink::Inherit,
        super::Output::Capture => runner::Sink::Capture(std::sync::Arc::new(std::sync::Mutex::new(super::capture::Streams::default()))),
    };
    let mut notes = super::supervise::Notes::new(output);
    let rt = runtime()?;
    let r = rt.block_on(runner::run(plan, sink.clone(), &mut notes, egress, returns));
    // Do not wait for the blocking thread that may still sit in a read of our stdin.
    rt.shutdown_background();
    let (code, timed_out) = r?;
    let streams = match sink {
        runner::Sink::Capture(buf) => buf.lock().map(|mut b| std::mem::take(&mut *b)).unwrap_or_default(),
        runner::Sink::Inherit => super::capture::Streams::default(),
    };
    let mut finished = streams.into_finished(code, timed_out);
    let mut stderr = super::capture::Bounded::new(0);
    notes.append_to(&mut stderr);
    finished.stderr.extend_from_slice(&stderr.kept);
    Ok(finished)
}

/// Runs `args` inside the already running container of `plan` (the shell tool during a
/// docker run: the command sees exactly the worker's mounts, `/tmp` and network), with
/// output captured. With `image: host` the command is wrapped in the host's `timeout` so
/// it is killed at the deadline; otherwise workcell stops waiting and reports the timeout.
pub fn exec_captured(plan: &LaunchPlan, args: &[String], timeout: std::time::Duration) -> Result<super::Finished, BackendError> {
    use bollard::exec::{CreateExecOptions, StartExecResults};
    use futures_util::StreamExt;
    let name = render::container_name(plan);
    let mut cmd: Vec<String> = Vec::new();
    if plan.image == crate::config::ImageRef::Host {
        cmd.extend(["timeout".into(), "-s".into(), "KILL".into(), format!("{}", timeout.as_secs().max(1))]);
    }
    cmd.extend(args.iter().cloned());
    let env: Vec<String> = plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let rt = runtime()?;
    let result: Result<super::Finished, DockerError> = rt.block_on(async {
        let docker = connect().await?;
        let opts = CreateExecOptions {
            cmd: Some(cmd),
            env: Some(env),
            working_dir: Some(plan.workdir.clone()),
            user: Some(format!("{}:{}", plan.user.uid, plan.user.gid)),
            attach_stdin: Some(plan.stdin.is_some()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let exec = docker.create_exec(&name, opts).await.map_err(|e| DockerError::Api { what: format!("exec in container {name}"), source: e })?;
        let started = docker.start_exec(&exec.id, None).await.map_err(|e| DockerError::Api { what: format!("start exec in {name}"), source: e })?;
        // Frames are read as they come and only the cap of each stream is kept: the rest is
        // read and dropped, so the command is never blocked and workcell never holds it.
        let mut streams = super::capture::Streams::default();
        if let StartExecResults::Attached { mut output, mut input } = started {
            if let Some(bytes) = plan.stdin.clone() {
                // The given input, then end-of-input; written beside the reading below.
                tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    let _ = input.write_all(&bytes).await;
                    let _ = input.shutdown().await;
                });
            }
            let collect = async {
                while let Some(Ok(frame)) = output.next().await {
                    match frame {
                        bollard::container::LogOutput::StdErr { message } => streams.stderr.push(&message),
                        bollard::container::LogOutput::StdOut { message } | bollard::container::LogOutput::Console { message } => streams.stdout.push(&message),
                        bollard::container::LogOutput::StdIn { .. } => {}
                    }
                }
            };
            // A little grace beyond the in-container `timeout`, which does the killing.
            if tokio::time::timeout(timeout + std::time::Duration::from_secs(2), collect).await.is_err() {
                return Ok(streams.into_finished(super::EXIT_TIMEOUT, true));
            }
        }
        let inspect = docker.inspect_exec(&exec.id).await.map_err(|e| DockerError::Api { what: format!("inspect exec in {name}"), source: e })?;
        let code = inspect.exit_code.and_then(|c| i32::try_from(c).ok()).unwrap_or(super::EXIT_INTERNAL);
        // `timeout -s KILL` ends with 137 when it killed the command.
        let timed_out = plan.image == crate::config::ImageRef::Host && code == 137;
        Ok(streams.into_finished(if timed_out { super::EXIT_TIMEOUT } else { code }, timed_out))
    });
    rt.shutdown_background();
    Ok(result?)
}

/// Whether the container of `plan` exists and runs (a session sandbox waiting for commands).
pub fn is_running(plan: &LaunchPlan) -> bool {
    let name = render::container_name(plan);
    let Ok(rt) = runtime() else { return false };
    rt.block_on(async {
        let Ok(docker) = connect().await else { return false };
        docker
            .inspect_container(&name, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .is_ok_and(|c| c.state.and_then(|s| s.running).unwrap_or(false))
    })
}

/// Kills the container of `plan` (a session sandbox at the end of its session); its run then
/// removes it as after any ending. Errors are left to that run and to `workcell gc`.
pub fn kill(plan: &LaunchPlan) {
    let name = render::container_name(plan);
    let Ok(rt) = runtime() else { return };
    rt.block_on(async {
        if let Ok(docker) = connect().await {
            let _ = docker.kill_container(&name, None::<bollard::query_parameters::KillContainerOptions>).await;
        }
    });
}

/// The host pid of the first process of `plan`'s container, while it runs.
pub fn main_pid(plan: &LaunchPlan) -> Option<u32> {
    let name = render::container_name(plan);
    let rt = runtime().ok()?;
    rt.block_on(async {
        let docker = connect().await.ok()?;
        let c = docker.inspect_container(&name, None::<bollard::query_parameters::InspectContainerOptions>).await.ok()?;
        c.state?.pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0)
    })
}
