//! First contact as the people who use workcell (issue 35), as created users:
//!
//! - a developer in the `docker` group talking to the local root `dockerd` runs the starter
//!   project on docker with its zones bound (not shipped), and an MCP session's `shell` call;
//! - a forwarder that names itself `dockerd` in front of the engine is not taken as local;
//! - a developer without Docker access is told how to get it, and `auto` runs on bwrap with
//!   one line saying why; `plan` shows the backend `run` would use.
//!
//! Needs root (to create the users) and the local Docker daemon; skipped otherwise unless
//! `WORKCELL_REQUIRE_DOCKER=1`.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A user made for one test, removed with it.
struct User {
    name: String,
    home: PathBuf,
    _tmp: tempfile::TempDir,
}

impl User {
    /// A new user (its own group), a member of `groups` too.
    fn create(groups: &[&str]) -> User {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // One test per process (nextest): the pid names the user.
        let name = format!("wcgroup{}", std::process::id());
        let home = tmp.path().join("home");
        let mut add = Command::new("useradd");
        add.args(["--create-home", "--home-dir"]).arg(&home).args(["--shell", "/bin/sh"]);
        if !groups.is_empty() {
            add.args(["--groups", &groups.join(",")]);
        }
        let st = add.arg(&name).status().expect("useradd");
        assert!(st.success(), "useradd {name}");
        User { name, home, _tmp: tmp }
    }

    /// `sh -c line` as this user with its groups, in its home, with the binary under test first
    /// on `PATH` and `extra` in the environment.
    fn sh(&self, line: &str, extra: &[(&str, &str)]) -> Output {
        let bin = assert_cmd::cargo::cargo_bin("workcell");
        let path = format!("{}:{}", bin.parent().expect("bin dir").display(), std::env::var("PATH").unwrap_or_default());
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid", &self.name, "--regid", &self.name, "--init-groups", "--", "sh", "-c", line]);
        cmd.current_dir(&self.home).env_clear().env("PATH", path).env("HOME", &self.home).env("USER", &self.name).env("NO_COLOR", "1").stdin(Stdio::null());
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("setpriv");
        eprintln!("{line} -> {:?}\nstdout: {}\nstderr: {}", out.status.code(), text(&out.stdout), text(&out.stderr));
        out
    }
}

