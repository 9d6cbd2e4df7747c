//! The macOS-only part: probing `sandbox-exec` and running the worker under it. Everything it
//! runs is prepared by platform-neutral code (profile, environment, session and pty).

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::Duration;

use super::{env, host_workdir, private_tmp, pty, render_argv, unenforced, BackendError, LaunchPlan, SANDBOX_EXEC};
use crate::backend::none::ProcessGroup;
use crate::backend::supervise::{Grouping, Supervisor};
use crate::backend::{Attached, Finished, Output, EXIT_NOT_FOUND};

pub fn probe() -> Result<(), BackendError> {
    // The reason sandbox-exec cannot be used, found once per process (`None`: it works).
    static PROBED: OnceLock<Option<String>> = OnceLock::new();
    let unusable =
        PROBED.get_or_init(|| match Command::new(SANDBOX_EXEC).args(["-p", "(version 1)(allow default)", "/usr/bin/true"]).stdin(Stdio::null()).output() {
            Err(e) => Some(format!("cannot run {SANDBOX_EXEC}: {e}")),
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(format!("{SANDBOX_EXEC} failed: {}", String::from_utf8_lossy(&out.stderr).trim())),
        });
    match unusable {
        None => Ok(()),
        Some(reason) => Err(BackendError::Unavailable {
            backend: "seatbelt",
            reason: reason.clone(),
            fix: "sandbox-exec ships with macOS; if it is refused (e.g. already inside a sandbox), use the docker backend.".into(),
        }),
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> BackendError {
    move |source| BackendError::Io { what, source }
}

/// Runs the plan under `sandbox-exec` in a session of its own (with `-t`, on a pty of its
/// own): Seatbelt has no pid namespace, so that session's process group is what the timeout,
/// forwarded signals and the end of the run reach.
pub fn run(plan: &LaunchPlan, output: Output, attached: Attached<'_>) -> Result<Finished, BackendError> {
    probe()?;
    let Some(prog) = plan.command.first() else {
        return Err(BackendError::Failed("the plan has no command".into()));
    };
    let mut sup = Supervisor::new(plan, output, attached)?;
    let path = plan.env.get("PATH").cloned().unwrap_or_default();
    let found = prog.contains('/') || path.split(':').any(|d| Path::new(d).join(prog).is_file());
    if !found {
        sup.notes().say(&format!("workcell: {}: command not found (PATH={})", crate::term::escape(prog), crate::term::escape(&path)));
        return Ok(sup.finished_early(EXIT_NOT_FOUND));
    }
    for w in unenforced(plan, true) {
        sup.notes().say(&format!("workcell: warning: not enforced by the seatbelt backend: {w}"));
    }
    let env = env::worker_env(plan)?;
    let tmp = private_tmp(plan);
    // create (not create_all): fails if anything, including a planted symlink, is there.
    for dir in [tmp.clone(), env::home_dir(plan), env::tmp_dir(plan)] {
        std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(io(format!("cannot create the private temp dir {}", dir.display())))?;
    }
    let argv = render_argv(plan);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env_clear().envs(&env).current_dir(host_workdir(plan));
    sup.prepare(&mut cmd, plan, Grouping::Session);
    // A session of its own (never the user's terminal as controlling terminal); `-t` on
    // workcell's terminal: a pty.
    let tty = plan.tty && output == Output::Inherit;
    let pty = pty::prepare(&mut cmd, tty).map_err(io("cannot prepare the worker's session and terminal".into()))?;
    // The user's input, read by the relay (a copy: the relay's thread outlives this frame).
    let input = match &pty {
        Some(_) => Some(
            rustix::io::fcntl_dupfd_cloexec(std::io::stdin(), 0)
                .map_err(|e| BackendError::Io { what: "cannot pass the terminal on".into(), source: e.into() })?,
        ),
        None => None,
    };
    let raw = pty.as_ref().and_then(|_| pty::RawMode::enter(std::io::stdin()));
    let spawned = crate::backend::spawn_exclusive(|| cmd.spawn());
    drop(cmd);
    let child = match spawned {
        Ok(child) => child,
        Err(e) => {
            drop(raw);
            remove_private_dirs(plan);
            return Err(io(format!("cannot start {SANDBOX_EXEC}"))(e));
        }
    };
    let relay = match (pty, input) {
        (Some(pty), Some(input)) => {
            pty.copy_size_from(std::io::stdin());
            let (tx, rx) = mpsc::channel::<()>();
            std::thread::spawn(move || {
                let _ = pty.relay(input, std::io::stdout());
                let _ = tx.send(());
            });
            Some(rx)
        }
        _ => None,
    };
    let result = sup.supervise(child, plan, &mut ProcessGroup);
    if let Some(done) = relay {
        // The relay ends when the last holder of the pty's slave has gone; one that left the
        // session (setsid) could hold it forever, so the run does not wait for it long.
        let _ = done.recv_timeout(Duration::from_secs(1));
    }
    drop(raw);
    remove_private_dirs(plan);
    result
}

/// The run's private temp directory (HOME and TMPDIR may lie inside it).
fn remove_private_dirs(plan: &LaunchPlan) {
    let _ = std::fs::remove_dir_all(private_tmp(plan));
}
