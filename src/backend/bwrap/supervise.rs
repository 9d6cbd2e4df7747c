//! A bwrap run under the shared supervision loop ([`crate::backend::supervise`]): what bwrap
//! adds is its status pipe (the sandbox's init pid, pid namespace and the command's exit
//! code), the cgroup v2 handshake ([`super::handshake`]) and the pid namespace, through which
//! signals are forwarded and every process of the sandbox ends with it.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use super::diagnose::explain_bwrap_failure;
use super::handshake::{Channels, KILL_WAIT};
use super::launch::{argv_and_fds, prepare, spawn_bwrap};
use super::{secret_env, unenforced_note, BwrapError};
use crate::backend::cgroup::RunCgroup;
use crate::backend::outcome::Explained;
use crate::backend::supervise::{pidfd, send, Grouping, Notes, Process, Sandbox, Supervisor};
use crate::backend::{Attached, BackendError, Finished, Output};
use crate::plan::LaunchPlan;

/// Runs the plan under bwrap; the exit status is the worker's (124 on timeout, 126/127 when
/// the command cannot be executed / is not found, 125 when bwrap itself fails).
pub(super) fn run(plan: &LaunchPlan, output: Output, attached: Attached<'_>) -> Result<Finished, BackendError> {
    let (located, cgroup, support) = prepare(plan)?;
    let mut sup = Supervisor::new(plan, output, attached)?;
    let attached_egress = attached.egress;
    if let Some(note) = unenforced_note(&plan.limits, &support) {
        sup.notes().say(&format!("workcell: warning: {note}"));
    }
    // bwrap reports the sandbox's init pid and, when the command ran, its exit code on the
    // status pipe; no exit code means bwrap itself failed (setup or exec).
    let (mut argv, held) = argv_and_fds(plan, located)?;
    let (channels, theirs) = Channels::open(&mut argv, cgroup.as_ref(), attached_egress)?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env_clear().envs(secret_env(plan));
    crate::backend::as_worker(&mut cmd, plan);
    sup.prepare(&mut cmd, plan, Grouping::Group);
    let child = spawn_bwrap(&mut cmd, held.into_iter().chain(theirs).collect(), cgroup.as_ref(), located)?;
    let mut sandbox = Bwrap { plan, channels, cgroup, init: None };
    sup.supervise(child, plan, &mut sandbox)
}

/// What the supervision loop knows of a bwrap sandbox.
struct Bwrap<'a> {
    plan: &'a LaunchPlan,
    channels: Channels<'a>,
    cgroup: Option<RunCgroup>,
    /// The sandbox's init, once bwrap reported it.
    init: Option<Init>,
}

struct Init {
    pid: i32,
    pidfd: Option<OwnedFd>,
    pid_ns: Option<u64>,
}

impl Sandbox for Bwrap<'_> {
    fn watch_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.channels.status.fd().map(std::os::fd::AsFd::as_fd)
    }

    fn readable(&mut self, child: &Process) -> Result<(), BackendError> {
        let Some(reported) = self.channels.status.read_available() else { return Ok(()) };
        self.init = Some(Init { pid: reported.pid, pidfd: pidfd(reported.pid), pid_ns: reported.pid_ns });
        // With a cgroup v2 or an egress proxy the sandbox waits until it is inside its cgroup
        // and the proxy listens; if that fails, it is killed while still blocked.
        self.channels.started(self.cgroup.as_ref(), child.pid, reported).map_err(|e| BwrapError::NotEntered { stopped: "worker", source: e }.into())
    }

    /// Every process of the sandbox except its init (which, as a pid namespace's init, would
    /// ignore the signal).
    fn forward(&self, _child: &Process, sig: rustix::process::Signal) -> bool {
        let Some(Init { pid, pid_ns: Some(ns), .. }) = &self.init else { return false };
        let mut sent = false;
        for p in pids_in_namespace(*ns) {
            if p != *pid {
                if let Some(p) = rustix::process::Pid::from_raw(p) {
                    sent |= rustix::process::kill_process(p, sig).is_ok();
                }
            }
        }
        sent
    }

    /// The init (the kernel then kills every process of the pid namespace) and bwrap itself
    /// (`--die-with-parent` covers a sandbox not started yet), and anything bwrap forked
    /// outside the namespaces (nothing, normally).
    fn kill_all(&self, child: &Process) {
        if let Some(init) = &self.init {
            send(init.pidfd.as_ref(), init.pid, rustix::process::Signal::KILL);
        }
        child.signal_group(rustix::process::Signal::KILL);
    }

    /// bwrap has exited, so the status pipe's write end is closed: read what is left. bwrap
    /// exiting normally implies its init (and so the pid namespace) is gone; after a kill,
    /// make sure, so that "nothing left running" holds when the run returns.
    fn ended(&mut self, _child: &Process) {
        self.channels.status.read_to_end();
        self.wait_init_gone();
    }

    fn exit_code(&self, status: ExitStatus, signalled: Option<i32>, notes: &mut Notes) -> i32 {
        if let Some(code) = self.channels.status.exit_code() {
            if code == 128 + 9 && self.cgroup.as_ref().is_some_and(RunCgroup::oom_killed) {
                notes.explain(&Explained::OutOfMemory(self.plan.limits.memory_bytes));
            }
            return code;
        }
        if let Some(sig) = signalled {
            return 128 + sig;
        }
        explain_bwrap_failure(self.plan, crate::backend::none::exit_code_of(status), notes)
    }
}

impl Bwrap<'_> {
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

/// Host pids of the processes in pid namespace `ns` (by the inode of `/proc/PID/ns/pid`).
fn pids_in_namespace(ns: u64) -> Vec<i32> {
    let want = format!("pid:[{ns}]");
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|l| l.as_os_str() == want.as_str()))
        .collect()
}
