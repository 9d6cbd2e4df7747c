//! Issue 37, finding 2: the tool service never completes a git directory. A worker that has
//! the tool service write `config` (with `core.fsmonitor`), `objects/`, `refs/` and `HEAD`
//! into a plain directory, one piece per call, would leave a repository whose config the
//! person's next `git status` there runs. Each write is judged as the zone will be after it:
//! the piece that would make a directory holding `config` (or `hooks`, `commondir`,
//! `config.worktree`) a git directory is refused, in whatever order the pieces come; what
//! git runs from a directory that already is one stays refused as before. Checked with the
//! host's real git afterwards: the planted command never runs.
//!
//! In-process (every order, `commondir`, two writes racing) and through `workcell mcp`
//! with the official MCP Python SDK, whose session shell (bwrap or docker) prepares pieces
//! the tool service then would complete.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde_json::{json, Value};
use workcell::audit::AuditLog;
use workcell::config::{BackendChoice, Project};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::{ApprovalMode, Approver};
use workcell::tools::service::{Caller, ToolService};

mod support;

/// A config that makes git run a command (creating `marker`) on `git status` in its
/// directory, with that directory as the work tree.
fn planted_config(marker: &Path) -> String {
    format!("[core]\n\trepositoryformatversion = 0\n\tworktree = .\n\tfsmonitor = \"touch {}\"\n", marker.display())
}

/// The host's own `git status` in `dir`: whatever it finds there, the worker's command must
/// not run (`marker` absent).
fn assert_git_status_runs_nothing(dir: &Path, marker: &Path) {
    let _ = support::host_git(dir, &["status"]);
    assert!(!marker.exists(), "`git status` in {} ran the command the worker planted", dir.display());
}

/// A project with one writable zone `out` (`proj/out`), its root outside the project for
/// markers.
struct Zone {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    proj: PathBuf,
    out: PathBuf,
}

impl Zone {
    fn new() -> Zone {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let proj = root.join("proj");
        let out = proj.join("out");
        std::fs::create_dir_all(&out).expect("mkdir");
        std::fs::write(
            proj.join("workcell.yaml"),
            "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
        )
        .expect("config");
        support::give_to_worker(&proj);
        Zone { _tmp: tmp, root, proj, out }
    }

    fn service(&self) -> Arc<ToolService> {
        let project = Arc::new(
            Project::from_text(&std::fs::read_to_string(self.proj.join("workcell.yaml")).expect("read"), &self.proj.join("workcell.yaml"), &self.proj)
                .expect("project"),
        );
        let mode = ApprovalMode::ApproveAll;
        let runner = Arc::new(BackendRunner::new(project.clone(), BackendChoice::None, mode));
        Arc::new(ToolService::new(
            project.clone(),
            Caller::default(),
            project.sandbox.clone(),
            Approver::new(mode, None),
            AuditLog::new(&project.dir, "test-run"),
            runner,
        ))
    }
}

/// The pieces of a repository, each one `write_file` (the directories on the way created by
/// the write itself).
fn pieces(dir: &str, marker: &Path) -> Vec<(String, String)> {
    vec![
        (format!("{dir}/config"), planted_config(marker)),
        (format!("{dir}/objects/info/keep"), String::new()),
        (format!("{dir}/refs/heads/keep"), String::new()),
        (format!("{dir}/HEAD"), "ref: refs/heads/main\n".to_string()),
    ]
}

/// Every order of `items`.
fn orders(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut all = Vec::new();
    for (i, first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut tail in orders(&rest) {
            tail.insert(0, *first);
            all.push(tail);
        }
    }
    all
}

/// The finding's exact sequence and every other order of the four pieces: exactly one write
/// is refused (the one that would make the directory a git directory holding `config`:
/// `HEAD`, `objects/` or `config` itself, whichever comes last of the three), it says so,
/// and the host's `git status` runs nothing.
#[test]
fn no_order_of_writes_assembles_a_repository() {
    let z = Zone::new();
    let service = z.service();
    for (n, order) in orders(&[0, 1, 2, 3]).into_iter().enumerate() {
        let marker = z.root.join(format!("marker-{n}"));
        let dir = format!("r{n}");
        let all = pieces(&format!("/out/{dir}"), &marker);
        let mut refused = Vec::new();
        for i in &order {
            let (path, content) = &all[*i];
            if let Err(e) = service.call("write_file", json!({"path": path, "content": content})) {
                assert_eq!(e.kind(), "protected", "{path} (order {order:?}): {e}");
                let text = e.to_string();
                assert!(text.contains(&format!("/out/{dir}")) && text.contains("git"), "names the directory and why: {text}");
                refused.push(*i);
            }
        }
        // The refused one is the last of config, objects, HEAD to come.
        let last = *order.iter().rfind(|i| **i != 2).expect("three");
        assert_eq!(refused, vec![last], "order {order:?}: refused {refused:?}");
        assert_git_status_runs_nothing(&z.out.join(&dir), &marker);
    }
}

