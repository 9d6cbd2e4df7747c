//! Backends carry out a [`LaunchPlan`](crate::plan::LaunchPlan): Docker (Engine API through
//! bollard), bubblewrap, Seatbelt, or none. Each renders the plan with a pure function
//! (snapshot-tested) and runs the rendering; only the runners touch the OS. [`run`] is the one
//! entry point, for a run on workcell's terminal and a captured one alike; the backends whose
//! worker is a host process share one supervision loop ([`supervise`]).

/// Exit status when the plan's timeout killed the worker.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit status of workcell's own failure.
pub const EXIT_INTERNAL: i32 = 125;
/// Exit status when the command exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
/// Exit status when the command does not exist.
pub const EXIT_NOT_FOUND: i32 = 127;

/// Why a backend could not run a plan. Messages say what is missing and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend cannot work on this machine.
    #[error("the {backend} backend is unavailable: {reason}. {fix}")]
    Unavailable { backend: &'static str, reason: String, fix: String },
    /// A bwrap run that could not go ahead (exit 125).
    #[error(transparent)]
    Bwrap(#[from] bwrap::BwrapError),
    /// A docker run that could not go ahead (exit 125; an unreachable daemon is
    /// [`BackendError::Unavailable`]).
    #[error(transparent)]
    Docker(docker::DockerError),
    /// A local operation failed: `what` says which, `source` why.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// The run could not be supervised.
    #[error(transparent)]
    Supervise(#[from] SuperviseError),
    /// The on-demand service (the tool broker) could not start.
    #[error("{0}")]
    Service(#[source] ServiceError),
    /// A Seatbelt run that could not go ahead.
    #[error(transparent)]
    Seatbelt(#[from] seatbelt::SeatbeltError),
    /// The plan names a Docker runtime, which this backend cannot honour.
    #[error(
        "the {backend} backend cannot run under the runtime '{runtime}' (set by `runtime:` or `--runtime`): a runtime is Docker's, and {backend} runs the worker on the host's kernel. Use --backend docker (or auto, with Docker running), or remove the runtime"
    )]
    RuntimeUnsupported { backend: &'static str, runtime: String },
    /// The plan's network is filtered by rules, which this backend cannot enforce.
    #[error("the {backend} backend cannot enforce network rules (network: {{allow: [...]}}): it has no way to make workcell's egress proxy the worker's only way out. Run it with --backend docker or --backend bwrap, or use network: true or false")]
    EgressUnsupported { backend: &'static str },
    /// A plan with network rules came without the proxy that enforces them.
    #[error("the plan's network is filtered by rules, but no egress proxy was started for the run; refusing to run it without one")]
    EgressMissing,
    /// `--backend kubernetes` for a run: the Kubernetes backend only renders manifests.
    #[error("the kubernetes backend is rendered only: workcell cannot run a worker on a cluster. Use `workcell plan --backend kubernetes [WORKER] > job.yaml` and `kubectl apply -f job.yaml`")]
    RenderedOnly,
    /// Anything else that stopped workcell itself (exit 125).
    #[error("{0}")]
    Failed(String),
}

pub mod bwrap;
pub mod capture;
pub mod cgroup;
pub mod docker;
pub mod egress;
pub mod kubernetes;
pub mod none;
pub mod outcome;
pub mod seatbelt;
#[cfg(target_os = "linux")]
pub mod seccomp;
pub mod supervise;

use crate::config::{BackendChoice, ImageRef};
use crate::plan::{LaunchPlan, Network};
use egress::EgressProxy;
pub use supervise::{Attached, Finished, Output, SuperviseError};

/// The backend that will run a plan, after `auto` selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selected {
    Docker,
    Bwrap,
    Seatbelt,
    None,
}

impl Selected {
    pub fn name(self) -> &'static str {
        match self {
            Selected::Docker => "docker",
            Selected::Bwrap => "bwrap",
            Selected::Seatbelt => "seatbelt",
            Selected::None => "none",
        }
    }
}

/// Picks the backend for `plan`. `auto`: docker if the daemon answers (and, for a plan with
/// network rules, can confine it), else bwrap if it works here, else Seatbelt on macOS
/// ([`instead_of_docker`], which also serves a plan the docker engine cannot run here:
/// `run::choose`). A plan that needs a named image cannot fall back to bwrap or Seatbelt.
/// `none` only when chosen, or when no boundary exists and `require_os_sandbox` is false.
pub fn select(choice: BackendChoice, plan: &LaunchPlan, require_os_sandbox: bool) -> Result<Selected, BackendError> {
    pick(choice, plan, require_os_sandbox).map(|p| p.selected)
}

/// [`select`]'s answer with why docker was passed over, for the one line `auto` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picked {
    pub selected: Selected,
    /// Set when `auto` chose another backend because docker cannot run this plan here.
    pub instead_of_docker: Option<String>,
}

/// [`select`], telling why docker was passed over.
pub fn pick(choice: BackendChoice, plan: &LaunchPlan, require_os_sandbox: bool) -> Result<Picked, BackendError> {
    let picked = select_any(choice, plan, require_os_sandbox)?;
    enforces_rules(picked.selected, plan)?;
    Ok(picked)
}

/// Refuses a plan with network rules on a backend that cannot make the proxy the only way
/// out (Seatbelt, none): rules that look enforced but are not would be worse than none.
fn enforces_rules(selected: Selected, plan: &LaunchPlan) -> Result<(), BackendError> {
    match (plan.network, selected) {
        (Network::Proxied, Selected::Seatbelt | Selected::None) => Err(BackendError::EgressUnsupported { backend: selected.name() }),
        _ => Ok(()),
    }
}

/// The proxy a plan with network rules needs; refuses a backend that cannot enforce them.
fn egress_for<'a>(selected: Selected, plan: &LaunchPlan, egress: Option<&'a dyn EgressProxy>) -> Result<Option<&'a dyn EgressProxy>, BackendError> {
    enforces_rules(selected, plan)?;
    match (plan.network, egress) {
        (Network::Proxied, None) => Err(BackendError::EgressMissing),
        (Network::Proxied, e) => Ok(e),
        _ => Ok(None),
    }
}

