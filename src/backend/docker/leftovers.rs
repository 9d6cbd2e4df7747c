//! What an Engine-exec session's calls leave in their container (a named image, which cannot
//! run workcell's agent: `run::resident`). A command started through the Engine API's exec is
//! not a child of anything workcell holds, and what it leaves is reparented to the container's
//! init: nothing ends it with the call, and at a timeout workcell only stops waiting. So after
//! each call, and at its timeout, workcell kills from the host every process of the container
//! but its init and the process that keeps it waiting (`sleep`).
//!
//! A container's processes are found by their cgroup, which none of them can leave (the
//! container's cgroup file system is read-only and its capabilities are dropped), and which
//! `/proc/PID/cgroup` shows to any user (unlike the pid namespace's link, closed by a process
//! that makes itself undumpable). The container's processes run as the worker's user: workcell
//! started by that user, or by root, may signal them. Where the host cannot see the
//! container's processes (an engine elsewhere), nothing is found and nothing is killed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::{connect, render, runtime};
use crate::plan::LaunchPlan;

/// How long workcell keeps killing (each round a fresh look at /proc).
const KILL_FOR: Duration = Duration::from_secs(5);

/// A session container's processes that stay: its init and the process keeping it waiting.
#[derive(Debug, Clone)]
pub struct Kept {
    cgroup: String,
    pids: HashSet<u32>,
}

impl Kept {
    /// Reads `plan`'s running container: its first process, that process's cgroup (which
    /// must name the container's id) and its children now (the waiting `sleep`, started
    /// before any call). `None` when the host cannot see them.
    pub fn read(plan: &LaunchPlan) -> Option<Kept> {
        let name = render::container_name(plan);
        let rt = runtime().ok()?;
        let (main, id) = rt.block_on(async {
            let docker = connect().await.ok()?;
            let c = docker.inspect_container(&name, None::<bollard::query_parameters::InspectContainerOptions>).await.ok()?;
            let pid = c.state?.pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0)?;
            Some((pid, c.id?))
        })?;
        let cgroup = std::fs::read_to_string(format!("/proc/{main}/cgroup")).ok().filter(|c| !id.is_empty() && c.contains(&id))?;
        let mut pids = HashSet::from([main]);
        // The init starts its child right after the container starts: wait for it a little.
        let until = Instant::now() + Duration::from_secs(2);
        loop {
            let children = std::fs::read_to_string(format!("/proc/{main}/task/{main}/children")).unwrap_or_default();
            pids.extend(children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            if pids.len() > 1 || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(Kept { cgroup, pids })
    }
}

/// Kills every process of the container but `kept` until none has a live thread (at most
/// [`KILL_FOR`]); returns how many were killed.
pub fn sweep(kept: &Kept) -> usize {
    let mut killed = HashSet::new();
    let until = Instant::now() + KILL_FOR;
    loop {
        let alive = living(kept);
        if alive.is_empty() || Instant::now() >= until {
            break;
        }
        for pid in &alive {
            if let Some(p) = rustix::process::Pid::from_raw(*pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
        killed.extend(alive);
        std::thread::sleep(Duration::from_millis(2));
    }
    killed.len()
}

/// The container's processes other than `kept` with a live thread (a zombie leader whose
/// threads run on is alive).
fn living(kept: &Kept) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| !kept.pids.contains(pid))
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c == kept.cgroup))
        .filter(|pid| has_live_thread(*pid))
        .collect()
}

fn has_live_thread(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| {
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().next()).is_some_and(|s| !matches!(s, "Z" | "X"))
    })
}