impl Drop for User {
    fn drop(&mut self) {
        // Whatever the user left running (rootless Podman's service and its pause process).
        let _ = Command::new("pkill").args(["-KILL", "-u", &self.name]).status();
        let _ = Command::new("userdel").arg(&self.name).status();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ready() -> bool {
    if !rustix::process::geteuid().is_root() {
        eprintln!("note: skipping: creating users needs root");
        return false;
    }
    support::backend_ready("docker") && support::backend_ready("bwrap")
}

/// `workcell init` and one data file, as the user.
fn starter(user: &User) {
    let out = user.sh("mkdir p && cd p && workcell init && echo hi > data/a.txt", &[]);
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_docker_group_user_runs_the_starter_on_docker_with_zones_bound() {
    if !ready() {
        return;
    }
    let user = User::create(&["docker"]);
    starter(&user);
    let plan = user.sh("cd p && workcell plan line-count", &[]);
    assert!(text(&plan.stdout).contains("backend:  docker (the Docker daemon answers on this host: zones are bound)"), "{}", text(&plan.stdout));
    for args in ["run line-count", "run --backend docker line-count"] {
        let out = user.sh(&format!("cd p && rm -f out/* && workcell {args} && cat out/*"), &[]);
        assert_eq!(out.status.code(), Some(0), "{args}");
        // `image: host` (what `init` writes) runs only on an engine proven local: its zones
        // are bound, never shipped, and `auto` did not fall back.
        assert!(text(&out.stdout).contains("/data/a.txt"), "{args}: {}", text(&out.stdout));
        assert!(!text(&out.stderr).contains("running on bwrap"), "{args}: {}", text(&out.stderr));
    }
    // The worker's /data is the host directory itself (a bind mount of it), not a volume.
    let out = user.sh("cd p && workcell run --backend docker -- sh -c 'cat /proc/self/mountinfo' | grep ' /data '", &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(!text(&out.stdout).contains("/volumes/"), "shipped: {}", text(&out.stdout));
}

#[test]
fn a_docker_group_users_mcp_session_runs_a_shell_call_on_docker() {
    if !ready() {
        return;
    }
    let user = User::create(&["docker"]);
    starter(&user);
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sh","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shell","arguments":{"command":"cat /data/a.txt; id -u"}}}"#,
    ];
    let input = user.home.join("in.jsonl");
    std::fs::write(&input, lines.join("\n") + "\n").expect("input");
    let out = user.sh("cd p && workcell mcp --backend docker --approve shell < ../in.jsonl", &[]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(r#""id":2"#) && stdout.contains("hi\\n"), "{stdout}");
    assert!(!stdout.contains("needs the engine on this host"), "{stdout}");
}

#[test]
fn a_forwarder_named_dockerd_is_not_taken_as_the_local_engine() {
    if !ready() {
        return;
    }
    let Some(socat) = which("socat") else {
        panic!("this test needs socat: `bash .ci/test` as root installs it (apt-get install socat)");
    };
    let user = User::create(&["docker"]);
    starter(&user);
    // Root's forwarder, renamed: its comm is `dockerd`, it runs as root in this namespace,
    // and it forwards to the real engine. Only the engine's own pid may pass.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let fake = dir.path().join("dockerd");
    std::fs::copy(&socat, &fake).expect("copy socat");
    // Not an engine socket's usual name: a zone holding one anywhere beneath it is refused,
    // and other tests make zones of /tmp.
    let sock = dir.path().join("fwd.sock");
    let mut fwd = Command::new(&fake)
        .arg(format!("UNIX-LISTEN:{},fork,mode=666", sock.display()))
        .arg("UNIX-CONNECT:/var/run/docker.sock")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("forwarder");
    let start = Instant::now();
    while !sock.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "the forwarder did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let host = format!("unix://{}", sock.display());
    let env = [("DOCKER_HOST", host.as_str())];
    let plan = user.sh("cd p && workcell plan line-count", &env);
    let named = user.sh("cd p && workcell run --backend docker line-count", &env);
    let auto = user.sh("cd p && workcell run line-count", &env);
    // Root sees more of a process (its executable): the forwarder must fail there too.
    let as_root = support::workcell_in(&user.home.join("p")).env("DOCKER_HOST", &host).args(["plan", "line-count"]).output().expect("plan");
    let _ = fwd.kill();
    let _ = fwd.wait();
    for out in [&plan, &as_root] {
        let stdout = text(&out.stdout);
        assert!(stdout.contains("backend:  bwrap (docker cannot run this here:") && stdout.contains("is not shown to be the engine itself"), "{stdout}");
    }
    // Named: refused with the reason, never bound by path.
    assert_eq!(named.status.code(), Some(2));
    assert!(
        text(&named.stderr).contains("`image: host` needs the engine on this host") && text(&named.stderr).contains("not shown to be the engine itself"),
        "{}",
        text(&named.stderr)
    );
    // Not named: bwrap, with one line saying why.
    assert_eq!(auto.status.code(), Some(0));
    let why: Vec<&str> = text(&auto.stderr).lines().filter(|l| l.contains("running on bwrap because docker cannot run this here")).map(|_| "").collect();
    assert_eq!(why.len(), 1, "{}", text(&auto.stderr));
}

#[test]
fn a_user_without_docker_access_is_told_how_and_auto_runs_on_bwrap() {
    if !ready() {
        return;
    }
    let user = User::create(&[]);
    starter(&user);
    let named = user.sh("cd p && workcell run --backend docker line-count", &[]);
    assert_eq!(named.status.code(), Some(125));
    let stderr = text(&named.stderr);
    assert!(
        stderr.contains("the Docker daemon is running") && stderr.contains("docker") && stderr.contains("group") && stderr.contains("--backend bwrap"),
        "{stderr}"
    );
    assert!(!stderr.contains("start it") && !stderr.contains("start the"), "{stderr}");

    let auto = user.sh("cd p && workcell run line-count && cat out/*", &[]);
    assert_eq!(auto.status.code(), Some(0));
    assert!(text(&auto.stdout).contains("/data/a.txt"));
    let stderr = text(&auto.stderr);
    let why: Vec<&str> = stderr.lines().filter(|l| l.contains("running on bwrap because docker cannot run this here")).collect();
    assert_eq!(why.len(), 1, "{stderr}");
    assert!(why[0].contains("may not use its socket"), "{stderr}");

    let plan = user.sh("cd p && workcell plan line-count && workcell plan", &[]);
    let stdout = text(&plan.stdout);
    assert!(stdout.contains("backend:  bwrap (docker cannot run this here:"), "{stdout}");
    assert!(stdout.contains("backend:  auto: runs on bwrap"), "{stdout}");
}

/// Rootless Podman (the user's own service, in a user and mount namespace of its own) cannot
/// bind this host's paths as they are here: not local, so `auto` runs the starter on bwrap and
/// `--backend docker` refuses `image: host` with the reason.
#[test]
fn rootless_podman_is_not_taken_as_local() {
    if !ready() {
        return;
    }
    for tool in ["podman", "newuidmap"] {
        if which(tool).is_none() {
            panic!("this test needs {tool}: `bash .ci/test` as root installs it (apt-get install podman uidmap)");
        }
    }
    let user = User::create(&[]);
    starter(&user);
    let run_dir = user.home.join("run");
    let sock = run_dir.join("service.sock");
    let service = user.sh(
        &format!("mkdir -m 700 {0} && (podman system service --time=0 unix://{1} >{0}/log 2>&1 &) && for i in $(seq 100); do [ -S {1} ] && exit 0; sleep 0.1; done; cat {0}/log; exit 1", run_dir.display(), sock.display()),
        &[("XDG_RUNTIME_DIR", &run_dir.to_string_lossy())],
    );
    assert_eq!(service.status.code(), Some(0), "rootless Podman did not start");
    let host = format!("unix://{}", sock.display());
    let env = [("DOCKER_HOST", host.as_str()), ("XDG_RUNTIME_DIR", &*run_dir.to_string_lossy())];
    let plan = user.sh("cd p && workcell plan line-count", &env);
    let stdout = text(&plan.stdout);
    assert!(stdout.contains("backend:  bwrap (docker cannot run this here:") && stdout.contains("sees other mounts"), "{stdout}");
    let auto = user.sh("cd p && workcell run line-count && cat out/*", &env);
    assert_eq!(auto.status.code(), Some(0));
    assert!(text(&auto.stdout).contains("/data/a.txt"));
    let named = user.sh("cd p && workcell run --backend docker line-count", &env);
    assert_eq!(named.status.code(), Some(2));
    assert!(
        text(&named.stderr).contains("`image: host` needs the engine on this host") && text(&named.stderr).contains("sees other mounts"),
        "{}",
        text(&named.stderr)
    );
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| Path::new(p).is_file()))
}
