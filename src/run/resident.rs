//! One sandbox for a whole MCP session: started at the first shell call, kept until the
//! session ends, then removed like any run (its thread runs an ordinary [`Session`], so
//! the plan, limits, network rules, protected paths, watchdog and teardown are a run's).
//!
//! Commands reach it one of two ways ([`Exec`]): through the exec agent
//! ([`crate::agent`]) when the sandbox can run this binary (`image: host`, on bwrap and
//! docker), else through the Docker Engine API's exec into the running container.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{planted, RunError, Services, Session, Spec};
use crate::agent::{self, FrameError, Hello, Request, Response};
use crate::backend::{self, BackendError, Finished, Output, Selected};
use crate::config::ImageRef;
use crate::plan::{LaunchPlan, Overrides};
use crate::run::runner::BackendRunner;
use crate::sandbox::Sandbox;
use crate::tools::service::ShellRun;

/// How long a session sandbox may take to start and its agent to say hello.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Beyond a command's own timeout, how long workcell waits for the agent's answer before
/// it counts the agent as lost and ends the session sandbox.
const ANSWER_GRACE: Duration = Duration::from_secs(10);

/// How a session sandbox's commands are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exec {
    /// workcell's exec agent, the sandbox's first process, over a socket only workcell holds.
    Agent,
    /// The Docker Engine API's exec (an image that cannot run the agent).
    EngineExec,
}

impl Exec {
    /// The way for a sandbox of `image` on `backend` (`None` when that backend keeps no
    /// sandbox between calls: a fresh one per call).
    pub fn for_plan(image: &ImageRef, backend: Selected) -> Option<Exec> {
        Exec::for_run(image, backend, None)
    }

    /// [`Exec::for_plan`] under a Docker runtime: under one (gVisor's runsc) the agent's
    /// connection comes from the runtime's own process, not from one workcell can tell is
    /// inside the sandbox, so commands go through the Engine API's exec.
    pub fn for_run(image: &ImageRef, backend: Selected, runtime: Option<&str>) -> Option<Exec> {
        match (backend, image) {
            (Selected::Docker, _) if runtime.is_some() => Some(Exec::EngineExec),
            (Selected::Bwrap | Selected::Docker, ImageRef::Host) => Some(Exec::Agent),
            (Selected::Docker, _) => Some(Exec::EngineExec),
            _ => None,
        }
    }

    /// What `plan` and `doctor` say for an image: the way on docker and on bwrap.
    pub fn summary(image: &ImageRef) -> String {
        let name = |w: Option<Exec>| match w {
            Some(Exec::Agent) => "exec agent",
            Some(Exec::EngineExec) => {
                "Engine API exec into a container waiting on the image's `sleep` (only image: host can run the agent; without `sleep`, a container per command)"
            }
            None => "a fresh sandbox per command",
        };
        format!("docker: {}; bwrap: {}", name(Exec::for_plan(image, Selected::Docker)), name(Exec::for_plan(image, Selected::Bwrap)))
    }

    /// What `plan` and `doctor` say about it.
    pub fn describe(way: Option<Exec>) -> &'static str {
        match way {
            Some(Exec::Agent) => "one sandbox per session; commands through workcell's exec agent",
            Some(Exec::EngineExec) => {
                "one container per session; commands through the Engine API's exec (the image cannot run workcell's agent: only `image: host` can)"
            }
            None => "a fresh sandbox per command (this backend keeps none between calls)",
        }
    }
}

/// Why a session sandbox could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum ResidentError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("cannot set up the session sandbox's agent socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("the session sandbox ended before its agent started{}", detail(.0))]
    Ended(String),
    #[error("the session sandbox's agent did not start within {} s", START_TIMEOUT.as_secs())]
    StartTimeout,
    #[error("the session sandbox's agent did not answer: {0}")]
    Agent(#[source] FrameError),
    #[error("a process outside the session sandbox (uid {uid}, pid {pid}) connected to its agent socket first; the session sandbox was not used")]
    Impostor { uid: u32, pid: u32 },
    #[error(transparent)]
    Exec(#[from] BackendError),
}

fn detail(text: &str) -> String {
    if text.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", crate::term::escape(text.trim()))
    }
}

/// A running session sandbox.
pub struct Resident {
    plan: LaunchPlan,
    selected: Selected,
    way: Way,
    /// The session's own run; ends when the agent (or the container) does.
    thread: Option<JoinHandle<Result<Finished, RunError>>>,
    /// Each call's timeout is at most this (the run's own timeout, when the worker has one).
    call_cap: Option<Duration>,
    /// Set when the agent stopped answering (killed by a command, say): the session then
    /// starts a new sandbox at the next call instead of waiting for this one's teardown.
    broken: std::sync::atomic::AtomicBool,
}

