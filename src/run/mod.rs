//! One run, from plan to teardown: the launch plan, the backend chosen for it, the services
//! the worker talks to (the tool broker with its staged files, the audit log), the backend
//! run itself, and the records and cleanup after it. `workcell run`, child workers
//! (`call_worker`) and shell commands of the tool service all go through [`Session`]; a new
//! run service (an egress proxy, staged delivery) is started in [`Session::prepare`] and
//! ends when the session is dropped.

pub mod choose;
mod delivery;
pub mod history;
pub mod planted;
pub mod refusals;
pub mod resident;
mod review;
pub mod runner;
pub mod unverified;

use std::sync::{Arc, OnceLock};

use serde_json::json;

use crate::backend::docker::ship::Returns;
use crate::backend::{self, Attached, BackendError, Finished, Output, Selected};
use crate::config::{BackendChoice, Project, Worker};
use crate::egress::{Consent, ConsentDenied, EgressError, Proxy};
use crate::plan::{LaunchPlan, Network, Overrides, PlanError, BROKER_MOUNT_POINT};
use crate::sandbox::Sandbox;
pub use delivery::Review;

use crate::audit::AuditLog;
use crate::run::runner::{BackendRunner, DeadlinePassed};
use crate::tools::approval::ApprovalMode;
use crate::tools::attach::{self, AttachError, Attachment, Reservation};
use crate::tools::broker::{Broker, BrokerError};
use crate::tools::service::{Caller, ToolService};

/// The exit status of a run whose worker exited 0 but whose delivery did not bring
/// everything it left to the host (refused, withheld, declined, in conflict or failed; see
/// [`crate::delivery::Summary::held_back`]). A worker's own non-zero status wins.
pub const EXIT_HELD_BACK: i32 = 3;

/// Tells what a check after the run found (the planted files, history): `text` into a
/// captured run's stderr (after the worker's, past its cap), else on workcell's stderr, as
/// one JSON line `{key: {"run_id", field: reports}}` with `json`; and records
/// `{field: reports}` as a `key` audit record (`what` names it if that cannot be written).
#[allow(clippy::too_many_arguments)]
fn tell_found(
    text: &[String],
    (key, field, what): (&str, &str, &str),
    reports: &impl serde::Serialize,
    run_id: &str,
    output: Output,
    json: bool,
    result: &mut Result<Finished, BackendError>,
    audit: &AuditLog,
) {
    match (output, result.as_mut()) {
        (Output::Capture, Ok(finished)) => {
            for line in text {
                finished.stderr.extend_from_slice(line.as_bytes());
                finished.stderr.push(b'\n');
            }
        }
        _ if json => eprintln!("{}", serde_json::to_string(&json!({ key: {"run_id": run_id, field: reports} })).unwrap_or_default()),
        _ => text.iter().for_each(|l| eprintln!("{l}")),
    }
    if let Err(e) = audit.record(key, json!({ field: reports })) {
        eprintln!("workcell: cannot record the {what} in the audit log: {e}");
    }
}

