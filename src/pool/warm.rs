//! A warm run: the claimed sandbox's agent is woken, checked like a session sandbox's, and
//! given the run's command with two pipes for its output; workcell copies them to its own
//! stdout and stderr. The sandbox ends with the command: workcell closes the connection,
//! kills the container's first process, and waits until it is gone before the protected
//! paths are swept (nothing of the worker runs any more by then). If workcell itself is
//! killed, the agent sees the connection close and ends everything (the container goes
//! with its first process; the daemon removes it), and the run's watchdog
//! ([`Reaper`], started at the claim) removes the container whatever state the agent is in.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

use super::Claimed;
use crate::agent::host::{verify_agent, AgentSocket, SocketError};
use crate::agent::{self, Request, Response};
use crate::backend::docker::reaper::Reaper;
use crate::backend::outcome::Explained;
use crate::backend::supervise::Notes;
use crate::backend::{BackendError, Finished, Output};
use crate::plan::LaunchPlan;
use crate::tools::broker::Broker;

/// How long the agent of a claimed sandbox may take to connect once woken.
const CONNECT_WITHIN: Duration = Duration::from_secs(5);
/// Beyond the run's timeout, how long workcell waits for the agent's answer.
const ANSWER_GRACE: Duration = Duration::from_secs(10);
/// How long the container's first process may take to go after it was killed.
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// Why a claimed entry's agent cannot serve the run (the entry is then removed and the next
/// one tried). Said as a session sandbox's agent would be (`run::resident`).
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error("the session sandbox ended before its agent started{}", detail(.0))]
    Ended(String),
}

fn detail(text: &str) -> String {
    if text.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", crate::term::escape(text.trim()))
    }
}

/// How the wait for the command ended.
enum Ended {
    Answered(Response),
    Signalled(i32, &'static str),
    /// The agent did not answer (killed by the worker, say, or past the grace).
    Lost(String),
}

/// A claimed sandbox whose agent answered: ready for the run's command.
pub struct Warm {
    claimed: Claimed,
    stream: UnixStream,
    /// The container's first process (host pid).
    pid: u32,
    /// Removes the container if workcell is killed: the agent ends it when workcell's
    /// connection closes, but a host process of the worker's uid can stop the agent.
    reaper: Option<Reaper>,
}

impl Claimed {
    /// Wakes the agent and takes its connection (checked like a session sandbox's agent);
    /// an entry that cannot serve (its container was stopped, say) is removed.
    pub(super) fn connect(self, plan: &LaunchPlan) -> Result<Warm, WarmError> {
        // From the claim on, as for a cold run's container from its creation: whatever kills
        // workcell, the container goes (an entry claimed and never woken would wait for ever).
        let reaper = Reaper::start(&self.record.container);
        match self.open(plan) {
            Ok((stream, pid)) => Ok(Warm { claimed: self, stream, pid, reaper }),
            Err(e) => {
                let _ = crate::backend::docker::pooled::remove(&self.record.container);
                if let Some(r) = reaper {
                    r.disarm();
                }
                Err(e)
            }
        }
    }

