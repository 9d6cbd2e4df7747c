//! The macOS-only part: probing `sandbox-exec` and running the worker under it. Everything it
//! runs is prepared by platform-neutral code (profile, environment, session and pty).

use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use super::{env, host_workdir, private_tmp, pty, render_argv, unenforced, BackendError, LaunchPlan, SANDBOX_EXEC};
use crate::backend::{EXIT_NOT_FOUND, EXIT_TIMEOUT};

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

enum Event {
    Exited(std::io::Result<std::process::ExitStatus>),
    Signal(i32),
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> BackendError {
    move |source| BackendError::Io { what, source }
}

pub fn run(plan: &LaunchPlan) -> Result<i32, BackendError> {
    probe()?;
    let Some(prog) = plan.command.first() else {
        return Err(BackendError::Failed("the plan has no command".into()));
    };
    let path = plan.env.get("PATH").cloned().unwrap_or_default();
    let found = prog.contains('/') || path.split(':').any(|d| Path::new(d).join(prog).is_file());
    if !found {
        eprintln!("workcell: {}: command not found (PATH={})", crate::term::escape(prog), crate::term::escape(&path));
        return Ok(EXIT_NOT_FOUND);
    }
    for w in unenforced(plan, true) {
        eprintln!("workcell: warning: not enforced by the seatbelt backend: {w}");
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
    if !(plan.interactive || plan.tty) {
        cmd.stdin(Stdio::null());
    }
    // A session of its own (never the user's terminal as controlling terminal); `-t`: a pty.
    let pty = pty::prepare(&mut cmd, plan.tty).map_err(io("cannot prepare the worker's session and terminal".into()))?;
    let signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP])
        .map_err(io("cannot install signal handlers".into()))?;
    let handle = signals.handle();
    // The user's input, read by the relay (a copy: the relay's thread outlives this frame).
    let input = match &pty {
        Some(_) => Some(
            rustix::io::fcntl_dupfd_cloexec(std::io::stdin(), 0)
                .map_err(|e| BackendError::Io { what: "cannot pass the terminal on".into(), source: e.into() })?,
        ),
        None => None,
    };
    let raw = pty.as_ref().and_then(|_| pty::RawMode::enter(std::io::stdin()));
    let mut child = cmd.spawn().map_err(io(format!("cannot start {SANDBOX_EXEC}")))?;
    drop(cmd);
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
    let pid = child.id() as i32;
    let (tx, rx) = mpsc::channel();
    let tx2 = tx.clone();
    std::thread::spawn(move || {
        let mut signals = signals;
        for s in signals.forever() {
            if tx2.send(Event::Signal(s)).is_err() {
                break;
            }
        }
    });
    std::thread::spawn(move || {
        let _ = tx.send(Event::Exited(child.wait()));
    });
    // Seatbelt has no pid namespace: the worker's session (its process group) is the extent
    // the timeout and signals reach.
    let kill = |sig: rustix::process::Signal| {
        if let Some(p) = rustix::process::Pid::from_raw(pid) {
            let _ = rustix::process::kill_process_group(p, sig);
        }
    };
    let deadline = plan.timeout().map(|t| Instant::now() + t);
    let mut timed_out = false;
    let status = loop {
        let ev = match deadline.filter(|_| !timed_out) {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(e) => e,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    timed_out = true;
                    kill(rustix::process::Signal::KILL);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            },
            None => match rx.recv() {
                Ok(e) => e,
                Err(_) => break None,
            },
        };
        match ev {
            Event::Exited(s) => break Some(s),
            Event::Signal(s) => {
                if let Some(sig) = rustix::process::Signal::from_named_raw(s) {
                    kill(sig);
                }
            }
        }
    };
    handle.close();
    // Leftover background processes of the group go with the run.
    kill(rustix::process::Signal::KILL);
    if let Some(done) = relay {
        // The relay ends when the last holder of the pty's slave has gone; one that left the
        // session (setsid) could hold it forever, so the run does not wait for it long.
        let _ = done.recv_timeout(Duration::from_secs(1));
    }
    drop(raw);
    let _ = std::fs::remove_dir_all(&tmp);
    if timed_out {
        eprintln!("workcell: the worker did not finish in time; it was stopped (exit {EXIT_TIMEOUT})");
        return Ok(EXIT_TIMEOUT);
    }
    match status {
        Some(Ok(s)) => Ok(crate::backend::none::exit_code_of(s)),
        Some(Err(e)) => Err(BackendError::Io { what: "cannot wait for sandbox-exec".into(), source: e }),
        None => Err(BackendError::Failed("lost track of sandbox-exec".into())),
    }
}
