//! Approvals of `workcell mcp` through MCP elicitation, driven by the official MCP Python SDK
//! as a client with an elicitation callback (tests/mcp_elicit.py): an accepted answer lets a
//! write to an `ask` zone through, a declined, cancelled, denied or malformed one refuses it
//! and says so; "for the session" is asked once; a client without elicitation, and
//! `--no-elicit`, fall back to the terminal (none here: refused as before); `--approve shell`
//! runs a command that would ask without asking while writes are still asked; a child
//! worker's own requests go through the same client; the question is escaped.
//!
//! Every client runs in a session of its own (`setsid`): no controlling terminal, whatever
//! the test runner has, so "no terminal" is what the server sees.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

mod support;

const CURL: &str = r#"curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json'"#;

/// A project with a read-only `data` zone and an `out` zone whose writes ask (the default),
/// a worker `child` that writes to /out through its broker, and a worker `w` with a deny rule.
fn project() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = tmp.path();
    std::fs::create_dir_all(p.join("data")).expect("mkdir");
    std::fs::create_dir_all(p.join("out")).expect("mkdir");
    std::fs::write(p.join("data/hello.txt"), "hello\n").expect("write");
    let script = format!(r#"{CURL} --data-binary '{{"path":"/out/child.txt","content":"from the child"}}' http://workcell/v1/tools/write_file; echo"#);
    let child = format!(
        "---\nsandbox:\n  zones:\n    - {{name: out, mode: rw}}\ncommand: {}\n---\nWrite.\n",
        serde_json::to_string(&["sh", "-c", &script]).expect("json")
    );
    let w =
        "---\nsandbox:\n  zones:\n    - {name: out, mode: rw}\n    - {name: data, mode: ro}\nshell_rules:\n  - {pattern: rm, allowed: false}\n---\nA worker.\n";
    support::write_project(
        p,
        "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw, approval: {write: ask, delete: ask}}\n",
        &[("child", &child), ("w", w)],
    );
    support::give_to_worker(p);
    tmp
}

/// Runs the client against `workcell mcp --backend BACKEND EXTRA…` in `dir`; `answers` as
/// tests/mcp_elicit.py takes them (`null`: a client without elicitation).
fn session(dir: &Path, backend: &str, extra: &[&str], answers: Value, calls: Value) -> Value {
    assert!(support::python_ready(&["mcp"]), "the mcp Python package is required");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_elicit.py");
    let mut cmd = Command::new(support::python());
    cmd.arg(script).arg(env!("CARGO_BIN_EXE_workcell")).arg(dir).arg(backend).arg(json!(extra).to_string()).arg(answers.to_string()).arg(calls.to_string());
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(std::io::Error::from));
    }
    let out = cmd.output().expect("run the python client");
    assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("client output is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn call(r: &Value, i: usize) -> (bool, &str) {
    let c = &r["calls"][i];
    (c["error"].as_bool().expect("error flag"), c["text"].as_str().expect("text"))
}

fn asked(r: &Value) -> Vec<&str> {
    r["asked"].as_array().expect("asked").iter().map(|a| a["message"].as_str().expect("message")).collect()
}

fn write(path: &str) -> Value {
    json!(["write_file", {"path": path, "content": "x"}])
}

/// The decisions in the audit log, as `by` or the denial's reason.
fn decisions(dir: &Path) -> Vec<Value> {
    let log = std::fs::read_to_string(dir.join(".workcell/audit.jsonl")).expect("audit log");
    log.lines().map(|l| serde_json::from_str::<Value>(l).expect("json")).filter(|e| e["event"] == "decision").map(|e| e["decision"].clone()).collect()
}

mod body {
    use super::*;

    /// Allowed once: the write happens, and the next one is asked again; the question is
    /// the terminal's, the form one required choice of three.
    pub fn accepted_once_writes(backend: &str) {
        let tmp = project();
        let r = session(tmp.path(), backend, &[], json!(["allow_once", "allow_once"]), json!([write("/out/a.txt"), write("/out/b.txt")]));
        assert!(!call(&r, 0).0 && !call(&r, 1).0, "{r}");
        assert_eq!(std::fs::read_to_string(tmp.path().join("out/a.txt")).expect("written"), "x");
        assert!(tmp.path().join("out/b.txt").exists());
        let q = asked(&r);
        assert_eq!(q.len(), 2, "once covers one request: {q:?}");
        assert_eq!(q[0], "workcell: allow write to /out/a.txt? (for the session: covers /out)");
        let schema = &r["asked"][0]["schema"];
        assert_eq!(schema["required"], json!(["answer"]), "{schema}");
        assert_eq!(schema["properties"]["answer"]["enum"], json!(["allow_once", "allow_for_session", "deny"]), "{schema}");
        assert!(decisions(tmp.path()).iter().all(|d| d["by"] == "client_once"), "{:?}", decisions(tmp.path()));
    }