/// The refusal of the completing write: a tool error naming the path, the directory and why,
/// and what the person can do; nothing of the refused write is left behind.
#[test]
fn the_completing_write_is_refused_in_words() {
    let z = Zone::new();
    let service = z.service();
    let marker = z.root.join("marker");
    for (path, content) in pieces("/out", &marker).into_iter().take(3) {
        service.call("write_file", json!({"path": path, "content": content})).expect("a piece alone is an ordinary file");
    }
    let err = service.call("write_file", json!({"path": "/out/HEAD", "content": "ref: refs/heads/main\n"})).expect_err("HEAD completes it");
    let text = err.to_string();
    assert_eq!(err.kind(), "protected", "{text}");
    assert!(text.contains("'/out/HEAD'") && text.contains("would make '/out' a git repository"), "{text}");
    assert!(text.contains("config") && text.contains("git status"), "says what git would run: {text}");
    assert!(text.contains("unprotect"), "says what the person can do: {text}");
    assert!(!z.out.join("HEAD").exists(), "the refused HEAD is not there");
    let stray: Vec<_> = std::fs::read_dir(&z.out).expect("ls").flatten().map(|e| e.file_name()).filter(|n| n.to_string_lossy().contains("workcell")).collect();
    assert!(stray.is_empty(), "the refused write left {stray:?}");
    assert_git_status_runs_nothing(&z.out, &marker);
    // `commondir` (a linked worktree's) makes a git directory with HEAD as `objects` does.
    let marker = z.root.join("marker-commondir");
    service.call("write_file", json!({"path": "/out/w/config", "content": planted_config(&marker)})).expect("config");
    service.call("write_file", json!({"path": "/out/w/HEAD", "content": "ref: refs/heads/main\n"})).expect("HEAD");
    let err = service.call("write_file", json!({"path": "/out/w/commondir", "content": "..\n"})).expect_err("commondir completes it");
    assert_eq!(err.kind(), "protected", "{err}");
    assert!(!z.out.join("w/commondir").exists());
    // Hooks count as config does: the piece that would make their directory a repository
    // is refused, naming them.
    service.call("write_file", json!({"path": "/out/h/hooks/pre-commit", "content": "#!/bin/sh\nexit 0\n"})).expect("hooks of no repository");
    service.call("write_file", json!({"path": "/out/h/HEAD", "content": "ref: refs/heads/main\n"})).expect("HEAD");
    let err = service.call("write_file", json!({"path": "/out/h/objects/pack/keep", "content": ""})).expect_err("objects completes it");
    assert!(err.kind() == "protected" && err.to_string().contains("'hooks'"), "{err}");
    assert!(!z.out.join("h/objects").exists(), "the directories the refused write made are gone");
    // An ordinary file in a directory that has some pieces stays writable.
    service.call("write_file", json!({"path": "/out/w/notes.md", "content": "fine"})).expect("ordinary file");
}

