//! One sandbox per MCP session (`run::resident`, `agent`), through the official MCP Python
//! SDK (tests/mcp_session.py): 20 shell calls reuse one sandbox (the same run id), `/tmp`
//! and the working directory keep files between calls, a process a call leaves behind does
//! not outlive it (not even a daemon behind a zombie leader, issue 36), a timeout kills the
//! call and not the session, a stuck agent does not hang later calls; and the sandbox is
//! gone after a normal end, after the client is killed and after `workcell mcp` is killed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

fn project() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = tmp.path();
    std::fs::create_dir_all(p.join("out")).expect("mkdir");
    std::fs::write(p.join("workcell.yaml"), "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n")
        .expect("write");
    support::give_to_worker(p);
    tmp
}

fn client(dir: &Path, backend: &str, mode: &str) -> Command {
    assert!(support::python_ready(&["mcp"]), "the mcp Python package is required");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_session.py");
    let mut c = Command::new(support::python());
    c.arg(script).arg(env!("CARGO_BIN_EXE_workcell")).arg(dir).arg(backend).arg(mode).arg("--approve-all");
    c
}

/// Host processes that belong to the session sandbox `run_id` (bwrap's argv and docker's
/// container name carry it).
fn left_of(dir: &Path, backend: &str, run_id: &str) -> Vec<String> {
    let mut left: Vec<String> = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(run_id) {
                left.push(format!("pid {pid}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " ")));
            }
        }
    }
    if backend == "docker" {
        left.extend(support::containers_with_label(&format!("dev.workcell.project={}", dir.display())).into_iter().map(|c| format!("container {c}")));
    }
    left
}

fn wait_gone(dir: &Path, backend: &str, run_id: &str) {
    let start = Instant::now();
    loop {
        let left = left_of(dir, backend, run_id);
        if left.is_empty() {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(90), "the session sandbox {run_id} is still there: {left:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts a client in hold mode; returns it, the server's pid and the sandbox's run id.
fn hold(dir: &Path, backend: &str) -> (std::process::Child, u32, String) {
    let mut child = client(dir, backend, "hold").stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("client");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("read");
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("client said {line:?}: {e}"));
    let run_id = v["run_id"].as_str().expect("run id").to_string();
    assert!(!run_id.is_empty(), "{v}");
    let config = format!("{}/workcell.yaml", dir.display());
    let server = support::processes_with_arg(&config)
        .into_iter()
        .find(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"mcp")))
        .expect("the workcell mcp process");
    assert!(!left_of(dir, backend, &run_id).is_empty(), "the session sandbox should run while the client holds it");
    (child, server, run_id)
}

mod body {
    use super::*;

    pub fn session_reuses_one_sandbox(backend: &str) {
        let tmp = project();
        let out = client(tmp.path(), backend, "reuse").output().expect("client");
        assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let ids: Vec<&str> = r["ids"].as_array().expect("ids").iter().filter_map(Value::as_str).collect();
        assert_eq!(ids.len(), 20);
        assert!(!ids[0].is_empty() && ids.iter().all(|i| *i == ids[0]), "one sandbox for 20 calls: {ids:?}");
        // State persists between calls.
        assert_eq!(r["touch_tmp"]["exit_code"], 0, "{}", r["touch_tmp"]);
        assert_eq!(r["ls_tmp"]["exit_code"], 0, "/tmp/kept is gone: {}", r["ls_tmp"]);
        assert_eq!(r["ls_work"]["exit_code"], 0, "{}", r["ls_work"]);
        assert!(tmp.path().join("out/kept-in-workdir").exists());
        // What a call started in the background did not outlive it.
        assert_eq!(r["daemon"]["exit_code"], 0, "{}", r["daemon"]);
        let procs = r["procs"]["stdout"].as_str().unwrap_or("");
        assert!(r["procs"]["exit_code"] == 0 && !procs.contains("'sleep'"), "a call's daemon survived it: {}", r["procs"]);
        // A timeout ends the call, not the session.
        assert_eq!(r["timeout"]["timed_out"], true, "{}", r["timeout"]);
        assert_eq!(r["timeout"]["exit_code"], 124, "{}", r["timeout"]);
        assert_eq!(r["after_timeout"]["stdout"].as_str().map(str::trim), Some(ids[0]), "{}", r["after_timeout"]);
        // stdin, env and cwd arguments.
        assert_eq!(r["stdin"]["stdout"], "given on stdin\n", "{}", r["stdin"]);
        assert_eq!(r["env_cwd"]["stdout"], "hi\n", "{}", r["env_cwd"]);
        assert_eq!(r["pwd_tmp"]["stdout"], "/tmp\n", "{}", r["pwd_tmp"]);
        // The worker's commands cannot reach the agent: its socket is gone, its descriptors,
        // environment and memory are closed to them (it is not dumpable).
        let probe: Value = serde_json::from_str(r["probe"]["stdout"].as_str().unwrap_or("")).unwrap_or_else(|e| panic!("probe: {} ({e})", r["probe"]));
        assert_ne!(probe["connect"], "connected", "{probe}");
        assert_eq!(probe["agents"], 1, "the agent should be visible as a process: {probe}");
        for what in ["fd", "environ", "mem"] {
            assert_ne!(probe[what], "opened", "the worker opened the agent's {what}: {probe}");
        }
        // Killing the agent ends that sandbox (the call fails, saying so); the next call
        // gets a sandbox of its own.
        assert!(r["kill_agent"]["text"].as_str().unwrap_or("").contains("agent did not answer"), "{}", r["kill_agent"]);
        let second = r["after_kill"]["stdout"].as_str().unwrap_or("").trim().to_string();
        assert!(r["after_kill"]["exit_code"] == 0 && !second.is_empty() && second != ids[0], "{}", r["after_kill"]);
        // The client ended normally: both sandboxes are gone.
        wait_gone(tmp.path(), backend, ids[0]);
        wait_gone(tmp.path(), backend, &second);
    }

