//! No isolation: the command runs directly on the host, in the project directory, with the
//! plan's environment only. Chosen explicitly, never by surprise; a warning says so.

use std::process::{Command, ExitStatus};

use super::outcome::Explained;
use super::supervise::{Grouping, Notes, Process, Sandbox, Supervisor};
use super::{Attached, BackendError, Finished, Output};
use crate::plan::LaunchPlan;

/// Runs the plan's command unisolated, in a process group of its own (unless it has the
/// terminal): the timeout and forwarded signals reach the group, and what the worker leaves
/// in it is killed when the run ends. A process that leaves the group (`setsid`) is beyond
/// reach: nothing isolates this backend.
pub fn run(plan: &LaunchPlan, output: Output, attached: Attached<'_>) -> Result<Finished, BackendError> {
    let Some((prog, args)) = plan.command.split_first() else {
        return Err(BackendError::Failed("the plan has no command".into()));
    };
    let mut sup = Supervisor::new(plan, output, attached)?;
    if output == Output::Inherit {
        sup.notes().say("workcell: warning: running WITHOUT isolation (--backend none): the command can see and change everything your user can");
    }
    let mut cmd = Command::new(prog);
    cmd.args(args).env_clear().envs(host_env(plan));
    super::as_worker(&mut cmd, plan);
    sup.prepare(&mut cmd, plan, Grouping::Group);
    match crate::backend::spawn_exclusive(|| cmd.spawn()) {
        Ok(child) => sup.supervise(child, plan, &mut ProcessGroup),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let code = sup.notes().explain(&Explained::NotFound(prog.clone()));
            Ok(sup.finished_early(code))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let code = sup.notes().explain(&Explained::NotExecutable(prog.clone()));
            Ok(sup.finished_early(code))
        }
        Err(e) => Err(BackendError::Io { what: format!("cannot start {prog}"), source: e }),
    }
}

/// The shell convention: the exit code, or 128 + the signal that ended the process.
pub fn exit_code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The extent of an unisolated worker (and of a Seatbelt one): its process group.
pub(crate) struct ProcessGroup;

impl Sandbox for ProcessGroup {
    fn forward(&self, child: &Process, sig: rustix::process::Signal) -> bool {
        child.signal_group(sig);
        true
    }

    fn kill_all(&self, child: &Process) {
        child.signal_group(rustix::process::Signal::KILL);
    }

    fn ended(&mut self, child: &Process) {
        // The leader is reaped, but its group lives on while it has members (the kernel does
        // not hand out a pid still used as a group id), so this reaches only the leftovers.
        if child.own_group {
            child.signal_group(rustix::process::Signal::KILL);
        }
    }

    fn exit_code(&self, status: ExitStatus, _signalled: Option<i32>, _notes: &mut Notes) -> i32 {
        exit_code_of(status)
    }
}

/// The plan's environment with paths under the broker mount point rewritten to the broker's
/// host directory: without a boundary nothing is mounted, so the worker must use host paths.
fn host_env(plan: &LaunchPlan) -> std::collections::BTreeMap<String, String> {
    let point = crate::plan::BROKER_MOUNT_POINT;
    let Some(m) = plan.mounts.iter().find(|m| m.target == point) else { return plan.env.clone() };
    let host = m.source.to_string_lossy();
    plan.env.iter().map(|(k, v)| (k.clone(), v.strip_prefix(point).map(|rest| format!("{host}{rest}")).unwrap_or_else(|| v.clone()))).collect()
}
