//! The project's own control files — `workcell.yaml`, `workers/`, `.workcell/` and `build:`
//! folders — stay out of a worker's reach when its zone contains them: through the mounts
//! (read-only binds, see `tests/escape.rs`), through the tool service, which writes on the
//! host with workcell's rights, and by renaming the project directory itself.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use workcell::config::{BackendChoice, Project};
use workcell::plan::{LaunchPlan, Overrides, PlanError};
use workcell::tools::approval::{ApprovalMode, Approver};
use workcell::tools::service::{Caller, ToolService};

const ROOT_RW: &str = "sandbox:\n  root: {root: ., readonly: false, approval: {write: preApproved, delete: preApproved}}\n";
const TOOL_WORKER: &str = "---\ndescription: built from the project\nbuild: images/tool\ncommand: [true]\n---\nbuilt\n";

/// A root-form project whose whole directory is writable, with a worker built from
/// `images/tool` and an audit log.
fn project_dir(tmp: &Path) -> PathBuf {
    let dir = std::fs::canonicalize(tmp).expect("canonical").join("proj");
    std::fs::create_dir_all(dir.join("workers")).expect("mkdir");
    std::fs::create_dir_all(dir.join("images/tool")).expect("mkdir");
    std::fs::create_dir_all(dir.join(".workcell")).expect("mkdir");
    std::fs::write(dir.join("workcell.yaml"), ROOT_RW).expect("config");
    std::fs::write(dir.join("workers/tool.worker"), TOOL_WORKER).expect("worker");
    std::fs::write(dir.join("images/tool/Dockerfile"), "FROM scratch\n").expect("dockerfile");
    std::fs::write(dir.join(".workcell/audit.jsonl"), "{\"event\": \"earlier\"}\n").expect("audit");
    // Other names for the control directories, as a worker could make them: direct, and
    // climbing out of the directory the link sits in.
    std::os::unix::fs::symlink("workers", dir.join("alias")).expect("symlink");
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    std::os::unix::fs::symlink("../workers", dir.join("sub/w")).expect("symlink");
    std::os::unix::fs::symlink("../images/tool", dir.join("sub/t")).expect("symlink");
    std::os::unix::fs::symlink("../.workcell", dir.join("sub/c")).expect("symlink");
    support::give_to_worker(&dir);
    dir
}

fn service(dir: &Path) -> ToolService {
    let project = Arc::new(Project::load(Some(&dir.join("workcell.yaml")), dir).expect("project"));
    let runner = workcell::run::runner::BackendRunner::new(project.clone(), BackendChoice::Bwrap, ApprovalMode::Strict);
    let audit = workcell::audit::AuditLog::new(dir, "control-test");
    ToolService::new(
        project.clone(),
        Caller { worker: None, chain: Vec::new() },
        project.sandbox.clone(),
        Approver::new(ApprovalMode::Strict, None),
        audit,
        Arc::new(runner),
    )
}

fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    ["workcell.yaml", "workers/tool.worker", "images/tool/Dockerfile"].iter().map(|p| (dir.join(p), std::fs::read(dir.join(p)).expect("read"))).collect()
}