    fn open(&self, plan: &LaunchPlan) -> Result<(UnixStream, u32), WarmError> {
        let name = &self.record.container;
        let dir = self.agent_dir();
        let listener = AgentSocket::bind_in(&dir, plan.user)?;
        // Opening without blocking succeeds only while the agent waits on the other end.
        let wake = rustix::fs::open(
            dir.join(super::WAKE),
            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| WarmError::Ended(format!("its agent is not waiting ({e})")))?;
        let started = std::time::Instant::now();
        let stream = listener.accept(&mut || (started.elapsed() > CONNECT_WITHIN).then_some(WarmError::from(SocketError::StartTimeout)))?;
        drop(wake);
        let pid = crate::backend::docker::pooled::main_pid(name).ok_or_else(|| WarmError::Ended(format!("container {name} does not run")))?;
        verify_agent(&stream, plan.user.uid, Some(pid))?;
        protected_binds_held(pid, plan).map_err(|e| WarmError::Ended(e.to_string()))?;
        Ok((stream, pid))
    }
}

/// Why a claimed container cannot be trusted with its plan's protected paths.
#[derive(Debug, thiserror::Error)]
enum BindsGone {
    #[error("cannot read its mounts ({0})")]
    Mounts(#[source] std::io::Error),
    /// The path, escaped for a terminal.
    #[error("the read-only bind of its protected path {0} is gone")]
    Gone(String),
}

/// Checks that every protected path the run's plan finds bound read-only is still so in the
/// container of first process `pid`. The plans compared at the claim name the same objects,
/// but a file's bind in the container goes when its name is unlinked on the host (a link
/// made to it first keeps the object, and so the plan's identity, the same); the run would
/// then find that file writable where a cold run has it read-only.
fn protected_binds_held(pid: u32, plan: &LaunchPlan) -> Result<(), BindsGone> {
    let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).map_err(BindsGone::Mounts)?;
    // Mount point → whether the topmost mount there is read-only (later lines are on top).
    let mut read_only = std::collections::HashMap::new();
    for line in table.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if let (Some(point), Some(options)) = (fields.get(4), fields.get(5)) {
            read_only.insert(unescape(point), options.split(',').any(|o| o == "ro"));
        }
    }
    for area in &plan.protected {
        for bound in &area.bound {
            let path = format!("{}/{}", area.target.trim_end_matches('/'), bound.path);
            if read_only.get(&path) != Some(&true) {
                return Err(BindsGone::Gone(crate::term::escape(&path).into_owned()));
            }
        }
    }
    Ok(())
}

