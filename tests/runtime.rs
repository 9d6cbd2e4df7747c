//! `runtime:` and `--runtime`: a Docker runtime (gVisor's runsc) for workers. Refused where
//! written when malformed or when a worker would replace the project's; inherited by child
//! workers; refused by every backend but docker; checked against the daemon's list before a
//! container is made; shown by `plan` and `doctor`. The isolation bodies under gVisor are in
//! the behaviour suite (`tests/behaviour/runsc.rs`).

mod support;

use std::path::Path;
use std::process::Output;
use std::sync::Arc;

use serde_json::json;
use support::{backend_ready, write_project};
use workcell::audit::AuditLog;
use workcell::config::{BackendChoice, Project};
use workcell::plan::{LaunchPlan, Overrides, PlanError};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::{ApprovalMode, Approver};
use workcell::tools::service::{Caller, ToolService};

const ZONES: &str = "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n";

fn project(config: &str, workers: &[(&str, &str)]) -> (tempfile::TempDir, Result<Project, workcell::config::ConfigError>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(tmp.path().join("data")).expect("mkdir");
    write_project(tmp.path(), config, workers);
    let p = Project::from_text(config, &tmp.path().join("workcell.yaml"), tmp.path());
    (tmp, p)
}

/// `workcell ARGS` in `dir`, made a project (an empty `workcell.yaml`) when it is not one:
/// outside any project `run` is refused.
fn workcell(dir: &Path, args: &[&str]) -> Output {
    if !dir.join("workcell.yaml").exists() {
        std::fs::write(dir.join("workcell.yaml"), "{}\n").expect("workcell.yaml");
    }
    let out = assert_cmd::Command::cargo_bin("workcell").expect("binary").current_dir(dir).args(args).output().expect("run workcell");
    eprintln!(
        "workcell {args:?} -> {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_malformed_runtime_is_refused_where_it_is_written() {
    let (_t, p) = project(&format!("{ZONES}defaults:\n  runtime: /usr/bin/runsc\n"), &[]);
    let e = p.expect_err("a path is not a runtime name");
    assert_eq!((e.line, e.column), (5, 12), "{e}");
    assert!(e.message.contains("not a runtime name") && e.message.contains("workcell doctor"), "{e}");

    // A refused worker file stops only that worker.
    let (_t, p) = project(ZONES, &[("w", "---\nruntime: 'run sc'\ncommand: [true]\n---\n")]);
    let p = p.expect("the project itself loads");
    let e = p.broken.get("w").expect("a space is not in a runtime name");
    assert!(e.file.ends_with("workers/w.worker") && (e.line, e.column) == (2, 10), "{e}");
    assert!(p.worker("w").is_err());
}

#[test]
fn a_worker_may_repeat_the_projects_runtime_but_not_replace_it() {
    let config = format!("{ZONES}defaults:\n  runtime: runsc\n");
    let (_t, p) = project(&config, &[("weak", "---\ncommand: [true]\nruntime: runc\n---\n")]);
    let p = p.expect("the project itself loads");
    let e = p.broken.get("weak").expect("runc replaces runsc");
    assert!(e.file.ends_with("workers/weak.worker") && (e.line, e.column) == (3, 10), "{e}");
    assert!(e.message.contains("replaces the project's defaults.runtime 'runsc'"), "{e}");

    let (_t, p) = project(&config, &[("same", "---\ncommand: [true]\nruntime: runsc\n---\n"), ("plain", "---\ncommand: [true]\n---\n")]);
    let p = p.expect("repeating the project's runtime is fine");
    for w in ["same", "plain"] {
        let worker = p.worker(w).expect("worker");
        let plan = LaunchPlan::build(&p, Some(worker), &worker.sandbox, &Overrides::default()).expect("plan");
        assert_eq!(plan.runtime.as_deref(), Some("runsc"), "{w}");
    }
}

#[test]
fn without_a_project_runtime_a_worker_chooses_and_the_command_line_decides() {
    let (_t, p) = project(ZONES, &[("g", "---\ncommand: [true]\nruntime: runsc\n---\n"), ("plain", "---\ncommand: [true]\n---\n")]);
    let p = p.expect("project");
    let plan = |w: &str, ov: Overrides| {
        let worker = p.worker(w).expect("worker");
        LaunchPlan::build(&p, Some(worker), &worker.sandbox, &ov)
    };
    assert_eq!(plan("g", Overrides::default()).expect("plan").runtime.as_deref(), Some("runsc"));
    assert_eq!(plan("plain", Overrides::default()).expect("plan").runtime, None);
    // `--runtime` is the person at the command line: it replaces the worker's choice.
    let chosen = Overrides { runtime: Some("kata".into()), ..Overrides::default() };
    assert_eq!(plan("g", chosen).expect("plan").runtime.as_deref(), Some("kata"));
}

#[test]
fn a_run_started_by_another_runs_under_its_callers_runtime() {
    let (_t, p) = project(ZONES, &[("weak", "---\ncommand: [true]\nruntime: runc\n---\n"), ("plain", "---\ncommand: [true]\n---\n")]);
    let p = p.expect("project");
    let under = |caller: &str| Overrides { inherited_runtime: Some(caller.into()), ..Overrides::default() };
    let plain = p.worker("plain").expect("worker");
    let plan = LaunchPlan::build(&p, Some(plain), &plain.sandbox, &under("runsc")).expect("plan");
    assert_eq!(plan.runtime.as_deref(), Some("runsc"), "a child inherits its caller's runtime");
    let weak = p.worker("weak").expect("worker");
    let e = LaunchPlan::build(&p, Some(weak), &weak.sandbox, &under("runsc")).expect_err("a child may not drop gVisor for runc");
    assert!(matches!(e, PlanError::Runtime(_)), "{e:?}");
    assert!(e.to_string().contains("must run under 'runsc', set by the run that starts it"), "{e}");
    // Shell commands of the tool service (no worker) inherit too, even against `--runtime`.
    let cmd = Overrides { command: Some(vec!["true".into()]), runtime: Some("runc".into()), ..under("runsc") };
    assert_eq!(LaunchPlan::build(&p, None, &p.sandbox, &cmd).expect("plan").runtime.as_deref(), Some("runsc"));
}

#[test]
fn backends_without_runtimes_refuse_a_plan_that_names_one() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for backend in ["bwrap", "none"] {
        let out = workcell(tmp.path(), &["run", "--backend", backend, "--runtime", "runsc", "--", "true"]);
        assert_eq!(out.status.code(), Some(125), "{backend}");
        assert!(stderr(&out).contains(&format!("the {backend} backend cannot run under the runtime 'runsc'")), "{backend}: {}", stderr(&out));
    }
    let out = workcell(tmp.path(), &["run", "--runtime", "run sc", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "clap refuses a malformed name");
    assert!(stderr(&out).contains("not a runtime name"), "{}", stderr(&out));
    // `plan` shows no rendering of a backend that would refuse the plan.
    let out = workcell(tmp.path(), &["plan", "--backend", "bwrap", "--runtime", "runsc", "--", "true"]);
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("cannot run under the runtime 'runsc'"), "{}", stderr(&out));
}

