//! One run's cgroup, from creation to removal: the directories, the limits written into
//! them, getting the sandbox in, and whether the kernel's OOM killer struck.
//!
//! Getting the sandbox in: moving a process into a cgroup (a pid written to `cgroup.procs`)
//! takes the kernel's global threadgroup lock for writing, which waits for an RCU grace
//! period — 5 to 15 ms on the machines we measured, more than bwrap's whole start. A thread
//! that moves *itself* (`0` written to a v1 `tasks` file) skips that lock. So on cgroup v1 the
//! spawning thread steps into the run's cgroups, starts bwrap (which is born there, with
//! everything it starts), and steps back out ([`RunCgroup::spawn_inside`]). cgroup v2 has no
//! per-thread move for domain cgroups, so there bwrap and its init are moved after the spawn
//! while the sandbox waits ([`RunCgroup::attach`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::detect::cannot_create;
use super::{limit_file, CgroupError, Controller, Support, Unsupported};
use crate::config::Limits;

/// The CFS period used for cpu limits (the kernel's default, and Docker's).
const CPU_PERIOD_US: u64 = 100_000;
/// How long removal of a run's cgroup is retried while its last processes are reaped.
const REMOVE_WAIT: Duration = Duration::from_millis(500);

/// Whether a `mkdir` error means "no cgroup may be created here" (rather than a failure).
fn not_allowed(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    [Errno::ACCESS, Errno::PERM, Errno::ROFS, Errno::NOENT].iter().any(|x| e.raw_os_error() == Some(x.raw_os_error()))
}

/// A run's own cgroup (one directory per controller used); removed on drop.
#[derive(Debug)]
pub struct RunCgroup {
    dirs: Vec<Dir>,
}

/// One controller's directory of a run's cgroup.
#[derive(Debug)]
struct Dir {
    controller: Controller,
    path: PathBuf,
    /// This process's own cgroup in that hierarchy, where the spawning thread returns to.
    parent: PathBuf,
    v2: bool,
}

