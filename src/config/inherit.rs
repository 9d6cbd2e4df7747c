//! Which Docker runtime a run gets. Runtimes nest like sandboxes: a project whose
//! `defaults.runtime` is `runsc` runs every worker under gVisor, and a run started by another
//! run (a child worker, a shell command of the tool service) runs under its caller's runtime,
//! so a worker put under gVisor cannot hand its work to a child that runs under runc, the host
//! kernel's namespaces only. workcell cannot rank runtimes it does not know (is `kata`
//! stronger than `runsc`?), so beneath a runtime a worker may only repeat it, never name
//! another. Only `--runtime`, the person at the command line, replaces it for a whole run.

use std::fmt;

/// What set the runtime a worker may not replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Floor {
    /// The project's `defaults.runtime`.
    Defaults,
    /// The run that starts this one.
    Caller,
}

impl fmt::Display for Floor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Floor::Defaults => "the project's defaults.runtime",
            Floor::Caller => "the run that starts it",
        })
    }
}

/// A worker names a runtime other than the one it must run under.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "worker '{worker}' names the runtime '{wanted}', but it must run under '{floor_runtime}', set by {floor}: a worker may repeat that runtime, never replace it (workcell cannot tell whether '{wanted}' isolates as well). Remove `runtime:` from the worker's file, or set it to '{floor_runtime}'"
)]
pub struct RuntimeChanged {
    pub worker: String,
    pub wanted: String,
    pub floor_runtime: String,
    pub floor: Floor,
}

/// The runtime of a run that must run under `floor_runtime`: that one, which the worker's
/// own `runtime:` (`named`) may repeat but not replace.
pub fn inherit(worker: Option<&str>, named: Option<String>, floor_runtime: &str, floor: Floor) -> Result<String, RuntimeChanged> {
    match named {
        Some(wanted) if wanted != floor_runtime => {
            Err(RuntimeChanged { worker: worker.unwrap_or("(shell command)").to_string(), wanted, floor_runtime: floor_runtime.to_string(), floor })
        }
        _ => Ok(floor_runtime.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inherits_and_may_repeat() {
        assert_eq!(inherit(Some("c"), None, "runsc", Floor::Caller), Ok("runsc".into()));
        assert_eq!(inherit(Some("c"), Some("runsc".into()), "runsc", Floor::Caller), Ok("runsc".into()));
    }

    #[test]
    fn may_not_replace() {
        let e = inherit(Some("c"), Some("runc".into()), "runsc", Floor::Caller).unwrap_err();
        assert_eq!(e.worker, "c");
        assert!(e.to_string().contains("must run under 'runsc', set by the run that starts it"), "{e}");
        let e = inherit(Some("w"), Some("runc".into()), "runsc", Floor::Defaults).unwrap_err();
        assert!(e.to_string().contains("set by the project's defaults.runtime"), "{e}");
    }
}
