//! The two ways a sandbox runs: supervised ([`run`]: workcell's own terminal, signals
//! forwarded into the sandbox, the timeout, the on-demand tool broker) and captured
//! ([`run_captured`]: the shell tool and child workers, output kept in bounded buffers).
//! Both share the setup ([`super::launch`]) and the cgroup v2 handshake
//! ([`super::handshake`]).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::diagnose::explain_bwrap_failure;
use super::handshake::{Channels, KILL_WAIT};
use super::launch::{argv_and_fds, prepare, spawn_bwrap};
use super::{explicit_unenforced, secret_env, BwrapError};
use crate::backend::cgroup::RunCgroup;
use crate::backend::egress::EgressProxy;
use crate::backend::outcome::Explained;
use crate::backend::{BackendError, OnDemand};
use crate::plan::LaunchPlan;

/// How long a worker gets to exit after a forwarded SIGINT/SIGTERM before the sandbox is
/// killed.
const SIGNAL_GRACE: Duration = Duration::from_secs(10);

/// Runs the plan under bwrap with its output captured (the shell tool, child workers):
/// the same sandbox, limits and timeout as [`run`], without a terminal or signal
/// forwarding.
pub(super) fn run_captured(plan: &LaunchPlan, egress: Option<&dyn EgressProxy>) -> Result<crate::backend::Captured, BackendError> {
    let (located, cgroup, support) = prepare(plan)?;
    let (mut argv, held) = argv_and_fds(plan, located)?;
    // The status pipe only for the handshake (cgroup v2, egress): the exit code comes from
    // bwrap's own.
    let channels = Channels::open(&mut argv, cgroup.as_ref(), false, egress)?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env_clear().envs(secret_env(plan));
    crate::backend::as_worker(&mut cmd, plan);
    // The channels outlive the spawn closure: they stay open until the run is over.
    let mut kept: Option<Channels> = None;
    let spawn = |cmd: &mut Command| -> Result<std::process::Child, BackendError> {
        let Some((channels, theirs)) = channels else {
            return Ok(spawn_bwrap(cmd, held, cgroup.as_ref(), located)?);
        };
        let mut child = spawn_bwrap(cmd, held.into_iter().chain(theirs).collect(), cgroup.as_ref(), located)?;
        let channels = kept.insert(channels);
        channels.attach_now(&mut child, cgroup.as_ref()).map_err(|source| BwrapError::NotEntered { stopped: "command", source })?;
        Ok(child)
    };
    let out = crate::backend::capture_with(cmd, plan.limits.timeout, spawn);
    drop(kept);
    let mut out = out?;
    for w in explicit_unenforced(plan, &support) {
        out.stderr.extend_from_slice(format!("workcell: warning: not enforced by the bwrap backend: {w}\n").as_bytes());
    }
    if out.exit_code == 128 + 9 && cgroup.as_ref().is_some_and(RunCgroup::oom_killed) {
        let limit = plan.limits.memory_bytes.unwrap_or_default();
        out.stderr.extend_from_slice(Explained::OutOfMemory(Some(limit)).message().as_bytes());
    }
    Ok(out)
}

