//! No isolation: the command runs directly on the host, in the project directory, with the
//! plan's environment only. Chosen explicitly, never by surprise; a warning says so.

use std::process::Command;

use super::BackendError;
use crate::plan::LaunchPlan;

/// Runs the plan's command unisolated; returns its exit status.
pub fn run(plan: &LaunchPlan) -> Result<i32, BackendError> {
    eprintln!("workcell: warning: running WITHOUT isolation (--backend none): the command can see and change everything your user can");
    let Some((prog, args)) = plan.command.split_first() else {
        return Err(BackendError::Failed("the plan has no command".into()));
    };
    let mut cmd = Command::new(prog);
    cmd.args(args).env_clear().envs(host_env(plan));
    super::as_worker(&mut cmd, plan);
    match crate::backend::spawn_exclusive(|| cmd.spawn()).and_then(|mut c| c.wait()) {
        Ok(s) => Ok(exit_code_of(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(super::outcome::Explained::NotFound(prog.clone()).report()),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Ok(super::outcome::Explained::NotExecutable(prog.clone()).report()),
        Err(e) => Err(BackendError::Io { what: format!("cannot start {prog}"), source: e }),
    }
}

/// The shell convention: the exit code, or 128 + the signal that ended the process.
pub fn exit_code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Runs the plan's command unisolated with output captured.
pub fn run_captured(plan: &LaunchPlan) -> Result<super::Captured, BackendError> {
    let Some((prog, args)) = plan.command.split_first() else {
        return Err(BackendError::Failed("the plan has no command".into()));
    };
    let mut cmd = Command::new(prog);
    cmd.args(args).env_clear().envs(host_env(plan));
    super::as_worker(&mut cmd, plan);
    super::capture(cmd, plan.limits.timeout)
}

/// The plan's environment with paths under the broker mount point rewritten to the broker's
/// host directory: without a boundary nothing is mounted, so the worker must use host paths.
fn host_env(plan: &LaunchPlan) -> std::collections::BTreeMap<String, String> {
    let point = crate::plan::BROKER_MOUNT_POINT;
    let Some(m) = plan.mounts.iter().find(|m| m.target == point) else { return plan.env.clone() };
    let host = m.source.to_string_lossy();
    plan.env.iter().map(|(k, v)| (k.clone(), v.strip_prefix(point).map(|rest| format!("{host}{rest}")).unwrap_or_else(|| v.clone()))).collect()
}