#[test]
fn seatbelt_refuses_a_runtime_and_auto_never_falls_back_to_bwrap() {
    let (_t, p) = project(ZONES, &[("g", "---\ncommand: [true]\nruntime: runsc\n---\n")]);
    let p = p.expect("project");
    let g = p.worker("g").expect("worker");
    let plan = LaunchPlan::build(&p, Some(g), &g.sandbox, &Overrides::default()).expect("plan");
    let e = workcell::backend::select(BackendChoice::Seatbelt, &plan, true).expect_err("seatbelt has no runtimes");
    assert!(e.to_string().contains("the seatbelt backend cannot run under the runtime 'runsc'"), "{e}");
    // Without a daemon, `auto` says why instead of running the worker under bwrap.
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::write(tmp.path().join("workcell.yaml"), "{}\n").expect("workcell.yaml");
    let out = assert_cmd::Command::cargo_bin("workcell")
        .expect("binary")
        .current_dir(tmp.path())
        .env("DOCKER_HOST", format!("unix://{}/no-daemon.sock", tmp.path().display()))
        .args(["run", "--runtime", "runsc", "--", "sh", "-c", "echo RAN"])
        .output()
        .expect("run workcell");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"), "the worker ran without its runtime");
    assert!(stderr(&out).contains("names the runtime 'runsc', which only docker can use"), "{}", stderr(&out));
}

