//! Memory, cpu and process limits for the bwrap backend: a cgroup of its own for every run,
//! where this process may create one.
//!
//! bwrap has no resource limits of its own. A cgroup can be created by root on a cgroup v1
//! host (one hierarchy per controller), or under cgroup v2 in a subtree whose controllers are
//! delegated to this user. Elsewhere (a desktop session's systemd scope, a container without
//! a writable cgroupfs) [`Support`] says why, and the limits are named as not enforced.
//!
//! [`Support::detect`] reads `/proc/self/cgroup` and `/proc/self/mountinfo`; the parsing is
//! pure ([`Support::from_proc`]) and unit-tested. [`RunCgroup`] creates the directories,
//! writes the limits, puts the sandbox in and removes everything again.
//!
//! Getting the sandbox in: moving a process into a cgroup (a pid written to `cgroup.procs`)
//! takes the kernel's global threadgroup lock for writing, which waits for an RCU grace
//! period — 5 to 15 ms on the machines we measured, more than bwrap's whole start. A thread
//! that moves *itself* (`0` written to a v1 `tasks` file) skips that lock. So on cgroup v1 the
//! spawning thread steps into the run's cgroups, starts bwrap (which is born there, with
//! everything it starts), and steps back out ([`RunCgroup::spawn_inside`]). cgroup v2 has no
//! per-thread move for domain cgroups, so there bwrap and its init are moved after the spawn
//! while the sandbox waits ([`RunCgroup::attach`]).

mod leftovers;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::Limits;

/// Whether a `mkdir` error means "no cgroup may be created here" (rather than a failure).
fn not_allowed(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    [Errno::ACCESS, Errno::PERM, Errno::ROFS, Errno::NOENT].iter().any(|x| e.raw_os_error() == Some(x.raw_os_error()))
}

/// The CFS period used for cpu limits (the kernel's default, and Docker's).
const CPU_PERIOD_US: u64 = 100_000;
/// How long removal of a run's cgroup is retried while its last processes are reaped.
const REMOVE_WAIT: Duration = Duration::from_millis(500);

/// A cgroup controller workcell sets limits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

/// Where this process can create a child cgroup for a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The parent directory: this process's own cgroup in that hierarchy.
    pub parent: PathBuf,
    /// cgroup v2 (one unified hierarchy) rather than v1.
    pub v2: bool,
}

/// What limits can be enforced here, per controller, and why not when they cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    pub memory: Result<Place, String>,
    pub pids: Result<Place, String>,
    pub cpu: Result<Place, String>,
}

impl Support {
    /// No limit can be enforced, for `reason`.
    pub fn none(reason: &str) -> Support {
        Support { memory: Err(reason.into()), pids: Err(reason.into()), cpu: Err(reason.into()) }
    }

    /// This process's support, detected once per process and verified by creating (and
    /// removing) a probe cgroup per controller: what `plan`, `doctor` and `gc` report.
    pub fn detect() -> &'static Support {
        static SUPPORT: std::sync::OnceLock<Support> = std::sync::OnceLock::new();
        SUPPORT.get_or_init(|| Support::located().verified())
    }

    /// Where this process's cgroups are, from `/proc/self`, without the probe: a run tries
    /// its own cgroup directly ([`RunCgroup::create`]), which answers the same question for
    /// the price of one mkdir instead of two mkdirs and an rmdir per controller.
    pub fn located() -> Support {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        Support::from_proc(&read("/proc/self/cgroup"), &read("/proc/self/mountinfo"))
    }

    /// Where each controller lives, from `/proc/self/cgroup` and `/proc/self/mountinfo`
    /// (without checking that a child cgroup can really be created there).
    pub fn from_proc(cgroup: &str, mountinfo: &str) -> Support {
        let mounts: Vec<Mount> = mountinfo.lines().filter_map(Mount::parse).collect();
        let place = |c: Controller| -> Result<Place, String> {
            // A v1 hierarchy carrying the controller wins; else the unified (v2) one.
            for line in cgroup.lines() {
                let mut parts = line.splitn(3, ':');
                let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
                if controllers.split(',').any(|x| x == c.name()) {
                    let m = mounts.iter().find(|m| !m.v2 && m.controllers.iter().any(|x| x == c.name()));
                    return match m {
                        Some(m) => Ok(Place { parent: m.dir_of(path), v2: false }),
                        None => Err(format!("the cgroup v1 {} hierarchy is not mounted", c.name())),
                    };
                }
            }
            for line in cgroup.lines() {
                if let Some(path) = line.strip_prefix("0::") {
                    return match mounts.iter().find(|m| m.v2) {
                        Some(m) => Ok(Place { parent: m.dir_of(path), v2: true }),
                        None => Err("the cgroup v2 hierarchy is not mounted".into()),
                    };
                }
            }
            Err(format!("this process is in no {} cgroup", c.name()))
        };
        Support { memory: place(Controller::Memory), pids: place(Controller::Pids), cpu: place(Controller::Cpu) }
    }

    /// Keeps only the places where a child cgroup with the controller can be created, by
    /// creating (and removing) one.
    fn verified(self) -> Support {
        let check = |c: Controller, p: Result<Place, String>| -> Result<Place, String> {
            let p = p?;
            let probe = p.parent.join(format!("workcell-probe-{}", std::process::id()));
            std::fs::create_dir(&probe).map_err(|e| cannot_create(&p, &e))?;
            let ok = probe.join(limit_file(c, p.v2)).exists();
            let _ = std::fs::remove_dir(&probe);
            if ok {
                Ok(p)
            } else {
                Err(not_enabled(c, &p))
            }
        };
        Support { memory: check(Controller::Memory, self.memory), pids: check(Controller::Pids, self.pids), cpu: check(Controller::Cpu, self.cpu) }
    }

    fn get(&self, c: Controller) -> &Result<Place, String> {
        match c {
            Controller::Memory => &self.memory,
            Controller::Pids => &self.pids,
            Controller::Cpu => &self.cpu,
        }
    }

    fn get_mut(&mut self, c: Controller) -> &mut Result<Place, String> {
        match c {
            Controller::Memory => &mut self.memory,
            Controller::Pids => &mut self.pids,
            Controller::Cpu => &mut self.cpu,
        }
    }

    /// Why `c` cannot be enforced, or `None` when it can.
    pub fn missing(&self, c: Controller) -> Option<&str> {
        self.get(c).as_ref().err().map(String::as_str)
    }

    /// One line for `plan` and `doctor`.
    pub fn summary(&self) -> String {
        let on: Vec<String> = Controller::ALL
            .iter()
            .filter_map(|&c| self.get(c).as_ref().ok().map(|p| format!("{} (cgroup {})", c.name(), if p.v2 { "v2" } else { "v1" })))
            .collect();
        if on.is_empty() {
            "no limits enforced".to_string()
        } else {
            format!("enforced with a cgroup per run: {}", on.join(", "))
        }
    }
}

