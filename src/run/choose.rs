//! Which backend a run gets, and why: the one decision `workcell run`, child workers, MCP
//! sessions and `workcell plan` share, so that `plan` shows what `run` would do.
//!
//! A named backend (`--backend`, `defaults.backend`) is taken or refused with its reason.
//! `auto` takes docker when its daemon answers and its engine can run the plan here, and
//! otherwise the next backend that can ([`backend::instead_of_docker`]), saying why in one
//! line: a person without access to the Docker socket, or whose engine cannot see this
//! host's files while the plan needs it to (`image: host`, network rules, a service on a
//! socket of this host), is never stranded while bubblewrap works.

use crate::backend::docker::placement::{self, Remote};
use crate::backend::{self, Selected};
use crate::config::{BackendChoice, ImageRef};
use crate::plan::{LaunchPlan, Network};

use super::RunError;

/// The backend of a run and what led to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub selected: Selected,
    /// Docker's engine cannot see this host's files: every zone is shipped to it.
    pub engine: Option<Remote>,
    /// Why `auto` passed docker over, when it did.
    pub instead_of_docker: Option<String>,
}

impl Choice {
    /// Says, once per process, why `auto` passed docker over: a session's every call or a
    /// run's every child would otherwise repeat it.
    pub fn tell(&self) {
        static SAID: std::sync::Once = std::sync::Once::new();
        if let Some(why) = &self.instead_of_docker {
            SAID.call_once(|| eprintln!("workcell: running on {} because docker cannot run this here: {why} (`--backend` chooses)", self.selected.name()));
        }
    }

    /// The reason, as `workcell plan` shows it.
    pub fn reason(&self, choice: BackendChoice) -> String {
        match (&self.instead_of_docker, &self.engine, choice) {
            (Some(why), _, _) => format!("docker cannot run this here: {why}"),
            (None, Some(engine), _) => format!("{engine}: zones are shipped to it"),
            (None, None, BackendChoice::Auto) if self.selected == Selected::Docker => "the Docker daemon answers on this host: zones are bound".into(),
            (None, None, BackendChoice::Auto) => "chosen by `auto`".into(),
            (None, None, _) => "named by --backend or `defaults.backend`".into(),
        }
    }
}

/// Chooses the backend of `plan`; `service` names the run's service that reaches workcell
/// through a socket on this host, if any (an MCP session's sandbox, a child worker, a pool).
pub fn choose(choice: BackendChoice, plan: &LaunchPlan, service: Option<&'static str>, require_os_sandbox: bool) -> Result<Choice, RunError> {
    let picked = backend::pick(choice, plan, require_os_sandbox)?;
    let chosen = Choice { selected: picked.selected, engine: None, instead_of_docker: picked.instead_of_docker };
    if chosen.selected != Selected::Docker {
        return Ok(chosen);
    }
    let Some(engine) = placement::remote().map_err(|e| RunError::Backend(e.into()))? else { return Ok(chosen) };
    match needs_local_engine(plan, service) {
        Some(need) if choice == BackendChoice::Auto => {
            let why = format!("{engine}, and {need} needs the engine on this host");
            let selected = backend::instead_of_docker(plan, require_os_sandbox, &why)?;
            Ok(Choice { selected, engine: None, instead_of_docker: Some(why) })
        }
        // Named: shipped, or refused with the whole reason and its way out (`run::ship`).
        _ => Ok(Choice { engine: Some(engine), ..chosen }),
    }
}

/// What of this run a remote engine cannot carry out (the refusals of `run::ship` and
/// `LaunchPlan::ship`), in a few words.
fn needs_local_engine(plan: &LaunchPlan, service: Option<&'static str>) -> Option<&'static str> {
    if plan.image == ImageRef::Host {
        Some("`image: host`")
    } else if plan.network == Network::Proxied {
        Some("network rules")
    } else {
        service
    }
}