    /// Every answer but a yes refuses, says how, and writes nothing.
    pub fn refusals_write_nothing(backend: &str) {
        let tmp = project();
        let calls = json!([write("/out/1.txt"), write("/out/2.txt"), write("/out/3.txt"), write("/out/4.txt"), write("/out/5.txt")]);
        let r = session(tmp.path(), backend, &[], json!(["deny", "decline", "cancel", "bogus", "error"]), calls);
        assert_eq!(asked(&r).len(), 5, "{r}");
        let expect = ["the user denied (through the MCP client): write to /out/1.txt", "declined", "cancelled", "was not one of", "the exchange failed"];
        for (i, e) in expect.iter().enumerate() {
            let (error, text) = call(&r, i);
            assert!(error && text.starts_with("[denied]") && text.contains(e), "call {i}: {text}");
        }
        assert_eq!(std::fs::read_dir(tmp.path().join("out")).expect("out").count(), 0, "nothing was written");
    }

    /// "For the session" is asked once: later writes in the directory and below are not.
    pub fn session_answer_is_remembered(backend: &str) {
        let tmp = project();
        let calls = json!([write("/out/s1.txt"), write("/out/s2.txt"), write("/out/sub/s3.txt"), ["delete_file", {"path": "/out/s1.txt"}]]);
        let r = session(tmp.path(), backend, &[], json!(["allow_for_session", "deny"]), calls);
        for i in 0..3 {
            assert!(!call(&r, i).0, "{r}");
        }
        // A delete is another action: asked, and here denied.
        let (error, text) = call(&r, 3);
        assert!(error && text.contains("delete /out/s1.txt"), "{text}");
        assert_eq!(
            asked(&r),
            ["workcell: allow write to /out/s1.txt? (for the session: covers /out)", "workcell: allow delete /out/s1.txt? (for the session: covers /out)"]
        );
        assert!(tmp.path().join("out/sub/s3.txt").exists() && tmp.path().join("out/s1.txt").exists());
        let by: Vec<Value> = decisions(tmp.path()).iter().map(|d| d["by"].clone()).collect();
        assert_eq!(by, [json!("client_session"), json!("session"), json!("session"), Value::Null], "{by:?}");
    }
}

/// A client without the elicitation capability and no terminal: refused as before, naming
/// the flags; tools that always need consent are not listed.
#[test]
fn without_elicitation_refused_as_before() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let tmp = project();
    let r = session(tmp.path(), "bwrap", &[], Value::Null, json!([write("/out/a.txt")]));
    let (error, text) = call(&r, 0);
    assert!(error && text.contains("no terminal to ask on") && text.contains("--approve-all"), "{text}");
    assert!(!tmp.path().join("out/a.txt").exists());
    assert!(!r["tools"].as_array().expect("tools").contains(&json!("call_worker")), "{}", r["tools"]);
}

/// `--no-elicit`: an elicitation-capable client is never asked; no terminal, so refused.
#[test]
fn no_elicit_keeps_approvals_on_the_terminal() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let tmp = project();
    let r = session(tmp.path(), "bwrap", &["--no-elicit"], json!(["allow_once"]), json!([write("/out/a.txt")]));
    assert!(asked(&r).is_empty(), "{r}");
    let (error, text) = call(&r, 0);
    assert!(error && text.contains("no terminal to ask on"), "{text}");
    assert!(!tmp.path().join("out/a.txt").exists());
    assert!(!r["tools"].as_array().expect("tools").contains(&json!("call_worker")), "{}", r["tools"]);
}

/// `--approve shell`: a command that would ask runs without asking; a write to the `ask`
/// zone is still asked (and here denied); a deny rule still denies.
#[test]
fn approve_shell_preset_covers_commands_only() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let tmp = project();
    let calls = json!([["shell", {"command": "cat /data/hello.txt"}], write("/out/a.txt"), ["shell", {"command": "rm /out/x"}]]);
    let r = session(tmp.path(), "bwrap", &["--worker", "w", "--approve", "shell"], json!(["deny"]), calls);
    let (error, text) = call(&r, 0);
    assert!(!error && text.contains("hello") && text.contains("\"exit_code\": 0"), "{text}");
    let (error, text) = call(&r, 1);
    assert!(error && text.contains("the user denied"), "{text}");
    let (error, text) = call(&r, 2);
    assert!(error && text.contains("rule 'rm' denies it"), "{text}");
    assert_eq!(asked(&r), ["workcell: allow write to /out/a.txt? (for the session: covers /out)"], "only the write was asked");
    assert!(!tmp.path().join("out/a.txt").exists());
    let by: Vec<Value> = decisions(tmp.path()).iter().map(|d| d["by"].clone()).collect();
    assert_eq!(by[0], "preset_shell", "{by:?}");

    // Without a client to ask, the preset still runs the command, and the write is refused.
    let r = session(tmp.path(), "bwrap", &["--approve", "shell"], Value::Null, json!([["shell", {"command": "cat /data/hello.txt"}], write("/out/a.txt")]));
    assert!(!call(&r, 0).0, "{r}");
    assert!(call(&r, 1).0 && call(&r, 1).1.contains("no terminal to ask on"), "{r}");
    assert!(!tmp.path().join("out/a.txt").exists());
}