fn cannot_create(p: &Place, e: &std::io::Error) -> String {
    format!("cannot create a cgroup under {}: {e} (needs root on cgroup v1, or a delegated cgroup v2 subtree)", p.parent.display())
}

fn not_enabled(c: Controller, p: &Place) -> String {
    format!("the {} controller is not enabled for cgroups under {} (cgroup v2: it is not delegated here)", c.name(), p.parent.display())
}

/// The file that sets `c`'s limit (its presence shows the controller is enabled).
fn limit_file(c: Controller, v2: bool) -> &'static str {
    match (c, v2) {
        (Controller::Memory, false) => "memory.limit_in_bytes",
        (Controller::Memory, true) => "memory.max",
        (Controller::Pids, _) => "pids.max",
        (Controller::Cpu, false) => "cpu.cfs_quota_us",
        (Controller::Cpu, true) => "cpu.max",
    }
}

/// A cgroup filesystem mount from `/proc/self/mountinfo`.
struct Mount {
    root: String,
    point: PathBuf,
    v2: bool,
    controllers: Vec<String>,
}

impl Mount {
    /// `36 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:13 - cgroup cgroup rw,memory`
    fn parse(line: &str) -> Option<Mount> {
        // Fields split on single spaces (a char pattern: memchr, not a substring search,
        // which made this parse cost 80 k instructions per run).
        let mut fields = line.split(' ');
        let (root, point) = (fields.nth(3)?, fields.next()?);
        // Optional fields end at a lone `-`; then fstype, source, super options.
        let mut r = fields.skip_while(|f| *f != "-").skip(1);
        let fstype = r.next()?;
        let _source = r.next()?;
        let opts = r.next().unwrap_or("");
        let v2 = match fstype {
            "cgroup2" => true,
            "cgroup" => false,
            _ => return None,
        };
        Some(Mount { root: unescape(root), point: PathBuf::from(unescape(point)), v2, controllers: opts.split(',').map(str::to_string).collect() })
    }

    /// The directory of cgroup `path` (as `/proc/self/cgroup` names it) under this mount.
    fn dir_of(&self, path: &str) -> PathBuf {
        let root = self.root.trim_end_matches('/');
        let rel = path.strip_prefix(root).filter(|r| r.is_empty() || r.starts_with('/')).unwrap_or(path);
        self.point.join(rel.trim_start_matches('/'))
    }
}

