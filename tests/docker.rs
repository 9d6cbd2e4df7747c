//! The Docker backend against the real engine: zones, hardening, limits, network,
//! timeout, signals, exit statuses, images, gc, and `workcell plan --json` snapshots.
//!
//! Without a daemon each test prints a skip note and passes, unless
//! `WORKCELL_REQUIRE_DOCKER=1` (CI), where it fails. Every test checks that no container of
//! its own project (label `dev.workcell.project=<its temp dir>`) is left.

mod support;

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use predicates::prelude::*;
use support::*;

macro_rules! need_docker {
    () => {
        if !docker_or_skip(module_path!()) {
            return;
        }
    };
}

#[test]
fn zones_are_mounted_with_their_modes_and_nothing_else_is_visible() {
    need_docker!();
    let p = Proj::new();
    let secret = p.secret();
    let marker = format!("workcell-tmp-marker-{}", std::process::id());
    let script = format!(
        "set -e; cat /in/a.txt; echo written > /out/result.txt; \
         if echo x > /in/nope 2>/dev/null; then echo IN-WRITABLE; fi; \
         for p in {secret} /root /var/run/docker.sock /run/docker.sock /home /work; do if [ -e $p ]; then echo VISIBLE:$p; fi; done; \
         echo t > /tmp/{marker}; echo ---ROOT---; ls /",
        secret = secret.display()
    );
    let out = p.run(&[], &["sh", "-c", &script]).assert().success().get_output().stdout.clone();
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("hello from in"), "{out}");
    assert!(!out.contains("IN-WRITABLE"), "/in must be read-only: {out}");
    assert!(!out.contains("VISIBLE:"), "host paths leaked: {out}");
    let result = p.dir.join("out/result.txt");
    assert_eq!(std::fs::read_to_string(&result).expect("result on host"), "written\n");
    let meta = std::fs::metadata(&result).expect("meta");
    assert_eq!(meta.uid(), support::worker_uid(), "file owned by the worker's user (the project owner), never root");
    assert!(!p.dir.join("in/nope").exists());
    assert!(!std::path::Path::new("/tmp").join(&marker).exists(), "/tmp must be private");
    // The root holds the layout and the zones, nothing of the host's top level beyond it.
    let root: Vec<&str> = out.lines().skip_while(|l| *l != "---ROOT---").skip(1).collect();
    assert!(root.contains(&"in") && root.contains(&"out") && root.contains(&"usr"), "{out}");
    for name in root {
        assert!(
            ["bin", "dev", "etc", "in", "lib", "lib32", "lib64", "libx32", "out", "proc", "run", "sbin", "sys", "tmp", "usr"].contains(&name),
            "unexpected / entry {name}: {out}"
        );
    }
    p.assert_no_containers();
}

