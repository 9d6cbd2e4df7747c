//! Runs shell commands and child workers for the tool service inside a fresh boundary of
//! the selected backend: the command sees the caller's sandbox, nothing more. It lives in
//! `run` (not `tools`) because it starts [`Session`]s: the tool service only knows the
//! [`SandboxRunner`] trait, so `tools` never depends on `run`.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::resident::{Resident, ResidentError};
use super::{Review, RunError, Services, Session, Spec};
use crate::audit::AuditLog;
use crate::backend::{self, BackendError, Finished, Output};
use crate::config::{BackendChoice, Limits, Project, Worker};
use crate::plan::{LaunchPlan, Overrides};
use crate::sandbox::Sandbox;
use crate::tools::approval::{terminal_available, ApprovalMode, Approver, Preapproved, Prompter, TerminalPrompter};
use crate::tools::elicit::{ElicitPrompter, Elicitation};
use crate::tools::service::{Attachment, Caller, Dialect, RunFailure, SandboxRunner, ShellOutput, ShellRun, ToolService};

/// Runs commands on a backend chosen like `workcell run` chooses.
#[derive(Debug, Clone)]
pub struct BackendRunner {
    pub project: Arc<Project>,
    pub choice: BackendChoice,
    pub mode: ApprovalMode,
    /// The docker run this runner serves, once its container exists: shell commands are then
    /// executed in that container rather than in a fresh one.
    pub exec_in: Arc<OnceLock<LaunchPlan>>,
    /// The limits of the run this runner serves (none for `workcell mcp`): its shell commands
    /// get the same memory, CPU and process limits as the worker that asks for them.
    pub limits: Limits,
    /// When that run's timeout ends: no shell command or child worker it starts lives longer
    /// (the worker is gone by then, and workcell would wait for them).
    pub deadline: Option<Instant>,
    /// The Docker runtime of the run this runner serves: its shell commands and child
    /// workers run under the same (`plan::runtime`).
    pub runtime: Option<String>,
    /// How the run this runner serves shows and approves its copy-delivered results
    /// (`--review`, `--json`): its shell commands and child workers inherit it.
    pub review: Review,
    /// Kinds of request approved in advance (`--approve shell`), for this run and all it
    /// starts.
    pub preapproved: Preapproved,
    /// The MCP session's client, when approvals may be elicited from it (`workcell mcp`
    /// without `--no-elicit`): every tool service this runner makes — the session's, a shell
    /// command's (its egress `ask`), a child worker's — asks there once the client takes it.
    pub elicitation: Option<Elicitation>,
    /// An MCP session's sandbox, kept between its shell commands (`workcell mcp`); a run's
    /// own runner never has one (its commands go to its container or a fresh sandbox).
    pub session: Option<Arc<SessionSandbox>>,
}

/// The sandbox of one MCP session: started at the first shell command, replaced when the
/// session's sandbox changes (a granted directory) or its sandbox ended, stopped at
/// [`SessionSandbox::end`]. Commands run one at a time.
#[derive(Debug, Default)]
pub struct SessionSandbox {
    current: Mutex<Option<Current>>,
    /// Replaced sandboxes ending on threads of their own: the next call does not wait for a
    /// broken sandbox's teardown (bounded, `Resident::stop`), the session's end does.
    retiring: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

#[derive(Debug)]
struct Current {
    /// The mounts it was started with.
    key: Vec<(std::path::PathBuf, String, bool)>,
    /// `None`: this configuration keeps no sandbox between calls.
    resident: Option<Resident>,
}

fn key_of(sandbox: &Sandbox) -> Vec<(std::path::PathBuf, String, bool)> {
    crate::plan::mounts_for(sandbox).into_iter().map(|m| (m.source, m.target, m.read_only)).collect()
}

impl SessionSandbox {
    /// Runs `cmd` in the session's sandbox (started or replaced as needed); `None` when this
    /// configuration keeps none (the command then gets a fresh sandbox of its own).
    fn exec(&self, runner: &BackendRunner, sandbox: &Sandbox, cmd: &ShellRun, timeout: Duration) -> Option<Result<Finished, RunnerError>> {
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = key_of(sandbox);
        let usable = current.as_ref().is_some_and(|c| c.key == key && c.resident.as_ref().is_none_or(Resident::alive));
        if !usable {
            if let Some(old) = current.take().and_then(|c| c.resident) {
                tracing::debug!(run_id = old.run_id(), "replacing the session sandbox (its mounts changed or it ended)");
                self.retire(old);
            }
            match Resident::start(runner.session_spec(sandbox)) {
                Ok(resident) => *current = Some(Current { key, resident }),
                Err(e) => return Some(Err(e.into())),
            }
        }
        let resident = current.as_ref()?.resident.as_ref()?;
        Some(resident.exec(cmd, timeout).map_err(RunnerError::from))
    }

    /// The session's sandbox id (its run id), if one runs.
    pub fn id(&self) -> Option<String> {
        let current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        current.as_ref()?.resident.as_ref().map(|r| r.run_id().to_string())
    }