impl RunCgroup {
    /// Creates `workcell-RUN_ID` for every limit of `limits` that `support` places, and writes
    /// the limits. A controller whose cgroup cannot be created here (no permission, not
    /// delegated) is not an error: the returned [`Support`] says why it is not enforced, as the
    /// probe of [`Support::detect`] would. Failing to write a limit into a created cgroup is an
    /// error. The cgroup is `None` when there is nothing to enforce.
    pub fn create(run_id: &str, limits: &Limits, support: &Support) -> Result<(Option<RunCgroup>, Support), CgroupError> {
        let mut cg = RunCgroup { dirs: Vec::new() };
        let mut effective = support.clone();
        let mut created: Vec<PathBuf> = Vec::new();
        let name = format!("workcell-{run_id}");
        // cpus as a CFS quota per period; the kernel's minimum quota is 1 ms.
        let wanted: [(Controller, Option<String>); 3] = [
            (Controller::Memory, limits.memory_bytes.map(|m| m.to_string())),
            (Controller::Pids, limits.pids.map(|p| p.to_string())),
            (Controller::Cpu, limits.cpus.map(|c| ((c * CPU_PERIOD_US as f64).round().max(1000.0) as u64).to_string())),
        ];
        let mut result = Ok(());
        for (c, value) in wanted {
            let (Some(value), Ok(place)) = (value, support.get(c)) else { continue };
            let dir = place.parent.join(&name);
            // One cgroup directory can carry several v2 controllers.
            if !created.contains(&dir) {
                match std::fs::create_dir(&dir) {
                    Ok(()) => created.push(dir.clone()),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        result = Err(CgroupError::Exists(dir));
                        break;
                    }
                    // Not allowed here (no permission, read-only cgroupfs, no such parent): the
                    // limit is named as not enforced, as the probe of `detect` would.
                    Err(e) if not_allowed(&e) => {
                        *effective.get_mut(c) = Err(cannot_create(place, &e));
                        continue;
                    }
                    // Anything else (too many cgroups, no memory) is a failure of this run,
                    // not a lack of support: the limits are not silently dropped.
                    Err(e) => {
                        result = Err(CgroupError::Create { dir, source: e });
                        break;
                    }
                }
            }
            if !dir.join(limit_file(c, place.v2)).exists() {
                *effective.get_mut(c) = Err(Unsupported::NotEnabled { controller: c, parent: place.parent.clone() });
                continue;
            }
            cg.dirs.push(Dir { controller: c, path: dir.clone(), parent: place.parent.clone(), v2: place.v2 });
            result = cg.write_limit(c, &dir, place.v2, &value);
            if result.is_err() {
                break;
            }
        }
        // A directory whose every controller turned out disabled carries nothing (the others
        // go when `cg` is dropped).
        for dir in created.iter().filter(|d| !cg.dirs.iter().any(|x| x.path == **d)) {
            let _ = std::fs::remove_dir(dir);
        }
        result?;
        Ok(((!cg.dirs.is_empty()).then_some(cg), effective))
    }

    fn write_limit(&self, c: Controller, dir: &Path, v2: bool, value: &str) -> Result<(), CgroupError> {
        let write =
            |file: &'static str, v: &str| std::fs::write(dir.join(file), v).map_err(|source| CgroupError::SetLimit { file, dir: dir.to_path_buf(), source });
        match (c, v2) {
            (Controller::Memory, false) => {
                write("memory.limit_in_bytes", value)?;
                // No extra swap, as with Docker; absent when swap accounting is off.
                let _ = write("memory.memsw.limit_in_bytes", value);
                Ok(())
            }
            (Controller::Memory, true) => {
                write("memory.max", value)?;
                let _ = write("memory.swap.max", "0");
                Ok(())
            }
            (Controller::Pids, _) => write("pids.max", value),
            (Controller::Cpu, false) => {
                write("cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
                write("cpu.cfs_quota_us", value)
            }
            (Controller::Cpu, true) => write("cpu.max", &format!("{value} {CPU_PERIOD_US}")),
        }
    }

    /// The directories, each once (co-mounted v1 controllers share one).
    fn unique_dirs(&self) -> Vec<&Dir> {
        let mut out: Vec<&Dir> = Vec::new();
        for d in &self.dirs {
            if !out.iter().any(|x| x.path == d.path) {
                out.push(d);
            }
        }
        out
    }

    /// Runs `spawn` with the calling thread inside the run's cgroup v1 directories, so that
    /// the process it starts is born there, then moves the thread back. Only this thread
    /// moves (`0` written to `tasks`), which, unlike moving a process, does not wait for an
    /// RCU grace period. Fails, without calling `spawn`, when the thread cannot move in.
    pub fn spawn_inside<T>(&self, spawn: impl FnOnce() -> T) -> Result<T, CgroupError> {
        let v1: Vec<&Dir> = self.unique_dirs().into_iter().filter(|d| !d.v2).collect();
        let move_thread = |to: &Path| std::fs::write(to.join("tasks"), "0").map_err(|source| CgroupError::EnterThread { dir: to.to_path_buf(), source });
        let mut entered = 0;
        let mut result = Ok(());
        for d in &v1 {
            result = move_thread(&d.path);
            if result.is_err() {
                break;
            }
            entered += 1;
        }
        // Moves the thread back out however `spawn` ends (a panic included).
        struct Back<'a>(Vec<&'a Path>);
        impl Drop for Back<'_> {
            fn drop(&mut self) {
                for parent in &self.0 {
                    // The thread's own cgroup accepted it a moment ago; if it does not now, the
                    // run still has its limits, but its cgroup cannot be removed while the
                    // thread is in.
                    if let Err(e) = std::fs::write(parent.join("tasks"), "0") {
                        tracing::warn!("cannot move workcell's thread back into the cgroup {}: {e}", parent.display());
                    }
                }
            }
        }
        let _back = Back(v1[..entered].iter().map(|d| d.parent.as_path()).collect());
        result.map(|()| spawn())
    }

    /// Whether processes must be moved in after the spawn ([`RunCgroup::attach`]): cgroup v2,
    /// where the spawning thread cannot step in by itself.
    pub fn needs_attach(&self) -> bool {
        self.dirs.iter().any(|d| d.v2)
    }

    /// Moves process `pid` into the run's cgroup v2 directory; its later children are born
    /// there. (The v1 directories are entered at spawn time, see [`RunCgroup::spawn_inside`].)
    pub fn attach(&self, pid: i32) -> Result<(), CgroupError> {
        for d in self.unique_dirs().into_iter().filter(|d| d.v2) {
            std::fs::write(d.path.join("cgroup.procs"), pid.to_string()).map_err(|source| CgroupError::Attach { pid, dir: d.path.clone(), source })?;
        }
        Ok(())
    }

    /// Whether the kernel killed a process of the run for exceeding the memory limit.
    pub fn oom_killed(&self) -> bool {
        self.dirs.iter().filter(|d| d.controller == Controller::Memory).any(|d| {
            let file = if d.v2 { "memory.events" } else { "memory.oom_control" };
            std::fs::read_to_string(d.path.join(file))
                .unwrap_or_default()
                .lines()
                .any(|l| l.strip_prefix("oom_kill ").and_then(|n| n.trim().parse::<u64>().ok()).is_some_and(|n| n > 0))
        })
    }

    /// The controllers in use, for messages.
    pub fn controllers(&self) -> Vec<&'static str> {
        self.dirs.iter().map(|d| d.controller.name()).collect()
    }
}

impl Drop for RunCgroup {
    /// Removes the directories; the kernel allows it once the last process has been reaped,
    /// which can trail the sandbox's exit by a moment.
    fn drop(&mut self) {
        let until = Instant::now() + REMOVE_WAIT;
        for d in self.unique_dirs() {
            let dir = &d.path;
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(e) if Instant::now() >= until => {
                        tracing::warn!("cannot remove the cgroup {}: {e}", dir.display());
                        break;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }
    }
}