#[test]
fn host_env_is_not_passed_unless_named_and_process_is_hardened() {
    need_docker!();
    let p = Proj::new();
    let var = format!("WORKCELL_TEST_SECRET_{}", std::process::id());
    let script = format!(
        "echo \"var=${{{var}:-unset}}\"; grep -E '^(NoNewPrivs|CapEff|CapBnd)' /proc/self/status; if touch /x 2>/dev/null; then echo ROOT-WRITABLE; fi; echo zones=$WORKCELL_ZONES"
    );
    let out = p.run(&[], &["sh", "-c", &script]).env(&var, "s3cret").assert().success().get_output().stdout.clone();
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("var=unset"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(!out.contains("ROOT-WRITABLE"), "{out}");
    assert!(out.contains("zones=/in:ro,/out:rw"), "{out}");
    let out = p.run(&["--env", &var], &["sh", "-c", &script]).env(&var, "s3cret").assert().success().get_output().stdout.clone();
    assert!(String::from_utf8_lossy(&out).contains("var=s3cret"));
    p.assert_no_containers();
}

#[test]
fn network_off_has_only_loopback_and_cannot_connect_network_on_can() {
    need_docker!();
    let p = Proj::new();
    let img = BusyboxImage::build("net");
    let server = Server::httpd(&img, &format!("dev.workcell.test=net-{}", std::process::id()));
    // busybox wget segfaults in Debian 12's static build, so speak HTTP through nc.
    let get = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 3 {} 8080", server.ip);
    // Give httpd a moment to listen: retry a few times.
    let fetch = format!("for i in 1 2 3 4 5 6 7 8 9 10; do if {get} | grep -qx ok; then echo reached; exit 0; fi; sleep 0.5; done; exit 1");

    let out = p.run(&[], &["sh", "-c", "cat /proc/net/dev"]).assert().success().get_output().stdout.clone();
    let ifaces: Vec<String> = String::from_utf8_lossy(&out).lines().skip(2).filter_map(|l| l.split(':').next()).map(|s| s.trim().to_string()).collect();
    assert_eq!(ifaces, vec!["lo".to_string()], "network off must leave only lo");

    p.run(&[], &["sh", "-c", &fetch]).timeout(Duration::from_secs(60)).assert().failure().stdout(predicate::str::contains("reached").not());

    p.run(&["--network"], &["sh", "-c", &fetch]).assert().success().stdout("reached\n");
    drop(server);
    p.assert_no_containers();
}

#[test]
fn fork_bomb_is_contained_by_pids_limit() {
    need_docker!();
    let p = Proj::new();
    let out = p
        .run(&["--pids", "64"], &["sh", "-c", "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(String::from_utf8_lossy(&out).trim(), "64");
    let status = p
        .run(&["--pids", "64", "--timeout", "8s"], &["sh", "-c", "f() { f | f & }; f; sleep 6; echo survived"])
        .timeout(Duration::from_secs(60))
        .output()
        .expect("run");
    assert_ne!(status.status.code(), None, "workcell must exit normally");
    // The host can still start processes.
    assert!(std::process::Command::new("true").status().expect("spawn").success());
    p.assert_no_containers();
}

#[test]
fn memory_hog_is_killed() {
    need_docker!();
    let p = Proj::new();
    let out =
        p.run(&["--memory", "64m", "--timeout", "60s"], &["sh", "-c", "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo done ${#x}"]).output().expect("run");
    let code = out.status.code().unwrap_or(-1);
    assert_ne!(code, 0, "the hog must not succeed: {}", String::from_utf8_lossy(&out.stdout));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("done"));
    assert_ne!(code, 124, "killed by the memory limit, not the timeout");
    p.assert_no_containers();
}

#[test]
fn timeout_exits_124_and_removes_the_container() {
    need_docker!();
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

#[test]
fn sigint_removes_the_container() {
    need_docker!();
    signal_removes_container(rustix::process::Signal::INT, 130);
}

#[test]
fn sigterm_removes_the_container() {
    need_docker!();
    signal_removes_container(rustix::process::Signal::TERM, 143);
}

#[test]
fn missing_command_is_127_and_non_executable_is_126() {
    need_docker!();
    let p = Proj::new();
    p.run(&[], &["/nonexistent"]).assert().code(127).stderr(predicate::str::contains("/nonexistent").and(predicate::str::contains("not found")));
    p.run(&[], &["/in/a.txt"]).assert().code(126).stderr(predicate::str::contains("/in/a.txt").and(predicate::str::contains("not executable")));
    // The worker's own exit status passes through.
    p.run(&[], &["sh", "-c", "exit 42"]).assert().code(42);
    p.assert_no_containers();
}

#[test]
fn stdin_is_connected_with_dash_i() {
    need_docker!();
    let p = Proj::new();
    p.run(&["-i"], &["sh", "-c", "read x; echo got:$x"]).write_stdin("piped\n").assert().success().stdout("got:piped\n");
    p.assert_no_containers();
}

#[test]
fn named_images_run_and_missing_ones_say_how_to_get_them() {
    need_docker!();
    let p = Proj::new();
    let img = BusyboxImage::build("named");
    p.run(&["--image", &img.tag], &["/bin/busybox", "cat", "/in/a.txt"]).assert().success().stdout("hello from in\n");
    p.run(&["--image", "workcell-test-no-such-image:1"], &["true"])
        .assert()
        .code(125)
        .stderr(predicate::str::contains("never pulls").and(predicate::str::contains("docker load")));
    p.assert_no_containers();
}

#[test]
fn build_folder_is_built_once_and_reused() {
    need_docker!();
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

#[test]
fn gc_removes_stopped_managed_containers() {
    need_docker!();
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
        .stdout(predicate::str::contains("DOCKER_HOST: unix:///nonexistent/docker.sock").and(predicate::str::contains("podman/podman.sock")));
}

#[test]
fn doctor_reports_the_engine() {
    need_docker!();
    let p = Proj::new();
    p.workcell().arg("doctor").assert().stdout(predicate::str::contains("docker:  ok").and(predicate::str::contains("API")));
}

// --- workcell plan --json ----------------------------------------------------------------

const PROJECT: &str =
    "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n";

fn plan_project() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    std::fs::create_dir_all(dir.join("out")).expect("mkdir");
    write_project(
        &dir,
        PROJECT,
        &[
            ("reader", "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\ncommand: [sh, -c, \"ls /data\"]\n---\nbody\n"),
            (
                "writer",
                "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n    - {name: out, mode: rw}\ncommand: [python3, /data/run.py]\nenv: {MODE: fast}\nlimits: {timeout: 30s, memory: 128m, cpus: 0.5, pids: 32}\n---\nbody\n",
            ),
            ("named", "---\nimage: python:3.12-slim\nsandbox:\n  zones:\n    - {name: out, mode: rw}\ncommand: [python3, -V]\n---\n"),
        ],
    );
    (tmp, dir)
}

/// Replaces what differs between machines and runs: temp paths, run id, uid/gid, the host
/// system layout and what is derived from it (base image hash, system binds, init path).
fn redact(v: &mut serde_json::Value, dir: &str, run_id: &str) {
    use serde_json::Value;
    match v {
        Value::String(s) => {
            if s.contains(dir) || s.contains(run_id) {
                *s = s.replace(dir, "[PROJECT]").replace(run_id, "[RUN_ID]");
            }
            if s.starts_with("workcell-host:") {
                *s = "workcell-host:[HASH]".into();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| redact(x, dir, run_id)),
        Value::Object(o) => {
            for k in ["uid", "gid"] {
                if o.contains_key(k) {
                    o.insert(k.into(), "[ID]".into());
                }
            }
            if o.contains_key("system") {
                o.insert("system".into(), "[HOST SYSTEM LAYOUT]".into());
            }
            if let Some(u) = o.get_mut("User") {
                *u = "[UID]:[GID]".into();
            }
            if let Some(e) = o.get_mut("Entrypoint") {
                *e = "[HOST INIT]".into();
            }
            if let Some(Value::Array(m)) = o.get_mut("Mounts") {
                // System binds depend on the host; zone binds are what the snapshot is about.
                m.retain(|x| x["Source"].as_str().is_some_and(|s| s.starts_with(dir)));
            }
            o.values_mut().for_each(|x| redact(x, dir, run_id));
        }
        _ => {}
    }
}

fn plan_json(dir: &std::path::Path, worker: &str) -> serde_json::Value {
    let out = assert_cmd::Command::cargo_bin("workcell")
        .expect("bin")
        .current_dir(dir)
        .args(["plan", "--json", worker])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let mut v: serde_json::Value = serde_json::from_slice(&out).expect("plan json");
    let run_id = v["run_id"].as_str().expect("run_id").to_string();
    redact(&mut v, &dir.display().to_string(), &run_id);
    v
}

#[test]
fn plan_json_snapshots() {
    let (_tmp, dir) = plan_project();
    for w in ["reader", "writer", "named"] {
        insta::assert_json_snapshot!(format!("plan_{w}"), plan_json(&dir, w));
    }
}

#[test]
fn derived_child_plan_has_only_its_own_mounts() {
    let (_tmp, dir) = plan_project();
    let v = plan_json(&dir, "reader");
    let targets: Vec<&str> = v["mounts"].as_array().expect("mounts").iter().filter_map(|m| m["target"].as_str()).collect();
    assert_eq!(targets, vec!["/data"]);
    assert_eq!(v["mounts"][0]["read_only"], true);
    let binds: Vec<&str> = v["docker"]["create"]["HostConfig"]["Mounts"].as_array().expect("binds").iter().filter_map(|m| m["Target"].as_str()).collect();
    assert_eq!(binds, vec!["/data"]);
    assert_eq!(v["docker"]["create"]["HostConfig"]["NetworkMode"], "none");
}
