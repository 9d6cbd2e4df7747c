//! What only the Docker backend has, against the real engine: the container's root, named
//! env, interfaces, the pids cgroup, container removal on timeout and signals, the start
//! errors Docker reports, stdin, images and builds, gc, doctor, what lies beyond the zones
//! (/run, /tmp, IPC) the same on both engines. What every backend must do
//! (zones, hidden host paths, env, capabilities, /tmp, limits, exit statuses, network) is in
//! `behaviour.rs`, run on docker and bwrap; the rendered plans (no daemon) in `docker_render.rs`.
//!
//! Each test runs on Docker (module `docker`) and on Podman's Docker-compatible service
//! (module `podman`, see [`on_engines`]).
//!
//! Gate: `support::backend_ready("docker")` / `("podman")` (a missing daemon skips, or fails
//! under `WORKCELL_REQUIRE_DOCKER=1` / `WORKCELL_REQUIRE_PODMAN=1`). Every test checks that no container of its own project
//! (label `dev.workcell.project=<its temp dir>`) is left.

mod support;

use std::time::{Duration, Instant};

use predicates::prelude::*;
use support::*;

/// Zone modes, hidden host paths and a private /tmp are in `behaviour.rs` (both backends);
/// here: the container's root holds the layout and the zones, nothing of the host's top
/// level beyond it.
fn the_root_holds_only_the_layout_and_the_zones(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    let out = p.run(&[], &["ls", "/"]).assert().success().get_output().stdout.clone();
    let out = String::from_utf8_lossy(&out);
    let root: Vec<&str> = out.lines().collect();
    assert!(root.contains(&"in") && root.contains(&"out") && root.contains(&"usr"), "{out}");
    for name in root {
        assert!(
            ["bin", "dev", "etc", "in", "lib", "lib32", "lib64", "libx32", "out", "proc", "run", "sbin", "sys", "tmp", "usr"].contains(&name)
                // Podman makes /var for the read-only /var/tmp workcell puts over its own.
                || (engine == "podman" && name == "var"),
            "unexpected / entry {name}: {out}"
        );
    }
    p.assert_no_containers();
}

/// A host variable reaches the worker only when `--env` names it (the unnamed case and the
/// capability set are in `behaviour.rs`); the root file system is read-only and the zones
/// are announced in `WORKCELL_ZONES`.
fn named_env_is_passed_and_the_root_is_read_only(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    let var = format!("WORKCELL_TEST_SECRET_{}", std::process::id());
    let script = format!("echo \"var=${{{var}:-unset}}\"; if touch /x 2>/dev/null; then echo ROOT-WRITABLE; fi; echo zones=$WORKCELL_ZONES");
    let out = p.run(&[], &["sh", "-c", &script]).env(&var, "s3cret").assert().success().get_output().stdout.clone();
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("var=unset"), "{out}");
    assert!(!out.contains("ROOT-WRITABLE"), "{out}");
    assert!(out.contains("zones=/in:ro,/out:rw"), "{out}");
    let out = p.run(&["--env", &var], &["sh", "-c", &script]).env(&var, "s3cret").assert().success().get_output().stdout.clone();
    assert!(String::from_utf8_lossy(&out).contains("var=s3cret"));
    p.assert_no_containers();
}

/// Reaching (or not) a sibling container is in `behaviour.rs`; here: with the network off
/// the container has no interface but `lo`.
fn network_off_leaves_only_loopback(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    let out = p.run(&[], &["sh", "-c", "cat /proc/net/dev"]).assert().success().get_output().stdout.clone();
    let ifaces: Vec<String> = String::from_utf8_lossy(&out).lines().skip(2).filter_map(|l| l.split(':').next()).map(|s| s.trim().to_string()).collect();
    assert_eq!(ifaces, vec!["lo".to_string()], "network off must leave only lo");
    p.assert_no_containers();
}

