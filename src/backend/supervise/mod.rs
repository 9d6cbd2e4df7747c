//! One supervision loop for every backend whose worker is a host process (bwrap, none,
//! Seatbelt), the same for a run on workcell's own terminal ([`Output::Inherit`]) and one
//! whose output is kept ([`Output::Capture`]): the timeout, signals forwarded with a grace
//! period, the on-demand tool broker, bounded output buffers, and workcell's own words
//! ([`Notes`]). What a backend adds (bwrap's status pipe and pid namespace, a process group,
//! a session) comes through the [`Sandbox`] trait.
//!
//! One thread does it all: it sleeps in poll(2) on the child's pidfd, the signal pipe, the
//! output pipes, the broker's socket and the backend's own descriptor.

mod notes;
mod poll;

use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use notes::Notes;
use poll::{signal_pipe, Signals, Watch};

use super::capture::{Bounded, OUTPUT_CAP};
use super::outcome::Explained;
use super::{BackendError, OnDemand};
use crate::plan::LaunchPlan;

/// Where a run's output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Output {
    /// workcell's own terminal: stdout and stderr inherited, signals forwarded.
    #[default]
    Inherit,
    /// Kept in bounded buffers for the caller (the shell tool, child workers): at most
    /// [`OUTPUT_CAP`] bytes of each stream; standard input is the plan's `stdin`, else empty.
    Capture,
}

/// The host-side services a run is attached to.
#[derive(Default, Clone, Copy)]
pub struct Attached<'a> {
    /// The tool broker: started when the worker first connects (host-process backends), or
    /// before the worker (docker).
    pub broker: Option<&'a dyn OnDemand>,
    /// The egress proxy of a plan whose network is
    /// [`Proxied`](crate::plan::Network::Proxied): the backend makes the listener only the
    /// worker can reach and calls [`EgressProxy::serve`](crate::backend::egress::EgressProxy)
    /// before the worker starts.
    pub egress: Option<&'a dyn crate::backend::egress::EgressProxy>,
    /// Where a run on a remote engine puts the writable zones it brings back (docker only).
    pub returns: Option<&'a crate::backend::docker::ship::Returns>,
}

impl std::fmt::Debug for Attached<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attached").field("broker", &self.broker.is_some()).field("egress", &self.egress.is_some()).finish()
    }
}

/// How a run ended: its exit status and, for a captured run, its output (at most
/// [`OUTPUT_CAP`] bytes of each stream, and how many bytes beyond it were cut).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Finished {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_cut: u64,
    pub stderr_cut: u64,
    pub timed_out: bool,
}

