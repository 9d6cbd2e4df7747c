//! Red team for warm starts (`workcell pool fill`, then a `workcell run` that takes the
//! pooled sandbox), on the real Docker engine as root, the worker as uid 1000: each test
//! tries to make a warm run weaker than the cold run of the same command — a worker that
//! outlives its workcell, a sandbox that carries what its filler had, an exit status or a
//! limit that differs — and asserts that it held.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::{give_to_worker, processes_with_arg, unique};

/// A project directory of the worker's own with a writable zone `out`.
struct Project {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Project {
    fn new() -> Project {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
        std::fs::create_dir(dir.join("out")).expect("mkdir out");
        give_to_worker(&dir);
        Project { _tmp: tmp, dir }
    }

    fn workcell(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_workcell"));
        c.current_dir(&self.dir).env_remove("RUST_LOG");
        c
    }

    /// `workcell pool fill --backend docker ARGS`.
    fn fill(&self, args: &[&str]) {
        let out = self.workcell().args(["pool", "fill", "--backend", "docker"]).args(args).output().expect("pool fill");
        assert!(out.status.success(), "{}", show("pool fill", &out));
    }

    /// `workcell run --backend docker ARGS`.
    fn run(&self, args: &[&str]) -> Command {
        let mut c = self.workcell();
        c.args(["run", "--backend", "docker"]).args(args);
        c
    }

    /// The states of this project's pooled sandboxes (`pool ls --json`).
    fn states(&self) -> Vec<String> {
        let out = self.workcell().args(["pool", "ls", "--json"]).output().expect("pool ls");
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("pool ls --json");
        list.as_array().expect("a list").iter().map(|e| e["state"].as_str().unwrap_or_default().to_string()).collect()
    }