/// Runs the plan under bwrap; returns the worker's exit status (124 on timeout, 126/127
/// when the command cannot be executed / is not found, 125 when bwrap itself fails).
pub(super) fn run(plan: &LaunchPlan, service: Option<&dyn OnDemand>, egress: Option<&dyn EgressProxy>) -> Result<i32, BackendError> {
    let (located, cgroup, support) = prepare(plan)?;
    for w in explicit_unenforced(plan, &support) {
        eprintln!("workcell: warning: not enforced by the bwrap backend: {w}");
    }

    // bwrap reports the sandbox's init pid and, when the command ran, its exit code on the
    // status pipe; no exit code means bwrap itself failed (setup or exec).
    let (mut argv, held) = argv_and_fds(plan, located)?;
    let (mut channels, theirs) = Channels::open(&mut argv, cgroup.as_ref(), true, egress)?.expect("a status pipe was asked for");

    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env_clear().envs(secret_env(plan));
    crate::backend::as_worker(&mut cmd, plan);
    let stdin_is_tty = std::io::IsTerminal::is_terminal(&std::io::stdin());
    if !(plan.interactive || plan.tty) {
        cmd.stdin(Stdio::null());
    }
    // Its own process group, so a terminal's Ctrl-C reaches only workcell, which forwards it
    // into the sandbox; with a terminal the worker must stay in the foreground group.
    let own_group = !(plan.tty || (plan.interactive && stdin_is_tty));
    if own_group {
        cmd.process_group(0);
    }
    // Signals are registered before the spawn so that none is lost in between; they arrive
    // on a self-pipe that the supervision loop polls with everything else.
    let mut signals = signal_pipe()?;
    let mut child = spawn_bwrap(&mut cmd, held.into_iter().chain(theirs).collect(), cgroup.as_ref(), located)?;
    let bwrap_pid = child.id() as i32;
    let bwrap_pidfd = rustix::process::Pid::from_raw(bwrap_pid).and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());

    // One thread supervises: it sleeps in poll(2) on bwrap's pidfd, the status pipe and
    // the signal pipe, until bwrap exits or the deadline passes.
    let mut sup = Supervisor { bwrap_pid, bwrap_pidfd, init: None, own_group };
    let mut deadline = plan.timeout().map(|t| Instant::now() + t);
    let mut timed_out = false;
    let mut signalled: Option<i32> = None;
    let mut service_started = false;
    let mut limit_failure = None;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(BwrapError::Wait)? {
            break s;
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| d <= now) {
            if signalled.is_none() {
                timed_out = true;
            }
            // The deadline, or a worker that ignored a forwarded signal for the whole
            // grace period: stop everything.
            sup.kill_all();
            deadline = None;
            continue;
        }
        // Without a pidfd (Linux < 5.3) bwrap's exit is noticed by polling every 10 ms.
        let mut wait = deadline.map(|d| d - now);
        if sup.bwrap_pidfd.is_none() {
            wait = Some(wait.map_or(NO_PIDFD_POLL, |w| w.min(NO_PIDFD_POLL)));
        }
        let wake = service.filter(|_| !service_started).map(|s| s.wake_fd());
        let ready = wait_readable(sup.bwrap_pidfd.as_ref(), channels.status.fd(), signals.get_read(), wake, wait)?;
        if ready.wake {
            if let Some(s) = service {
                // The worker connected: serve it. If the service cannot start, the worker's
                // request fails (its connection is closed with the socket at the end).
                if let Err(e) = s.start() {
                    eprintln!("workcell: the tool broker could not start: {e}");
                }
                service_started = true;
            }
        }
        if ready.status {
            if let Some(sandbox) = channels.status.read_available() {
                sup.started(sandbox.pid, sandbox.pid_ns);
                if let Err(e) = channels.started(cgroup.as_ref(), bwrap_pid, sandbox) {
                    // The sandbox is still blocked: kill it before it is released.
                    sup.kill_all();
                    limit_failure = Some(e);
                }
            }
        }
        if ready.signal {
            for sig in signals.pending() {
                if signalled.is_some() || !sup.forward(sig) {
                    // A second signal, or nothing to forward to yet: stop now.
                    sup.kill_all();
                    deadline = None;
                } else if deadline.is_none_or(|d| d > Instant::now() + SIGNAL_GRACE) {
                    deadline = Some(Instant::now() + SIGNAL_GRACE);
                }
                signalled = Some(sig);
            }
        }
    };
    drop(signals);
    // bwrap has exited, so the pipe's write end is closed: read what is left.
    channels.status.read_to_end();
    // bwrap exiting normally implies its init (and so the pid namespace) is gone; after a
    // kill, make sure before reporting, so that "nothing left running" holds on return.
    sup.wait_init_gone();

    if let Some(e) = limit_failure {
        return Err(BwrapError::NotEntered { stopped: "worker", source: e }.into());
    }
    if timed_out {
        return Ok(Explained::TimedOut(plan.timeout()).report());
    }
    if let Some(code) = channels.status.exit_code() {
        if code == 128 + 9 && cgroup.as_ref().is_some_and(|cg| cg.oom_killed()) {
            Explained::OutOfMemory(plan.limits.memory_bytes).report();
        }
        return Ok(code);
    }
    if let Some(sig) = signalled {
        return Ok(128 + sig);
    }
    let code = crate::backend::none::exit_code_of(status);
    Ok(explain_bwrap_failure(plan, code))
}

/// How often bwrap's exit is checked when the kernel has no pidfds.
const NO_PIDFD_POLL: Duration = Duration::from_millis(10);

type Signals = signal_hook::iterator::backend::SignalDelivery<std::os::unix::net::UnixStream, signal_hook::iterator::exfiltrator::SignalOnly>;

/// SIGINT, SIGTERM and SIGHUP delivered through a self-pipe (signal-hook's), to be
/// polled with the other descriptors.
fn signal_pipe() -> Result<Signals, BwrapError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let fail = BwrapError::Signals;
    let (read, write) = std::os::unix::net::UnixStream::pair().map_err(fail)?;
    read.set_nonblocking(true).map_err(fail)?;
    write.set_nonblocking(true).map_err(fail)?;
    Signals::with_pipe(read, write, signal_hook::iterator::exfiltrator::SignalOnly, [SIGINT, SIGTERM, SIGHUP]).map_err(fail)
}