/// Why supervising a run failed (exit 125).
#[derive(Debug, thiserror::Error)]
pub enum SuperviseError {
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    #[error("cannot wait for the sandbox: {0}")]
    Poll(#[source] rustix::io::Errno),
    #[error("cannot wait for the worker: {0}")]
    Wait(#[source] std::io::Error),
    #[error("cannot read the worker's output: {0}")]
    Pipe(#[source] rustix::io::Errno),
}

/// How long a worker gets to exit after a forwarded SIGINT/SIGTERM/SIGHUP before the sandbox
/// is killed.
const SIGNAL_GRACE: Duration = Duration::from_secs(10);

/// How long captured output is still read once the sandbox is gone. A pipe whose writers
/// all died ends at once; one held open by a process that left the sandbox's reach (a
/// `setsid` under `--backend none`) is closed after this, so that it cannot hold the run.
const OUTPUT_LINGER: Duration = Duration::from_secs(2);

/// How often the child's exit is checked where the kernel has no pidfds.
const NO_PIDFD_POLL: Duration = Duration::from_millis(10);

/// What a backend adds to the supervision of its host process.
pub(crate) trait Sandbox {
    /// A descriptor of the backend's own to watch (bwrap's status pipe).
    fn watch_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
    /// [`Sandbox::watch_fd`] has something to read. An error stops the run: the sandbox is
    /// killed and the run fails with it.
    fn readable(&mut self, _child: &Process) -> Result<(), BackendError> {
        Ok(())
    }
    /// Sends `sig` to the worker; false when there is nothing to send it to yet.
    fn forward(&self, child: &Process, sig: rustix::process::Signal) -> bool;
    /// Kills everything of the sandbox that can still be reached.
    fn kill_all(&self, child: &Process);
    /// The child has exited: make sure nothing of the sandbox is left that it can reach.
    fn ended(&mut self, child: &Process);
    /// The run's exit status from the child's; `signalled` is the signal forwarded, if any.
    fn exit_code(&self, status: ExitStatus, signalled: Option<i32>, notes: &mut Notes) -> i32;
}

/// The child process being supervised.
pub(crate) struct Process {
    pub pid: i32,
    /// A pidfd pins the process, so a signal can never hit a recycled pid.
    pub pidfd: Option<OwnedFd>,
    /// Whether it leads a process group (or session) of its own.
    pub own_group: bool,
}

impl Process {
    /// Sends `sig` to the child alone.
    pub fn signal(&self, sig: rustix::process::Signal) {
        send(self.pidfd.as_ref(), self.pid, sig);
    }

    /// Sends `sig` to the child's process group (to the child alone without a group).
    pub fn signal_group(&self, sig: rustix::process::Signal) {
        match rustix::process::Pid::from_raw(self.pid) {
            Some(p) if self.own_group => {
                let _ = rustix::process::kill_process_group(p, sig);
            }
            _ => self.signal(sig),
        }
    }
}

/// Sends `sig` through the pidfd when there is one, else by pid.
pub(crate) fn send(pidfd: Option<&OwnedFd>, pid: i32, sig: rustix::process::Signal) {
    #[cfg(target_os = "linux")]
    if let Some(fd) = pidfd {
        let _ = rustix::process::pidfd_send_signal(fd.as_fd(), sig);
        return;
    }
    let _ = pidfd;
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// A pidfd for `pid`, where the kernel has them.
pub(crate) fn pidfd(pid: i32) -> Option<OwnedFd> {
    #[cfg(target_os = "linux")]
    {
        rustix::process::Pid::from_raw(pid).and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

/// How the child's process is grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grouping {
    /// A process group of its own, unless the worker has workcell's terminal (then it stays
    /// in the terminal's foreground group).
    Group,
    /// A session of its own, which the backend sets up itself (Seatbelt: no controlling
    /// terminal but, with `-t`, a pty of its own): always a group of its own.
    Session,
}

/// One supervised run: its output, notes, signals and timeout.
pub(crate) struct Supervisor<'a> {
    output: Output,
    notes: Notes,
    broker: Option<&'a dyn OnDemand>,
    /// Registered before the spawn (inherited runs only), so that no signal is lost.
    signals: Option<Signals>,
    timeout: Option<Duration>,
    own_group: bool,
}

impl<'a> Supervisor<'a> {
    /// A supervisor for `plan`; an inherited run starts catching SIGINT, SIGTERM and SIGHUP.
    pub fn new(plan: &LaunchPlan, output: Output, attached: Attached<'a>) -> Result<Supervisor<'a>, BackendError> {
        let signals = match output {
            Output::Inherit => Some(signal_pipe().map_err(SuperviseError::Signals)?),
            Output::Capture => None,
        };
        Ok(Supervisor { output, notes: Notes::new(output), broker: attached.broker, signals, timeout: plan.timeout(), own_group: true })
    }

    /// Where workcell's own words go.
    pub fn notes(&mut self) -> &mut Notes {
        &mut self.notes
    }

    /// Sets up `cmd`'s standard streams and grouping. A worker with workcell's terminal
    /// (`-t`, or `-i` on a terminal) stays in its foreground group unless its backend gives
    /// it a session of its own; any other gets a group of its own, so that a terminal's
    /// Ctrl-C reaches only workcell, which forwards it, and what the worker leaves in its
    /// group can be killed with it.
    pub fn prepare(&mut self, cmd: &mut Command, plan: &LaunchPlan, grouping: Grouping) {
        let on_terminal = self.output == Output::Inherit && (plan.tty || (plan.interactive && std::io::IsTerminal::is_terminal(&std::io::stdin())));
        match self.output {
            Output::Capture => {
                cmd.stdin(if plan.stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
            }
            Output::Inherit if !(plan.interactive || plan.tty) => {
                cmd.stdin(Stdio::null());
            }
            Output::Inherit => {}
        }
        self.own_group = grouping == Grouping::Session || !on_terminal;
        if grouping == Grouping::Group && self.own_group {
            std::os::unix::process::CommandExt::process_group(cmd, 0);
        }
    }

    /// A run that ended before its worker started (`code` explained in the notes already).
    pub fn finished_early(self, code: i32) -> Finished {
        let mut stderr = Bounded::new(OUTPUT_CAP);
        self.notes.append_to(&mut stderr);
        Finished { exit_code: code, stderr: stderr.kept, stderr_cut: stderr.cut, ..Finished::default() }
    }

    /// Supervises `child` until it and its sandbox are gone; returns how the run ended.
    pub fn supervise<S: Sandbox>(mut self, mut child: Child, plan: &LaunchPlan, sandbox: &mut S) -> Result<Finished, BackendError> {
        let pid = child.id() as i32;
        let process = Process { pid, pidfd: pidfd(pid), own_group: self.own_group };
        if let (Some(mut pipe), Some(bytes)) = (child.stdin.take(), plan.stdin.clone()) {
            // The given input, written beside the loop (a command that does not read it
            // leaves the writer blocked until it ends: then the write fails and the pipe is
            // closed with the thread).
            std::thread::spawn(move || {
                let _ = std::io::Write::write_all(&mut pipe, &bytes);
            });
        }
        let mut out = Stream::new(child.stdout.take().map(OwnedFd::from))?;
        let mut err = Stream::new(child.stderr.take().map(OwnedFd::from))?;
        let mut deadline = self.timeout.map(|t| Instant::now() + t);
        let mut timed_out = false;
        let mut signalled: Option<i32> = None;
        let mut broker_started = false;
        let mut failure: Option<BackendError> = None;
        let status = loop {
            if let Some(s) = child.try_wait().map_err(SuperviseError::Wait)? {
                break s;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                if signalled.is_none() {
                    timed_out = true;
                }
                // The deadline, or a worker that ignored a forwarded signal for the whole
                // grace period: stop everything.
                sandbox.kill_all(&process);
                deadline = None;
                continue;
            }
            let mut wait = deadline.map(|d| d - now);
            if process.pidfd.is_none() {
                wait = Some(wait.map_or(NO_PIDFD_POLL, |w| w.min(NO_PIDFD_POLL)));
            }
            let wake = self.broker.filter(|_| !broker_started).map(|b| b.wake_fd());
            let ready = Watch {
                child: process.pidfd.as_ref().map(AsFd::as_fd),
                signals: self.signals.as_ref().map(|s| s.get_read().as_fd()),
                sandbox: sandbox.watch_fd(),
                wake,
                stdout: out.fd(),
                stderr: err.fd(),
            }
            .wait(wait)?;
            if ready.stdout {
                out.read()?;
            }
            if ready.stderr {
                err.read()?;
            }
            if ready.wake {
                if let Some(b) = self.broker {
                    // The worker connected: serve it. If the broker cannot start, the worker's
                    // request fails (its connection is closed with the socket at the end).
                    if let Err(e) = b.start() {
                        self.notes.say(&format!("workcell: the tool broker could not start: {e}"));
                    }
                    broker_started = true;
                }
            }
            if ready.sandbox {
                if let Err(e) = sandbox.readable(&process) {
                    sandbox.kill_all(&process);
                    failure.get_or_insert(e);
                }
            }
            if ready.signal {
                let pending: Vec<i32> = self.signals.as_mut().map(|s| s.pending().collect()).unwrap_or_default();
                for sig in pending {
                    let forwarded = rustix::process::Signal::from_named_raw(sig).is_some_and(|s| sandbox.forward(&process, s));
                    if signalled.is_some() || !forwarded {
                        // A second signal, or nothing to forward to yet: stop now.
                        sandbox.kill_all(&process);
                        deadline = None;
                    } else if deadline.is_none_or(|d| d > Instant::now() + SIGNAL_GRACE) {
                        deadline = Some(Instant::now() + SIGNAL_GRACE);
                    }
                    signalled = Some(sig);
                }
            }
        };
        drop(self.signals.take());
        sandbox.ended(&process);
        // What the worker wrote before it ended is read to the end; a pipe still held open by
        // a process that left the sandbox is abandoned after a bounded moment.
        let until = Instant::now() + OUTPUT_LINGER;
        while out.fd().is_some() || err.fd().is_some() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let ready = Watch { stdout: out.fd(), stderr: err.fd(), ..Watch::default() }.wait(Some(left))?;
            if ready.stdout {
                out.read()?;
            }
            if ready.stderr {
                err.read()?;
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        let exit_code =
            if timed_out { self.notes.explain(&Explained::TimedOut(plan.timeout())) } else { sandbox.exit_code(status, signalled, &mut self.notes) };
        let mut stderr = err.kept;
        self.notes.append_to(&mut stderr);
        Ok(Finished { exit_code, stdout: out.kept.kept, stdout_cut: out.kept.cut, stderr: stderr.kept, stderr_cut: stderr.cut, timed_out })
    }
}

/// One captured output pipe, read without blocking as it fills.
struct Stream {
    fd: Option<OwnedFd>,
    kept: Bounded,
}

impl Stream {
    fn new(fd: Option<OwnedFd>) -> Result<Stream, SuperviseError> {
        if let Some(fd) = &fd {
            rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK).map_err(SuperviseError::Pipe)?;
        }
        Ok(Stream { fd, kept: Bounded::new(OUTPUT_CAP) })
    }

    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.fd.as_ref().map(AsFd::as_fd)
    }

    /// Reads what the pipe holds now; beyond the cap it is read and only counted, so the
    /// writer never blocks on a full pipe.
    fn read(&mut self) -> Result<(), SuperviseError> {
        let Some(fd) = &self.fd else { return Ok(()) };
        let mut buf = [0u8; 64 << 10];
        loop {
            match rustix::io::read(fd, &mut buf) {
                Ok(0) => {
                    self.fd = None;
                    return Ok(());
                }
                Ok(n) => self.kept.push(&buf[..n]),
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(e) => {
                    self.fd = None;
                    return Err(SuperviseError::Pipe(e));
                }
            }
        }
    }
}