#[test]
fn a_child_worker_cannot_run_on_bwrap_under_a_runtime() {
    let (_t, p) = project(ZONES, &[("parent", "---\nworkers: [kid]\ncommand: [true]\n---\n"), ("kid", "---\ncommand: [true]\n---\n")]);
    let p = Arc::new(p.expect("project"));
    let parent = p.worker("parent").expect("worker").clone();
    let runner = BackendRunner::new(p.clone(), BackendChoice::Bwrap, ApprovalMode::ApproveAll).under_runtime(Some("runsc".into()));
    let svc = ToolService::new(
        p.clone(),
        Caller { worker: Some(parent.clone()), chain: vec!["parent".into()] },
        parent.sandbox.clone(),
        Approver::new(ApprovalMode::ApproveAll, None),
        AuditLog::new(&p.dir, "t"),
        Arc::new(runner),
    );
    let err = svc.call("call_worker", json!({"name": "kid"})).expect_err("bwrap cannot honour runsc");
    assert!(err.to_string().contains("bwrap backend cannot run under the runtime 'runsc'"), "{err}");
}

#[test]
fn plan_shows_the_runtime() {
    let (t, p) = project(&format!("{ZONES}defaults:\n  runtime: runsc\n"), &[("w", "---\ncommand: [true]\n---\n")]);
    p.expect("project");
    let out = workcell(t.path(), &["plan", "w"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("runtime:  runsc (docker only"), "{text}");
    let out = workcell(t.path(), &["plan", "--json", "w"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["runtime"], "runsc");
    assert_eq!(v["docker"]["create"]["HostConfig"]["Runtime"], "runsc");
}

#[test]
fn a_runtime_the_daemon_lacks_is_refused_before_any_container_with_the_fix() {
    if !backend_ready("docker") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    let out = workcell(&dir, &["run", "--backend", "docker", "--runtime", "workcell-no-such-runtime", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = stderr(&out);
    assert!(err.contains("the Docker daemon has no runtime 'workcell-no-such-runtime' (it lists: ") && err.contains("runc"), "{err}");
    assert!(err.contains("daemon.json") && err.contains("reload"), "install, register and reload are named: {err}");
    let left = support::containers_with_label(&format!("dev.workcell.project={}", dir.display()));
    assert!(left.is_empty(), "a container was made for a missing runtime: {left:?}");
    // The same under auto selection: no fallback to bwrap.
    let out = workcell(&dir, &["run", "--runtime", "workcell-no-such-runtime", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("has no runtime 'workcell-no-such-runtime'"), "{}", stderr(&out));
}

#[test]
fn runsc_missing_names_the_debian_package() {
    let hint = workcell::backend::docker::runtimes::install_hint("runsc");
    assert!(hint.contains("apt-get install runsc") && hint.contains("daemon.json") && hint.contains("--host-uds=open"), "{hint}");
}

#[test]
fn doctor_lists_the_daemons_runtimes() {
    if !backend_ready("docker+runsc") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = workcell(tmp.path(), &["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.trim_start().starts_with("runtimes:")).unwrap_or_else(|| panic!("no runtimes line:\n{text}"));
    assert!(line.contains("runsc") && line.contains("runc"), "{line}");
    let out = workcell(tmp.path(), &["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let names: Vec<&str> = v["docker"]["runtimes"]["names"].as_array().expect("names").iter().filter_map(|n| n.as_str()).collect();
    assert!(names.contains(&"runsc"), "{names:?}");
}

/// End to end: a worker run under `--runtime runsc` calls a child through the broker; the
/// child runs under gVisor too (its kernel log is gVisor's), and a child that names runc is
/// refused.
#[test]
fn a_child_worker_called_under_gvisor_runs_under_gvisor() {
    if !backend_ready("docker+runsc") {
        return;
    }
    let call = |name: &str| {
        format!(
            "curl -s --max-time 120 --unix-socket \"$WORKCELL_BROKER\" -H \"Authorization: Bearer $WORKCELL_TOKEN\" -H 'Content-Type: application/json' --data-binary '{{\"name\":\"{name}\"}}' http://workcell/v1/tools/call_worker; echo"
        )
    };
    let parent = format!("---\nworkers: [kid, weak]\ncommand: [sh, -c, '{}; {}']\n---\n", call("kid").replace('\'', "''"), call("weak").replace('\'', "''"));
    let workers = [
        ("parent", parent.as_str()),
        ("kid", "---\ncommand: [sh, -c, 'dmesg | head -n 1']\n---\n"),
        ("weak", "---\nruntime: runc\ncommand: [uname, -r]\n---\n"),
    ];
    let (t, p) = project(ZONES, &workers);
    p.expect("project");
    let dir = std::fs::canonicalize(t.path()).expect("canonical");
    support::give_to_worker(&dir);
    let out = workcell(&dir, &["run", "--backend", "docker", "--runtime", "runsc", "--approve-all", "parent"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut replies = text.lines().filter(|l| l.starts_with('{'));
    let kid: serde_json::Value = serde_json::from_str(replies.next().unwrap_or_else(|| panic!("no reply for kid:\n{text}"))).expect("json");
    assert!(kid["result"]["output"].as_str().is_some_and(|o| o.contains("gVisor")), "the child did not run under gVisor: {kid}");
    let weak = replies.next().unwrap_or_else(|| panic!("no reply for weak:\n{text}"));
    assert!(weak.contains("must run under 'runsc'"), "a child named runc under a gVisor run: {weak}");
    assert!(!weak.contains(&std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("release").trim().to_string()), "{weak}");
    // The audit log says which runtime each run had.
    let log = std::fs::read_to_string(dir.join(".workcell/audit.jsonl")).expect("audit log");
    let starts: Vec<serde_json::Value> =
        log.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).filter(|e| e["event"] == "run_start").collect();
    for worker in ["parent", "kid"] {
        let e = starts.iter().find(|e| e["worker"] == worker).unwrap_or_else(|| panic!("no run_start for {worker}:\n{log}"));
        assert_eq!(e["runtime"], "runsc", "{e}");
    }
}

/// A stand-in Docker daemon on a unix socket in `dir`: `/_ping`, `/version`, and `/info`
/// answering `runtimes` (`docker info`'s `Runtimes`); anything else is 404. One request per
/// connection, closed after the answer. Serves until the test process ends.
fn stand_in_daemon(dir: &Path, runtimes: serde_json::Value) -> String {
    use std::io::{BufRead, BufReader, Write};
    let path = dir.join("docker.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind the stand-in daemon");
    let info = json!({"Runtimes": runtimes, "DefaultRuntime": "runc", "OSType": "linux"}).to_string();
    let version = json!({"Version": "27.0.0", "ApiVersion": "1.45", "MinAPIVersion": "1.24", "Os": "linux", "Arch": "amd64"}).to_string();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut head = String::new();
            let mut r = BufReader::new(s.try_clone().expect("clone"));
            while r.read_line(&mut head).is_ok_and(|n| n > 0) && !head.ends_with("\r\n\r\n") {}
            // `GET /v1.45/info HTTP/1.1`: the path without its API version.
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
            let path = path.trim_start_matches("/v1.45").split('?').next().unwrap_or("/").to_string();
            let (status, body) = match path.as_str() {
                "/_ping" => ("200 OK", "OK".to_string()),
                "/version" => ("200 OK", version.clone()),
                "/info" => ("200 OK", info.clone()),
                _ => ("404 Not Found", json!({"message": "not in the stand-in"}).to_string()),
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nApi-Version: 1.45\r\nServer: Docker/27.0.0 (linux)\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("unix://{}", path.display())
}

/// gVisor registered without `--host-uds=open` runs workers that cannot reach their broker:
/// `doctor` names the runtime, what fails under it and the daemon.json fix; one registered
/// with it gets no such line.
#[test]
fn doctor_names_a_gvisor_runtime_without_host_uds() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let runc = json!({"path": "runc"});
    let without = stand_in_daemon(tmp.path(), json!({"runc": runc, "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host"]}}));
    let doctor = |host: &str, json: bool| {
        let mut c = assert_cmd::Command::cargo_bin("workcell").expect("binary");
        c.current_dir(tmp.path()).env("DOCKER_HOST", host).env_remove("DOCKER_TLS_VERIFY").arg("doctor");
        if json {
            c.arg("--json");
        }
        String::from_utf8_lossy(&c.output().expect("workcell doctor").stdout).into_owned()
    };
    let text = doctor(&without, false);
    let line = text.lines().find(|l| l.contains("--host-uds=open")).unwrap_or_else(|| panic!("no word of --host-uds:\n{text}"));
    assert!(line.contains("`runsc`") && line.contains("cannot reach workcell's broker") && line.contains("daemon.json"), "{line}");
    let v: serde_json::Value = serde_json::from_str(&doctor(&without, true)).expect("doctor --json");
    assert_eq!(v["docker"]["runtimes"]["broker_unreachable"], json!(["runsc"]), "{v}");

    let other = tempfile::tempdir().expect("tempdir");
    let with = stand_in_daemon(other.path(), json!({"runc": runc, "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=host", "--host-uds=open"]}}));
    let text = doctor(&with, false);
    assert!(text.contains("runtimes: runc (default), runsc"), "the stand-in answered: {text}");
    assert!(!text.contains("cannot reach workcell's broker"), "{text}");
}
