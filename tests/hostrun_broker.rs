//! A hostile worker asks the host to plant what git, direnv and editors run later: through
//! the broker from inside a real sandbox (bwrap and docker: the same body), and as an agent
//! through `workcell mcp` (the official MCP Python SDK). Every such request is refused as
//! `protected`, says how a person allows it, and leaves the host repository as it was: the
//! host's own `git status`, `git checkout` and `git commit` afterwards run nothing of the
//! worker's (its hook and `core.fsmonitor` would create a marker file).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

mod support;

/// The marker a planted hook or fsmonitor command would create (outside the project).
fn payload(marker: &Path) -> (String, String) {
    let config = format!("[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"touch {}\"\n", marker.display());
    let hook = format!("#!/bin/sh\ntouch {}\n", marker.display());
    (config, hook)
}

/// `tmp/proj/repo`, a git repository with one commit, a nested repository `sub/`, and the
/// worker's link `foo -> .git` (made by the worker where it can write, by the test here).
struct Repo {
    _tmp: tempfile::TempDir,
    proj: PathBuf,
    repo: PathBuf,
    marker: PathBuf,
}

use support::host_git as git;

impl Repo {
    fn new() -> Repo {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let proj = root.join("proj");
        let repo = proj.join("repo");
        std::fs::create_dir_all(repo.join("sub")).expect("mkdir");
        assert!(git(&repo, &["init", "-q", "-b", "main"]).status.success());
        assert!(git(&repo.join("sub"), &["init", "-q", "-b", "main"]).status.success());
        std::fs::write(repo.join("README.md"), "hello\n").expect("write");
        assert!(git(&repo, &["add", "README.md"]).status.success());
        assert!(git(&repo, &["commit", "-q", "-m", "first"]).status.success());
        std::os::unix::fs::symlink(".git", repo.join("foo")).expect("symlink");
        support::give_to_worker(&proj);
        Repo { marker: root.join("MARKER"), _tmp: tmp, proj, repo }
    }

    /// Everything under `.git/hooks`, `.git/config` and `sub/.git/config`, to compare.
    fn protected_state(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for f in [".git/config", "sub/.git/config", ".envrc", ".vscode"] {
            out.push((f.to_string(), std::fs::read(self.repo.join(f)).unwrap_or_default()));
        }
        let mut hooks: Vec<_> = std::fs::read_dir(self.repo.join(".git/hooks")).expect("hooks").map(|e| e.expect("entry").path()).collect();
        hooks.sort();
        for h in hooks {
            out.push((h.display().to_string(), std::fs::read(&h).expect("hook")));
        }
        out
    }