    /// Issue 36, findings 1 and 5: a call's daemon (double fork, `setsid`, main thread gone
    /// with the raw exit system call: the leader shows `Z` while its thread spies) must not
    /// read a later call's environment or write into its stdout; one holding its call's
    /// stdout must not hold the answer back; a call that stops the agent loses that call
    /// only, and the next call answers from a new sandbox.
    pub fn calls_leave_nothing_behind(backend: &str) {
        let tmp = project();
        let mut child = client(tmp.path(), backend, "survivor").stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("client");
        let mut text = String::new();
        std::io::Read::read_to_string(child.stdout.as_mut().expect("stdout"), &mut text).expect("read");
        let _ = child.wait();
        // A wedged server outlives its client: end it, so a failure leaves nothing running.
        let config = format!("{}/workcell.yaml", tmp.path().display());
        let start = Instant::now();
        let mut wedged = support::processes_with_arg(&config);
        while !wedged.is_empty() && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(200));
            wedged = support::processes_with_arg(&config);
        }
        for pid in &wedged {
            let _ = rustix::process::kill_process(rustix::process::Pid::from_raw(*pid as i32).expect("pid"), rustix::process::Signal::KILL);
        }
        let r: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("client said {text:?}: {e}"));
        let leaked = std::fs::read_to_string(tmp.path().join("out/leaked")).unwrap_or_default();
        assert!(leaked.is_empty(), "a call's daemon read a later call's environment: {leaked:?}");
        assert_eq!(r["spawn"]["exit_code"], 0, "{}", r["spawn"]);
        assert_eq!(r["victim"]["stdout"], "clean\n", "a call's daemon wrote into a later call's stdout: {}", r["victim"]);
        assert_eq!(r["left"]["stdout"], "0\n", "the daemon outlived its call: {}", r["left"]);
        // Its stdout held by a daemon: the call answers at once, the next one too.
        assert_eq!(r["holder"]["exit_code"], 0, "{}", r["holder"]);
        assert_ne!(r["holder"]["timed_out"], true, "a call whose daemon held its stdout ran into its timeout: {}", r["holder"]);
        let first = r["after_holder"]["stdout"].as_str().unwrap_or("").trim().to_string();
        assert!(!first.is_empty(), "the call after one whose daemon held its stdout: {}", r["after_holder"]);
        // A stopped agent: that call fails, saying so; the next answers from a new sandbox
        // within a bound (the old one is not waited for).
        assert!(r["stop_agent"]["text"].as_str().unwrap_or("").contains("agent did not answer"), "{}", r["stop_agent"]);
        let second = r["after_stop"]["stdout"].as_str().unwrap_or("").trim().to_string();
        assert!(!second.is_empty() && second != first, "the call after a stopped agent: {}", r["after_stop"]);
        assert_ne!(r["after_stop"]["hung"], true, "the call after a stopped agent did not answer: {}", r["after_stop"]);
        assert!(wedged.is_empty(), "workcell mcp did not end after its client: {wedged:?}");
        wait_gone(tmp.path(), backend, &first);
        wait_gone(tmp.path(), backend, &second);
    }

    pub fn session_ends_when_the_client_is_killed(backend: &str) {
        let tmp = project();
        let (mut child, _server, run_id) = hold(tmp.path(), backend);
        child.kill().expect("SIGKILL the client");
        let _ = child.wait();
        wait_gone(tmp.path(), backend, &run_id);
    }

    pub fn session_ends_when_the_server_is_killed(backend: &str) {
        let tmp = project();
        let (mut child, server, run_id) = hold(tmp.path(), backend);
        rustix::process::kill_process(rustix::process::Pid::from_raw(server as i32).expect("pid"), rustix::process::Signal::KILL).expect("SIGKILL workcell");
        wait_gone(tmp.path(), backend, &run_id);
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A local image FROM scratch holding busybox under the names of the applets the test
/// calls (`with_sleep`: also as `sleep`, which keeps a session container waiting).
fn image(tag: &str, with_sleep: bool) -> String {
    let mut b = tar::Builder::new(Vec::new());
    let bb = std::fs::read("/usr/bin/busybox").expect("static busybox at /usr/bin/busybox");
    let mut names = vec!["env", "touch", "ls", "ps"];
    if with_sleep {
        names.push("sleep");
    }
    let mut df = String::from("FROM scratch\n");
    for name in &names {
        let mut h = tar::Header::new_gnu();
        h.set_size(bb.len() as u64);
        h.set_mode(0o755);
        b.append_data(&mut h, name, bb.as_slice()).expect("tar");
        df.push_str(&format!("COPY {name} /bin/{name}\n"));
    }
    let mut h = tar::Header::new_gnu();
    h.set_size(df.len() as u64);
    h.set_mode(0o644);
    b.append_data(&mut h, "Dockerfile", df.as_bytes()).expect("tar");
    let tag = format!("workcell-test-session:{tag}-{}", std::process::id());
    let mut child = Command::new("docker").args(["build", "-q", "-t", &tag, "-"]).stdin(Stdio::piped()).stdout(Stdio::null()).spawn().expect("docker build");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), &b.into_inner().expect("tar")).expect("context");
    assert!(child.wait().expect("docker build").success(), "docker build {tag}");
    tag
}