    /// Stops the session's sandbox and waits until it is torn down (each wait bounded,
    /// `Resident::stop`), the replaced ones too.
    pub fn end(&self) {
        let taken = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        if let Some(r) = taken.and_then(|c| c.resident) {
            r.stop();
        }
        let retiring = std::mem::take(&mut *self.retiring.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for t in retiring {
            let _ = t.join();
        }
    }

    /// Stops `old` on a thread of its own (one that cannot be started drops it, and a
    /// dropped sandbox stops there and then).
    fn retire(&self, old: Resident) {
        let mut retiring = self.retiring.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        retiring.retain(|t| !t.is_finished());
        if let Ok(t) = std::thread::Builder::new().name("workcell-session-stop".into()).spawn(move || old.stop()) {
            retiring.push(t);
        }
    }
}

/// The run's timeout has passed: nothing more is started in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the run's timeout has passed; nothing more can be started in it")]
pub struct DeadlinePassed;

/// Why a shell command or a child worker could not be run (its own failure is in its
/// [`ShellOutput`]).
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error(transparent)]
    Deadline(#[from] DeadlinePassed),
    /// The command could not be executed in the running container.
    #[error(transparent)]
    Exec(#[from] BackendError),
    /// The command's or the child's own run could not be prepared or carried out.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The session's sandbox could not be started or did not answer.
    #[error(transparent)]
    Session(#[from] ResidentError),
}

/// A prompter for `mode`: the terminal when interactive and one exists, else none.
pub fn prompter_for(mode: ApprovalMode) -> Option<Box<dyn Prompter>> {
    match mode {
        ApprovalMode::Interactive if terminal_available() => Some(Box::new(TerminalPrompter)),
        _ => None,
    }
}

fn to_output(c: Finished) -> ShellOutput {
    let (stdout, stdout_cut) = text_of(c.stdout, c.stdout_cut);
    let (stderr, stderr_cut) = text_of(c.stderr, c.stderr_cut);
    ShellOutput { exit_code: c.exit_code, stdout, stderr, timed_out: c.timed_out, stdout_truncated_bytes: stdout_cut, stderr_truncated_bytes: stderr_cut }
}

/// A captured stream as text. A stream cut at the cap may end inside a character: those
/// bytes are counted as cut rather than shown as a replacement character.
fn text_of(mut bytes: Vec<u8>, mut cut: u64) -> (String, u64) {
    if cut > 0 {
        if let Err(e) = std::str::from_utf8(&bytes[bytes.len().saturating_sub(3)..]) {
            if e.error_len().is_none() {
                let keep = bytes.len().saturating_sub(3) + e.valid_up_to();
                cut += (bytes.len() - keep) as u64;
                bytes.truncate(keep);
            }
        }
    }
    (String::from_utf8_lossy(&bytes).into_owned(), cut)
}

impl BackendRunner {
    pub fn new(project: Arc<Project>, choice: BackendChoice, mode: ApprovalMode) -> BackendRunner {
        BackendRunner {
            project,
            choice,
            mode,
            exec_in: Arc::new(OnceLock::new()),
            limits: Limits::default(),
            deadline: None,
            runtime: None,
            review: Review::default(),
            preapproved: Preapproved::default(),
            elicitation: None,
            session: None,
        }
    }

    /// This runner keeping one sandbox for all the shell commands of an MCP session.
    pub fn with_session(self) -> BackendRunner {
        BackendRunner { session: Some(Arc::new(SessionSandbox::default())), ..self }
    }

    /// This runner with `preapproved` kinds of request approved without asking.
    pub fn preapproving(self, preapproved: Preapproved) -> BackendRunner {
        BackendRunner { preapproved, ..self }
    }

    /// This runner asking through `elicitation` (an MCP session's client) once it can.
    pub fn eliciting(self, elicitation: Elicitation) -> BackendRunner {
        BackendRunner { elicitation: Some(elicitation), ..self }
    }

    /// The approver of one tool service of this runner.
    fn approver(&self) -> Approver {
        let prompter = match (&self.elicitation, self.mode) {
            (Some(e), ApprovalMode::Interactive) => Some(Box::new(ElicitPrompter::new(e.clone())) as Box<dyn Prompter>),
            _ => prompter_for(self.mode),
        };
        Approver::new(self.mode, prompter).preapproving(self.preapproved)
    }

    /// This runner for a run with `limits` that starts now.
    pub fn serving(self, limits: Limits) -> BackendRunner {
        BackendRunner { limits, deadline: limits.timeout.map(|t| Instant::now() + t), ..self }
    }

    /// This runner with `review` for the copy-delivered results of its runs.
    pub fn reviewing(self, review: Review) -> BackendRunner {
        BackendRunner { review, ..self }
    }

    /// This runner for a run under the Docker runtime `runtime` (`None`: the daemon's default).
    pub fn under_runtime(self, runtime: Option<String>) -> BackendRunner {
        BackendRunner { runtime, ..self }
    }

    /// `wanted` cut to what is left of the run's time; an error once nothing is left.
    pub(crate) fn within_deadline(&self, wanted: Option<Duration>) -> Result<Option<Duration>, DeadlinePassed> {
        let Some(deadline) = self.deadline else { return Ok(wanted) };
        let left = deadline.saturating_duration_since(Instant::now());
        if left < Duration::from_millis(1) {
            return Err(DeadlinePassed);
        }
        Ok(Some(wanted.map_or(left, |w| w.min(left))))
    }

    /// The tool service a child worker talks to, sharing this runner.
    pub fn service_for(&self, caller: Caller, sandbox: Sandbox, run_id: &str) -> ToolService {
        ToolService::new(self.project.clone(), caller, sandbox, self.approver(), AuditLog::new(&self.project.dir, run_id), Arc::new(self.clone()))
    }
}

impl SandboxRunner for BackendRunner {
    fn run(&self, sandbox: &Sandbox, cmd: &ShellRun, timeout_secs: u64) -> Result<ShellOutput, RunFailure> {
        Ok(self.run_command(sandbox, cmd, timeout_secs)?)
    }

    fn workdir(&self, sandbox: &Sandbox) -> String {
        match self.exec_in.get() {
            Some(running) => running.workdir.clone(),
            None => crate::plan::default_workdir(&crate::plan::mounts_for(sandbox)),
        }
    }

    /// The image commands run on: the running container's, else the project's (every fresh
    /// or session sandbox of a shell command is an ad-hoc run on `defaults.image`).
    fn dialect(&self) -> Dialect {
        Dialect::for_image(self.exec_in.get().map_or(&self.project.defaults.image, |running| &running.image))
    }

    fn run_worker(
        &self,
        worker: &Worker,
        sandbox: &Sandbox,
        input: &str,
        attachments: &[Attachment],
        _depth: usize,
        chain: &[String],
    ) -> Result<ShellOutput, RunFailure> {
        Ok(self.run_child(worker, sandbox, input, attachments, chain)?)
    }
}

impl BackendRunner {
    /// A run of `sandbox` as this runner starts a command's (its project, limits, runtime and
    /// backend choice, itself as the parent), for an MCP session's sandbox
    /// ([`Resident::start`] sets its command and services).
    fn session_spec(&self, sandbox: &Sandbox) -> Spec<'static> {
        Spec {
            project: self.project.clone(),
            worker: None,
            sandbox: sandbox.clone(),
            overrides: Overrides { limits: self.limits, inherited_runtime: self.runtime.clone(), ..Overrides::default() },
            choice: self.choice,
            parent: self.clone(),
            chain: Vec::new(),
            services: Services::Resident,
        }
    }

    /// Runs `cmd` with `sandbox`'s filesystem and network, within `timeout_secs` (and the
    /// run's deadline): in the running container, the MCP session's sandbox, or a fresh one.
    pub fn run_command(&self, sandbox: &Sandbox, cmd: &ShellRun, timeout_secs: u64) -> Result<ShellOutput, RunnerError> {
        let timeout = self.within_deadline(Some(Duration::from_secs(timeout_secs)))?.unwrap_or(Duration::from_secs(timeout_secs));
        if let Some(running) = self.exec_in.get() {
            let mut plan = running.clone();
            plan.workdir = cmd.workdir.clone();
            plan.env.extend(cmd.env.iter().cloned());
            plan.stdin = (!cmd.stdin.is_empty()).then(|| cmd.stdin.as_slice().into());
            return Ok(backend::docker::exec_captured(&plan, &cmd.args, timeout).map(to_output)?);
        }
        if let Some(session) = &self.session {
            if let Some(result) = session.exec(self, sandbox, cmd, timeout) {
                return result.map(to_output);
            }
        }
        let ov = Overrides {
            command: Some(cmd.args.clone()),
            limits: Limits { timeout: Some(timeout), ..self.limits },
            env: cmd.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            workdir: Some(cmd.workdir.clone()),
            inherited_runtime: self.runtime.clone(),
            stdin: (!cmd.stdin.is_empty()).then(|| cmd.stdin.as_slice().into()),
            ..Overrides::default()
        };
        // A run of its own (a fresh boundary with the caller's sandbox), with no services.
        let spec = Spec {
            project: self.project.clone(),
            worker: None,
            sandbox: sandbox.clone(),
            overrides: ov,
            choice: self.choice,
            parent: self.clone(),
            chain: Vec::new(),
            services: Services::None,
        };
        Ok(Session::prepare(spec).and_then(|s| s.run(Output::Capture)).map(to_output)?)
    }

    /// Runs the child `worker` with `sandbox`, its input and its attachments; `chain` is the
    /// delegation chain down to it.
    pub fn run_child(&self, worker: &Worker, sandbox: &Sandbox, input: &str, attachments: &[Attachment], chain: &[String]) -> Result<ShellOutput, RunnerError> {
        let spec = Spec {
            project: self.project.clone(),
            worker: Some(worker),
            sandbox: sandbox.clone(),
            overrides: Overrides { inherited_runtime: self.runtime.clone(), ..Overrides::default() },
            choice: self.choice,
            parent: self.clone(),
            chain: chain.to_vec(),
            services: Services::Child { input, attachments, instructions: &worker.instructions },
        };
        Ok(Session::prepare(spec).and_then(|s| s.run(Output::Capture)).map(to_output)?)
    }
}