    /// The host's own git in the repository: nothing of the worker's may run.
    fn assert_host_git_runs_nothing(&self) {
        for args in [&["status"][..], &["checkout", "-q", "-b", "later"], &["commit", "-q", "--allow-empty", "-m", "by the person"]] {
            let out = git(&self.repo, args);
            assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        assert!(!self.marker.exists(), "the host's git ran something the worker planted");
    }
}

/// The requests a hostile worker makes, as (tool, arguments); all must be refused.
fn hostile_calls(marker: &Path) -> Vec<(&'static str, Value)> {
    let (config, hook) = payload(marker);
    vec![
        ("write_file", json!({"path": "/repo/.git/config", "content": config})),
        ("write_file", json!({"path": "/repo/.git/hooks/pre-commit", "content": hook})),
        ("write_file", json!({"path": "/repo/.git/hooks/post-checkout", "content": hook})),
        ("write_file", json!({"path": "/repo/foo/config", "content": config})),
        ("write_file", json!({"path": "/repo/foo/hooks/pre-commit", "content": hook})),
        ("write_file", json!({"path": "/repo/sub/.git/config", "content": config})),
        ("write_file", json!({"path": "/repo/.envrc", "content": format!("touch {}\n", marker.display())})),
        ("write_file", json!({"path": "/repo/.vscode/settings.json", "content": "{}"})),
        ("edit_file", json!({"path": "/repo/.git/config", "old_text": "[core]", "new_text": format!("[core]\n\tfsmonitor = \"touch {}\"", marker.display())})),
        ("delete_file", json!({"path": "/repo/.git/config"})),
        ("delete_file", json!({"path": "/repo/foo/hooks/pre-commit.sample"})),
    ]
}

fn assert_protected(text: &str, what: &str) {
    assert!(text.contains("protected by the entry") && text.contains("unprotect: ['") && text.contains("workcell.yaml"), "{what}: {text}");
}

/// A worker inside the sandbox calls the broker for each hostile request.
fn broker_refuses_planted_files(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let r = Repo::new();
    let req = r.proj.join("req");
    std::fs::create_dir_all(&req).expect("mkdir");
    let calls = hostile_calls(&r.marker);
    let mut script = String::new();
    for (i, (tool, args)) in calls.iter().enumerate() {
        std::fs::write(req.join(format!("{i}.json")), args.to_string()).expect("write request");
        script.push_str(&format!(
            r#"curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json' --data-binary @/req/{i}.json http://workcell/v1/tools/{tool}; echo; "#
        ));
    }
    script.push_str(r#"curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json' --data-binary '{"path":"/repo/notes.md","content":"fine"}' http://workcell/v1/tools/write_file; echo"#);
    let command = serde_json::to_string(&["sh", "-c", &script]).expect("json");
    let worker = format!("---\nsandbox:\n  zones:\n    - {{name: repo, mode: rw}}\n    - {{name: req, mode: ro}}\ncommand: {command}\n---\nPlant.\n");
    support::write_project(
        &r.proj,
        "sandbox:\n  zones:\n    repo: {path: ./repo, mode: rw, approval: {write: preApproved, delete: preApproved}}\n    req: {path: ./req, mode: ro}\n",
        &[("planter", &worker)],
    );
    support::give_to_worker(&r.proj);
    let before = r.protected_state();
    let out = Command::new(env!("CARGO_BIN_EXE_workcell")).args(["run", "--backend", backend, "planter"]).current_dir(&r.proj).output().expect("workcell");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{backend}: {stdout}");
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let answers: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(answers.len(), calls.len() + 1, "{stdout}");
    for ((tool, args), a) in calls.iter().zip(&answers) {
        assert_eq!(a["ok"], false, "{tool} {args}: {a}");
        assert_eq!(a["error"]["kind"], "protected", "{tool} {args}: {a}");
        assert_protected(a["error"]["message"].as_str().unwrap_or(""), tool);
    }
    assert_eq!(answers[calls.len()]["ok"], true, "an ordinary file is written: {}", answers[calls.len()]);
    assert_eq!(std::fs::read_to_string(r.repo.join("notes.md")).expect("written"), "fine");
    assert_eq!(r.protected_state(), before, "the host's protected files are as they were");
    r.assert_host_git_runs_nothing();
    // The refusals are in the audit log with their kind.
    let log = std::fs::read_to_string(r.proj.join(".workcell/audit.jsonl")).expect("audit");
    assert_eq!(log.lines().filter(|l| l.contains("\"kind\":\"protected\"")).count(), calls.len(), "{log}");
}

#[test]
fn broker_refuses_planted_files_bwrap() {
    broker_refuses_planted_files("bwrap");
}

#[test]
fn broker_refuses_planted_files_docker() {
    broker_refuses_planted_files("docker");
}

#[test]
fn mcp_refuses_planted_files() {
    if !support::python_ready(&["mcp"]) {
        return;
    }
    let r = Repo::new();
    std::fs::write(r.proj.join("workcell.yaml"), "sandbox:\n  zones:\n    repo: {path: ./repo, mode: rw}\n").expect("config");
    let calls = hostile_calls(&r.marker);
    let mut all: Vec<Value> = calls.iter().map(|(t, a)| json!([t, a])).collect();
    all.push(json!(["read_file", {"path": "/repo/.git/config"}]));
    all.push(json!(["write_file", {"path": "/repo/notes.md", "content": "fine"}]));
    let before = r.protected_state();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_calls.py");
    let launch = json!([env!("CARGO_BIN_EXE_workcell")]).to_string();
    let child = Command::new(support::python())
        .arg(script)
        .arg(launch)
        .arg(&r.proj)
        .arg("bwrap")
        .arg(Value::Array(all).to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    let out = child.wait_with_output().expect("client");
    assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
    let answers: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    for ((tool, args), a) in calls.iter().zip(&answers) {
        assert_eq!(a["error"], true, "{tool} {args}: {a}");
        assert_protected(a["text"].as_str().unwrap_or(""), tool);
    }
    assert_eq!(answers[calls.len()]["error"], false, "reading stays allowed: {}", answers[calls.len()]);
    assert!(answers[calls.len()]["text"].as_str().unwrap_or("").contains("repositoryformatversion"));
    assert_eq!(answers[calls.len() + 1]["error"], false, "{}", answers[calls.len() + 1]);
    assert_eq!(r.protected_state(), before);
    r.assert_host_git_runs_nothing();
}