/// Which of the supervised descriptors have something to say.
struct Ready {
    status: bool,
    signal: bool,
    wake: bool,
}

/// Sleeps until bwrap exits (its pidfd turns readable), the status pipe, the signal pipe
/// or the on-demand service's descriptor has data, or `wait` passes.
fn wait_readable(
    pidfd: Option<&OwnedFd>,
    status: Option<&OwnedFd>,
    signals: &std::os::unix::net::UnixStream,
    wake: Option<std::os::fd::BorrowedFd<'_>>,
    wait: Option<Duration>,
) -> Result<Ready, BwrapError> {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = Vec::with_capacity(4);
    fds.push(PollFd::new(signals, PollFlags::IN));
    let status_at = status.map(|s| {
        fds.push(PollFd::new(s, PollFlags::IN));
        fds.len() - 1
    });
    let wake_at = wake.as_ref().map(|w| {
        fds.push(PollFd::new(w, PollFlags::IN));
        fds.len() - 1
    });
    if let Some(p) = pidfd {
        fds.push(PollFd::new(p, PollFlags::IN));
    }
    let timeout = wait.map(|w| rustix::event::Timespec { tv_sec: w.as_secs() as i64, tv_nsec: i64::from(w.subsec_nanos()) });
    match rustix::event::poll(&mut fds, timeout.as_ref()) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(e) => return Err(BwrapError::Poll(e)),
    }
    let has = |i: Option<usize>| i.is_some_and(|i| !fds[i].revents().is_empty());
    Ok(Ready { signal: !fds[0].revents().is_empty(), status: has(status_at), wake: has(wake_at) })
}

/// Handles on the running sandbox, for forwarding signals and killing it.
struct Supervisor {
    bwrap_pid: i32,
    /// A pidfd pins the process, so a signal can never hit a recycled pid.
    bwrap_pidfd: Option<OwnedFd>,
    init: Option<Init>,
    own_group: bool,
}

struct Init {
    pid: i32,
    pidfd: Option<OwnedFd>,
    pid_ns: Option<u64>,
}

impl Supervisor {
    fn started(&mut self, pid: i32, pid_ns: Option<u64>) {
        let pidfd = rustix::process::Pid::from_raw(pid).and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
        self.init = Some(Init { pid, pidfd, pid_ns });
    }

    /// Sends `sig` to every process of the sandbox except its init (which, as a pid
    /// namespace's init, would ignore it). Returns false when there is nothing to send to.
    fn forward(&self, sig: i32) -> bool {
        let Some(Init { pid, pid_ns: Some(ns), .. }) = &self.init else { return false };
        let Some(signal) = rustix::process::Signal::from_named_raw(sig) else { return false };
        let mut sent = false;
        for p in pids_in_namespace(*ns) {
            if p != *pid {
                if let Some(p) = rustix::process::Pid::from_raw(p) {
                    sent |= rustix::process::kill_process(p, signal).is_ok();
                }
            }
        }
        sent
    }

    /// Kills the whole sandbox: its init (the kernel then kills every process of the pid
    /// namespace) and bwrap itself (`--die-with-parent` covers a sandbox not started yet).
    fn kill_all(&self) {
        if let Some(init) = &self.init {
            send_kill(init.pidfd.as_ref(), init.pid);
        }
        send_kill(self.bwrap_pidfd.as_ref(), self.bwrap_pid);
        if self.own_group {
            // Anything bwrap forked outside the namespaces (nothing, normally).
            if let Some(p) = rustix::process::Pid::from_raw(self.bwrap_pid) {
                let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
            }
        }
    }

    /// Waits (bounded) until the sandbox's init has exited, which the kernel allows only
    /// once every other process of its pid namespace is gone.
    fn wait_init_gone(&self) {
        let Some(init) = &self.init else { return };
        let start = Instant::now();
        match &init.pidfd {
            Some(fd) => {
                let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                let timeout = rustix::event::Timespec { tv_sec: KILL_WAIT.as_secs() as i64, tv_nsec: 0 };
                let _ = rustix::event::poll(&mut fds, Some(&timeout));
            }
            None => {
                while Path::new(&format!("/proc/{}", init.pid)).exists() && start.elapsed() < KILL_WAIT {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

fn send_kill(pidfd: Option<&OwnedFd>, pid: i32) {
    match pidfd {
        Some(fd) => {
            let _ = rustix::process::pidfd_send_signal(fd.as_fd(), rustix::process::Signal::KILL);
        }
        None => {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
    }
}

/// Host pids of the processes in pid namespace `ns` (by the inode of `/proc/PID/ns/pid`).
fn pids_in_namespace(ns: u64) -> Vec<i32> {
    let want = format!("pid:[{ns}]");
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|l| l.as_os_str() == want.as_str()))
        .collect()
}
