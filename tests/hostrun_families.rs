//! A protected manifest brings its family (issue 37, findings 8 and 9): `protect: [Makefile]`
//! protects what make reads first (`GNUmakefile`, `makefile`), `protect: [web/package.json]`
//! what changes how its scripts run (`.npmrc`, `.yarnrc.yml`, `.pnpmfile.cjs`, …, at any depth:
//! yarn reads `.yarnrc.yml` in every folder above the project),
//! everywhere the configured entries are judged: `workcell plan` (which names why each extra
//! entry is there), the tool service, and copy delivery's publish. The sweep after a bind run
//! is `tests/hostrun_by_tool.rs`, with the real make and npm.

mod support;

use std::sync::Arc;

use serde_json::{json, Value};
use workcell::audit::AuditLog;
use workcell::config::{BackendChoice, Project};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::{ApprovalMode, Approver};
use workcell::tools::service::{Caller, ToolService};

const CONFIG: &str =
    "sandbox:\n  protect: [Makefile, web/package.json]\n  zones:\n    repo: {path: ./repo, mode: rw, approval: {write: preApproved, delete: preApproved}}\n";

fn project() -> (tempfile::TempDir, Arc<Project>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(tmp.path().join("repo/web")).expect("mkdir");
    std::fs::write(tmp.path().join("workcell.yaml"), CONFIG).expect("config");
    let project = Arc::new(Project::from_text(CONFIG, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project"));
    (tmp, project)
}

#[test]
fn plan_names_each_entry_a_manifest_brought() {
    let (tmp, _) = project();
    support::give_to_worker(tmp.path());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_workcell"))
        .current_dir(tmp.path())
        .args(["plan", "--json", "--backend", "none", "--", "true"])
        .output()
        .expect("plan");
    assert!(out.status.success(), "plan: {}", String::from_utf8_lossy(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).expect("json");
    let area = &plan["protected"][0];
    let entries: Vec<&str> = area["entries"].as_array().expect("entries").iter().filter_map(Value::as_str).collect();
    for e in ["Makefile", "GNUmakefile", "makefile", "web/package.json", ".npmrc", ".yarnrc.yml", ".pnpmfile.cjs", ".husky", "rust-toolchain.toml", ".codex"] {
        assert!(entries.contains(&e), "{e} is not among the entries: {entries:?}");
    }
    let family = area["by_family"].as_array().expect("by_family");
    let gnu = family.iter().find(|f| f["entry"] == "GNUmakefile").expect("GNUmakefile named");
    assert_eq!((gnu["from"].as_str(), gnu["tool"].as_str()), (Some("Makefile"), Some("make")));
    let yarnrc = family.iter().find(|f| f["entry"] == ".yarnrc.yml").expect(".yarnrc.yml named");
    assert_eq!((yarnrc["from"].as_str(), yarnrc["tool"].as_str()), (Some("web/package.json"), Some("yarn")));

    let text = std::process::Command::new(env!("CARGO_BIN_EXE_workcell"))
        .current_dir(tmp.path())
        .args(["plan", "--backend", "none", "--", "true"])
        .output()
        .expect("plan");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("with Makefile: GNUmakefile (read by make)"), "{text}");
    assert!(text.contains("with web/package.json: .yarnrc.yml (read by yarn)"), "{text}");
}

#[test]
fn the_tool_service_refuses_the_family() {
    let (tmp, project) = project();
    let mode = ApprovalMode::ApproveAll;
    let runner = Arc::new(BackendRunner::new(project.clone(), BackendChoice::None, mode));
    let service =
        ToolService::new(project.clone(), Caller::default(), project.sandbox.clone(), Approver::new(mode, None), AuditLog::new(&project.dir, "t"), runner);
    for (path, entry) in
        [("/repo/GNUmakefile", "GNUmakefile"), ("/repo/sub/makefile", "makefile"), ("/repo/web/.npmrc", ".npmrc"), ("/repo/.yarnrc.yml", ".yarnrc.yml")]
    {
        let err = service.call("write_file", json!({"path": path, "content": "all:\n\ttouch /tmp/x\n"})).expect_err(path);
        assert_eq!(err.kind(), "protected", "{path}: {err}");
        assert!(err.to_string().contains(&format!("protected by the entry '{entry}'")), "{path}: {err}");
    }
    assert!(!tmp.path().join("repo/GNUmakefile").exists());
    // make reads only its own folder: another name beside a makefile is the worker's.
    service.call("write_file", json!({"path": "/repo/web/rules.mk", "content": "x\n"})).expect("an ordinary file");
}
