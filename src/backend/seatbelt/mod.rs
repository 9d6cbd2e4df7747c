//! Seatbelt backend (macOS `sandbox-exec`): the plan rendered as an SBPL profile.
//!
//! Seatbelt cannot remap paths, so zones appear at their **host** paths here (unlike docker
//! and bwrap); the profile allows reads of the listed system folders and the readable zones,
//! writes only to writable zones (less the project's control files) and a private temp dir,
//! Unix sockets only to the broker's, and the network only when the plan opens it.
//!
//! Jobs: [`render`] the profile and its `-D` parameters, [`env`] the worker's environment,
//! [`pty`] the worker's session and `-t` terminal, [`sexp`] and [`audit`] reading a profile
//! back to check it (all pure or platform-neutral, tested on any host); `macos` probes and
//! spawns `sandbox-exec`, the only part that runs only on a Mac.

use std::path::PathBuf;

use super::BackendError;
use crate::plan::{LaunchPlan, Network, DEFAULT_MEMORY, DEFAULT_PIDS};

pub mod audit;
pub mod env;
#[cfg(target_os = "macos")]
mod macos;
pub mod pty;
pub mod render;
pub mod sexp;

pub use render::render_profile;

/// The static part of every profile (deny by default; what any process needs to start).
pub const BASE_PROFILE: &str = include_str!("../../../policies/seatbelt-base.sbpl");

/// The `sandbox-exec` binary.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// Parameter naming the run's private, writable temp directory.
pub const TMP_PARAM: &str = "WORKCELL_TMP";

/// A rendered Seatbelt profile and the parameters it references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatbeltProfile {
    /// SBPL text: the base profile plus generated rules.
    pub profile: String,
    /// `(NAME, VALUE)` pairs passed as `sandbox-exec -D NAME=VALUE`.
    pub params: Vec<(String, String)>,
}

/// Why a Seatbelt run cannot go ahead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeatbeltError {
    #[error("the zone's host path '{0}' contains ',', ':' or a control character, which would make WORKCELL_ZONES ambiguous under Seatbelt (zones appear at their host paths); rename the directory")]
    AmbiguousZonePath(String),
}

/// The run's private temp directory on the host (created by the run, removed after it).
pub fn private_tmp(plan: &LaunchPlan) -> PathBuf {
    PathBuf::from(format!("/private/tmp/workcell-{}", plan.run_id))
}

/// What the plan asks for that Seatbelt does not enforce, in words for `plan`, `doctor` and
/// a warning at run time. `explicit_only`: leave out limits the plan has only by default.
pub fn unenforced(plan: &LaunchPlan, explicit_only: bool) -> Vec<String> {
    let mut out = Vec::new();
    let l = &plan.limits;
    if let Some(m) = l.memory_bytes.filter(|m| !(explicit_only && *m == DEFAULT_MEMORY)) {
        out.push(format!("memory limit ({m} bytes): macOS has no per-sandbox memory limit"));
    }
    if let Some(p) = l.pids.filter(|p| !(explicit_only && *p == DEFAULT_PIDS)) {
        out.push(format!("pids limit ({p}): macOS has no per-sandbox process limit"));
    }
    if let Some(c) = l.cpus {
        out.push(format!("cpus limit ({c}): macOS has no per-sandbox CPU limit"));
    }
    if plan.network == Network::Proxied {
        out.push("network allowlist: the egress proxy is not wired to Seatbelt; the worker has no network".into());
    }
    if !explicit_only {
        out.extend(GENERAL.iter().map(|s| s.to_string()));
    }
    out
}

/// Limits of the backend itself, whatever the plan.
pub const GENERAL: &[&str] = &[
    "timeout and signals reach the worker's session (its process group): a process that calls setsid() leaves it and may outlive the run",
    "the worker runs as the user who started workcell (the plan's uid:gid is not applied)",
    "a -t run's pty keeps the size it started with (window resizes are not passed on)",
];

/// The variables [`env::worker_env`] rewrites.
const REWRITTEN_ENV: &[&str] = &["HOME", "TMPDIR", "WORKCELL_ZONES", "WORKCELL_BROKER"];