fn select_any(choice: BackendChoice, plan: &LaunchPlan, require_os_sandbox: bool) -> Result<Picked, BackendError> {
    let named = |selected: Result<Selected, BackendError>| selected.map(|selected| Picked { selected, instead_of_docker: None });
    if let Some(runtime) = &plan.runtime {
        return named(with_runtime(choice, runtime));
    }
    match choice {
        BackendChoice::Docker => named(docker::probe().map(|_| Selected::Docker)),
        // An explicit choice only needs the binary: a run that cannot create its namespaces
        // fails with the same actionable message, and skipping the throwaway probe sandbox
        // keeps the launch close to raw bwrap's speed.
        BackendChoice::Bwrap => named(host_image_only(plan, "bwrap").and_then(|_| bwrap::locate()).map(|_| Selected::Bwrap)),
        BackendChoice::Seatbelt => named(host_image_only(plan, "seatbelt").and_then(|_| seatbelt::probe()).map(|_| Selected::Seatbelt)),
        BackendChoice::None => named(Ok(Selected::None)),
        BackendChoice::Kubernetes => Err(BackendError::RenderedOnly),
        BackendChoice::Auto => {
            let refused = match docker::probe() {
                // Network rules on docker need root for the firewall that confines the worker.
                Ok(_) if plan.network == Network::Proxied => docker::firewall::check().err().map(|e| e.to_string()),
                Ok(_) => None,
                Err(e) => Some(docker_reason(&e)),
            };
            match refused {
                None => named(Ok(Selected::Docker)),
                Some(why) => instead_of_docker(plan, require_os_sandbox, &why).map(|selected| Picked { selected, instead_of_docker: Some(why) }),
            }
        }
    }
}