/// mountinfo escapes space, tab, newline and backslash as octal (`\040`).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The limits of `limits` that `support` cannot enforce, with the reason.
pub fn unenforceable(limits: &Limits, support: &Support) -> Vec<(Controller, String)> {
    let mut out = Vec::new();
    let wanted = [(Controller::Memory, limits.memory_bytes.is_some()), (Controller::Pids, limits.pids.is_some()), (Controller::Cpu, limits.cpus.is_some())];
    for (c, want) in wanted {
        if let (true, Some(why)) = (want, support.missing(c)) {
            out.push((c, why.to_string()));
        }
    }
    out
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
    pub fn create(run_id: &str, limits: &Limits, support: &Support) -> Result<(Option<RunCgroup>, Support), String> {
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
                        result = Err(format!("the cgroup {} already exists", dir.display()));
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
                        result = Err(format!("cannot create the cgroup {}: {e}", dir.display()));
                        break;
                    }
                }
            }
            if !dir.join(limit_file(c, place.v2)).exists() {
                *effective.get_mut(c) = Err(not_enabled(c, place));
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

    fn write_limit(&self, c: Controller, dir: &Path, v2: bool, value: &str) -> Result<(), String> {
        let write = |file: &str, v: &str| std::fs::write(dir.join(file), v).map_err(|e| format!("cannot set {} in {}: {e}", file, dir.display()));
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
    pub fn spawn_inside<T>(&self, spawn: impl FnOnce() -> T) -> Result<T, String> {
        let v1: Vec<&Dir> = self.unique_dirs().into_iter().filter(|d| !d.v2).collect();
        let move_thread =
            |to: &Path| std::fs::write(to.join("tasks"), "0").map_err(|e| format!("cannot move workcell's thread into the cgroup {}: {e}", to.display()));
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
    pub fn attach(&self, pid: i32) -> Result<(), String> {
        for d in self.unique_dirs().into_iter().filter(|d| d.v2) {
            std::fs::write(d.path.join("cgroup.procs"), pid.to_string())
                .map_err(|e| format!("cannot move process {pid} into the cgroup {}: {e}", d.path.display()))?;
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

pub use leftovers::remove_leftovers;

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO_V1: &str = "\
30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
36 30 0:31 / /sys/fs/cgroup/memory rw,relatime shared:13 - cgroup cgroup rw,memory
37 30 0:32 / /sys/fs/cgroup/pids rw,relatime shared:14 - cgroup cgroup rw,pids
38 30 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
39 30 0:34 / /sys/fs/cgroup/unified rw,relatime shared:16 - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_controllers_are_found_in_their_hierarchies() {
        let cgroup = "9:pids:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/x\n0::/\n";
        let s = Support::from_proc(cgroup, MOUNTINFO_V1);
        assert_eq!(s.memory, Ok(Place { parent: "/sys/fs/cgroup/memory/process_api/abc".into(), v2: false }));
        assert_eq!(s.pids, Ok(Place { parent: "/sys/fs/cgroup/pids".into(), v2: false }));
        assert_eq!(s.cpu, Ok(Place { parent: "/sys/fs/cgroup/cpu,cpuacct/x".into(), v2: false }));
    }

    #[test]
    fn v2_only_uses_the_unified_hierarchy() {
        let mountinfo = "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        let s = Support::from_proc("0::/user.slice/user-1000.slice/session-2.scope\n", mountinfo);
        let want = Ok(Place { parent: "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope".into(), v2: true });
        assert_eq!(s.memory, want);
        assert_eq!(s.pids, want);
    }

    #[test]
    fn a_mount_rooted_below_the_hierarchy_root_is_followed() {
        // Inside a container: the cgroupfs shows only the container's subtree.
        let mountinfo = "40 30 0:31 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let s = Support::from_proc("0::/docker/abc/inner\n", mountinfo);
        assert_eq!(s.memory, Ok(Place { parent: "/sys/fs/cgroup/inner".into(), v2: true }));
    }

    #[test]
    fn no_cgroup_filesystem_means_no_support_with_a_reason() {
        let s = Support::from_proc("4:memory:/a\n", "22 1 0:5 / /proc rw - proc proc rw\n");
        assert!(s.memory.unwrap_err().contains("not mounted"));
        assert!(s.pids.unwrap_err().contains("no pids cgroup"));
    }

    #[test]
    fn unenforceable_names_only_wanted_and_missing_limits() {
        let limits = Limits { memory_bytes: Some(1 << 20), pids: Some(10), ..Limits::default() };
        let s = Support { memory: Ok(Place { parent: "/x".into(), v2: true }), pids: Err("no".into()), cpu: Err("no".into()) };
        let missing = unenforceable(&limits, &s);
        assert_eq!(missing, vec![(Controller::Pids, "no".to_string())]);
    }

    #[test]
    fn mountinfo_lines_with_several_or_no_optional_fields_parse() {
        let m = Mount::parse(r"41 30 0:35 /a\040b /sys/fs/cgroup/my\040pids rw shared:17 master:3 - cgroup none rw,pids").unwrap();
        assert_eq!((m.root.as_str(), m.point.to_str().unwrap(), m.v2), ("/a b", "/sys/fs/cgroup/my pids", false));
        assert_eq!(m.controllers, ["rw", "pids"]);
        let m = Mount::parse("42 30 0:36 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw").unwrap();
        assert!(m.v2);
        // A mount point that is literally `-`, and an empty source field.
        let m = Mount::parse("43 30 0:37 / /- rw shared:2 - cgroup  rw,memory").unwrap();
        assert_eq!(m.point.to_str(), Some("/-"));
        assert_eq!(m.controllers, ["rw", "memory"]);
        assert!(Mount::parse("22 1 0:5 / /proc rw - proc proc rw").is_none());
        assert!(Mount::parse("truncated line").is_none());
    }

    #[test]
    fn octal_escapes_are_decoded() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape(r"/plain"), "/plain");
    }
}
