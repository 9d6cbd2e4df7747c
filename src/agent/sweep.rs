//! Ending everything a call started, whatever it did to itself.
//!
//! What a call's processes cannot leave is the sandbox's pid namespace: leaving it needs
//! `setns` with `CAP_SYS_ADMIN`, which no process of the worker has, and a pid namespace a
//! process makes below it is still inside it (its processes are visible, and killable, from
//! here). The agent is that namespace's only inhabitant besides the calls' processes and
//! the init above it (bwrap's pid 1, Docker's tini, or none: the agent is pid 1 itself):
//! nothing else is started in an agent's sandbox (the Engine API's exec is used only for
//! sandboxes without an agent, `run::resident`). So "every process in this namespace but
//! the agent and its ancestors" is exactly "what the calls started", and after each call
//! the agent kills all of it.
//!
//! The ways not taken: a pid namespace per call needs `CAP_SYS_ADMIN` in the agent's user
//! namespace (bwrap drops every capability and, where it can, forbids new user namespaces;
//! Docker drops them too, sets `no-new-privileges` and its seccomp profile refuses
//! `unshare(CLONE_NEWPID)`), and a cgroup per call needs a delegated cgroup, which neither a
//! normal user's bwrap (cgroup v1 gives cgroups to root only) nor a container (its cgroup
//! namespace is read-only) has. The sandbox's own namespace needs no privilege at all.
//!
//! How: `kill(-1, SIGKILL)` is the kernel's own "every process in my pid namespace (and
//! those below it) but pid 1 and me". It is taken under the task list lock, so a process
//! forking meanwhile either has its child in the list or loses the fork to the pending
//! signal; it reaches stopped and traced processes (SIGKILL cannot be held off) and a thread
//! group whose leader left with the raw `exit` system call (the leader shows `Z` while its
//! threads run; a signal to the thread group kills every thread). It spares pid 1 only, so
//! the agent uses it only when its ancestors are exactly pid 1 (or it is pid 1), and in a
//! pid namespace of its own (`NSpid` names more than one pid); otherwise (gVisor, which shows
//! no `NSpid`) it kills by pid what it finds in `/proc`. Either way it then looks again until
//! no process but the agent and its ancestors has a live thread: a zombie counts only by its
//! threads, and is reaped by its parent (the agent reaps its own, the init the orphans).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

/// How long the agent keeps killing what a command left behind (each round a fresh look at
/// /proc). One `kill(-1)` leaves nothing that can fork; this bounds a process the kernel
/// cannot end at once (in uninterruptible sleep), so the agent still answers.
const KILL_FOR: Duration = Duration::from_secs(5);

/// The processes the agent never kills: itself and its ancestors.
#[derive(Debug, Clone)]
pub struct Keep {
    pids: HashSet<u32>,
    /// `kill(-1)` kills exactly what is not kept.
    whole_namespace: bool,
}

impl Keep {
    /// The agent and the processes above it, read once when it starts (before any command).
    pub fn read() -> Keep {
        let me = std::process::id();
        let mut pids = HashSet::from([me, 1]);
        let mut pid = me;
        for _ in 0..64 {
            match stat_of(pid).map(|(_, ppid)| ppid) {
                Some(p) if p > 1 && pids.insert(p) => pid = p,
                _ => break,
            }
        }
        let whole_namespace = pids.len() <= 2 && in_own_pid_namespace();
        Keep { pids, whole_namespace }
    }

    fn contains(&self, pid: u32) -> bool {
        self.pids.contains(&pid)
    }
}

/// Whether this process lives in a pid namespace below the host's: its `NSpid` line names
/// its pid in each namespace from the host's down.
fn in_own_pid_namespace() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return false };
    status.lines().find_map(|l| l.strip_prefix("NSpid:")).is_some_and(|pids| pids.split_whitespace().count() > 1)
}

/// Fields of /proc/PID/stat after the command name: (state, ppid).
fn stat_of(pid: u32) -> Option<(char, u32)> {
    stat_at(&format!("/proc/{pid}/stat"))
}

fn stat_at(path: &str) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(path).ok()?;
    // The name is in parentheses and may hold anything: read after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether any thread of process `pid` still runs (or sleeps, or is stopped): a zombie leader
/// with live threads is alive; a thread group gone or all zombie is not.
fn has_live_thread(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str().map(str::to_owned))
        .any(|tid| matches!(stat_at(&format!("/proc/{pid}/task/{tid}/stat")), Some((state, _)) if !matches!(state, 'Z' | 'X')))
}

/// Processes other than `keep` with a live thread.
fn living(keep: &Keep) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()).filter(|pid| !keep.contains(*pid) && has_live_thread(*pid)).collect()
}

/// One round of killing: the whole namespace at once when that spares exactly `keep`, and
/// each of `seen` by pid.
fn kill_round(keep: &Keep, seen: &[u32]) {
    if keep.whole_namespace {
        // SAFETY: kill(2) takes two integers and touches no memory of ours.
        unsafe {
            libc::kill(-1, libc::SIGKILL);
        }
    }
    for pid in seen {
        if let Some(p) = Pid::from_raw(*pid as i32) {
            let _ = rustix::process::kill_process(p, Signal::KILL);
        }
    }
}

/// Kills everything in the sandbox but `keep` now, without waiting (a timeout: the command's
/// own process is then waited for as usual).
pub fn kill_now(keep: &Keep) {
    kill_round(keep, &living(keep));
}

/// Kills every process in the sandbox but `keep` until none has a live thread (at most
/// [`KILL_FOR`]); returns how many distinct processes were killed. Reaps what is the
/// agent's to reap (it is the orphans' parent when it runs as pid 1).
pub fn sweep(keep: &Keep) -> u32 {
    let mut killed = HashSet::new();
    let until = Instant::now() + KILL_FOR;
    loop {
        reap();
        let alive = living(keep);
        if alive.is_empty() || Instant::now() >= until {
            break;
        }
        killed.extend(alive.iter().copied());
        kill_round(keep, &alive);
        std::thread::sleep(Duration::from_millis(1));
    }
    reap();
    killed.len() as u32
}

/// Collects exited children without waiting (any child: `waitpid(None)` would look only in
/// the agent's own process group, and each command has a group of its own).
pub fn reap() {
    while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_alive_by_its_threads() {
        assert!(has_live_thread(std::process::id()));
        assert!(!has_live_thread(u32::MAX));
        let keep = Keep::read();
        assert!(keep.contains(std::process::id()) && keep.contains(1));
    }
}
