//! bubblewrap backend: the plan rendered as a `bwrap` argv and run under workcell's
//! supervision.
//!
//! The worker sees the same filesystem as under Docker: an empty, read-only tmpfs root, the
//! host system directories read-only, workcell's own `/etc/passwd` and `/etc/group`, the
//! zones at their mount points, a private `/tmp`, fresh
//! `/proc` and `/dev` — and nothing else of the host. Every namespace is unshared (the
//! network one is kept only when the plan allows network), all capabilities are dropped,
//! the environment is exactly the plan's, and the sandbox dies with workcell.
//!
//! One file per job: `render` is the pure argv ([`render_argv`]) (snapshot-tested); `locate` finds the
//! binary, its features and whether it works here ([`probe`]); on Linux, `launch` prepares a
//! run (zones, cgroup, descriptors), `handshake` holds bwrap's status and block pipes and
//! the cgroup v2 handshake, `supervise` is what bwrap adds to the shared supervision loop, and
//! `diagnose` explains a command bwrap could not start.

#[cfg(target_os = "linux")]
mod diagnose;
#[cfg(target_os = "linux")]
mod handshake;
#[cfg(target_os = "linux")]
mod launch;
mod locate;
#[cfg(target_os = "linux")]
mod netns;
mod render;
#[cfg(target_os = "linux")]
mod supervise;

use std::path::PathBuf;

use super::BackendError;
use crate::plan::{LaunchPlan, DEFAULT_MEMORY, DEFAULT_PIDS};

#[cfg(target_os = "linux")]
pub use handshake::AttachError;
pub use locate::{locate, probe, Located};
#[cfg(target_os = "linux")]
pub use netns::NetnsError;
#[cfg_attr(not(target_os = "linux"), allow(unused_imports))]
use render::secret_env;
pub use render::{render_argv, render_argv_passed, render_argv_with, shell_line, BwrapFeatures, Passed};

/// Where bwrap is looked for first; distribution packages install it here.
pub const DEFAULT_BWRAP: &str = "/usr/bin/bwrap";

/// Environment variable naming the bwrap binary to use instead of [`DEFAULT_BWRAP`] and
/// `PATH`. A path that does not exist makes the backend unavailable (tests use
/// `WORKCELL_BWRAP=/nonexistent` to simulate a machine without bubblewrap).
pub const BWRAP_ENV: &str = "WORKCELL_BWRAP";