enum Way {
    Agent(Mutex<UnixStream>),
    EngineExec,
}

impl std::fmt::Debug for Resident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resident").field("run_id", &self.plan.run_id).finish()
    }
}

impl Resident {
    /// Starts a session sandbox for `sandbox` the way `runner` runs commands; `None` when its
    /// backend keeps no sandbox between calls, or its zones are copy-delivered (each call's
    /// result is then reviewed and published at the call's end, as before).
    pub fn start(runner: &BackendRunner, sandbox: &Sandbox) -> Result<Option<Resident>, ResidentError> {
        if sandbox.mounts().iter().any(|m| m.delivery == crate::sandbox::Delivery::Copy) {
            return Ok(None);
        }
        let project = runner.project.clone();
        let image = project.defaults.image.clone();
        let plan_probe = LaunchPlan { image: image.clone(), runtime: runner.runtime.clone(), ..probe_plan() };
        let selected = backend::select(runner.choice, &plan_probe, project.require_os_sandbox).map_err(RunError::from)?;
        let Some(way) = Exec::for_run(&image, selected, runner.runtime.as_deref()) else { return Ok(None) };
        let listener = match way {
            Exec::Agent => Some(AgentSocket::new(crate::plan::worker_user(&project.dir, project.defaults.user))?),
            Exec::EngineExec => None,
        };
        let command = match &listener {
            Some(_) => vec![agent::PROGRAM.to_string(), "__agent".into(), format!("{}/{}", agent::SOCKET_DIR, agent::SOCKET_NAME)],
            // Anything that waits for ever; the container is killed at the end of the session.
            None => vec!["sleep".into(), "2147483647".into()],
        };
        let spec = Spec {
            project: project.clone(),
            worker: None,
            sandbox: sandbox.clone(),
            overrides: Overrides { command: Some(command), limits: runner.limits, inherited_runtime: runner.runtime.clone(), ..Overrides::default() },
            choice: runner.choice,
            parent: runner.clone(),
            chain: Vec::new(),
            services: match &listener {
                Some(l) => Services::Agent { dir: l.path.parent().map(std::path::Path::to_path_buf).unwrap_or_default() },
                None => Services::Resident,
            },
        };
        let session = Session::prepare(spec)?;
        let plan = session.plan().clone();
        let selected = session.backend();
        let call_cap = session.call_cap;
        let thread = std::thread::Builder::new()
            .name("workcell-session".into())
            .spawn(move || session.run(Output::Capture))
            .map_err(|e| ResidentError::Socket(std::io::Error::other(format!("cannot start the session thread: {e}"))))?;
        let mut resident = Resident { plan, selected, way: Way::EngineExec, thread: Some(thread), call_cap, broken: Default::default() };
        match listener {
            Some(l) => {
                let stream = l.accept(&mut || (!resident.alive()).then(|| resident.ended()))?;
                let anchor = match resident.selected {
                    Selected::Docker => backend::docker::main_pid(&resident.plan),
                    _ => Some(std::process::id()),
                };
                verify_agent(&stream, resident.plan.user.uid, anchor)?;
                resident.way = Way::Agent(Mutex::new(stream));
            }
            None => match resident.wait_running() {
                // An image without a `sleep` cannot keep a container waiting: each command then
                // gets a container of its own, as before sessions.
                Err(ResidentError::Ended(why)) => {
                    tracing::debug!(reason = %why, "the image cannot keep a session container waiting; a container per command");
                    return Ok(None);
                }
                r => r?,
            },
        }
        tracing::debug!(run_id = %resident.plan.run_id, way = ?way, "session sandbox started");
        Ok(Some(resident))
    }

    /// The session sandbox's run id (its container is named after it on docker).
    pub fn run_id(&self) -> &str {
        &self.plan.run_id
    }

