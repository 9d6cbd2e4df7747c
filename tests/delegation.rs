//! Delegation rules at the tool service: allowlist, cycles with their chain, depth, and the
//! child's sandbox derived from the caller's (it can only shrink).

use std::sync::Arc;

use serde_json::json;
use workcell::audit::AuditLog;
use workcell::config::{BackendChoice, Project};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::{ApprovalMode, Approver};
use workcell::tools::service::{Caller, ToolService};

fn project() -> (tempfile::TempDir, Arc<Project>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    for d in ["data", "out", "workers"] {
        std::fs::create_dir(tmp.path().join(d)).expect("mkdir");
    }
    std::fs::write(tmp.path().join("data/doc.txt"), "a document").expect("write");
    std::fs::write(tmp.path().join("data/tool.exe"), "MZ").expect("write");
    let yaml = "sandbox:\n  zones:\n    data: {path: ./data, mode: rw}\n    out: {path: ./out, mode: rw}\n";
    let w = |name: &str, body: &str| std::fs::write(tmp.path().join("workers").join(format!("{name}.worker")), body).expect("worker");
    w("a", "---\nworkers: [b, reader]\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n    - {name: out, mode: rw}\ncommand: [true]\n---\n");
    w("b", "---\nworkers: [a]\nsandbox:\n  zones:\n    - {name: data, mode: ro}\ncommand: [true]\n---\n");
    w("writer", "---\nsandbox:\n  zones:\n    - {name: data, mode: rw}\ncommand: [true]\n---\n");
    w("reader", "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\nattachment_policy: {max_attachments: 1, allowed_suffixes: [.txt]}\ncommand: [sh, -c, 'cat \"$WORKCELL_ATTACHMENTS\"/doc.txt; echo; cat \"$WORKCELL_INPUT\"']\n---\n");
    let p = Project::from_text(yaml, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project");
    (tmp, Arc::new(p))
}

fn service_for(p: &Arc<Project>, worker: &str, chain: &[&str]) -> ToolService {
    let w = p.worker(worker).expect("worker").clone();
    let runner = Arc::new(BackendRunner::new(p.clone(), BackendChoice::None, ApprovalMode::ApproveAll));
    ToolService::new(
        p.clone(),
        Caller { worker: Some(w.clone()), chain: chain.iter().map(|s| s.to_string()).collect() },
        w.sandbox.clone(),
        Approver::new(ApprovalMode::ApproveAll, None),
        AuditLog::new(&p.dir, "t"),
        runner,
    )
}

#[test]
fn only_listed_workers_may_be_called() {
    let (_t, p) = project();
    let err = service_for(&p, "b", &["b"]).call("call_worker", json!({"name": "writer"})).expect_err("not listed");
    assert!(err.to_string().contains("may not call 'writer'") && err.to_string().contains("may call: a"), "{err}");
}

#[test]
fn cycles_are_refused_with_the_chain() {
    let (_t, p) = project();
    let err = service_for(&p, "b", &["a", "b"]).call("call_worker", json!({"name": "a"})).expect_err("cycle");
    assert_eq!(err.kind(), "refused");
    assert!(err.to_string().contains("a -> b -> a"), "{err}");
}

#[test]
fn depth_is_limited_to_five() {
    let (_t, p) = project();
    let err = service_for(&p, "b", &["x1", "x2", "x3", "x4", "b"]).call("call_worker", json!({"name": "a"})).expect_err("too deep");
    assert!(err.to_string().contains("at most 5"), "{err}");
}

#[test]
fn a_child_cannot_get_rw_where_the_caller_has_ro() {
    let (_t, p) = project();
    // `a` sees data read-only; `writer` declares data rw: refused though the project has rw.
    let mut a = p.worker("a").expect("a").clone();
    a.workers.push("writer".into());
    let runner = Arc::new(BackendRunner::new(p.clone(), BackendChoice::None, ApprovalMode::ApproveAll));
    let svc = ToolService::new(
        p.clone(),
        Caller { worker: Some(a.clone()), chain: vec!["a".into()] },
        a.sandbox.clone(),
        Approver::new(ApprovalMode::ApproveAll, None),
        AuditLog::new(&p.dir, "t"),
        runner,
    );
    let err = svc.call("call_worker", json!({"name": "writer"})).expect_err("escalation");
    assert_eq!(err.kind(), "permission_escalation");
    assert!(err.to_string().contains("'rw'") && err.to_string().contains("'ro'"), "{err}");
}

#[test]
fn attachments_must_be_readable_and_fit_the_childs_policy() {
    let (tmp, p) = project();
    let a = service_for(&p, "a", &["a"]);
    let err = a.call("call_worker", json!({"name": "reader", "attachments": ["/data/tool.exe"]})).expect_err("suffix");
    assert!(err.to_string().contains(".txt"), "{err}");
    let err = a.call("call_worker", json!({"name": "reader", "attachments": ["/data/doc.txt", "/data/doc.txt"]})).expect_err("count");
    assert!(err.to_string().contains("at most 1"), "{err}");
    let err = a.call("call_worker", json!({"name": "reader", "attachments": ["/data/../../etc/passwd"]})).expect_err("outside");
    assert_eq!(err.kind(), "outside_sandbox");
    // A valid call runs the child (unisolated here: the `none` backend) with its input and
    // the attachment staged read-only beside the broker socket.
    let out = a.call("call_worker", json!({"name": "reader", "input": "please summarise", "attachments": ["/data/doc.txt"]})).expect("runs");
    assert_eq!(out["exit_code"], 0, "{out}");
    assert_eq!(out["output"], "a document\nplease summarise");
    let log = std::fs::read_to_string(tmp.path().join(".workcell/audit.jsonl")).expect("audit");
    assert!(log.contains("\"event\":\"delegation\"") && log.contains("\"chain\":[\"a\",\"reader\"]"), "{log}");
}

/// Staging that fails half-way (an attachment that grew after its check) stops the call and
/// removes the broker directory with what was already staged in it.
#[test]
fn a_failed_staging_leaves_no_broker_directory() {
    use workcell::run::runner::RunnerError;
    use workcell::run::RunError;
    use workcell::tools::attach::AttachError;
    use workcell::tools::service::Attachment;
    let (tmp, p) = project();
    let first = format!("first-{}.txt", std::process::id());
    std::fs::write(tmp.path().join("data").join(&first), "staged first").expect("write");
    let open = |name: &str| std::fs::File::open(tmp.path().join("data").join(name)).expect("open");
    let attachments = [
        Attachment { name: first.clone(), file: open(&first), size: 12 },
        // Checked at 2 bytes; it holds 10 now.
        Attachment { name: "doc.txt".into(), file: open("doc.txt"), size: 2 },
    ];
    let reader = p.worker("reader").expect("worker").clone();
    let runner = BackendRunner::new(p.clone(), BackendChoice::None, ApprovalMode::ApproveAll);
    let err = runner.run_child(&reader, &reader.sandbox, "in", &attachments, &["reader".into()]).expect_err("staging fails");
    assert!(matches!(&err, RunnerError::Run(RunError::Attach(AttachError::Changed { name, checked: 2, copied: 3 })) if name == "doc.txt"), "{err:?}");
    assert!(err.to_string().contains("changed while it was handed over"), "{err}");
    let bases = ["/dev/shm".into(), std::env::temp_dir()].into_iter().chain(std::env::var_os("XDG_RUNTIME_DIR").map(std::path::PathBuf::from));
    let left: Vec<_> = bases
        .flat_map(|b| std::fs::read_dir(b).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|d| d.join("attachments").join(&first).exists())
        .collect();
    assert!(left.is_empty(), "staged files outlived the failed call: {left:?}");
}