/// With a named image, commands go through the Engine API's exec into one container when
/// the image has `sleep`; without it, each command gets a container of its own. Either
/// way nothing is left at the end.
#[test]
fn named_images_exec_into_one_container_or_run_one_per_call() {
    if !support::backend_ready("docker") {
        return;
    }
    for (with_sleep, tag) in [(true, "sleep"), (false, "nosleep")] {
        let tag = image(tag, with_sleep);
        let tmp = project();
        std::fs::write(tmp.path().join("workcell.yaml"), format!("sandbox:\n  zones:\n    out: {{path: ./out, mode: rw}}\ndefaults:\n  image: {tag}\n"))
            .expect("write");
        let out = client(tmp.path(), "docker", "named").output().expect("client");
        let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
        assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let ids: Vec<&str> = r["ids"].as_array().expect("ids").iter().filter_map(Value::as_str).collect();
        assert!(ids.iter().all(|i| !i.is_empty()), "{r}\n{}", String::from_utf8_lossy(&out.stderr));
        if with_sleep {
            assert!(ids.iter().all(|i| *i == ids[0]), "one container for the session: {ids:?}");
            assert_eq!(r["ls"]["exit_code"], 0, "/tmp keeps files: {}", r["ls"]);
            // Issue 36: a call's processes do not outlive it, its timeout included.
            assert_eq!(r["timeout"]["timed_out"], true, "{}", r["timeout"]);
            let ps = r["ps"]["stdout"].as_str().unwrap_or("");
            assert!(r["ps"]["exit_code"] == 0 && !ps.contains("sleep 1000"), "a timed-out call's command still runs: {}", r["ps"]);
        } else {
            assert!(ids[0] != ids[1] && ids[1] != ids[2], "a container per command: {ids:?}");
        }
        let left = support::containers_with_label(&format!("dev.workcell.project={}", tmp.path().display()));
        assert!(left.is_empty(), "containers left: {left:?}");
    }
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [session_reuses_one_sandbox, calls_leave_nothing_behind, session_ends_when_the_client_is_killed, session_ends_when_the_server_is_killed]
);
support::backend_suite!(
    docker,
    "docker",
    [session_reuses_one_sandbox, calls_leave_nothing_behind, session_ends_when_the_client_is_killed, session_ends_when_the_server_is_killed]
);