/// Without the preset, a shell command is asked through the client too, runs inside the
/// backend once allowed, and a refusal without a client names the preset.
pub fn shell_commands_are_elicited(backend: &str) {
    let tmp = project();
    let r = session(tmp.path(), backend, &[], json!(["allow_once"]), json!([["shell", {"command": "cat /data/hello.txt"}]]));
    assert_eq!(asked(&r), ["workcell: allow run cat /data/hello.txt? (for the session: covers cat /data/hello.txt)"]);
    assert!(!call(&r, 0).0 && call(&r, 0).1.contains("hello"), "{r}");
    let r = session(tmp.path(), backend, &[], Value::Null, json!([["shell", {"command": "cat /data/hello.txt"}]]));
    assert!(call(&r, 0).0 && call(&r, 0).1.contains("--approve shell approves shell commands only"), "{r}");
}

/// A child worker's own requests, made inside `call_worker`, go through the same client:
/// the delegation is asked, then the child's write through its broker.
pub fn a_child_workers_requests_are_elicited(backend: &str) {
    let tmp = project();
    let r = session(tmp.path(), backend, &[], json!(["allow_once", "allow_once"]), json!([["call_worker", {"name": "child", "input": "go"}]]));
    assert!(r["tools"].as_array().expect("tools").contains(&json!("call_worker")), "elicitation can approve a delegation: {}", r["tools"]);
    let (error, text) = call(&r, 0);
    assert!(!error, "{text}");
    let q = asked(&r);
    assert_eq!(q.len(), 2, "{q:?}");
    assert!(q[0].starts_with("workcell: allow call worker child"), "{q:?}");
    assert_eq!(q[1], "workcell: allow write to /out/child.txt? (for the session: covers /out)");
    assert_eq!(std::fs::read_to_string(tmp.path().join("out/child.txt")).expect("the child wrote"), "from the child");
}

/// A shell command's network `ask` (its egress proxy's question) goes to the client too:
/// allowed, the command reaches the server; denied, the proxy refuses it.
#[test]
fn a_commands_network_ask_is_elicited() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let web = support::servers::web_server("127.0.0.2");
    let tmp = project();
    let config = "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n  network:\n    allow: []\n    ask: true\n    hosts: {asked.test: 127.0.0.2}\n";
    std::fs::write(tmp.path().join("workcell.yaml"), config).expect("write");
    let url = format!("http://asked.test:{}/elicited", web.port());
    let curl = json!(["shell", {"command": format!("curl -s -S --max-time 60 {url}")}]);
    let r = session(tmp.path(), "bwrap", &["--approve", "shell"], json!(["allow_once", "deny"]), json!([curl, curl]));
    let destination = format!("asked.test:{}", web.port());
    let question = format!("workcell: allow connect to {destination}? (for the session: covers {destination})");
    assert_eq!(asked(&r), [question.as_str(), question.as_str()], "{r}");
    let (error, text) = call(&r, 0);
    assert!(!error && text.contains("hello /elicited"), "{text}");
    let (_, text) = call(&r, 1);
    assert!(!text.contains("hello /elicited") && text.contains("the user denied (through the MCP client): connect to"), "{text}");
}

/// What the client shows is escaped: a right-to-left override and a backslash in a path
/// arrive as visible escapes; a path with ESC is refused before anybody is asked.
#[test]
fn the_question_is_escaped() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let tmp = project();
    let calls = json!([write("/out/x\u{1b}[2K\rworkcell: allow read /out/ok.txt"), write("/out/re\\port\u{202e}txt.exe")]);
    let r = session(tmp.path(), "bwrap", &[], json!(["deny"]), calls);
    let (error, text) = call(&r, 0);
    assert!(error && text.contains("control character U+001B"), "{text}");
    assert_eq!(asked(&r), [r"workcell: allow write to /out/re\\port\u{202e}txt.exe? (for the session: covers /out)"]);
    assert!(!r["asked"].to_string().contains('\u{202e}') && !r["asked"].to_string().contains("\\u001b"), "{}", r["asked"]);
}

#[test]
fn accepted_once_writes() {
    if support::backend_ready("bwrap") {
        body::accepted_once_writes("bwrap")
    }
}

#[test]
fn refusals_write_nothing() {
    if support::backend_ready("bwrap") {
        body::refusals_write_nothing("bwrap")
    }
}

#[test]
fn session_answer_is_remembered() {
    if support::backend_ready("bwrap") {
        body::session_answer_is_remembered("bwrap")
    }
}

/// What runs inside the backend: a command approved through the client, and a child worker
/// whose broker requests are.
macro_rules! backend_tests {
    ($($backend:ident),*) => {$(
        mod $backend {
            fn ready() -> bool {
                super::support::backend_ready(stringify!($backend))
            }
            #[test]
            fn shell_commands_are_elicited() {
                if ready() { super::shell_commands_are_elicited(stringify!($backend)) }
            }
            #[test]
            fn a_child_workers_requests_are_elicited() {
                if ready() { super::a_child_workers_requests_are_elicited(stringify!($backend)) }
            }
        }
    )*};
}

backend_tests!(bwrap, docker);