/// Why a bwrap run could not go ahead. Each message names what was wrong and what to do;
/// the underlying error, when there is one, is also the [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
pub enum BwrapError {
    #[error("refusing to run {}: it lies inside the zone directory {} ({zone}), where a worker could have replaced it; install bwrap outside your zones or set {BWRAP_ENV}", bwrap.display(), zone_dir.display())]
    InsideZone { bwrap: PathBuf, zone_dir: PathBuf, zone: String },
    #[error(
        "the worker runs as uid {uid}, which cannot reach the zone {zone} ({}): {} is mode {mode:o}, owner uid {owner}. bwrap opens zones as the worker's user; let it through (chmod o+x {}), set defaults.user to a user that can, or use the docker backend",
        zone_dir.display(), dir.display(), dir.display()
    )]
    ZoneUnreachable { uid: u32, zone: String, zone_dir: PathBuf, dir: PathBuf, mode: u32, owner: u32 },
    #[error("cannot pass the zone {zone} to bwrap: {source}")]
    PassZone {
        zone: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot pass {path} to bwrap: {source}")]
    PassData {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[cfg(target_os = "linux")]
    #[error(transparent)]
    Seccomp(#[from] super::seccomp::SeccompError),
    #[error("cannot create a pipe: {0}")]
    Pipe(#[source] rustix::io::Errno),
    #[error("cannot set up bwrap's pipes: {0}")]
    PassPipes(#[source] rustix::io::Errno),
    #[error("cannot start {}: {source}", path.display())]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The run's cgroup could not be created, written or entered before the spawn.
    #[error("cannot enforce the run's limits: {0}")]
    Limits(#[source] super::cgroup::CgroupError),
    /// The sandbox could not be moved into the run's cgroup (v2) or given its egress proxy,
    /// and was killed while it still waited: `stopped` names what never started.
    #[cfg(target_os = "linux")]
    #[error("{source}; the {stopped} was stopped before it started")]
    NotEntered {
        stopped: &'static str,
        #[source]
        source: AttachError,
    },
}

/// The printable bwrap rendering of `plan` for `workcell plan --backend bwrap`.
pub fn plan_text(plan: &LaunchPlan) -> String {
    let (bwrap, features) = match locate() {
        Ok(l) => (l.path.clone(), l.features),
        Err(_) => (PathBuf::from("bwrap"), BwrapFeatures::default()),
    };
    let mut out = format!("# bwrap command line (run id {})\n{}\n", plan.run_id, shell_line(&render_argv_with(plan, &bwrap, features)));
    out.push_str("# at run time also, on descriptors: the seccomp filter, /etc/passwd and /etc/group (root, nobody, the worker)\n");
    out.push_str(&format!("# limits: {}\n", super::cgroup::Support::detect().summary()));
    for w in unenforced_limits(plan) {
        out.push_str(&format!("# not enforced by bwrap: {w}\n"));
    }
    out
}

/// Limits in `plan` that bwrap cannot enforce here, one human-readable line each.
/// The timeout is always enforced (by workcell); memory, cpus and pids need a cgroup of the
/// run's own (see [`cgroup`](super::cgroup)).
pub fn unenforced_limits(plan: &LaunchPlan) -> Vec<String> {
    unenforced_limits_with(plan, super::cgroup::Support::detect())
}

/// [`unenforced_limits`] for a given cgroup support (pure).
pub fn unenforced_limits_with(plan: &LaunchPlan, support: &super::cgroup::Support) -> Vec<String> {
    use super::cgroup::Controller;
    let l = &plan.limits;
    super::cgroup::unenforceable(l, support)
        .into_iter()
        .map(|(c, why)| match c {
            Controller::Memory => format!("memory limit ({} bytes): {why}; use the docker backend to enforce it", l.memory_bytes.unwrap_or_default()),
            Controller::Cpu => format!("cpu limit ({} cpus): {why}; use the docker backend to enforce it", l.cpus.unwrap_or_default()),
            // RLIMIT_NPROC counts every process of the uid on the whole host and is ignored
            // for root, so it is no substitute.
            Controller::Pids => format!(
                "process limit ({}): {why} (RLIMIT_NPROC is per host user, so it is not used); the pid namespace still ends every process with the run; use the docker backend to enforce it",
                l.pids.unwrap_or_default()
            ),
        })
        .collect()
}

/// The limits the user asked for explicitly (not workcell's defaults, which are only logged)
/// that bwrap cannot enforce, as one short line: a run says it every time, so the reasons in
/// full stay in `plan --backend bwrap` and `doctor` ([`unenforced_limits_with`]). `None` when
/// every such limit is enforced.
pub fn unenforced_note(limits: &crate::config::Limits, support: &super::cgroup::Support) -> Option<String> {
    use super::cgroup::Controller;
    let mut asked = *limits;
    if asked.memory_bytes == Some(DEFAULT_MEMORY) {
        asked.memory_bytes = None;
    }
    if asked.pids == Some(DEFAULT_PIDS) {
        asked.pids = None;
    }
    let missing = super::cgroup::unenforceable(&asked, support);
    let names: Vec<String> = missing
        .iter()
        .map(|(c, _)| match c {
            Controller::Memory => "the memory limit",
            Controller::Cpu => "the cpu limit",
            Controller::Pids => "the process limit",
        })
        .map(String::from)
        .collect();
    let mut reasons: Vec<String> = Vec::new();
    for (_, why) in &missing {
        let short = why.short();
        if !reasons.contains(&short) {
            reasons.push(short);
        }
    }
    let (listed, them) = match names.as_slice() {
        [] => return None,
        [one] => (one.clone(), "it"),
        [rest @ .., last] => (format!("{} and {last}", rest.join(", ")), "them"),
    };
    Some(format!("not enforced by the bwrap backend: {listed} ({}); --backend docker enforces {them}", reasons.join("; ")))
}

/// Runs the plan under bwrap, its output to `output`; the exit status is the worker's (124 on
/// timeout, 126/127 when the command cannot be executed / is not found, 125 when bwrap itself
/// fails).
pub fn run(plan: &LaunchPlan, output: super::Output, attached: super::Attached<'_>) -> Result<super::Finished, BackendError> {
    #[cfg(target_os = "linux")]
    {
        supervise::run(plan, output, attached)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (plan, output, attached);
        Err(not_linux())
    }
}

/// The runner uses Linux-only interfaces (pidfds, pipe2, /proc, seccomp), so it is compiled
/// only there; the renderer stays portable for `workcell plan` and the snapshot tests.
#[cfg(not(target_os = "linux"))]
fn not_linux() -> BackendError {
    BackendError::Unavailable { backend: "bwrap", reason: "bubblewrap runs only on Linux".into(), fix: "On macOS use the docker or seatbelt backend.".into() }
}