/// Every way the tool service could change a control file is refused; the rest of the
/// project stays writable.
#[test]
fn tool_service_cannot_change_control_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = project_dir(tmp.path());
    let before = snapshot(&dir);
    let svc = service(&dir);
    let evil = "sandbox: {root: {root: /, readonly: false}}\n";
    let attempts = [
        ("write_file", json!({"path": "/workcell.yaml", "content": evil})),
        ("edit_file", json!({"path": "/workcell.yaml", "old_text": "root: .", "new_text": "root: /"})),
        ("delete_file", json!({"path": "/workcell.yaml"})),
        ("write_file", json!({"path": "/workers/evil.worker", "content": "---\ncommand: [true]\n---\n"})),
        ("write_file", json!({"path": "/workers/tool.worker", "content": "---\ncommand: [true]\n---\n"})),
        ("delete_file", json!({"path": "/workers/tool.worker"})),
        ("write_file", json!({"path": "/workers/deeper/x.worker", "content": "x"})),
        ("write_file", json!({"path": "/alias/evil.worker", "content": "x"})),
        ("write_file", json!({"path": "/.workcell/audit.jsonl", "content": "{\"forged\": true}\n"})),
        ("delete_file", json!({"path": "/.workcell/audit.jsonl"})),
        ("write_file", json!({"path": "/images/tool/Dockerfile", "content": "FROM scratch\nRUN evil\n"})),
        ("write_file", json!({"path": "/images/tool/extra.sh", "content": "evil"})),
        ("write_file", json!({"path": "/sub/w/evil.worker", "content": "x"})),
        ("write_file", json!({"path": "/sub/t/Dockerfile", "content": "FROM evil\n"})),
        ("write_file", json!({"path": "/sub/c/audit.jsonl", "content": "forged\n"})),
        ("delete_file", json!({"path": "/sub/w/tool.worker"})),
    ];
    for (tool, args) in attempts {
        let r = svc.call(tool, args.clone());
        assert!(r.is_err(), "{tool} {args} was allowed: {r:?}");
        let msg = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("project's own configuration") || msg.contains("no such file"), "{tool} {args}: {msg}");
    }
    assert_eq!(snapshot(&dir), before, "a control file changed");
    assert!(!dir.join("workers/evil.worker").exists() && !dir.join("workers/deeper").exists());
    assert!(!dir.join("images/tool/extra.sh").exists());
    let log = std::fs::read_to_string(dir.join(".workcell/audit.jsonl")).expect("audit log");
    assert!(log.starts_with("{\"event\": \"earlier\"}") && !log.contains("forged"), "{log}");
    // Ordinary files beside them are still the worker's to write.
    svc.call("write_file", json!({"path": "/notes.md", "content": "fine"})).expect("an ordinary write");
    assert_eq!(std::fs::read_to_string(dir.join("notes.md")).expect("notes"), "fine");
}

/// A writable zone that contains the project directory could rename the project away and
/// plant a config of its own: such a plan is refused, naming the zone.
#[test]
fn writable_zone_around_the_project_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    up: {path: .., mode: rw, approval: {write: preApproved, delete: preApproved}}\n")
        .expect("config");
    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project");
    let ov = Overrides { command: Some(vec!["true".into()]), ..Overrides::default() };
    match LaunchPlan::build(&project, None, &project.sandbox, &ov) {
        Err(e @ PlanError::ZoneContainsProject { .. }) => assert!(e.to_string().contains("/up"), "{e}"),
        other => panic!("a writable zone around the project was accepted: {other:?}"),
    }
    // Read-only it is fine.
    std::fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    up: {path: .., mode: ro}\n").expect("config");
    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project");
    LaunchPlan::build(&project, None, &project.sandbox, &ov).expect("a read-only zone around the project");
    // A writable zone that is a control directory itself is refused too.
    std::fs::create_dir_all(dir.join("workers")).expect("mkdir");
    std::fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    w: {path: ./workers, mode: rw, approval: {write: preApproved, delete: preApproved}}\n")
        .expect("config");
    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project");
    match LaunchPlan::build(&project, None, &project.sandbox, &ov) {
        Err(e @ PlanError::ZoneInsideControl { .. }) => assert!(e.to_string().contains("/w"), "{e}"),
        other => panic!("a writable zone on workers/ was accepted: {other:?}"),
    }
}

/// Through the mounts, on a real backend: the build folder of a worker is read-only inside a
/// writable project, like the config and the worker files.
fn build_folder_read_only(backend: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = project_dir(tmp.path());
    let before = snapshot(&dir);
    // A second worker whose build folder does not exist yet: the worker may not create it.
    std::fs::write(dir.join("workers/later.worker"), "---\nbuild: images/later\ncommand: [true]\n---\nx\n").expect("worker");
    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project");
    let script = "cd /sandbox; echo 'RUN evil' >> images/tool/Dockerfile; echo x > images/tool/extra.sh; rm -rf images/tool; mv images moved; echo x > alias/evil.worker; mkdir -p images/later; echo 'FROM evil' > images/later/Dockerfile; echo ok > fine.txt; exit 0";
    let ov = Overrides { command: Some(vec!["sh".into(), "-c".into(), script.into()]), ..Overrides::default() };
    let plan = LaunchPlan::build(&project, None, &project.sandbox, &ov).expect("plan");
    let selected = if backend == "bwrap" { workcell::backend::Selected::Bwrap } else { workcell::backend::Selected::Docker };
    let out = workcell::backend::run(selected, &plan, workcell::backend::Output::Capture, workcell::backend::Attached::default()).expect("run");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.exit_code, 0);
    assert!(dir.join("fine.txt").exists(), "the project stays writable");
    assert_eq!(snapshot(&dir), before, "a control file changed through the mounts");
    assert!(!dir.join("images/tool/extra.sh").exists() && !dir.join("workers/evil.worker").exists());
    assert!(!dir.join("images/later/Dockerfile").exists(), "the worker created a build folder's Dockerfile");
}