/// A mount point as `/proc/PID/mountinfo` writes it: space, tab, newline and backslash as
/// three octal digits after a backslash.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| std::str::from_utf8(d).ok()).and_then(|d| u8::from_str_radix(d, 8).ok());
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Warm {
    /// Runs `plan`'s command in this sandbox, its output on workcell's own, with `broker`
    /// serving the worker. The sandbox is gone when this returns, however the run ended.
    pub fn run(mut self, plan: &LaunchPlan, broker: Option<&Broker>) -> Result<Finished, BackendError> {
        let name = self.claimed.record.container.clone();
        let reaper = self.reaper.take();
        let result = self.run_in(plan, broker, &name);
        // Interrupted or failed: the container goes now (after a normal end it is gone).
        if result.as_ref().map_or(true, |f| [129, 130, 143].contains(&f.exit_code)) {
            let _ = crate::backend::docker::pooled::remove(&name);
        }
        if let Some(r) = reaper {
            r.disarm();
        }
        result
    }

    fn run_in(self, plan: &LaunchPlan, broker: Option<&Broker>, name: &str) -> Result<Finished, BackendError> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source: std::io::Error| BackendError::Io { what: what.clone(), source }
        };
        let rt = crate::backend::docker::runtime()?;
        // Signal handlers first: a Ctrl-C from here on still ends the sandbox.
        let sig = |k: SignalKind| {
            let _guard = rt.enter();
            signal(k).map_err(io("cannot install a signal handler"))
        };
        let (mut sigint, mut sigterm, mut sighup) = (sig(SignalKind::interrupt())?, sig(SignalKind::terminate())?, sig(SignalKind::hangup())?);
        if let Some(b) = broker {
            b.serve_in(&self.claimed.broker_dir(), plan.user).map_err(|e| BackendError::Service(e.into()))?;
        }
        let Warm { claimed, stream, pid, .. } = self;
        let pidfd = rustix::process::Pid::from_raw(pid as i32).and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());

        let (out_r, out_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| io("cannot make a pipe")(e.into()))?;
        let (err_r, err_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| io("cannot make a pipe")(e.into()))?;
        let timeout = plan.timeout();
        let request = Request {
            argv: plan.command.clone(),
            env: plan.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            env_remove: claimed.record.env_keys.iter().filter(|k| !plan.env.contains_key(*k)).cloned().collect(),
            cwd: plan.workdir.clone(),
            stdin: Vec::new(),
            timeout_ms: timeout.map_or(agent::NO_TIMEOUT, |t| t.as_millis().min(u128::from(u64::MAX - 1)) as u64),
            stdio: true,
        };
        agent::write_frame(&mut &stream, &request).map_err(|e| lost(name, &e.to_string()))?;
        agent::send_stdio(&stream, out_w.as_fd(), err_w.as_fd()).map_err(|e| lost(name, &e.to_string()))?;
        drop((out_w, err_w));
        let copies = [copy(out_r, false), copy(err_r, true)];

        let reader = stream.try_clone().map_err(io("cannot share the agent's connection"))?;
        let ended = rt.block_on(async {
            let answer = tokio::task::spawn_blocking(move || {
                let _ = reader.set_read_timeout(timeout.map(|t| t + ANSWER_GRACE));
                agent::read_frame::<Response>(&mut &reader)
            });
            tokio::select! {
                r = answer => match r {
                    Ok(Ok(response)) => Ended::Answered(response),
                    Ok(Err(e)) => Ended::Lost(e.to_string()),
                    Err(e) => Ended::Lost(e.to_string()),
                },
                _ = sigint.recv() => Ended::Signalled(130, "SIGINT"),
                _ = sigterm.recv() => Ended::Signalled(143, "SIGTERM"),
                _ = sighup.recv() => Ended::Signalled(129, "SIGHUP"),
            }
        });
        // An OOM kill is known to the daemon only while the container exists.
        let oom = matches!(&ended, Ended::Answered(r) if r.exit_code == 137) && crate::backend::docker::pooled::oom_killed(name);
        let _ = stream.shutdown(std::net::Shutdown::Both);
        drop(stream);
        if let Some(fd) = &pidfd {
            let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::KILL);
            wait_gone(fd);
        }
        rt.shutdown_background();
        for c in copies {
            let _ = c.join();
        }
        let mut notes = Notes::new(Output::Inherit);
        let finished = |exit_code, timed_out| Finished { exit_code, timed_out, ..Finished::default() };
        match ended {
            Ended::Answered(r) => {
                if !r.stderr.is_empty() {
                    let _ = std::io::stderr().write_all(&r.stderr);
                }
                if r.timed_out {
                    return Ok(finished(notes.explain(&Explained::TimedOut(timeout)), true));
                }
                if oom {
                    notes.explain(&Explained::OutOfMemory(plan.limits.memory_bytes));
                }
                Ok(finished(r.exit_code, false))
            }
            Ended::Signalled(code, signal) => {
                notes.say(&format!("workcell: interrupted by {signal}; the container was removed"));
                Ok(finished(code, false))
            }
            Ended::Lost(why) => Err(lost(name, &why)),
        }
    }
}

fn lost(name: &str, why: &str) -> BackendError {
    BackendError::Io { what: format!("the pooled container {name} failed"), source: std::io::Error::other(why.to_string()) }
}

/// Copies one of the command's pipes to workcell's stdout or stderr until every writer is
/// gone (the command and all it started).
fn copy(from: OwnedFd, to_stderr: bool) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut from = std::fs::File::from(from);
        if to_stderr {
            let _ = std::io::copy(&mut from, &mut std::io::stderr());
        } else {
            let mut out = std::io::stdout();
            let _ = std::io::copy(&mut from, &mut out);
            let _ = out.flush();
        }
    })
}

/// Waits until the process behind `pidfd` has exited: the first process of a container,
/// whose end takes every other process of its pid namespace with it.
fn wait_gone(pidfd: &OwnedFd) {
    let until = std::time::Instant::now() + GONE_WITHIN;
    while std::time::Instant::now() < until {
        let mut fds = [rustix::event::PollFd::new(pidfd, rustix::event::PollFlags::IN)];
        if rustix::event::poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 100_000_000 })).is_ok_and(|n| n > 0) {
            return;
        }
    }
}