    fn containers(&self) -> Vec<String> {
        support::containers_with_label(&format!("dev.workcell.project={}", self.dir.display()))
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        // Whatever a failed test left: its containers, then the pool's entries.
        for c in self.containers() {
            let _ = Command::new("docker").args(["rm", "-f", &c]).output();
        }
        let _ = self.workcell().arg("gc").output();
    }
}

fn show(what: &str, out: &Output) -> String {
    format!("{what} -> {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

fn ready() -> bool {
    support::backend_ready("docker") && rustix::process::geteuid().is_root()
}

/// Host pids of `sleep` processes carrying `marker` as an argument.
fn sleeping(marker: &str) -> Vec<u32> {
    processes_with_arg(marker).into_iter().filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep")).collect()
}

/// Starts a warm run of `args` (filled first) and waits until its worker sleeps with
/// `marker`; returns workcell's process.
fn warm_sleeper(p: &Project, args: &[&str], marker: &str) -> std::process::Child {
    p.fill(args);
    let child = p.run(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start workcell");
    assert!(wait_until(Duration::from_secs(60), || !sleeping(marker).is_empty()), "the worker never started");
    assert_eq!(p.states(), ["claimed"], "the run is warm");
    child
}

/// SIGKILLs workcell (no handler of its runs): then, as after a cold run's, nothing of the
/// worker may run on and no container may stay.
fn kill_workcell_and_check(p: &Project, mut child: std::process::Child, marker: &str) {
    child.kill().expect("SIGKILL workcell");
    let _ = child.wait();
    let gone = wait_until(Duration::from_secs(30), || sleeping(marker).is_empty() && p.containers().is_empty());
    let left = (sleeping(marker), p.containers());
    for pid in &left.0 {
        let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(*pid as i32).expect("pid"), rustix::process::Signal::KILL);
    }
    assert!(gone, "after workcell was killed, the worker's processes {:?} and containers {:?} stayed", left.0, left.1);
}

/// The worker stops its agent (the process it reports to, its parent) and sleeps: a
/// SIGKILL of workcell must still end the worker and its container, as it does for a cold
/// run (whose watchdog removes the container).
#[test]
fn a_worker_that_stops_its_agent_does_not_outlive_workcell() {
    if !ready() {
        return;
    }
    let p = Project::new();
    let marker = format!("1{}", unique());
    let script = format!("kill -STOP $PPID; kill -STOP 1; exec sleep {marker}");
    let args = ["--zone", "out=./out:rw", "--", "sh", "-c", &script];
    let child = warm_sleeper(&p, &args, &marker);
    kill_workcell_and_check(&p, child, &marker);
}

/// Variant: the agent stopped from outside (a host process of the worker's uid may signal
/// the container's processes): killing workcell still ends everything.
#[test]
fn an_agent_stopped_from_the_host_does_not_keep_the_worker_alive() {
    if !ready() {
        return;
    }
    let p = Project::new();
    let marker = format!("1{}", unique());
    let args = ["--zone", "out=./out:rw", "--", "sleep", &marker];
    let child = warm_sleeper(&p, &args, &marker);
    // The agent is the sleeping worker's parent.
    let worker = sleeping(&marker)[0];
    let stat = std::fs::read_to_string(format!("/proc/{worker}/stat")).expect("stat");
    let agent: i32 = stat[stat.rfind(')').expect(")") + 1..].split_whitespace().nth(1).expect("ppid").parse().expect("a pid");
    let cmdline = std::fs::read(format!("/proc/{agent}/cmdline")).unwrap_or_default();
    assert!(String::from_utf8_lossy(&cmdline).contains("__agent"), "the worker's parent is the agent");
    rustix::process::kill_process(rustix::process::Pid::from_raw(agent).expect("pid"), rustix::process::Signal::STOP).expect("SIGSTOP the agent");
    kill_workcell_and_check(&p, child, &marker);
}

/// `kill -9 $PPID` from the worker: in a cold container its parent is the container's
/// init, out of its reach, and the command goes on; a warm run must end the same way.
#[test]
fn killing_its_parent_ends_a_warm_run_like_a_cold_one() {
    if !ready() {
        return;
    }
    let p = Project::new();
    let args = ["--zone", "out=./out:rw", "--", "sh", "-c", "kill -9 $PPID; kill -9 1; sleep 0.2; echo still here; exit 3"];
    let cold = p.run(&args).output().expect("cold run");
    assert_eq!(cold.status.code(), Some(3), "{}", show("cold", &cold));
    p.fill(&args);
    let warm = p.run(&args).output().expect("warm run");
    assert!(p.states().is_empty(), "the pooled sandbox was not taken");
    assert_eq!(warm.status.code(), Some(3), "{}", show("warm", &warm));
    assert_eq!(String::from_utf8_lossy(&warm.stdout), "still here\n", "{}", show("warm", &warm));
    assert!(wait_until(Duration::from_secs(20), || p.containers().is_empty()), "containers left: {:?}", p.containers());
}

/// What `pool fill` was given for its runs' environment (`--env K=V`) belongs to the filler:
/// a run that was not given it must not find it anywhere in its sandbox — not in its own
/// environment, nor in any process's (`/proc/*/environ` of the container's init).
#[test]
fn the_fillers_environment_does_not_reach_a_warm_worker() {
    if !ready() {
        return;
    }
    let p = Project::new();
    let secret = format!("fill-secret-{}", unique());
    p.fill(&["--env", &format!("FILLER_SECRET={secret}"), "--zone", "out=./out:rw", "--", "true"]);
    let script = "env; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f 2>/dev/null; done";
    let out = p.run(&["--zone", "out=./out:rw", "--", "sh", "-c", script]).output().expect("warm run");
    assert!(p.states().is_empty(), "the pooled sandbox was not taken");
    assert_eq!(out.status.code(), Some(0), "{}", show("warm", &out));
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(seen.contains("WORKCELL_RUN_ID="), "the worker read its environment: {seen}");
    assert!(!seen.contains(&secret), "the worker read the filler's environment: {seen}");
}

/// The process limit: a warm worker may start as many processes as a cold one (the agent's
/// own tasks do not eat the worker's share).
#[test]
fn a_warm_worker_gets_the_process_limit_of_a_cold_one() {
    if !ready() {
        return;
    }
    let p = Project::new();
    let script = "echo $(( $(cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max) - $(cat /sys/fs/cgroup/pids/pids.current 2>/dev/null || cat /sys/fs/cgroup/pids.current) ))";
    let args = ["--pids", "20", "--zone", "out=./out:rw", "--", "sh", "-c", script];
    let cold = p.run(&args).output().expect("cold run");
    assert_eq!(cold.status.code(), Some(0), "{}", show("cold", &cold));
    p.fill(&args);
    let warm = p.run(&args).output().expect("warm run");
    assert!(p.states().is_empty(), "the pooled sandbox was not taken");
    assert_eq!(warm.status.code(), Some(0), "{}", show("warm", &warm));
    assert_eq!(String::from_utf8_lossy(&warm.stdout), String::from_utf8_lossy(&cold.stdout), "processes left to the worker: warm vs cold");
}

/// Orphans: each `(true &)` leaves a process whose parent is gone; it ends as a zombie of
/// the sandbox's first process, holding its place in the process limit until reaped. A cold
/// run's init reaps them; a warm run's first process (the agent) must too, or a worker that
/// starts many background jobs runs out of processes only when warm.
#[test]
fn a_warm_sandbox_reaps_orphans_like_a_cold_one() {
    if !ready() {
        return;
    }
    let p = Project::new();
    // Each orphan's zombie must go before the next is made (a deadline of 10 s each, else
    // exit 8): more orphans than the process limit, and never a race with the reaper.
    let script = "i=0; while [ $i -lt 40 ]; do (true &) || exit 9; n=0; \
        while grep -qs '^State:.Z' /proc/[0-9]*/status; do n=$((n+1)); [ $n -lt 1000 ] || exit 8; sleep 0.01; done; \
        i=$((i+1)); done; echo done";
    let args = ["--pids", "16", "--zone", "out=./out:rw", "--", "sh", "-c", script];
    let cold = p.run(&args).output().expect("cold run");
    assert_eq!((cold.status.code(), String::from_utf8_lossy(&cold.stdout).as_ref()), (Some(0), "done\n"), "{}", show("cold", &cold));
    p.fill(&args);
    let warm = p.run(&args).output().expect("warm run");
    assert!(p.states().is_empty(), "the pooled sandbox was not taken");
    assert_eq!((warm.status.code(), String::from_utf8_lossy(&warm.stdout).as_ref()), (Some(0), "done\n"), "{}", show("warm", &warm));
}

/// A run killed between its claim (the rename to `ID.claimed`) and the wake leaves an
/// entry whose agent waits for ever: `gc` must remove it and its container once the claim
/// is old, as it removes any other leftover of a killed run. (The state is made here the
/// way such a run leaves it; the kill itself cannot be aimed at that instant.)
#[test]
fn gc_removes_a_claim_whose_run_died_before_the_wake() {
    if !ready() {
        return;
    }
    let p = Project::new();
    p.fill(&["--zone", "out=./out:rw", "--", "true"]);
    let out = p.workcell().args(["pool", "ls", "--json"]).output().expect("pool ls");
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("pool ls --json");
    let id = list[0]["id"].as_str().expect("an entry").to_string();
    let base = std::path::Path::new("/run/workcell/pool");
    let claimed = base.join(format!("{id}.claimed"));
    std::fs::rename(base.join(&id), &claimed).expect("claim the entry");
    let long_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(&claimed).and_then(|f| f.set_modified(long_ago)).expect("age the claim");
    assert_eq!(p.containers().len(), 1);
    let gc = p.workcell().arg("gc").output().expect("gc");
    assert!(gc.status.success(), "{}", show("gc", &gc));
    assert!(wait_until(Duration::from_secs(20), || p.containers().is_empty()), "gc left the container {:?}", p.containers());
    assert!(!claimed.exists(), "gc left the claimed entry");
}

/// A protected file replaced by itself between the fill and the run: a second link made to
/// `.git/config`, the name unlinked and linked again. The object (and so the plan compared
/// at the claim) is the same, but the pooled container's read-only bind of that name went
/// with the unlink: the run must not find the file writable where a cold run has it
/// read-only.
#[test]
fn a_protected_file_relinked_after_the_fill_stays_read_only() {
    if !ready() {
        return;
    }
    let p = Project::new();
    let git = p.dir.join("out/.git");
    std::fs::create_dir(&git).expect("mkdir .git");
    std::fs::write(git.join("config"), "[core]\n").expect("write config");
    give_to_worker(&git);
    let args = ["--zone", "out=./out:rw", "--", "sh", "-c", "echo '[core] fsmonitor = evil' >> /out/.git/config"];
    p.fill(&args);
    std::fs::hard_link(git.join("config"), git.join("config.2")).expect("link");
    std::fs::remove_file(git.join("config")).expect("unlink");
    std::fs::hard_link(git.join("config.2"), git.join("config")).expect("link again");
    std::fs::remove_file(git.join("config.2")).expect("unlink the second name");
    let out = p.run(&args).output().expect("run");
    assert_ne!(out.status.code(), Some(0), "{}", show("run", &out));
    assert_eq!(std::fs::read_to_string(git.join("config")).expect("read config"), "[core]\n", "the worker wrote .git/config");
}