/// Why a run did not happen (or its end could not be recorded). Exit status 125 unless the
/// plan itself was refused (2).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The configuration or the flags ask for something that cannot be planned.
    #[error("{0}")]
    Plan(#[from] PlanError),
    /// The backend could not be chosen, or failed.
    #[error("{0}")]
    Backend(#[from] BackendError),
    /// The broker or its staged files could not be set up.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// The attachments of a child run could not be reserved or staged.
    #[error(transparent)]
    Attach(#[from] AttachError),
    /// The run that starts this one has no time left.
    #[error(transparent)]
    Deadline(#[from] DeadlinePassed),
    /// The egress proxy of a run with network rules could not start.
    #[error(transparent)]
    Egress(#[from] EgressError),
    /// The start of the run could not be recorded: an operation that cannot be audited
    /// does not proceed.
    #[error("cannot write the audit log: {0}")]
    Audit(#[source] std::io::Error),
    /// A zone with `delivery: copy` could not be copied for the worker.
    #[error(transparent)]
    Delivery(#[from] crate::delivery::DeliveryError),
    /// The private copy mounted at `target` could not be given to the run's tool service
    /// (which would otherwise write the host's zone, past the review).
    #[error("cannot give the tool service the private copy mounted at {target}{}", source.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Copies {
        target: String,
        #[source]
        source: Option<Box<crate::sandbox::SandboxError>>,
    },
    /// A zone with `delivery: copy` is over the bounds of a copy: the plan cannot be run as
    /// it is (refused like a bad configuration).
    #[error(transparent)]
    CopyRefused(crate::delivery::DeliveryError),
    /// The check after the run could not finish in a zone, or a zone is still unverified
    /// from such a run (exit [`unverified::EXIT_UNVERIFIED`]).
    #[error(transparent)]
    Unverified(#[from] unverified::UnverifiedError),
}

/// What the worker can ask the host for.
#[derive(Debug, Default)]
pub enum Services<'a> {
    /// Nothing: no socket is mounted (`--no-broker`, shell commands).
    #[default]
    None,
    /// The tool broker, with the worker's instructions beside it when it has any.
    Broker { instructions: Option<&'a str> },
    /// A child worker's broker: its input, attachments and instructions staged beside it.
    Child { input: &'a str, attachments: &'a [Attachment], instructions: &'a str },
    /// A session sandbox run by the exec agent (`run::resident`): `dir` holds the socket the
    /// agent connects to, and this binary is bound in as the agent's program. The session
    /// lives without the run's timeout, which caps each command instead.
    Agent { dir: std::path::PathBuf },
    /// A session sandbox whose commands come through the Engine API's exec: no socket, and
    /// the run's timeout caps each command, not the session.
    Resident,
    /// A pooled sandbox being filled (`workcell pool fill`, [`crate::pool`]): its agent
    /// waits in `entry` for the run that claims it, without a timeout; `broker` when the
    /// runs it serves have the tool broker (its socket is bound at the claim).
    Pool { entry: std::path::PathBuf, broker: bool },
}

/// What a run is made of, before anything is created.
#[derive(Debug)]
pub struct Spec<'a> {
    pub project: Arc<Project>,
    pub worker: Option<&'a Worker>,
    pub sandbox: Sandbox,
    pub overrides: Overrides,
    pub choice: BackendChoice,
    /// The runner of the run that starts this one (its approval mode, review, limits and
    /// deadline carry over to the shell commands and children of this run).
    pub parent: BackendRunner,
    /// Worker names from the top of the delegation chain to this run's worker.
    pub chain: Vec<String>,
    pub services: Services<'a>,
}

/// A prepared run: its plan, backend and services exist; [`Session::run`] carries it out,
/// and dropping it tears the services down.
pub struct Session {
    plan: LaunchPlan,
    selected: Selected,
    service: Arc<ToolService>,
    broker: Option<Broker>,
    audit: AuditLog,
    /// The egress proxy of a plan with network rules; the backend hands it its listener.
    egress: Option<Proxy>,
    /// Held until the run is over: the attachments' share of the process-wide budget.
    _reserved: Option<Reservation>,
    /// Zones with `delivery: copy`: their private copies, published after a normal exit.
    deliveries: Vec<delivery::Delivery>,
    /// What a run on a remote engine brought back of its writable zones, for `deliveries`.
    returns: Returns,
    review: Review,
    mode: ApprovalMode,
    /// A session sandbox's cap on each command's time (the run's own timeout, lifted from
    /// the session itself).
    pub(crate) call_cap: Option<std::time::Duration>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("run_id", &self.plan.run_id).field("backend", &self.selected.name()).finish()
    }
}

impl Session {
    /// Plans the run, chooses its backend, starts its services and records its start.
    pub fn prepare(spec: Spec<'_>) -> Result<Session, RunError> {
        // Before anything is made or walked: a zone an earlier run left unverified waits for
        // a person (`unverified`).
        unverified::refuse_marked(&spec.project.dir, &spec.sandbox)?;
        // Granted directories that do not exist yet are created now, owned by the worker's
        // user; the plan and the tool service then hold them like any other area.
        // Removed again (when still empty) if the launch is refused below.
        let (sandbox, created) =
            spec.sandbox.materialize_undoable(crate::plan::worker_user(&spec.project.dir, spec.project.defaults.user)).map_err(PlanError::Grant)?;
        let mut plan = LaunchPlan::build(&spec.project, spec.worker, &sandbox, &spec.overrides)?;
        // The tool service acts as the worker the plan runs: its file I/O is checked, and what
        // it creates is owned, exactly as for the worker's own commands.
        let sandbox = sandbox.acting_as(plan.user);
        plan.limits.timeout = spec.parent.within_deadline(plan.limits.timeout)?;
        let choice = choose::choose(spec.choice, &plan, service_on_this_host(&spec.services), spec.project.require_os_sandbox)?;
        choice.tell();
        let selected = choice.selected;
        // An engine that cannot see this host's files gets every zone shipped as a copy.
        if let Some(engine) = &choice.engine {
            ship(&mut plan, &spec.project, &sandbox, &spec.services, &engine.to_string())?;
        }
        // Before the backend sees the plan: copy-delivered zones are bound as private copies.
        let deliveries = delivery::prepare(&mut plan, &sandbox)?;
        // Before anything starts: a zone the worker's uid cannot use is refused here, with
        // the fixes, instead of ending in the worker's own `Permission denied`.
        // (`--backend none` runs the command as workcell's own user, not as the worker.)
        if selected != Selected::None {
            crate::plan::access::check_sandbox(&sandbox, plan.user, selected == Selected::Bwrap).map_err(PlanError::from)?;
        }
        // From here on the run's own tools work on the private copies: the broker's writes,
        // its shell commands and its child workers change the copy, reviewed at the end.
        let sandbox = delivery::on_copies(&sandbox, &deliveries)?;
        // This run's own runner: the shell commands of its worker go to its container.
        let runner = BackendRunner { exec_in: Arc::new(OnceLock::new()), choice: spec.choice, session: None, ..spec.parent.clone() }
            .serving(plan.limits)
            .under_runtime(plan.runtime.clone());
        let caller = Caller { worker: spec.worker.cloned(), chain: spec.chain.clone() };
        // The protected paths bound read-only for the worker stay out of the tool service's
        // reach too, wherever the worker moves the directories holding them.
        let sandbox = sandbox.pinning(plan.protected.iter().flat_map(|a| a.bound.iter().map(|b| (b.identity, b.entry.clone()))));
        // A zone the walk found a home (a `--zone`, a start-up file deeper than its top): its
        // home entries hold for the tool service's writes too.
        let sandbox = plan.protected.iter().filter(|a| a.home.is_some()).fold(sandbox, |s, a| s.protecting_zone(&a.target, &a.protection));
        let service = Arc::new(runner.service_for(caller, sandbox, &plan.run_id));
        let audit = AuditLog::new(&spec.project.dir, &plan.run_id);
        let mut call_cap = None;
        let pooled = matches!(spec.services, Services::Pool { .. });
        let (broker, reserved) = match spec.services {
            Services::None => (None, None),
            Services::Resident => {
                call_cap = plan.limits.timeout.take();
                (None, None)
            }
            Services::Pool { entry, broker } => {
                plan.limits.timeout = None;
                crate::pool::attach(&mut plan, &entry, broker)
                    .map_err(|e| RunError::Backend(BackendError::Io { what: "cannot bind the pool entry into its sandbox".into(), source: e }))?;
                (None, None)
            }
            Services::Agent { dir } => {
                call_cap = plan.limits.timeout.take();
                plan.attach_agent(&dir)
                    .map_err(|e| RunError::Backend(BackendError::Io { what: "cannot bind the exec agent into the session sandbox".into(), source: e }))?;
                (None, None)
            }
            Services::Broker { instructions } => {
                let broker = Broker::bind(service.clone())?;
                if let Some(text) = instructions {
                    broker.stage("instructions.md", text.as_bytes())?;
                    plan.env.insert("WORKCELL_INSTRUCTIONS".into(), format!("{BROKER_MOUNT_POINT}/instructions.md"));
                }
                (Some(broker), None)
            }
            Services::Child { input, attachments, instructions } => {
                // Reserved before anything is copied, released when the session ends.
                let reserved = Reservation::take(attachments.iter().map(|a| a.size).fold(0u64, u64::saturating_add))?;
                // The broker owns its directory (a tmpfs when there is one): every return
                // below, and a panic's unwinding, drops it and so removes the staged files.
                let broker = Broker::start(service.clone())?;
                broker.stage("input.txt", input.as_bytes())?;
                attach::stage(&broker, attachments)?;
                broker.stage("instructions.md", instructions.as_bytes())?;
                for (k, file) in [("WORKCELL_INPUT", "input.txt"), ("WORKCELL_ATTACHMENTS", "attachments"), ("WORKCELL_INSTRUCTIONS", "instructions.md")] {
                    plan.env.insert(k.into(), format!("{BROKER_MOUNT_POINT}/{file}"));
                }
                plan.env.insert("WORKCELL_CHAIN".into(), spec.chain.join(" -> "));
                (Some(broker), Some(reserved))
            }
        };
        // A remote engine cannot reach the broker's socket on this host: the worker runs
        // without the tool service (docs/engines.md says so).
        if let Some(broker) = broker.as_ref().filter(|_| plan.shipped.is_none()) {
            broker.share_with(plan.user)?;
            plan.attach_broker(broker.dir(), broker.token());
        }
        if selected == Selected::Docker {
            let _ = runner.exec_in.set(plan.clone());
        }
        let egress = match &plan.egress {
            Some(policy) if plan.network == Network::Proxied => {
                // Unlisted destinations ask only where every layer of the rules asks.
                let asks = policy.layers.iter().all(|l| l.ask);
                let consent = asks.then(|| Arc::new(ServiceConsent(service.clone())) as Arc<dyn Consent>);
                Some(Proxy::start(policy.clone(), Some(audit.clone()), consent)?)
            }
            _ => None,
        };
        // The review and approval mode of the run that starts this one (`workcell run`'s own
        // flags at the top): a nested run never publishes with less review than its parent.
        let (mode, review) = (spec.parent.mode, spec.parent.review);
        let returns = delivery::returns_for(&deliveries);
        let session = Session { plan, selected, service, broker, audit, egress, _reserved: reserved, deliveries, returns, review, mode, call_cap };
        // A pooled sandbox runs nothing of the worker's until a run claims it (and records
        // its own start).
        if !pooled {
            session.record_start(&spec.chain)?;
        }
        created.keep();
        Ok(session)
    }

    fn record_start(&self, chain: &[String]) -> Result<(), RunError> {
        let p = &self.plan;
        let mounts: Vec<_> = p.mounts.iter().map(|m| json!({"target": m.target, "read_only": m.read_only})).collect();
        let event = json!({"worker": p.worker, "chain": chain, "backend": self.selected.name(), "command": p.command, "network": p.network,
            "runtime": p.runtime, "egress": p.egress, "broker": self.broker.is_some(), "mounts": mounts});
        self.audit.record("run_start", event).map_err(RunError::Audit)
    }

    fn record_end(&self, exit_code: Option<i32>, error: Option<String>) {
        if let Err(e) = self.audit.record("run_end", json!({"worker": self.plan.worker, "exit_code": exit_code, "error": error})) {
            // The run has happened; its end at least is not lost silently.
            eprintln!("workcell: cannot record the end of the run in the audit log: {e}");
        }
    }

    /// Checks and publishes the copy-delivered zones; only a worker that ended by itself
    /// publishes (not a timeout, a signal, or a start that failed). True when some zone's
    /// delivery held something back.
    fn deliver(&mut self, exit_code: Option<i32>, timed_out: bool) -> bool {
        if self.deliveries.is_empty() {
            return false;
        }
        let withheld = match exit_code {
            _ if timed_out => Some("the run timed out".to_string()),
            Some(backend::EXIT_TIMEOUT) => Some("the run timed out (or the worker exited 124)".to_string()),
            Some(c) if (0..backend::EXIT_INTERNAL).contains(&c) => None,
            // The backends' statuses for a program missing or not executable (`outcome`):
            // nothing of the worker's ran, so it did end, having done nothing.
            Some(c @ (backend::EXIT_NOT_EXECUTABLE | backend::EXIT_NOT_FOUND)) => Some(format!("the command could not be started (or the worker exited {c})")),
            Some(c) => Some(format!("the worker did not end by itself (exit status {c})")),
            None => Some("the run failed".to_string()),
        };
        let deliveries = std::mem::take(&mut self.deliveries);
        delivery::finish(deliveries, withheld.as_deref(), &self.returns, self.review, self.mode, &self.audit).iter().any(|s| s.held_back())
    }

    pub fn plan(&self) -> &LaunchPlan {
        &self.plan
    }

    pub fn backend(&self) -> Selected {
        self.selected
    }

    /// The tool service of this run (for what it learned: the expansions to keep).
    pub fn service(&self) -> &Arc<ToolService> {
        &self.service
    }

    /// Runs the worker, its output to `output` (workcell's terminal, or bounded buffers for
    /// the caller); returns how it ended.
    pub fn run(mut self, output: Output) -> Result<Finished, RunError> {
        tracing::info!(run_id = %self.plan.run_id, backend = self.selected.name(), "starting run");
        let attached = Attached {
            broker: self.broker.as_ref().map(|b| b as &dyn backend::OnDemand),
            egress: self.egress.as_ref().map(|p| p as &dyn backend::egress::EgressProxy),
            returns: Some(&self.returns),
        };
        // The repositories' branches and index as the worker finds them (a few reads).
        let watch = crate::hostrun::history::Watch::take(&self.plan.protected);
        // A pooled sandbox started for exactly this plan, when there is one: claimed for
        // this run alone, and gone at its end like a cold run's container.
        let mut result = match crate::pool::claim(&self.plan, self.selected, output) {
            Some(entry) => entry.run(&self.plan, self.broker.as_ref()),
            None => backend::run(self.selected, &self.plan, output, attached),
        };
        // Stopped first, so that the lines of connections still open come before run_end.
        let refused = self.egress.take().map(Proxy::finish).unwrap_or_default();
        refusals::tell(&refused, output, self.review.json, &mut result);
        // The worker is gone, however it ended: what it planted for the host to run goes
        // before anyone (the caller, the person) touches the zones again.
        let swept = planted::sweep(&self.plan, &self.plan.run_id);
        planted::tell(&swept, &self.plan.run_id, output, self.review.json, &mut result, &self.audit);
        // A check that could not finish fails the run, whatever the worker's status.
        let unfinished = unverified::record(&self.plan, &swept).err();
        // Then what it committed or staged: a protected file's content on the current branch
        // or in the index is set back before the person's `git reset --hard` writes it.
        history::tell(&watch.check(&self.plan.run_id), &self.plan.run_id, output, self.review.json, &mut result, &self.audit);
        let held_back = self.deliver(result.as_ref().ok().map(|f| f.exit_code), result.as_ref().is_ok_and(|f| f.timed_out));
        // A run that looks successful must not hide that part of its work stayed behind.
        if let Ok(finished) = result.as_mut() {
            if held_back && finished.exit_code == 0 {
                finished.exit_code = EXIT_HELD_BACK;
            }
        }
        let error = unfinished.as_ref().map(ToString::to_string).or_else(|| result.as_ref().err().map(|e| e.to_string()));
        self.record_end(result.as_ref().ok().map(|f| f.exit_code), error);
        if let Some(e) = unfinished {
            return Err(e.into());
        }
        Ok(result?)
    }
}

/// Makes `plan` one for a remote engine when the docker engine cannot see this host's files
/// (`backend::docker::placement`, described by `engine`); refuses the services that need it
/// on this host.
fn ship(plan: &mut LaunchPlan, project: &Project, sandbox: &crate::sandbox::Sandbox, services: &Services<'_>, engine: &str) -> Result<(), RunError> {
    if let Some(what) = service_on_this_host(services) {
        return Err(PlanError::from(crate::plan::ship::RemoteRefusal::Service { what, engine: engine.to_string() }).into());
    }
    plan.ship(project, sandbox, engine)?;
    Ok(())
}

/// The services of a run that reach workcell through a socket on this host.
pub(crate) fn service_on_this_host(services: &Services<'_>) -> Option<&'static str> {
    match services {
        Services::Resident | Services::Agent { .. } => Some("an MCP session's sandbox"),
        Services::Pool { .. } => Some("a warm pool (`workcell pool fill`)"),
        Services::Child { .. } => Some("a child worker (its input and tools reach it through a socket on this host)"),
        Services::None | Services::Broker { .. } => None,
    }
}

/// The run's approvals, as the egress proxy asks them (`network: {ask: true}`).
struct ServiceConsent(Arc<ToolService>);

impl Consent for ServiceConsent {
    fn connect(&self, destination: &str) -> Result<(), ConsentDenied> {
        self.0.consent_to_connect(destination).map_err(|e| ConsentDenied(e.to_string()))
    }
}
