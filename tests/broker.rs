//! The broker socket, spoken to by curl (a client we did not write): token, tools, approval
//! modes, zone approval settings, and the audit lines each call leaves.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use serde_json::Value;
use workcell::audit::{read_all, AuditLog};
use workcell::config::{BackendChoice, Project};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::{ApprovalMode, Approver};
use workcell::tools::broker::Broker;
use workcell::tools::service::{Caller, ToolService};

const CONFIG: &str = "sandbox:
  zones:
    data: {path: ./data, mode: ro}
    drafts: {path: ./drafts, mode: rw, approval: {write: ask, delete: blocked}}
    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}
";

fn setup(mode: ApprovalMode) -> (tempfile::TempDir, Arc<ToolService>, Broker) {
    let tmp = tempfile::tempdir().expect("tempdir");
    for d in ["data", "drafts", "out"] {
        std::fs::create_dir(tmp.path().join(d)).expect("mkdir");
    }
    std::fs::write(tmp.path().join("data/a.txt"), "alpha beta\n").expect("write");
    std::fs::write(tmp.path().join("drafts/keep.txt"), "keep me\n").expect("write");
    let project = Arc::new(Project::from_text(CONFIG, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project"));
    let runner = Arc::new(BackendRunner::new(project.clone(), BackendChoice::None, mode));
    let service = Arc::new(ToolService::new(
        project.clone(),
        Caller::default(),
        project.sandbox.clone(),
        Approver::new(mode, None),
        AuditLog::new(&project.dir, "test-run"),
        runner,
    ));
    let broker = Broker::start(service.clone()).expect("broker");
    (tmp, service, broker)
}

/// POSTs (or GETs without a body) through curl; returns (HTTP status, JSON body).
fn curl(socket: &Path, token: Option<&str>, path: &str, body: Option<&str>) -> (u16, Value) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket"]).arg(socket);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    if let Some(b) = body {
        cmd.args(["-H", "Content-Type: application/json", "--data-binary", b]);
    }
    cmd.arg(format!("http://workcell{path}"));
    let out = cmd.output().expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (json, code) = text.rsplit_once('\n').expect("status line");
    (code.trim().parse().expect("status"), serde_json::from_str(json).unwrap_or(Value::Null))
}

