//! Helpers shared by the integration tests (the one helper module: `mod support;`): the
//! backend gate, projects in temp dirs, label-based container checks, and in submodules the
//! sandbox-core fixture ([`fixture`]), the plan-rendering fixture ([`render`]), the zone and
//! worker of the sweep attacks ([`sweep`]), the bases of the tests' scratch directories
//! ([`scratch`]) and the gate for host tools and the tests' Python ([`tools`]). Beside them,
//! `pty_drive.py`: the pseudo-terminal loop of tests/pty_run.py and tests/pty_review.py.
#![allow(dead_code)]

pub mod compose;
pub mod doc_lines;
pub mod fixture;
pub mod remote;
pub mod render;
pub mod scratch;
pub mod servers;
pub mod sweep;
pub mod tools;

#[allow(unused_imports)]
pub use tools::{program_ready, python, python_ready};

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

use assert_cmd::Command;
use workcell::backend::cgroup::{Controller, Support};

/// Whether `backend` ("bwrap", "docker", "docker+runsc": docker with gVisor's runtime,
/// "podman": docker against Podman's service, "remote": docker against an engine on another
/// host, or "none", which always works) works here. Without it the test is skipped with a
/// note, unless `WORKCELL_REQUIRE_BWRAP=1` / `WORKCELL_REQUIRE_DOCKER=1` /
/// `WORKCELL_REQUIRE_RUNSC=1` / `WORKCELL_REQUIRE_PODMAN=1` / `WORKCELL_REQUIRE_REMOTE=1`
/// makes that a failure.
pub fn backend_ready(backend: &str) -> bool {
    let (result, gate) = match backend {
        "bwrap" => (workcell::backend::bwrap::probe().map(|_| ()).map_err(|e| e.to_string()), "WORKCELL_REQUIRE_BWRAP"),
        // "docker+pool": the docker backend starting warm from `workcell pool fill`.
        "docker" | "docker+pool" => (workcell::backend::docker::probe().map(|_| ()).map_err(|e| e.to_string()), "WORKCELL_REQUIRE_DOCKER"),
        // The docker backend under gVisor: the daemon must list the runtime, with the host
        // sockets open (the broker): `.ci/setup-runsc` registers it so.
        "docker+runsc" => (workcell::backend::docker::probe().map(|_| ()).map_err(|e| e.to_string()).and_then(|_| runsc_probe()), "WORKCELL_REQUIRE_RUNSC"),
        // The docker backend against Podman's Docker-compatible service: the socket named by
        // WORKCELL_PODMAN_SOCKET becomes this test process's DOCKER_HOST (see `podman_probe`).
        "podman" => (podman_probe(), "WORKCELL_REQUIRE_PODMAN"),
        // The docker backend against an engine on a "second host" (`.ci/remote-engine`,
        // tests/support/remote.rs): only whether one can be made here; each test makes its own.
        "remote" => (remote::probe(), "WORKCELL_REQUIRE_REMOTE"),
        "none" => return true,
        other => panic!("unknown backend {other}"),
    };
    match result {
        Ok(()) => true,
        Err(e) if std::env::var(gate).as_deref() == Ok("1") => panic!("{gate}=1 but the {backend} backend is unavailable: {e}"),
        Err(e) => {
            eprintln!("note: skipping a {backend} test ({e}); set {gate}=1 to make this a failure");
            false
        }
    }
}

/// gVisor registered with the daemon so that a worker reaches its broker.
fn runsc_probe() -> Result<(), String> {
    use workcell::backend::docker::runtimes;
    let listed = runtimes::current().map_err(|e| e.to_string())?;
    runtimes::check(&listed, "runsc").map_err(|e| format!("{e} (`bash .ci/test` as root does: .ci/setup-runsc)"))?;
    if listed.broker_unreachable.iter().any(|n| n == "runsc") {
        return Err(format!("runsc is registered without --host-uds=open, so no worker under it reaches its broker: `.ci/setup-runsc` (run by `bash .ci/test` as root) registers it with it; or {}", runtimes::host_uds_hint("runsc")));
    }
    Ok(())
}

/// Points this test process at the Podman socket in `WORKCELL_PODMAN_SOCKET` (a path or a
/// `unix://` address): `DOCKER_HOST` is set for the process, so the `workcell` and `docker`
/// commands it starts talk to Podman too. That is only sound with one test per process, as
/// nextest runs them; then the socket must answer as Podman.
fn podman_probe() -> Result<(), String> {
    let socket = std::env::var("WORKCELL_PODMAN_SOCKET")
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or("WORKCELL_PODMAN_SOCKET is not set (the socket of `podman system service`, e.g. /run/wc-podman/podman.sock; `bash .ci/test` as root starts one and sets it)")?;
    if std::env::var("NEXTEST_EXECUTION_MODE").as_deref() != Ok("process-per-test") {
        return Err("the podman tests set DOCKER_HOST for their whole process: run them with cargo nextest (one process per test)".into());
    }
    let address = if socket.contains("://") { socket } else { format!("unix://{socket}") };
    std::env::set_var("DOCKER_HOST", &address);
    std::env::set_var(ENGINE_VAR, "podman");
    let answer = workcell::backend::docker::probe().map_err(|e| e.to_string())?;
    if !answer.starts_with("Podman") {
        return Err(format!("{address} answers as {answer}, not as Podman"));
    }
    Ok(())
}

