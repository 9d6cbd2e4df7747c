//! A Docker-API engine on a "second host" for the remote-engine tests: `.ci/remote-engine`
//! starts rootful Podman's service on TCP in a network namespace of its own (reachable from
//! this host only) and a mount namespace where this host's temporary directories, /run and
//! the checkout are hidden, so a zone can reach a worker there only by being shipped.
//!
//! Each [`RemoteEngine`] is its own namespace, storage and address (parallel tests each start
//! one); dropping it (also while a test panics) takes everything down, and the script's
//! watcher does the same when the test process is killed outright. The engine is never this
//! process's `DOCKER_HOST`: the commands that should talk to it get it on their `Command`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The label every container and volume workcell makes carries.
pub const MANAGED: &str = "dev.workcell.managed=true";

/// `.ci/remote-engine` (usage in its header).
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/remote-engine")
}

/// Where the script keeps an engine's state (slot, service pid, log).
fn state_dir(name: &str) -> PathBuf {
    PathBuf::from("/run/workcell-remote-engine/engines").join(name)
}

/// Whether a remote engine can be made here (the gate behind `backend_ready("remote")`):
/// root, the tools the script needs, and network namespaces. Only cheap checks: an engine
/// that then fails to start is a failure of the test, not a reason to skip it.
pub fn probe() -> Result<(), String> {
    if rustix::process::geteuid().as_raw() != 0 {
        return Err("a remote engine needs root (network namespaces, mounts)".into());
    }
    if !script().exists() {
        return Err(format!("{} is missing", script().display()));
    }
    for tool in ["ip", "unshare", "nsenter", "flock", "setsid", "pgrep", "tail", "podman", "docker"] {
        let found = StdCommand::new("sh").args(["-c", &format!("command -v {tool}")]).stdout(Stdio::null()).status().is_ok_and(|s| s.success());
        if !found {
            return Err(format!("{tool} is not installed (.ci/setup-podman installs podman)"));
        }
    }
    if !Path::new("/usr/libexec/podman/catatonit").exists() {
        return Err("/usr/libexec/podman/catatonit is missing (apt-get install catatonit)".into());
    }
    let netns = StdCommand::new("unshare").args(["--net", "true"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
    if !netns {
        return Err("cannot make a network namespace here (unshare --net)".into());
    }
    Ok(())
}

/// One engine (`.ci/remote-engine up`), taken down (`down`) on drop.
pub struct RemoteEngine {
    name: String,
    host: String,
    image: OnceLock<String>,
}

impl RemoteEngine {
    /// Starts an engine and waits until it answers; panics with the script's words when it
    /// cannot. The script's watcher takes it down if this process dies without dropping it.
    pub fn start() -> RemoteEngine {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("wcr-{}-{}", std::process::id(), COUNT.fetch_add(1, Ordering::Relaxed));
        let out = StdCommand::new(script())
            .args(["up", &name, "--owner", &std::process::id().to_string()])
            .stdin(Stdio::null())
            .output()
            .expect("run .ci/remote-engine up");
        let host = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // Constructed before checking, so that a half-made engine is taken down on the panic.
        let engine = RemoteEngine { name, host, image: OnceLock::new() };
        assert!(
            out.status.success() && engine.host.starts_with("tcp://"),
            "remote engine {} did not start: {}",
            engine.name,
            String::from_utf8_lossy(&out.stderr)
        );
        engine
    }

    /// The `DOCKER_HOST` value of this engine (`tcp://10.213.N.2:2375`).
    pub fn docker_host(&self) -> &str {
        &self.host
    }

    /// The engine's name: its network namespace, and an argument of its service's processes.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `docker` talking to this engine.
    pub fn docker(&self) -> StdCommand {
        let mut c = StdCommand::new("docker");
        c.env("DOCKER_HOST", &self.host).env_remove("DOCKER_CONTEXT").env_remove("DOCKER_TLS_VERIFY").env_remove("DOCKER_CERT_PATH");
        c
    }

    /// `workcell` in `dir` against this engine, without a controlling terminal (`setsid`),
    /// so nothing can ever be asked on one, with a deadline that turns a hang into a failure.
    /// The caller adds `run --backend docker …`.
    pub fn workcell(&self, dir: &Path) -> assert_cmd::Command {
        let mut c = assert_cmd::Command::new("setsid");
        c.arg("-w").arg(assert_cmd::cargo::cargo_bin("workcell"));
        c.current_dir(dir).env("DOCKER_HOST", &self.host).env_remove("RUST_LOG").env("NO_COLOR", "1").timeout(Duration::from_secs(180));
        // The engine speaks plain HTTP: no TLS settings of this environment apply to it.
        c.env_remove("DOCKER_TLS_VERIFY").env_remove("DOCKER_CERT_PATH");
        c
    }

    /// The same as a plain process (for tests that signal it): workcell itself, not setsid.
    pub fn workcell_process(&self, dir: &Path) -> StdCommand {
        let mut c = StdCommand::new(assert_cmd::cargo::cargo_bin("workcell"));
        c.current_dir(dir).env("DOCKER_HOST", &self.host).env_remove("RUST_LOG").env("NO_COLOR", "1");
        c.env_remove("DOCKER_TLS_VERIFY").env_remove("DOCKER_CERT_PATH");
        c
    }

    fn ids(&self, args: &[&str]) -> Vec<String> {
        let out = self.docker().args(args).output().expect("docker");
        assert!(out.status.success(), "docker {args:?} on {}: {}", self.host, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect()
    }

    /// Containers (any state) on this engine labelled as workcell's.
    pub fn managed_containers(&self) -> Vec<String> {
        self.ids(&["ps", "-aq", "--filter", &format!("label={MANAGED}")])
    }

    /// Volumes on this engine labelled as workcell's.
    pub fn managed_volumes(&self) -> Vec<String> {
        self.ids(&["volume", "ls", "-q", "--filter", &format!("label={MANAGED}")])
    }

    /// Nothing of workcell's is left on the engine: no container, no volume.
    pub fn assert_nothing_left(&self) {
        let (c, v) = (self.managed_containers(), self.managed_volumes());
        assert!(c.is_empty() && v.is_empty(), "left on the remote engine: containers {c:?}, volumes {v:?}");
    }

    /// Waits (at most `limit`, a give-up guard, not a measure) until nothing of workcell's
    /// is left on the engine; then asserts it.
    pub fn wait_until_nothing_left(&self, limit: Duration) {
        let start = Instant::now();
        while start.elapsed() < limit && !(self.managed_containers().is_empty() && self.managed_volumes().is_empty()) {
            std::thread::sleep(Duration::from_millis(250));
        }
        self.assert_nothing_left();
    }

    /// Waits until a container labelled as workcell's runs on the engine; its id. Panics
    /// after `limit`, or at once if `child` (the workcell expected to start it) has ended.
    pub fn wait_for_running(&self, child: &mut std::process::Child, limit: Duration) -> String {
        let start = Instant::now();
        loop {
            if let Some(id) = self.ids(&["ps", "-q", "--filter", &format!("label={MANAGED}"), "--filter", "status=running"]).into_iter().next() {
                return id;
            }
            if let Some(status) = child.try_wait().expect("wait workcell") {
                panic!("workcell ended ({status}) before its container ran on {}", self.host);
            }
            assert!(start.elapsed() < limit, "no running workcell container on {} after {limit:?}", self.host);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A tiny image built on this engine, once: the host's static busybox as /bin/busybox
    /// with a link in /bin for each of its commands (`sh`, `cat`, …), `PATH=/bin`. Its tag.
    pub fn busybox(&self) -> &str {
        self.image.get_or_init(|| {
            let tag = "workcell-remote-test:busybox".to_string();
            let mut child = self
                .docker()
                .args(["build", "-q", "-t", &tag, "--label", "dev.workcell.kind=test", "-"])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("docker build");
            child.stdin.take().expect("stdin").write_all(&busybox_context()).expect("send the build context");
            let out = child.wait_with_output().expect("docker build");
            assert!(out.status.success(), "building {tag} on {} failed: {}", self.host, String::from_utf8_lossy(&out.stderr));
            tag
        })
    }

    /// Host processes of this engine (see [`processes_of`]).
    pub fn processes(&self) -> Vec<u32> {
        processes_of(&self.name)
    }

    /// The host-side link of this engine (`wcreNh`).
    pub fn link(&self) -> String {
        let slot = std::fs::read_to_string(state_dir(&self.name).join("slot")).expect("engine slot");
        format!("wcre{}h", slot.trim())
    }

    /// Runs `.ci/remote-engine down` now; dropping afterwards does nothing more.
    pub fn stop(mut self) -> Output {
        self.down()
    }

    fn down(&mut self) -> Output {
        let out = StdCommand::new(script()).args(["down", &self.name]).stdin(Stdio::null()).output().expect("run .ci/remote-engine down");
        self.name.clear();
        out
    }
}

impl Drop for RemoteEngine {
    fn drop(&mut self) {
        if self.name.is_empty() {
            return;
        }
        let name = self.name.clone();
        let out = self.down();
        if !out.status.success() {
            // Not a panic: a panic while unwinding would abort and hide the test's own.
            eprintln!("remote engine {name}: down failed: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// Host processes of engine `name`: those whose arguments name it (the service's unshare and
/// init, the watcher) and every process in its pid namespace (Podman, conmon, workers).
pub fn processes_of(name: &str) -> Vec<u32> {
    let pid_ns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let mut pids = super::processes_with_arg(name);
    let mine = pid_ns(std::process::id());
    let engine_ns: Vec<_> = pids.iter().filter_map(|p| pid_ns(*p)).filter(|ns| Some(ns) != mine.as_ref()).collect();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if !pids.contains(&pid) && pid_ns(pid).is_some_and(|ns| engine_ns.contains(&ns)) {
            pids.push(pid);
        }
    }
    pids
}

/// What `.ci/remote-engine up NAME` made on this host that can be named from here: the
/// network namespace and the engine's state directory (its slot, pids and log).
pub fn host_traces(name: &str) -> Vec<String> {
    let mut found = Vec::new();
    if Path::new("/run/netns").join(name).exists() {
        found.push(format!("network namespace /run/netns/{name}"));
    }
    let state = state_dir(name);
    if state.exists() {
        found.push(format!("state {}", state.display()));
    }
    found
}

/// The build context of [`RemoteEngine::busybox`]: a Dockerfile and `bin/`.
fn busybox_context() -> Vec<u8> {
    let bb = std::fs::read("/usr/bin/busybox").expect("static busybox at /usr/bin/busybox (apt-get install busybox-static)");
    let list = StdCommand::new("/usr/bin/busybox").arg("--list").output().expect("busybox --list");
    let mut b = tar::Builder::new(Vec::new());
    let df = "FROM scratch\nCOPY bin /bin\nENV PATH=/bin\nUSER 65534:65534\n";
    file(&mut b, "Dockerfile", df.as_bytes(), 0o644);
    file(&mut b, "bin/busybox", &bb, 0o755);
    for applet in String::from_utf8_lossy(&list.stdout).split_whitespace().filter(|a| *a != "busybox") {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        h.set_mtime(0);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox").expect("tar link");
    }
    b.into_inner().expect("tar")
}

fn file(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8], mode: u32) {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_mtime(0);
    b.append_data(&mut h, name, data).expect("tar entry");
}