#[test]
fn requests_without_the_token_are_refused() {
    let (_t, _s, broker) = setup(ApprovalMode::ApproveAll);
    let (code, body) = curl(&broker.socket(), None, "/v1/tools", None);
    assert_eq!(code, 401);
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("WORKCELL_TOKEN"));
    let (code, _) = curl(&broker.socket(), Some("wrong"), "/v1/tools/read_file", Some(r#"{"path":"/data/a.txt"}"#));
    assert_eq!(code, 401);
    let (code, body) = curl(&broker.socket(), Some(broker.token()), "/v1/tools", None);
    assert_eq!(code, 200);
    assert!(body["tools"].as_array().expect("list").iter().any(|t| t == "call_worker"));
}

#[test]
fn file_tools_answer_with_results_and_llm_friendly_refusals() {
    let (tmp, _s, broker) = setup(ApprovalMode::Strict);
    let t = Some(broker.token());
    let (code, body) = curl(&broker.socket(), t, "/v1/tools/read_file", Some(r#"{"path":"data/a.txt"}"#));
    assert_eq!((code, body["result"]["content"].as_str()), (200, Some("alpha beta\n")));
    // Pre-approved zone: written without asking even in strict mode.
    let (code, _) = curl(&broker.socket(), t, "/v1/tools/write_file", Some(r#"{"path":"/out/r.txt","content":"ok"}"#));
    assert_eq!(code, 200);
    assert_eq!(std::fs::read_to_string(tmp.path().join("out/r.txt")).expect("written"), "ok");
    let (code, body) = curl(&broker.socket(), t, "/v1/tools/read_file", Some(r#"{"path":"/data/../../etc/passwd"}"#));
    assert_eq!(code, 422);
    assert_eq!(body["error"]["kind"], "outside_sandbox");
    let (code, body) = curl(&broker.socket(), t, "/v1/tools/edit_file", Some(r#"{"path":"/out/r.txt","old_text":"zz","new_text":"y"}"#));
    assert_eq!((code, body["error"]["kind"].as_str()), (422, Some("edit_mismatch")));
    let (code, body) = curl(&broker.socket(), t, "/v1/tools/list_files", Some(r#"{"path":"/"}"#));
    assert_eq!(code, 200);
    assert_eq!(body["result"]["entries"], serde_json::json!(["/data/", "/drafts/", "/out/"]));
    let (code, body) = curl(&broker.socket(), t, "/v1/tools/no_such_tool", Some("{}"));
    assert_eq!(code, 422);
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("read_file"));
}

#[test]
fn ask_zone_writes_follow_the_approval_mode_and_denials_change_nothing() {
    let (tmp, _s, broker) = setup(ApprovalMode::Strict);
    let (code, body) = curl(&broker.socket(), Some(broker.token()), "/v1/tools/write_file", Some(r#"{"path":"/drafts/new.txt","content":"x"}"#));
    assert_eq!(code, 403);
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("--strict"));
    assert!(!tmp.path().join("drafts/new.txt").exists(), "a denied write leaves nothing behind");
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path().join("drafts")).expect("dir").filter_map(Result::ok).map(|e| e.file_name()).collect();
    assert_eq!(leftovers.len(), 1, "no temporary files either: {leftovers:?}");
    // Deletes in drafts are blocked whatever the mode.
    let (code, body) = curl(&broker.socket(), Some(broker.token()), "/v1/tools/delete_file", Some(r#"{"path":"/drafts/keep.txt"}"#));
    assert_eq!(code, 403);
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("blocked"));
    assert!(tmp.path().join("drafts/keep.txt").exists());
    drop(broker);

    let (tmp2, _s2, broker2) = setup(ApprovalMode::ApproveAll);
    let (code, _) = curl(&broker2.socket(), Some(broker2.token()), "/v1/tools/write_file", Some(r#"{"path":"/drafts/new.txt","content":"x"}"#));
    assert_eq!(code, 200);
    assert_eq!(std::fs::read_to_string(tmp2.path().join("drafts/new.txt")).expect("written"), "x");

    // The audit log records each call and each decision.
    let events = read_all(tmp.path()).expect("audit");
    assert!(events.iter().any(|e| e["event"] == "decision" && e["subject"] == "/drafts/new.txt" && e["decision"]["outcome"] == "denied"));
    assert!(events.iter().any(|e| e["event"] == "tool_call" && e["tool"] == "delete_file" && e["kind"] == "denied"));
    let events2 = read_all(tmp2.path()).expect("audit");
    assert!(events2.iter().any(|e| e["event"] == "decision" && e["decision"]["by"] == "approve_all"));
}

#[test]
fn dynamic_expansion_is_refused_unless_enabled() {
    let (_t, service, _b) = setup(ApprovalMode::ApproveAll);
    let err = service.call("request_access", serde_json::json!({"path": "/tmp", "mode": "ro"})).expect_err("refused");
    assert!(err.to_string().contains("dynamic: true"), "{err}");
}

#[test]
fn dynamic_expansion_grants_a_directory_for_the_session() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(tmp.path().join("out")).expect("mkdir");
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("notes.txt"), "outside notes").expect("write");
    let yaml = "sandbox:\n  dynamic: true\n  zones:\n    out: {path: ./out, mode: rw}\n";
    let project = Arc::new(Project::from_text(yaml, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project"));
    let runner = Arc::new(BackendRunner::new(project.clone(), BackendChoice::None, ApprovalMode::ApproveAll));
    let service = ToolService::new(
        project.clone(),
        Caller::default(),
        project.sandbox.clone(),
        Approver::new(ApprovalMode::ApproveAll, None),
        AuditLog::new(tmp.path(), "r"),
        runner,
    );
    let granted = service.call("request_access", serde_json::json!({"path": outside.path().join("notes.txt"), "mode": "ro"})).expect("granted");
    let zone = granted["granted"].as_str().expect("zone").to_string();
    let read = service.call("read_file", serde_json::json!({"path": format!("{zone}/notes.txt")})).expect("readable now");
    assert_eq!(read["content"], "outside notes");
    // Read-only grant: writing there is still refused.
    assert!(service.call("write_file", serde_json::json!({"path": format!("{zone}/x.txt"), "content": "x"})).is_err());
    // Approved or not, `/` and the sockets' directory are never granted.
    for (path, wording) in [("/", "/ may not be a zone"), ("/var/run", "/run may not be a zone"), ("/proc/self/root", "/ may not be a zone")] {
        let err = service.call("request_access", serde_json::json!({"path": path, "mode": "ro"})).expect_err("refused");
        assert!(err.to_string().contains(wording), "{path}: {err}");
    }
    let summary = service.expansion_summary().expect("summary");
    assert!(summary.contains(outside.path().to_str().expect("utf8")) && summary.contains("mode: ro"), "{summary}");
    assert!(read_all(tmp.path()).expect("audit").iter().any(|e| e["event"] == "expansion"));
}

/// `workcell gc` removes the broker directory of a run that was killed (old, its socket
/// refuses connections) and keeps a live run's and a young one's.
#[test]
fn gc_removes_only_dead_old_broker_directories() {
    let base = std::env::temp_dir();
    let make = |tag: &str, age_secs: u64| {
        let dir = tempfile::Builder::new().prefix(&format!("workcell-broker-test-{tag}-")).tempdir_in(&base).expect("dir").keep();
        let listener = std::os::unix::net::UnixListener::bind(dir.join(workcell::tools::broker::SOCKET_NAME)).expect("bind");
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(age_secs);
        let since = then.duration_since(std::time::UNIX_EPOCH).expect("time");
        let ts = rustix::fs::Timespec { tv_sec: since.as_secs() as i64, tv_nsec: 0 };
        rustix::fs::utimensat(rustix::fs::CWD, &dir, &rustix::fs::Timestamps { last_access: ts, last_modification: ts }, rustix::fs::AtFlags::empty())
            .expect("backdate");
        (dir, listener)
    };
    let (dead, l) = make("dead", 600);
    drop(l);
    let (young, l2) = make("young", 0);
    drop(l2);
    let (live, _listener) = make("live", 600);
    let removed = workcell::tools::broker::remove_stale_dirs();
    // (Another test's `workcell gc` may have removed it first: gone is what counts.)
    assert!(!dead.exists(), "the dead run's directory must go: {removed:?}");
    assert!(young.exists(), "a directory younger than a minute stays (its run may be starting)");
    assert!(live.exists(), "a live run's directory stays");
    for d in [young, live] {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// `delete_file` on a symlink removes the link itself, wherever it points (outside the
/// sandbox included), and leaves the target; a missing file is "not found", with no prompt.
#[test]
fn delete_file_removes_a_link_not_its_target() {
    let (tmp, service, _broker) = setup(ApprovalMode::Strict);
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(outside.path().join("target.txt"), "host file\n").expect("write");
    std::os::unix::fs::symlink(outside.path().join("target.txt"), tmp.path().join("out/link.txt")).expect("link");
    std::os::unix::fs::symlink("../data/a.txt", tmp.path().join("out/rel.txt")).expect("link");
    for link in ["/out/link.txt", "/out/rel.txt"] {
        let r = service.call("delete_file", serde_json::json!({"path": link})).unwrap_or_else(|e| panic!("{link}: {e}"));
        assert_eq!(r["deleted"], true);
    }
    assert!(std::fs::symlink_metadata(tmp.path().join("out/link.txt")).is_err() && std::fs::symlink_metadata(tmp.path().join("out/rel.txt")).is_err());
    assert_eq!(std::fs::read_to_string(outside.path().join("target.txt")).expect("target"), "host file\n");
    assert_eq!(std::fs::read_to_string(tmp.path().join("data/a.txt")).expect("target"), "alpha beta\n");
    let missing = service.call("delete_file", serde_json::json!({"path": "/out/nothing.txt"})).unwrap_err();
    assert_eq!(missing.kind(), "not_found", "{missing}");
}

/// A request over the broker's 2 MiB limit is answered 413 with a JSON error naming the limit
/// (not a dropped connection), nothing is written, and the broker keeps answering.
/// A 48 MiB body gets the same answer, sent with its length or streamed (chunked, its size
/// unknown until it ends): the broker reads at most its limit, answers, and keeps answering.
#[test]
fn a_48_mib_request_gets_the_same_error_however_it_is_sent() {
    let (tmp, _s, broker) = setup(ApprovalMode::ApproveAll);
    let body = serde_json::json!({"path": "/out/big.txt", "content": "x".repeat(48 << 20)}).to_string();
    let file = tmp.path().join("body.json");
    std::fs::write(&file, body).expect("write");
    for chunked in [false, true] {
        let mut cmd = Command::new("curl");
        cmd.args(["-s", "-o", "-", "-w", "\n%{http_code}", "--unix-socket"]).arg(broker.socket());
        cmd.args(["-H", &format!("Authorization: Bearer {}", broker.token()), "-H", "Content-Type: application/json"]);
        if chunked {
            cmd.args(["-H", "Transfer-Encoding: chunked"]);
        }
        cmd.args(["--data-binary", &format!("@{}", file.display()), "http://workcell/v1/tools/write_file"]);
        let out = cmd.output().expect("curl runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (json, code) = text.rsplit_once('\n').unwrap_or_else(|| panic!("no answer (chunked: {chunked}): {text:?}"));
        assert_eq!(code.trim(), "413", "chunked: {chunked}: {text}");
        let reply: Value = serde_json::from_str(json).unwrap_or(Value::Null);
        assert_eq!(reply["error"]["kind"], "too_large", "{text}");
        assert!(reply["error"]["message"].as_str().unwrap_or("").contains("2097152 bytes"), "{reply}");
    }
    assert!(!tmp.path().join("out/big.txt").exists());
    let (code, _) = curl(&broker.socket(), Some(broker.token()), "/v1/tools/write_file", Some(r#"{"path":"/out/ok.txt","content":"ok"}"#));
    assert_eq!(code, 200);
}

#[test]
fn an_oversized_request_gets_a_clear_error() {
    let (tmp, _s, broker) = setup(ApprovalMode::ApproveAll);
    let body = serde_json::json!({"path": "/out/big.txt", "content": "x".repeat(3 << 20)}).to_string();
    let file = tmp.path().join("body.json");
    std::fs::write(&file, body).expect("write");
    let (code, reply) = curl(&broker.socket(), Some(broker.token()), "/v1/tools/write_file", Some(&format!("@{}", file.display())));
    assert_eq!(code, 413, "{reply}");
    assert_eq!(reply["error"]["kind"], "too_large");
    assert!(reply["error"]["message"].as_str().unwrap_or("").contains("2097152 bytes"), "{reply}");
    assert!(!tmp.path().join("out/big.txt").exists());
    let (code, _) = curl(&broker.socket(), Some(broker.token()), "/v1/tools/write_file", Some(r#"{"path":"/out/ok.txt","content":"ok"}"#));
    assert_eq!(code, 200);
}
