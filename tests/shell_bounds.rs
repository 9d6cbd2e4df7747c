//! What a worker starts through the shell tool is held to the worker's own limits: its
//! process limit (not the project's looser default), and its timeout (a shell command asked
//! for with `timeout: 3600` ends with the run, not an hour later, and cannot write into a
//! zone after the worker was stopped).

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CURL: &str = r#"curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json'"#;

/// A project whose worker `w` (with `limits`) writes `script` to /out/job.py and asks the
/// shell tool to run it (`python3 /out/job.py MARKER`) with a timeout of an hour.
fn project(limits: &str, script: &str, marker: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("out")).unwrap();
    fs::create_dir_all(dir.join("workers")).unwrap();
    support::give_to_worker(&dir);
    fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n")
        .unwrap();
    let body = format!(r#"{CURL} --data-binary '{{"command":"python3 /out/job.py {marker}","timeout":3600}}' http://workcell/v1/tools/shell; echo"#);
    let command = serde_json::to_string(&["sh", "-c", &body]).unwrap();
    fs::write(
        dir.join("workers/w.worker"),
        format!("---\nsandbox:\n  zones:\n    - {{name: out, mode: rw}}\nshell_default: {{allowed: true, approval_required: false}}\nlimits: {limits}\ncommand: {command}\n---\nWork.\n"),
    )
    .unwrap();
    fs::write(dir.join("out/job.py"), script).unwrap();
    (tmp, dir)
}

fn run(dir: &Path, backend: &str) -> Output {
    let out = Command::new(assert_cmd::cargo::cargo_bin("workcell")).current_dir(dir).args(["run", "--backend", backend, "w"]).output().unwrap();
    eprintln!("{:?}\n{}\n{}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// Forty processes at once, each living a few seconds: more than a process limit of 20.
const FORKS: &str = "import os, time\ntry:\n    for i in range(40):\n        if os.fork() == 0:\n            time.sleep(3)\n            os._exit(0)\n    print('FORKED-ALL')\nexcept OSError:\n    print('FORK-REFUSED')\n";

fn shell_commands_get_the_workers_process_limit(backend: &str) {
    if backend == "bwrap" && !support::cgroup_ready(workcell::backend::cgroup::Controller::Pids) {
        return;
    }
    let (_t, dir) = project("{pids: 20}", FORKS, "limit");
    let out = run(&dir, backend);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FORK-REFUSED") && !stdout.contains("FORKED-ALL"), "the worker's limit of 20 processes held its shell command: {stdout}");
    // The control: with a looser limit the same command forks them all.
    let (_t, dir) = project("{pids: 200}", FORKS, "limit");
    let out = run(&dir, backend);
    assert!(String::from_utf8_lossy(&out.stdout).contains("FORKED-ALL"));
}

/// Writes into the zone well after the worker's timeout.
const LATE: &str = "import time\ntime.sleep(20)\nopen('/out/late-write', 'w').write('after the run')\n";

fn shell_commands_end_with_the_run(backend: &str) {
    let marker = format!("late-{}", support::unique());
    let (_t, dir) = project("{timeout: 3s}", LATE, &marker);
    let out = run(&dir, backend);
    // Stopped at its timeout, or ended just before it when its shell command was stopped.
    assert!(matches!(out.status.code(), Some(124) | Some(0)), "{:?}", out.status);
    // The job writes only 20 s in, long after workcell returned: what must hold is that no
    // process of it is left to do so (a zombie has an empty command line, so it does not count).
    let left = support::processes_with_arg(&marker);
    assert!(left.is_empty(), "the worker's shell command outlived the run: pids {left:?}");
    assert!(!dir.join("out/late-write").exists(), "a shell command of the worker wrote into its zone after the run's timeout");
}

#[test]
fn bwrap_shell_commands_get_the_workers_process_limit() {
    if support::backend_ready("bwrap") {
        shell_commands_get_the_workers_process_limit("bwrap");
    }
}

#[test]
fn bwrap_shell_commands_end_with_the_run() {
    if support::backend_ready("bwrap") {
        shell_commands_end_with_the_run("bwrap");
    }
}

#[test]
fn docker_shell_commands_end_with_the_run() {
    if support::backend_ready("docker") {
        shell_commands_end_with_the_run("docker");
    }
}