/// Two writes racing, each the other's missing piece (`HEAD` and `objects/`, `config`
/// there already): never both succeed, and the directory never ends up a git directory
/// holding `config`. Each write is judged again after it lands, beneath the same handle.
#[test]
fn racing_pieces_never_both_land() {
    let z = Zone::new();
    let service = z.service();
    let marker = z.root.join("marker-race");
    for n in 0..40 {
        let dir = format!("/out/race{n}");
        service.call("write_file", json!({"path": format!("{dir}/config"), "content": planted_config(&marker)})).expect("config");
        let calls = [(format!("{dir}/HEAD"), "ref: refs/heads/main\n"), (format!("{dir}/objects/info/keep"), "")];
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let results: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = calls
                .iter()
                .map(|(path, content)| {
                    let (service, barrier) = (service.clone(), barrier.clone());
                    s.spawn(move || {
                        barrier.wait();
                        service.call("write_file", json!({"path": path, "content": content})).is_ok()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        assert!(!results.iter().all(|ok| *ok), "round {n}: both pieces landed");
        let d = z.out.join(format!("race{n}"));
        assert!(!(d.join("HEAD").exists() && d.join("objects").exists()), "round {n}: {} is a git directory holding config", d.display());
        assert_git_status_runs_nothing(&d, &marker);
    }
}

/// Runs `calls` through `workcell mcp --backend BACKEND` with the official MCP SDK.
fn mcp(proj: &Path, backend: &str, calls: &[Value]) -> Vec<Value> {
    assert!(support::python_ready(&["mcp"]), "the mcp Python package is required");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_calls.py");
    let launch = json!([env!("CARGO_BIN_EXE_workcell")]).to_string();
    let out =
        Command::new(support::python()).arg(script).arg(launch).arg(proj).arg(backend).arg(Value::Array(calls.to_vec()).to_string()).output().expect("python");
    assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("client said {}: {e}", String::from_utf8_lossy(&out.stdout)))
}

mod body {
    use super::*;

    /// Through `workcell mcp`: the finding's sequence at the zone's root (config, objects,
    /// refs, HEAD last); a directory the session's shell prepared (config, objects, refs)
    /// and renamed into place, then HEAD; a directory with HEAD and config (the shell's)
    /// whose `objects/` the tool service would create. Each completing write is refused;
    /// the host's `git status` in each runs nothing.
    pub fn mcp_never_completes_a_git_directory(backend: &str) {
        let z = Zone::new();
        let [m_root, m_moved, m_objects] = ["marker-root", "marker-moved", "marker-objects"].map(|m| z.root.join(m));
        let write = |path: &str, content: &str| json!(["write_file", {"path": path, "content": content}]);
        let shell = |command: String| json!(["shell", {"command": command}]);
        let mut calls: Vec<Value> = pieces("/out", &m_root).iter().map(|(p, c)| write(p, c)).collect();
        let config_moved = planted_config(&m_moved).replace('\n', "\\n").replace('\t', "\\t");
        calls.push(shell(format!(
            "mkdir -p /out/prep/objects/info /out/prep/refs/heads && printf '{config_moved}' > /out/prep/config && mv /out/prep /out/moved && echo prepared"
        )));
        calls.push(write("/out/moved/HEAD", "ref: refs/heads/main\n"));
        let config_objects = planted_config(&m_objects).replace('\n', "\\n").replace('\t', "\\t");
        calls.push(write("/out/obj/HEAD", "ref: refs/heads/main\n"));
        calls.push(shell(format!("printf '{config_objects}' > /out/obj/config && mkdir -p /out/obj/refs/heads && echo prepared")));
        calls.push(write("/out/obj/objects/pack/keep", ""));
        let answers = mcp(&z.proj, backend, &calls);
        assert_eq!(answers.len(), calls.len(), "{answers:?}");
        let refused = |i: usize, dir: &str| {
            let a = &answers[i];
            let text = a["text"].as_str().unwrap_or("");
            assert_eq!(a["error"], true, "call {i} {} must be refused: {a}", calls[i]);
            assert!(text.contains(&format!("would make '{dir}' a git repository")), "call {i}: {text}");
        };
        for i in [0, 1, 2, 4, 6, 7] {
            assert_eq!(answers[i]["error"], false, "call {i} {}: {}", calls[i], answers[i]);
        }
        assert!(
            answers[4]["text"].as_str().unwrap_or("").contains("prepared") && answers[7]["text"].as_str().unwrap_or("").contains("prepared"),
            "{answers:?}"
        );
        refused(3, "/out");
        refused(5, "/out/moved");
        refused(8, "/out/obj");
        assert!(!z.out.join("HEAD").exists() && !z.out.join("moved/HEAD").exists() && !z.out.join("obj/objects").exists());
        assert_git_status_runs_nothing(&z.out, &m_root);
        assert_git_status_runs_nothing(&z.out.join("moved"), &m_moved);
        assert_git_status_runs_nothing(&z.out.join("obj"), &m_objects);
    }
}

support::backend_suite!(bwrap, "bwrap", [mcp_never_completes_a_git_directory]);
support::backend_suite!(docker, "docker", [mcp_never_completes_a_git_directory]);