/// `--pids` lands in the container's cgroup, and a real (exponential) fork bomb stays inside
/// it: the worker's own shell starts it with a single fork (a subshell; dash forks each side
/// of a pipe from the shell itself, and the second fork could meet a full cgroup), then
/// `exec`s (no fork needed) into a sleep that only the timeout
/// ends, so the run must end with 124 from workcell's timeout, the container gone and the
/// host still able to start processes. (A bounded burst against a limit is in `behaviour.rs`.)
fn fork_bomb_is_contained_by_pids_limit(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    let out = p
        .run(&["--pids", "64"], &["sh", "-c", "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(String::from_utf8_lossy(&out).trim(), "64");
    let out = p
        .run(&["--pids", "64", "--timeout", "5s"], &["sh", "-c", "(f() { f | f & }; f); exec sleep 60"])
        .timeout(Duration::from_secs(120))
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "the bomb must neither end the run nor outlast the timeout: {}", stderr.lines().last().unwrap_or(""));
    assert!(stderr.contains("timeout"), "the end is explained: {}", stderr.lines().last().unwrap_or(""));
    assert!(std::process::Command::new("true").status().expect("spawn").success());
    p.assert_no_containers();
}

fn timeout_exits_124_and_removes_the_container(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    p.run(&["--timeout", "2s"], &["sleep", "60"]).assert().code(124).stderr(predicate::str::contains("timeout"));
    p.assert_no_containers();
}

fn signal_removes_container(sig: rustix::process::Signal, code: i32) {
    let p = Proj::new();
    let bin = assert_cmd::cargo::cargo_bin("workcell");
    let mut child = std::process::Command::new(bin)
        .current_dir(&p.dir)
        .args(["run", "--backend", "docker", "--zone", "in=in:ro", "--", "sleep", "60"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn workcell");
    let label = format!("dev.workcell.project={}", p.dir.display());
    wait_for_running(&label, Duration::from_secs(60));
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, sig).expect("signal workcell");
    // A workcell that ignored the signal would hang here; nextest's slow-timeout
    // (.config/nextest.toml) ends such a test as a failure.
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(code));
    p.assert_no_containers();
}

fn sigint_removes_the_container(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    signal_removes_container(rustix::process::Signal::INT, 130);
}

fn sigterm_removes_the_container(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    signal_removes_container(rustix::process::Signal::TERM, 143);
}

/// The statuses themselves are in `behaviour.rs`; here: workcell names the command Docker
/// could not start and why.
fn missing_or_non_executable_command_is_named(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    p.run(&[], &["/nonexistent"]).assert().code(127).stderr(predicate::str::contains("/nonexistent").and(predicate::str::contains("not found")));
    p.run(&[], &["/in/a.txt"]).assert().code(126).stderr(predicate::str::contains("/in/a.txt").and(predicate::str::contains("not executable")));
    p.assert_no_containers();
}

fn stdin_is_connected_with_dash_i(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    p.run(&["-i"], &["sh", "-c", "read x; echo got:$x"]).write_stdin("piped\n").assert().success().stdout("got:piped\n");
    p.assert_no_containers();
}

fn named_images_run_and_missing_ones_say_how_to_get_them(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    let img = BusyboxImage::build("named");
    p.run(&["--image", &img.tag], &["/bin/busybox", "cat", "/in/a.txt"]).assert().success().stdout("hello from in\n");
    p.run(&["--image", "workcell-test-no-such-image:1"], &["true"])
        .assert()
        .code(125)
        .stderr(predicate::str::contains("never pulls").and(predicate::str::contains("docker load")));
    p.assert_no_containers();
}

fn build_folder_is_built_once_and_reused(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    let unique = format!("{}-{:?}", std::process::id(), Instant::now());
    let bdir = p.dir.join("images/bb");
    std::fs::create_dir_all(&bdir).expect("mkdir");
    std::fs::copy("/usr/bin/busybox", bdir.join("busybox")).expect("copy busybox");
    std::fs::write(bdir.join("Dockerfile"), format!("# {unique}\nFROM scratch\nCOPY busybox /bin/busybox\n")).expect("write");
    write_project(
        &p.dir,
        "sandbox:\n  zones:\n    in: {path: ./in, mode: ro}\n",
        &[("bb", "---\nbuild: images/bb\nsandbox:\n  zones:\n    - {name: in, mode: ro}\ncommand: [/bin/busybox, cat, /in/a.txt]\n---\n")],
    );
    let first = p.workcell().args(["run", "--backend", "docker", "bb"]).assert().success().stdout("hello from in\n").get_output().stderr.clone();
    assert!(String::from_utf8_lossy(&first).contains("building"), "first run builds: {}", String::from_utf8_lossy(&first));
    let second = p.workcell().args(["run", "--backend", "docker", "bb"]).assert().success().get_output().stderr.clone();
    assert!(!String::from_utf8_lossy(&second).contains("building"), "second run reuses the image");
    // Clean up the image this test built.
    let plan = p.workcell().args(["plan", "--json", "bb"]).assert().success().get_output().stdout.clone();
    let v: serde_json::Value = serde_json::from_slice(&plan).expect("json");
    let tag = v["docker"]["image"].as_str().expect("tag").to_string();
    assert!(tag.starts_with("workcell-build-bb:"), "{tag}");
    let _ = std::process::Command::new("docker").args(["rmi", "-f", &tag]).output();
    p.assert_no_containers();
}

fn gc_removes_stopped_managed_containers(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    let img = BusyboxImage::build("gc");
    let label = format!("dev.workcell.test=gc-{}", std::process::id());
    let out = std::process::Command::new("docker")
        .args(["create", "--label", "dev.workcell.managed=true", "--label", &label, &img.tag, "/bin/busybox", "true"])
        .output()
        .expect("docker create");
    assert!(out.status.success());
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let report = p.workcell().args(["gc", "--json"]).output().expect("gc");
    let v: serde_json::Value = serde_json::from_slice(&report.stdout).expect("json report");
    let removed: Vec<String> = v["containers"].as_array().into_iter().flatten().filter_map(|c| c.as_str().map(str::to_string)).collect();
    assert!(containers_with_label(&label).is_empty(), "gc left {id}: {v}");
    assert!(removed.iter().any(|c| c.contains("created")), "{v}");
    // The test image is not a workcell leftover: gc leaves it.
    assert!(std::process::Command::new("docker").args(["image", "inspect", &img.tag]).output().expect("inspect").status.success());
}

#[test]
fn missing_daemon_fails_with_125_and_says_what_to_do() {
    let p = Proj::new();
    p.run(&[], &["true"])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .assert()
        .code(125)
        .stderr(predicate::str::contains("cannot reach the Docker daemon").and(predicate::str::contains("workcell doctor")));
    p.workcell()
        .arg("doctor")
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .assert()
        .stdout(predicate::str::contains("DOCKER_HOST: unix:///nonexistent/docker.sock").and(predicate::str::contains("podman/podman.sock")))
        // doctor is where that advice leads: it does not send the reader to itself.
        .stdout(predicate::str::contains("workcell doctor").not());
}

/// A normal user outside the socket's group (as most people are before `usermod -aG
/// docker`): the daemon is running, and what is said is how to get access or do without,
/// never to start it. Made as root: a user with no supplementary groups.
#[test]
fn a_user_the_socket_refuses_is_told_how_to_get_access() {
    use std::os::unix::fs::MetadataExt;
    let socket = std::path::Path::new("/var/run/docker.sock");
    let Ok(meta) = std::fs::metadata(socket) else {
        eprintln!("note: no /var/run/docker.sock here");
        return;
    };
    if !rustix::process::geteuid().is_root() || meta.mode() & 0o006 != 0 || !backend_ready("docker") {
        eprintln!("note: needs root and a local daemon whose socket other users may not use");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::create_dir(dir.join("in")).unwrap();
    give_to_worker(&dir);
    let ids = TEST_WORKER_UID.to_string();
    let as_user = |args: &[&str]| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid", &ids, "--regid", &ids, "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_workcell"))
            .args(args)
            .current_dir(&dir)
            .env("HOME", &dir)
            .env("NO_COLOR", "1")
            .env_remove("DOCKER_HOST")
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        eprintln!("{args:?} -> {:?}\n{said}", out.status.code());
        (out.status.code(), said)
    };
    let (code, said) = as_user(&["run", "--backend", "docker", "--zone", "in=./in", "--", "true"]);
    assert_eq!(code, Some(125), "{said}");
    let group = if meta.gid() == 0 {
        "root".to_string()
    } else {
        std::fs::read_to_string("/etc/group")
            .unwrap()
            .lines()
            .find(|l| l.split(':').nth(2) == Some(&meta.gid().to_string()))
            .and_then(|l| l.split(':').next())
            .unwrap_or("?")
            .to_string()
    };
    for part in [
        "the Docker daemon is running, but this user may not use its socket /var/run/docker.sock",
        &format!("sudo usermod -aG {group} $USER"),
        &format!("newgrp {group}"),
        "rootless Docker",
        "Podman",
        "DOCKER_HOST",
        "--backend bwrap",
    ] {
        assert!(said.contains(part), "{part:?} missing: {said}");
    }
    assert!(!said.contains("Start it"), "{said}");
    let (_, said) = as_user(&["doctor"]);
    assert!(said.contains("the Docker daemon is running, but this user may not use its socket"), "{said}");
    assert!(!said.contains("Start it") && !said.contains("workcell doctor"), "{said}");
}

/// The same boundary beyond the zones on Docker and on Podman, which on its own mounts a
/// writable /run (world-writable and unbounded when the image has none), leaves /tmp
/// executable and makes the IPC namespace shareable. The worker, in an image without /run and
/// in `image: host`, tries to write in /run and /var/tmp and to run a program it put in /tmp;
/// then another container tries to join its IPC namespace.
fn run_tmp_and_ipc_are_the_same_on_both_engines(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    let img = BusyboxImage::build("parity");
    let probe = "B=/bin/busybox; for f in /run/x /run/workcell/x /var/tmp/x; do if (echo x > $f) 2>/dev/null; then echo WROTE:$f; fi; done; \
        $B mkdir /run/d 2>/dev/null && echo WROTE:/run/d; $B stat -c run=%a:%u /run; \
        $B cp $B /tmp/true && $B ls /tmp/true && /tmp/true && echo RAN:/tmp/true; exit 0";
    for image in [&["--image", img.tag.as_str()][..], &[]] {
        let out = p.run(image, &["/bin/busybox", "sh", "-c", probe]).assert().success().get_output().stdout.clone();
        let out = String::from_utf8_lossy(&out);
        assert!(out.contains("/tmp/true"), "the worker could not put a program in /tmp ({image:?}):\n{out}");
        assert!(!out.contains("WROTE:") && !out.contains("RAN:"), "the worker wrote beyond its zones and /tmp, or ran a program from /tmp ({image:?}):\n{out}");
        assert!(out.contains("run=755:0"), "/run is not root's 0755 ({image:?}):\n{out}");
    }

    // A worker that waits, and a container that asks to share its IPC namespace.
    let mut worker = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
        .current_dir(&p.dir)
        .args(["run", "--backend", "docker", "--zone", "in=in:ro", "--", "sleep", "60"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn workcell");
    let id = wait_for_running(&format!("dev.workcell.project={}", p.dir.display()), Duration::from_secs(60));
    let intruder = format!("workcell-test-ipc-{}", unique());
    let join = std::process::Command::new("docker")
        .args(["run", "-d", "--name", &intruder, "--label", "dev.workcell.managed=true", "--ipc", &format!("container:{id}")])
        .args(run_args())
        .args([&img.tag, "/bin/busybox", "sleep", "60"])
        .output()
        .expect("docker run");
    let _ = std::process::Command::new("docker").args(["rm", "-f", &intruder]).output();
    rustix::process::kill_process(rustix::process::Pid::from_child(&worker), rustix::process::Signal::TERM).expect("signal workcell");
    let _ = worker.wait();
    let said = String::from_utf8_lossy(&join.stderr);
    assert!(!join.status.success(), "another container joined the worker's IPC namespace");
    assert!(said.contains("non-shareable"), "refused for another reason than a private IPC namespace: {said}");
    p.assert_no_containers();
}

fn doctor_reports_the_engine(engine: &str) {
    if !backend_ready(engine) {
        return;
    }
    let p = Proj::new();
    let want = if engine == "podman" { "Podman" } else { "Docker" };
    p.workcell().arg("doctor").assert().stdout(predicate::str::contains(format!("docker:  ok: {want} ")).and(predicate::str::contains("API")));
}

/// Every test above, once per engine: Docker, and Podman's compatible service (the socket in
/// `WORKCELL_PODMAN_SOCKET`; `support::backend_ready("podman")` points DOCKER_HOST at it).
macro_rules! on_engines {
    ($($test:ident),* $(,)?) => {
        mod docker {
            $( #[test] fn $test() { super::$test("docker") } )*
        }
        mod podman {
            $( #[test] fn $test() { super::$test("podman") } )*
        }
    };
}

on_engines!(
    the_root_holds_only_the_layout_and_the_zones,
    named_env_is_passed_and_the_root_is_read_only,
    network_off_leaves_only_loopback,
    fork_bomb_is_contained_by_pids_limit,
    timeout_exits_124_and_removes_the_container,
    sigint_removes_the_container,
    sigterm_removes_the_container,
    missing_or_non_executable_command_is_named,
    stdin_is_connected_with_dash_i,
    named_images_run_and_missing_ones_say_how_to_get_them,
    build_folder_is_built_once_and_reused,
    gc_removes_stopped_managed_containers,
    doctor_reports_the_engine,
    run_tmp_and_ipc_are_the_same_on_both_engines,
);