/// The words of a docker refusal worth a person's one line: an unreachable daemon's reason
/// (its fix belongs to `--backend docker`), else the whole message.
fn docker_reason(e: &BackendError) -> String {
    match e {
        BackendError::Unavailable { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}

/// `auto`'s choice when docker cannot take this plan (its daemon does not answer, or its
/// engine cannot run this plan here: `why`): bwrap if it works here, else Seatbelt on
/// macOS, else none where no boundary is required. A plan that needs a named image has no
/// other backend and is refused with `why`.
pub fn instead_of_docker(plan: &LaunchPlan, require_os_sandbox: bool, why: &str) -> Result<Selected, BackendError> {
    if plan.image != ImageRef::Host {
        return Err(BackendError::Failed(format!(
            "this worker needs the image {:?}, which only the docker backend can run, and docker cannot run it here: {why}",
            plan.image
        )));
    }
    let chosen = match bwrap::probe() {
        Ok(_) => Selected::Bwrap,
        Err(bwrap_err) => match seatbelt::probe() {
            Ok(_) => Selected::Seatbelt,
            Err(_) if !require_os_sandbox => Selected::None,
            Err(seatbelt_err) => {
                return Err(BackendError::Failed(format!(
                    "no isolation backend works here, and require_os_sandbox is true.\n  docker: {why}\n  bwrap: {bwrap_err}\n  seatbelt: {seatbelt_err}\nInstall Docker or bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or set require_os_sandbox: false and choose --backend none to run without isolation."
                )))
            }
        },
    };
    Ok(chosen)
}

/// A plan that names a runtime runs on docker or not at all: falling back to bwrap would
/// quietly trade the runtime's boundary (gVisor's own kernel) for the host kernel's. The
/// daemon is asked whether it has the runtime before anything is created.
fn with_runtime(choice: BackendChoice, runtime: &str) -> Result<Selected, BackendError> {
    let refuse = |backend: &'static str| Err(BackendError::RuntimeUnsupported { backend, runtime: runtime.to_string() });
    match choice {
        BackendChoice::Bwrap => refuse("bwrap"),
        BackendChoice::Seatbelt => refuse("seatbelt"),
        BackendChoice::None => refuse("none"),
        BackendChoice::Kubernetes => Err(BackendError::RenderedOnly),
        BackendChoice::Docker | BackendChoice::Auto => {
            docker::probe().map_err(|e| match (choice, e) {
                (BackendChoice::Auto, BackendError::Unavailable { reason, fix, .. }) => BackendError::Unavailable {
                    backend: "docker",
                    reason: format!("this run names the runtime '{runtime}', which only docker can use, and {reason}"),
                    fix,
                },
                (_, e) => e,
            })?;
            docker::runtimes::require(runtime)?;
            Ok(Selected::Docker)
        }
    }
}

fn host_image_only(plan: &LaunchPlan, backend: &'static str) -> Result<(), BackendError> {
    if plan.image == ImageRef::Host {
        Ok(())
    } else {
        Err(BackendError::Failed(format!(
            "the {backend} backend runs the host's own system (image: host); this worker needs the image {:?}, which only docker can run",
            plan.image
        )))
    }
}

/// Why an [`OnDemand`] service could not start: the service's own error, whatever its type
/// (defined with the egress seam, below the backends).
pub use crate::egress::seam::ServiceError;

/// A host-side service for the worker that need not start until the worker first uses it
/// (the tool broker): a backend that supervises the run itself starts it when `wake_fd`
/// turns readable; the others start it before the worker.
pub trait OnDemand {
    /// A descriptor that turns readable when the worker first needs the service.
    fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_>;
    /// Starts the service; calling it again does nothing.
    fn start(&self) -> Result<(), ServiceError>;
}

/// Runs `plan` on the selected backend, its output to `output`; returns how it ended. The
/// broker in `attached`, if any, is started when the worker first connects to it (backends
/// whose worker is a host process, see [`supervise`]) or before the worker (docker).
pub fn run(selected: Selected, plan: &LaunchPlan, output: Output, attached: Attached<'_>) -> Result<Finished, BackendError> {
    // A proxied plan runs only where the proxy can be made the worker's only way out, and
    // only with its proxy; any other plan never serves one.
    let attached = Attached { egress: egress_for(selected, plan, attached.egress)?, ..attached };
    match selected {
        Selected::Bwrap => bwrap::run(plan, output, attached),
        Selected::None => none::run(plan, output, attached),
        Selected::Seatbelt => seatbelt::run(plan, output, attached),
        Selected::Docker => {
            if let Some(s) = attached.broker {
                s.start().map_err(BackendError::Service)?;
            }
            docker::run(plan, output, attached.egress, attached.returns)
        }
    }
}

/// Makes `cmd` run as the plan's user, never as root: a root workcell drops to the worker's
/// uid and gid (and no supplementary groups) between fork and exec. Under bwrap the user
/// namespace then maps the worker to that unprivileged host uid.
pub(crate) fn as_worker(cmd: &mut std::process::Command, plan: &LaunchPlan) {
    use std::os::unix::process::CommandExt;
    if rustix::process::geteuid().as_raw() != plan.user.uid {
        cmd.uid(plan.user.uid).gid(plan.user.gid);
    }
}

/// Held while a spawn may pass descriptors on: bwrap's status and block pipes are made
/// inheritable only around its spawn (clearing `FD_CLOEXEC` in a `pre_exec` hook would force
/// std to fork instead of posix_spawn), so no other process may be started meanwhile, or it
/// would inherit another run's pipes. Every spawn of workcell's own goes through it.
static SPAWN_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `f` (a spawn) while no other spawn of this process runs.
pub(crate) fn spawn_exclusive<T>(f: impl FnOnce() -> T) -> T {
    let _guard = SPAWN_LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    f()
}