/// Set (to "podman") in a test process that [`podman_probe`] pointed at Podman.
const ENGINE_VAR: &str = "WORKCELL_TEST_ENGINE";

/// Whether this test process talks to Podman (see [`podman_probe`]).
pub fn on_podman() -> bool {
    std::env::var(ENGINE_VAR).as_deref() == Ok("podman")
}

/// Extra `docker run` arguments for helper containers the tests start themselves. Podman
/// gives a container open-file and process limits of 1048576 unless told otherwise, which a
/// service without CAP_SYS_RESOURCE cannot set (workcell's own runs name theirs).
pub fn run_args() -> &'static [&'static str] {
    if on_podman() {
        &["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
    } else {
        &[]
    }
}

/// Whether bwrap runs here get a cgroup of their own for `c` (Docker always enforces its
/// limits). Without one the caller skips, or checks that the run names the unenforced limit,
/// unless `WORKCELL_REQUIRE_CGROUP=1` makes that a failure.
pub fn cgroup_ready(c: Controller) -> bool {
    match Support::detect().missing(c) {
        None => true,
        Some(why) if std::env::var("WORKCELL_REQUIRE_CGROUP").as_deref() == Ok("1") => {
            panic!("WORKCELL_REQUIRE_CGROUP=1 but bwrap cannot enforce {c:?} here: {why}")
        }
        Some(why) => {
            eprintln!("note: bwrap cannot enforce {c:?} here ({why}); set WORKCELL_REQUIRE_CGROUP=1 to make this a failure");
            false
        }
    }
}

/// A value unique to this test run, to find processes and files again.
pub fn unique() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    format!("{}{:09}", std::process::id(), nanos)
}

/// Host pids whose command line contains `marker` as a whole argument (a worker's processes
/// are visible from the host on every backend).
pub fn processes_with_arg(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if cmdline.split(|b| *b == 0).any(|a| a == marker.as_bytes()) {
                out.push(pid);
            }
        }
    }
    out
}

/// The host user tests hand their project directories to when they run as root (as CI
/// does): workers run as the project directory's owner, never as root.
pub const TEST_WORKER_UID: u32 = 1000;

/// The host uid a worker runs as in these tests: [`TEST_WORKER_UID`] as root, else ours.
pub fn worker_uid() -> u32 {
    let me = rustix::process::geteuid().as_raw();
    if me == 0 {
        TEST_WORKER_UID
    } else {
        me
    }
}

/// Gives `path` and everything below it to the test worker (only as root), so that a worker
/// can write where a test lets it.
pub fn give_to_worker(path: &Path) {
    if rustix::process::geteuid().as_raw() != 0 {
        return;
    }
    let status = StdCommand::new("chown").arg("-R").arg(format!("{TEST_WORKER_UID}:{TEST_WORKER_UID}")).arg(path).status().expect("chown");
    assert!(status.success(), "chown -R {}", path.display());
}