#[test]
fn bwrap_build_folder_read_only() {
    if support::backend_ready("bwrap") {
        build_folder_read_only("bwrap");
    }
}

#[test]
fn docker_build_folder_read_only() {
    if support::backend_ready("docker") {
        build_folder_read_only("docker");
    }
}

/// Control directories that did not exist when the project was loaded (a first run) are
/// protected as soon as they exist, under any name.
#[test]
fn control_directories_made_after_loading_are_protected() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("workcell.yaml"), ROOT_RW).expect("config");
    support::give_to_worker(&dir);
    let svc = service(&dir);
    // What the run's plan creates before the worker starts, then the worker's links.
    std::fs::create_dir_all(dir.join("workers")).expect("mkdir");
    std::fs::create_dir_all(dir.join(".workcell")).expect("mkdir");
    std::os::unix::fs::symlink("workers", dir.join("w")).expect("symlink");
    std::os::unix::fs::symlink(".workcell", dir.join("c")).expect("symlink");
    for path in ["/w/evil.worker", "/c/audit.jsonl", "/workers/evil.worker"] {
        let r = svc.call("write_file", json!({"path": path, "content": "x"}));
        assert!(r.is_err(), "{path} was written: {r:?}");
    }
    assert!(!dir.join("workers/evil.worker").exists());
    let log = std::fs::read_to_string(dir.join(".workcell/audit.jsonl")).unwrap_or_default();
    assert!(log.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()), "the audit log was overwritten: {log}");
}

/// `--zone w=.:rw` in a directory without `workcell.yaml`: the worker could write the config a
/// later run uses, so the run is refused and says what to do.
#[test]
fn writable_project_without_config_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
        .current_dir(&dir)
        .args(["run", "--backend", "none", "--zone", "w=.:rw", "--", "true"])
        .output()
        .expect("workcell");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("has no workcell.yaml") && stderr.contains("workcell init"), "{stderr}");
    assert!(!dir.join("workcell.yaml").exists());
}

/// `build: .` makes the whole writable project the build context: refused when planned, while
/// the tool service still writes ordinary files (the project itself is not a control folder).
/// A build folder outside the project is no reason to refuse or to bind anything above it.
#[test]
fn build_folders_that_cannot_be_protected_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = project_dir(tmp.path());
    std::fs::write(dir.join("workers/root.worker"), "---\nbuild: .\ncommand: [true]\n---\nx\n").expect("worker");
    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project");
    let ov = Overrides { command: Some(vec!["true".into()]), ..Overrides::default() };
    match LaunchPlan::build(&project, None, &project.sandbox, &ov) {
        Err(e @ PlanError::BuildFolderWritable { .. }) => assert!(e.to_string().contains("'root'"), "{e}"),
        other => panic!("build: . in a writable project was accepted: {other:?}"),
    }
    service(&dir).call("write_file", json!({"path": "/notes.md", "content": "fine"})).expect("an ordinary write");
    std::fs::remove_file(dir.join("workers/root.worker")).expect("rm");
    std::fs::create_dir_all(tmp.path().join("shared/img")).expect("mkdir");
    std::fs::write(dir.join("workers/outside.worker"), "---\nbuild: ../shared/img\ncommand: [true]\n---\nx\n").expect("worker");
    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project");
    let plan = LaunchPlan::build(&project, None, &project.sandbox, &ov).expect("a build folder outside the project");
    assert!(plan.mounts.iter().all(|m| !m.target.contains("..") && m.target != "/sandbox/.."), "{:?}", plan.mounts);
}