/// The worker's working directory on the host: zones are at their host paths here.
pub fn host_workdir(plan: &LaunchPlan) -> PathBuf {
    let best = plan
        .mounts
        .iter()
        .filter_map(|m| {
            let rest = plan.workdir.strip_prefix(m.target.trim_end_matches('/'))?;
            (rest.is_empty() || rest.starts_with('/')).then_some((m, rest))
        })
        .max_by_key(|(m, _)| m.target.len());
    match best {
        Some((m, "")) => m.source.clone(),
        Some((m, rest)) => m.source.join(rest.trim_start_matches('/')),
        None => env::home_dir(plan),
    }
}

/// The `sandbox-exec` argv for `plan` (argv\[0\] is `sandbox-exec`).
pub fn render_argv(plan: &LaunchPlan) -> Vec<String> {
    let sp = render_profile(plan);
    let mut argv = vec![SANDBOX_EXEC.to_string(), "-p".to_string(), sp.profile];
    for (k, v) in sp.params {
        argv.push("-D".into());
        argv.push(format!("{k}={v}"));
    }
    argv.push("--".into());
    argv.extend(plan.command.iter().cloned());
    argv
}

/// The printable Seatbelt rendering of `plan` for `workcell plan --backend seatbelt`. It is
/// itself a profile `sandbox-exec -f` accepts: everything else is `;` comments, the
/// parameters as `; -D NAME=VALUE` lines (the probe procedure in docs/backends.md, "Checking the Seatbelt profile on a Mac", reads them).
pub fn plan_text(plan: &LaunchPlan) -> String {
    let sp = render_profile(plan);
    let mut out = String::from("; Seatbelt profile (zones appear at their host paths)\n");
    out.push_str(&sp.profile);
    out.push_str("\n; parameters (sandbox-exec -D NAME=VALUE)\n");
    for (k, v) in &sp.params {
        out.push_str(&format!("; -D {k}={}\n", one_line(v)));
    }
    if let Ok(env) = env::worker_env(plan) {
        // Only what Seatbelt rewrites (the rest is the plan's, and may hold secrets).
        out.push_str("\n; environment rewritten to host paths\n");
        for (k, v) in env.iter().filter(|(k, _)| REWRITTEN_ENV.contains(&k.as_str())) {
            out.push_str(&format!("; {k}={}\n", one_line(v)));
        }
    }
    out.push('\n');
    for w in unenforced(plan, false) {
        out.push_str(&format!("; not enforced by seatbelt: {w}\n"));
    }
    let cmd = shlex::try_join(plan.command.iter().map(String::as_str)).unwrap_or_default();
    out.push_str(&format!("; command, in {}: sandbox-exec -p PROFILE -D ... -- {}\n", one_line(&host_workdir(plan).to_string_lossy()), one_line(&cmd)));
    out
}

/// `s` on one line: a line break in a path would end the `;` comment and put the rest of the
/// path into the printed profile as rules.
fn one_line(s: &str) -> String {
    if s.chars().any(char::is_control) {
        s.escape_debug().to_string()
    } else {
        s.to_string()
    }
}

/// Whether `sandbox-exec` is usable here.
pub fn probe() -> Result<(), BackendError> {
    #[cfg(target_os = "macos")]
    {
        macos::probe()
    }
    #[cfg(not(target_os = "macos"))]
    {
        Err(BackendError::Unavailable {
            backend: "seatbelt",
            reason: "Seatbelt (sandbox-exec) exists only on macOS".into(),
            fix: "On Linux use the docker or bwrap backend.".into(),
        })
    }
}

/// Runs the plan under `sandbox-exec`, its output to `output`, under the shared supervision
/// loop ([`super::supervise`]); works only on macOS.
pub fn run(plan: &LaunchPlan, output: super::Output, attached: super::Attached<'_>) -> Result<super::Finished, BackendError> {
    #[cfg(target_os = "macos")]
    {
        macos::run(plan, output, attached)
    }
    #[cfg(not(target_os = "macos"))]
    {
        let _ = (plan, output, attached);
        Err(probe().err().unwrap_or(BackendError::Failed("Seatbelt runs only on macOS".into())))
    }
}