    /// Whether the session sandbox still runs.
    pub fn alive(&self) -> bool {
        !self.broken.load(std::sync::atomic::Ordering::Relaxed) && self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// The working directory a command gets by default.
    pub fn workdir(&self) -> &str {
        &self.plan.workdir
    }

    /// Runs `cmd` in the session sandbox within `timeout`; then sweeps what it planted for
    /// the host to run (told after its stderr, as for a run).
    pub fn exec(&self, cmd: &ShellRun, timeout: Duration) -> Result<Finished, ResidentError> {
        let timeout = self.call_cap.map_or(timeout, |c| c.min(timeout));
        let mut finished = match &self.way {
            Way::Agent(stream) => {
                let request = Request {
                    argv: cmd.args.clone(),
                    env: cmd.env.clone(),
                    cwd: cmd.workdir.clone(),
                    stdin: cmd.stdin.clone(),
                    timeout_ms: timeout.as_millis() as u64,
                    env_remove: Vec::new(),
                    stdio: false,
                };
                let mut stream = stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let answer = stream
                    .set_read_timeout(Some(timeout + ANSWER_GRACE))
                    .map_err(FrameError::Io)
                    .and_then(|()| agent::write_frame(&mut *stream, &request))
                    .and_then(|()| agent::read_frame::<Response>(&mut *stream));
                match answer {
                    Ok(r) => Finished {
                        exit_code: r.exit_code,
                        stdout: r.stdout,
                        stderr: r.stderr,
                        stdout_cut: r.stdout_cut,
                        stderr_cut: r.stderr_cut,
                        timed_out: r.timed_out,
                    },
                    Err(e) => {
                        // An agent that does not answer is not trusted with another call.
                        let _ = stream.shutdown(std::net::Shutdown::Both);
                        self.broken.store(true, std::sync::atomic::Ordering::Relaxed);
                        return Err(ResidentError::Agent(e));
                    }
                }
            }
            Way::EngineExec => {
                let mut plan = self.plan.clone();
                plan.workdir = cmd.workdir.clone();
                plan.env.extend(cmd.env.iter().cloned());
                plan.stdin = (!cmd.stdin.is_empty()).then(|| cmd.stdin.as_slice().into());
                backend::docker::exec_captured(&plan, &cmd.args, timeout)?
            }
        };
        let swept = planted::sweep(&self.plan);
        if !swept.is_empty() {
            let mut result = Ok(finished);
            planted::tell(
                &swept,
                &self.plan.run_id,
                Output::Capture,
                false,
                &mut result,
                &crate::audit::AuditLog::new(&self.plan.project_dir, &self.plan.run_id),
            );
            finished = result.unwrap_or_default();
        }
        Ok(finished)
    }

    /// Waits until the container of an Engine-exec session runs (or its run ended).
    fn wait_running(&mut self) -> Result<(), ResidentError> {
        let until = Instant::now() + START_TIMEOUT;
        while Instant::now() < until {
            if !self.alive() {
                return Err(self.ended());
            }
            if backend::docker::is_running(&self.plan) {
                // Running can mean the container's init is up while `sleep` was not found:
                // the image must run a `sleep` of its own before the session relies on it.
                return match backend::docker::exec_captured(&self.plan, &["sleep".into(), "0".into()], Duration::from_secs(30)) {
                    Ok(f) if f.exit_code == 0 => Ok(()),
                    Ok(f) => Err(ResidentError::Ended(format!("`sleep` exited {} in the image: {}", f.exit_code, String::from_utf8_lossy(&f.stderr)))),
                    Err(e) => Err(ResidentError::Ended(e.to_string())),
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(ResidentError::StartTimeout)
    }

    /// The error of a session sandbox that ended before it could be used.
    fn ended(&mut self) -> ResidentError {
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(Ok(f))) => ResidentError::Ended(String::from_utf8_lossy(&f.stderr).into_owned()),
            Some(Ok(Err(e))) => ResidentError::Run(e),
            _ => ResidentError::Ended(String::new()),
        }
    }

    /// Ends the session sandbox and waits until its run has torn everything down.
    pub fn stop(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        match &self.way {
            // The agent exits when its connection closes; the sandbox with it.
            Way::Agent(stream) => {
                let _ = stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner).shutdown(std::net::Shutdown::Both);
            }
            Way::EngineExec => backend::docker::kill(&self.plan),
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Whether `anchor` is `pid` or one of its ancestors (host pids).
fn descends_from(pid: u32, anchor: u32) -> bool {
    let mut p = pid;
    for _ in 0..64 {
        if p == anchor {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { return false };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
        match rest.split_whitespace().nth(1).and_then(|f| f.parse::<u32>().ok()) {
            Some(parent) if parent > 0 => p = parent,
            _ => return false,
        }
    }
    false
}

/// A plan holding only what backend selection looks at.
fn probe_plan() -> LaunchPlan {
    LaunchPlan {
        run_id: String::new(),
        worker: None,
        image: ImageRef::Host,
        system: Vec::new(),
        mounts: Vec::new(),
        tmpfs: Vec::new(),
        network: crate::plan::Network::Off,
        egress: None,
        env: Default::default(),
        user: crate::plan::UserSpec { uid: 65534, gid: 65534 },
        workdir: "/".into(),
        command: Vec::new(),
        limits: Default::default(),
        project_dir: PathBuf::new(),
        interactive: false,
        tty: false,
        runtime: None,
        copies: Vec::new(),
        protected: Vec::new(),
        stdin: Default::default(),
        shipped: None,
    }
}

/// The listening socket the agent connects to, once: in a private directory of its own
/// (a session sandbox) or in a pooled sandbox's agent directory ([`crate::pool`]).
pub(crate) struct AgentSocket {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    listener: UnixListener,
}

impl AgentSocket {
    /// The directory (0700, or 0750 shared with `user`'s group when workcell is root) and
    /// its socket.
    fn new(user: crate::plan::UserSpec) -> Result<AgentSocket, ResidentError> {
        let dir = crate::tools::broker::private_dir().map_err(|e| ResidentError::Socket(std::io::Error::other(e.to_string())))?;
        share(dir.path(), user, 0o750)?;
        let mut socket = AgentSocket::bind_in(dir.path(), user)?;
        socket.dir = Some(dir);
        Ok(socket)
    }

    /// A socket in `dir`, a directory only workcell (and, when workcell is root, the
    /// worker's group) may enter.
    pub(crate) fn bind_in(dir: &std::path::Path, user: crate::plan::UserSpec) -> Result<AgentSocket, ResidentError> {
        let path = dir.join(agent::SOCKET_NAME);
        let listener = UnixListener::bind(&path).map_err(ResidentError::Socket)?;
        listener.set_nonblocking(true).map_err(ResidentError::Socket)?;
        share(&path, user, 0o660)?;
        Ok(AgentSocket { dir: None, path, listener })
    }

    /// Accepts the agent's connection (the first and only one: the listener and its file go
    /// right after) within [`START_TIMEOUT`]; `gone` says why to stop waiting early.
    pub(crate) fn accept(self, gone: &mut dyn FnMut() -> Option<ResidentError>) -> Result<UnixStream, ResidentError> {
        let until = Instant::now() + START_TIMEOUT;
        let stream = loop {
            match self.listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(ResidentError::Socket(e)),
            }
            if let Some(why) = gone() {
                return Err(why);
            }
            if Instant::now() > until {
                return Err(ResidentError::StartTimeout);
            }
            let mut fds = [rustix::event::PollFd::new(&self.listener, rustix::event::PollFlags::IN)];
            let _ = rustix::event::poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 20_000_000 }));
        };
        drop(self.listener);
        let _ = std::fs::remove_file(&self.path);
        drop(self.dir);
        stream.set_nonblocking(false).map_err(ResidentError::Socket)?;
        Ok(stream)
    }
}

/// Gives `path` to `user`'s group with `mode` when workcell is root (its workers run as
/// another uid); nothing otherwise.
fn share(path: &std::path::Path, user: crate::plan::UserSpec, mode: u32) -> Result<(), ResidentError> {
    use std::os::unix::fs::PermissionsExt;
    if rustix::process::geteuid().as_raw() == 0 {
        rustix::fs::chown(path, None, Some(rustix::process::Gid::from_raw(user.gid))).map_err(|e| ResidentError::Socket(e.into()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(ResidentError::Socket)?;
    }
    Ok(())
}

/// Checks who connected and reads its hello. The socket's directory is open to the worker's
/// group, which a host process of that user shares: the peer must be the worker's `uid`
/// *and* inside the sandbox (a descendant of `anchor`: the bwrap workcell started, or the
/// container's first process).
pub(crate) fn verify_agent(stream: &UnixStream, uid: u32, anchor: Option<u32>) -> Result<Hello, ResidentError> {
    let creds = rustix::net::sockopt::socket_peercred(stream).map_err(|e| ResidentError::Socket(e.into()))?;
    let (peer_uid, pid) = (creds.uid.as_raw(), creds.pid.as_raw_nonzero().get() as u32);
    if peer_uid != uid || !anchor.is_some_and(|a| descends_from(pid, a)) {
        return Err(ResidentError::Impostor { uid: peer_uid, pid });
    }
    stream.set_read_timeout(Some(START_TIMEOUT)).map_err(ResidentError::Socket)?;
    let hello = agent::read_frame(&mut &*stream).map_err(ResidentError::Agent)?;
    stream.set_read_timeout(None).map_err(ResidentError::Socket)?;
    Ok(hello)
}