/// A project directory (`proj/`) with zones `in/` (holding `a.txt`) and `out/`, plus a
/// sibling directory `secret/` that is never a zone.
pub struct Proj {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Proj {
    pub fn new() -> Proj {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical tempdir");
        let dir = root.join("proj");
        for d in ["proj/in", "proj/out", "secret"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::write(dir.join("in/a.txt"), "hello from in\n").expect("write");
        std::fs::write(root.join("secret/s.txt"), "secret\n").expect("write");
        give_to_worker(&dir);
        Proj { tmp, dir }
    }

    pub fn secret(&self) -> PathBuf {
        self.dir.parent().expect("parent").join("secret")
    }

    /// `workcell` in the project directory, no config file.
    pub fn workcell(&self) -> Command {
        workcell_in(&self.dir)
    }

    /// `workcell run --backend docker --zone in=in:ro --zone out=out:rw <extra> -- <cmd>`.
    pub fn run(&self, extra: &[&str], cmd: &[&str]) -> Command {
        let mut c = self.workcell();
        c.args(["run", "--backend", "docker", "--zone", "in=in:ro", "--zone", "out=out:rw"]).args(extra).arg("--").args(cmd);
        c
    }

    /// Containers labelled with this project (every run made here carries
    /// `dev.workcell.project=<dir>`).
    pub fn containers(&self) -> Vec<String> {
        containers_with_label(&format!("dev.workcell.project={}", self.dir.display()))
    }

    pub fn assert_no_containers(&self) {
        let left = self.containers();
        assert!(left.is_empty(), "containers left behind: {left:?}");
    }
}

/// The command lines of the first `sh` block of the Markdown file `readme` (a fence whose info
/// string's first word is `sh`; the words after it are tests/docs.rs's marks), trimmed,
/// without blank lines and comments (the quick start and the recipes are run from their docs).
pub fn first_sh_block_lines(readme: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(readme).unwrap_or_else(|e| panic!("{}: {e}", readme.display()));
    let mut lines = text.lines();
    lines.by_ref().find(|l| l.strip_prefix("```").is_some_and(|info| info.split_whitespace().next() == Some("sh"))).expect("an sh block");
    lines.take_while(|l| !l.starts_with("```")).map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_string).collect()
}

/// `workcell` started in `dir`, with a deadline that turns a hang into a failure.
pub fn workcell_in(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("workcell").expect("workcell binary");
    c.current_dir(dir).env_remove("RUST_LOG").timeout(Duration::from_secs(120));
    c
}

/// Ids of all containers (any state) carrying `label` (`k=v`).
pub fn containers_with_label(label: &str) -> Vec<String> {
    let out = StdCommand::new("docker").args(["ps", "-aq", "--filter", &format!("label={label}")]).output().expect("docker ps");
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
}

/// Waits until a running container carries `label`; panics after `limit`.
pub fn wait_for_running(label: &str, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        let out =
            StdCommand::new("docker").args(["ps", "-q", "--filter", &format!("label={label}"), "--filter", "status=running"]).output().expect("docker ps");
        let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !s.is_empty() {
            return s;
        }
        assert!(start.elapsed() < limit, "no running container with {label} after {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A tiny image built locally FROM scratch (no registry): the host's static busybox at
/// /bin/busybox plus /www/index.html ("ok"). The tag is unique to `name` so parallel tests
/// never remove each other's image. Removed on drop.
pub struct BusyboxImage {
    pub tag: String,
}

impl BusyboxImage {
    pub fn build(name: &str) -> BusyboxImage {
        let tag = format!("workcell-test-busybox:{name}-{}", std::process::id());
        let mut b = tar::Builder::new(Vec::new());
        let df = "FROM scratch\nCOPY busybox /bin/busybox\nCOPY www /www\nUSER 65534:65534\n";
        append(&mut b, "Dockerfile", df.as_bytes(), 0o644);
        let bb = std::fs::read("/usr/bin/busybox").expect("static busybox at /usr/bin/busybox (apt-get install busybox-static)");
        append(&mut b, "busybox", &bb, 0o755);
        append(&mut b, "www/index.html", b"ok\n", 0o644);
        let ctx = b.into_inner().expect("tar");
        // Up to three tries: under parallel builds the daemon's legacy builder has failed
        // once with "failed to get digest …: no such file" for an image it had just built.
        for attempt in 1..=3 {
            let mut child = StdCommand::new("docker")
                .args(["build", "-q", "-t", &tag, "--label", "dev.workcell.managed=true", "--label", "dev.workcell.kind=test", "-"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("docker build");
            std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), &ctx).expect("send context");
            if child.wait().expect("docker build").success() {
                return BusyboxImage { tag };
            }
            assert!(attempt < 3, "building {tag} failed three times");
        }
        unreachable!()
    }
}

impl Drop for BusyboxImage {
    fn drop(&mut self) {
        let _ = StdCommand::new("docker").args(["rmi", "-f", &self.tag]).output();
    }
}

fn append(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8], mode: u32) {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_mtime(0);
    b.append_data(&mut h, name, data).expect("tar entry");
}

/// A detached server container, force-removed on drop.
pub struct Server {
    pub id: String,
    pub ip: String,
}

impl Server {
    /// `busybox httpd` on port 8080 in the default bridge network.
    pub fn httpd(image: &BusyboxImage, label: &str) -> Server {
        let out = StdCommand::new("docker")
            .args(["run", "-d", "--rm", "--label", "dev.workcell.managed=true", "--label", label])
            .args(run_args())
            .arg(&image.tag)
            .args(["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"])
            .output()
            .expect("docker run");
        assert!(out.status.success(), "server failed: {}", String::from_utf8_lossy(&out.stderr));
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let ip = StdCommand::new("docker").args(["inspect", "-f", "{{.NetworkSettings.IPAddress}}", &id]).output().expect("inspect");
        let ip = String::from_utf8_lossy(&ip.stdout).trim().to_string();
        assert!(!ip.is_empty(), "server has no IP");
        Server { id, ip }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = StdCommand::new("docker").args(["rm", "-f", &self.id]).output();
    }
}

/// Writes `workcell.yaml` and `workers/<name>.worker` files into `dir`.
pub fn write_project(dir: &Path, config: &str, workers: &[(&str, &str)]) {
    std::fs::write(dir.join("workcell.yaml"), config).expect("write config");
    std::fs::create_dir_all(dir.join("workers")).expect("mkdir workers");
    for (name, text) in workers {
        std::fs::write(dir.join("workers").join(format!("{name}.worker")), text).expect("write worker");
    }
}

/// The cgroup directories the runs in `project`'s audit log would have used.
pub fn run_cgroup_dirs(project: &Path) -> Vec<PathBuf> {
    let log = std::fs::read_to_string(project.join(".workcell/audit.jsonl")).expect("audit log");
    let run_ids: Vec<String> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("run_id").and_then(|r| r.as_str()).map(str::to_string))
        .collect();
    assert!(!run_ids.is_empty(), "no run in the audit log");
    let support = Support::detect();
    let places = [&support.memory, &support.pids, &support.cpu].into_iter().flatten();
    places.flat_map(|p| run_ids.iter().map(|id| p.parent.join(format!("workcell-{id}")))).collect()
}

/// No bwrap cgroup of any run in `project`'s audit log is left.
pub fn assert_no_cgroup_left(project: &Path) {
    for dir in run_cgroup_dirs(project) {
        assert!(!dir.exists(), "cgroup left behind: {}", dir.display());
    }
}

/// One test per name in `[...]`, each running `body::NAME(backend)` when the backend is
/// ready (and failing instead of skipping when CI requires it): the same bodies on bwrap,
/// docker and docker+runsc.
#[allow(unused_macros)]
macro_rules! backend_suite {
    ($module:ident, $backend:literal, [$($test:ident),* $(,)?]) => {
        mod $module {
            use super::*;
            $(
                #[test]
                fn $test() {
                    if support::backend_ready($backend) {
                        body::$test($backend);
                    }
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use backend_suite;

/// The host's own git in `dir` as root, with an identity and `safe.directory` (the repository
/// belongs to the test worker's uid) and no system configuration.
#[allow(dead_code)]
pub fn host_git(dir: &Path, args: &[&str]) -> std::process::Output {
    StdCommand::new("git")
        .args(["-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs")
}

/// `program` on the host as the test worker's user (the zones' owner): through `setpriv` as
/// root, else as ourselves.
#[allow(dead_code)]
pub fn as_worker(program: &str) -> StdCommand {
    if rustix::process::geteuid().is_root() {
        let uid = worker_uid().to_string();
        let mut c = StdCommand::new("setpriv");
        c.args(["--reuid", &uid, "--regid", &uid, "--clear-groups", program]);
        c
    } else {
        StdCommand::new(program)
    }
}

/// `workcell ARGS` (the binary under test) in `dir`, without the test's `RUST_LOG` and with no
/// deadline; its status, stdout and stderr are logged (shown when a test fails).
#[allow(dead_code)]
pub fn workcell_logged(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = StdCommand::new(env!("CARGO_BIN_EXE_workcell")).current_dir(dir).env_remove("RUST_LOG").args(args).output().expect("start workcell");
    eprintln!("workcell -> {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// The names in `dir`, sorted (the marks a planted command left there).
#[allow(dead_code)]
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut m: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    m.sort();
    m
}

/// `workcell run --backend BACKEND EXTRA -- sh -c SCRIPT` in `dir` (not started yet), with
/// stdin empty and without the test's `RUST_LOG`.
#[allow(dead_code)]
pub fn workcell_sh(dir: &Path, backend: &str, extra: &[&str], script: &str) -> StdCommand {
    let mut c = StdCommand::new(env!("CARGO_BIN_EXE_workcell"));
    c.current_dir(dir)
        .env_remove("RUST_LOG")
        .args(["run", "--backend", backend])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdin(std::process::Stdio::null());
    c
}

/// `program ARGS` on the host in `dir` as the person (the zones' owner, see [`as_worker`]),
/// with `HOME` at `home` (made and given to them) and none of the test machine's git
/// configuration: no system or global file, the person's own identity.
#[allow(dead_code)]
pub fn as_person(dir: &Path, home: &Path, program: &str, args: &[&str]) -> std::process::Output {
    let _ = std::fs::create_dir_all(home);
    give_to_worker(home);
    as_worker(program)
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "person")
        .env("GIT_AUTHOR_EMAIL", "person@example.com")
        .env("GIT_COMMITTER_NAME", "person")
        .env("GIT_COMMITTER_EMAIL", "person@example.com")
        .output()
        .unwrap_or_else(|e| panic!("start {program}: {e}"))
}
