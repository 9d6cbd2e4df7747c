//! One sandbox for a whole MCP session: started at the first shell call, kept until the
//! session ends, then removed like any run (its thread runs an ordinary [`Session`], so
//! the plan, limits, network rules, protected paths, watchdog and teardown are a run's).
//!
//! Commands reach it one of two ways ([`Exec`]): through the exec agent
//! ([`crate::agent`]) when the sandbox can run this binary (`image: host`, on bwrap and
//! docker), else through the Docker Engine API's exec into the running container.

mod socket;

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{planted, RunError, Services, Session, Spec};
use crate::agent::{self, FrameError, Request, Response};
use crate::backend::{self, BackendError, Finished, Output, Selected};
use crate::config::ImageRef;
use crate::plan::LaunchPlan;
use crate::tools::service::ShellRun;
use socket::agent_pidfd;
pub(crate) use socket::{verify_agent, AgentSocket};

/// How long a session sandbox may take to start and its agent to say hello.
const START_TIMEOUT: Duration = crate::agent::host::START_TIMEOUT;
/// Beyond a command's own timeout, how long workcell waits for the agent's answer before
/// it counts the agent as lost and ends the session sandbox. The agent's own bounds after a
/// command's time are 5 s of killing and 2 s of reading its output (`agent::serve`).
const ANSWER_GRACE: Duration = Duration::from_secs(10);
/// How long a session sandbox may take to end by itself once its connection is closed (the
/// agent exits at once when it is idle) before workcell kills its agent.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long its run may take to tear down after that (a container's removal); beyond it the
/// teardown goes on in the background and nobody waits for it.
const STOP_WITHIN: Duration = Duration::from_secs(30);

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
    /// A call's answer did not come: the agent is killed, its sandbox ends.
    #[error("the session sandbox's agent did not answer {}; that sandbox was ended, and the next call starts a new one", lost(.0))]
    Lost(#[source] FrameError),
    #[error("a process outside the session sandbox (uid {uid}, pid {pid}) connected to its agent socket first; the session sandbox was not used")]
    Impostor { uid: u32, pid: u32 },
    #[error(transparent)]
    Exec(#[from] BackendError),
}

/// Why a call's answer did not come, said for a person: a read past its time is not an
/// operating-system error to them.
fn lost(e: &FrameError) -> String {
    match e {
        FrameError::Io(io) if matches!(io.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            format!("within the call's timeout and {} s more", ANSWER_GRACE.as_secs())
        }
        other => format!("({other})"),
    }
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
    /// Set when the agent stopped answering (killed or stopped by a command, say): the
    /// session then starts a new sandbox at the next call.
    broken: std::sync::atomic::AtomicBool,
    /// The agent's process (a pidfd, taken once its connection was checked): killed when it
    /// does not answer, or does not end when asked. Its sandbox ends with it: bwrap's init
    /// and Docker's end with their one child, and the agent is pid 1 when there is no init.
    agent: Option<std::os::fd::OwnedFd>,
    /// An Engine-exec container's init and waiting process: everything else in it is killed
    /// after each call (`backend::docker::leftovers`).
    kept: Option<backend::docker::leftovers::Kept>,
    /// Calls made so far: each call after the first has a quarantine and a history ref of its
    /// own (`RUN_ID.N`), beside the first's (`RUN_ID`).
    calls: std::sync::atomic::AtomicU64,
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
    /// Starts a session sandbox from `spec`, a command's run as the session's runner would
    /// start it (`run/runner`: its project, sandbox, limits, runtime, backend choice and
    /// itself as the parent), whose command and services this fills in; `None` when its
    /// backend keeps no sandbox between calls, or its zones are copy-delivered (each call's
    /// result is then reviewed and published at the call's end, as before).
    pub fn start(mut spec: Spec<'_>) -> Result<Option<Resident>, ResidentError> {
        if spec.sandbox.mounts().iter().any(|m| m.delivery == crate::sandbox::Delivery::Copy) {
            return Ok(None);
        }
        let project = spec.project.clone();
        let runtime = spec.overrides.inherited_runtime.clone();
        let image = project.defaults.image.clone();
        let plan_probe = LaunchPlan { image: image.clone(), runtime: runtime.clone(), ..probe_plan() };
        let selected = backend::select(spec.choice, &plan_probe, project.require_os_sandbox).map_err(RunError::from)?;
        let Some(way) = Exec::for_run(&image, selected, runtime.as_deref()) else { return Ok(None) };
        let listener = match way {
            Exec::Agent => Some(AgentSocket::new(crate::plan::worker_user(&project.dir, project.defaults.user))?),
            Exec::EngineExec => None,
        };
        let command = match &listener {
            Some(_) => vec![agent::PROGRAM.to_string(), "__agent".into(), format!("{}/{}", agent::SOCKET_DIR, agent::SOCKET_NAME)],
            // Anything that waits for ever; the container is killed at the end of the session.
            None => vec!["sleep".into(), "2147483647".into()],
        };
        spec.overrides.command = Some(command);
        spec.services = match &listener {
            Some(l) => Services::Agent { dir: l.path.parent().map(std::path::Path::to_path_buf).unwrap_or_default() },
            None => Services::Resident,
        };
        let session = Session::prepare(spec)?;
        let plan = session.plan().clone();
        let selected = session.backend();
        let call_cap = session.call_cap;
        let thread = std::thread::Builder::new()
            .name("workcell-session".into())
            .spawn(move || session.run(Output::Capture))
            .map_err(|e| ResidentError::Socket(std::io::Error::other(format!("cannot start the session thread: {e}"))))?;
        let mut resident = Resident {
            plan,
            selected,
            way: Way::EngineExec,
            thread: Some(thread),
            call_cap,
            broken: Default::default(),
            agent: None,
            kept: None,
            calls: Default::default(),
        };
        match listener {
            Some(l) => {
                let stream = l.accept(&mut || (!resident.alive()).then(|| resident.ended()))?;
                let anchor = match resident.selected {
                    Selected::Docker => backend::docker::main_pid(&resident.plan),
                    _ => Some(std::process::id()),
                };
                verify_agent(&stream, resident.plan.user.uid, anchor)?;
                resident.agent = agent_pidfd(&stream, anchor);
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
        // Noted at each call: what the person did between calls is theirs.
        let watch = crate::hostrun::history::Watch::take(&self.plan.protected);
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
                        // An agent that does not answer is not trusted with another call, nor
                        // waited for: it is killed now (stopped or stuck alike), and its
                        // sandbox with it.
                        let _ = stream.shutdown(std::net::Shutdown::Both);
                        self.broken.store(true, std::sync::atomic::Ordering::Relaxed);
                        self.kill_agent();
                        return Err(ResidentError::Lost(e));
                    }
                }
            }
            Way::EngineExec => {
                let mut plan = self.plan.clone();
                plan.workdir = cmd.workdir.clone();
                plan.env.extend(cmd.env.iter().cloned());
                plan.stdin = (!cmd.stdin.is_empty()).then(|| cmd.stdin.as_slice().into());
                let finished = backend::docker::exec_captured(&plan, &cmd.args, timeout);
                // Ended, timed out or failed: nothing it started stays for the next call.
                if let Some(kept) = &self.kept {
                    backend::docker::leftovers::sweep(kept);
                }
                finished?
            }
        };
        let call = match self.calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
            0 => self.plan.run_id.clone(),
            n => format!("{}.{}", self.plan.run_id, n + 1),
        };
        let swept = planted::sweep(&self.plan, &call);
        // A check that could not finish fails the call (its error is the tool's), and the
        // sandbox ends: the next call's start refuses the zone until a person has looked.
        if let Err(e) = super::unverified::record(&self.plan, &swept) {
            self.broken.store(true, std::sync::atomic::Ordering::Relaxed);
            self.kill_agent();
            return Err(ResidentError::Run(e.into()));
        }
        if !swept.is_empty() {
            let mut result = Ok(finished);
            planted::tell(&swept, &call, Output::Capture, false, &mut result, &crate::audit::AuditLog::new(&self.plan.project_dir, &self.plan.run_id));
            finished = result.unwrap_or_default();
        }
        let reverted = watch.check(&call);
        if !reverted.is_empty() {
            let mut result = Ok(finished);
            let audit = crate::audit::AuditLog::new(&self.plan.project_dir, &self.plan.run_id);
            super::history::tell(&reverted, &call, Output::Capture, false, &mut result, &audit);
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
                    Ok(f) if f.exit_code == 0 => {
                        self.kept = backend::docker::leftovers::Kept::read(&self.plan);
                        Ok(())
                    }
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

    /// Ends the sandbox within a bound: the agent exits when its connection closes (the
    /// sandbox with it); one that does not within [`STOP_GRACE`] (stopped, stuck) is killed;
    /// a teardown that takes longer than [`STOP_WITHIN`] goes on in the background.
    fn stop_now(&mut self) {
        match &self.way {
            Way::Agent(stream) => {
                let _ = stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner).shutdown(std::net::Shutdown::Both);
            }
            Way::EngineExec => backend::docker::kill(&self.plan),
        }
        let Some(t) = self.thread.take() else { return };
        if !finishes_within(&t, STOP_GRACE) {
            self.kill_agent();
            if !finishes_within(&t, STOP_WITHIN) {
                tracing::warn!(run_id = %self.plan.run_id, "the session sandbox did not end in time; its teardown goes on in the background");
                return;
            }
        }
        let _ = t.join();
    }

    /// Kills the agent (and so its sandbox); on docker the container too, whatever its
    /// first process is doing.
    fn kill_agent(&self) {
        if let Some(fd) = &self.agent {
            let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
        }
        if self.selected == Selected::Docker {
            backend::docker::kill(&self.plan);
        }
    }
}

impl Drop for Resident {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Whether `thread` has finished by `within` from now.
fn finishes_within<T>(thread: &JoinHandle<T>, within: Duration) -> bool {
    let until = Instant::now() + within;
    while !thread.is_finished() {
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
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
