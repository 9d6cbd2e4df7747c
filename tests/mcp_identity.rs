//! `workcell mcp`'s protocol identity, through the official MCP Python SDK (installed by
//! .ci/run): the server's name and version, annotations on every tool as docs/tools.md ("MCP identity")
//! documents them, `shell`'s outputSchema and a structuredContent that validates against it,
//! `encoding: "base64"` round-tripping bytes 0..=255, and tools that cannot work here neither
//! listed nor callable. The tool list's JSON is snapshotted.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod support;

fn project(config: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = tmp.path();
    std::fs::create_dir_all(p.join("data")).expect("mkdir");
    std::fs::create_dir_all(p.join("out")).expect("mkdir");
    std::fs::write(p.join("data/hello.txt"), "hello from the data zone\n").expect("write");
    std::fs::write(p.join("workcell.yaml"), config).expect("write");
    support::give_to_worker(p);
    tmp
}

const ZONES: &str = "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw}\n";

/// Runs tests/mcp_identity.py against a `workcell mcp` in `dir`.
fn identity(dir: &Path, backend: &str, extra: &[&str]) -> Value {
    assert!(support::python_ready(&["mcp", "jsonschema"]), "the mcp Python package (with jsonschema) is required");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_identity.py");
    let out =
        Command::new(support::python()).arg(script).arg(env!("CARGO_BIN_EXE_workcell")).arg(dir).arg(backend).args(extra).output().expect("python client");
    assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("client output is JSON")
}

fn tool<'a>(r: &'a Value, name: &str) -> Option<&'a Value> {
    r["tools"].as_array().expect("tools").iter().find(|t| t["name"] == name)
}

fn hints(r: &Value, name: &str) -> [bool; 4] {
    let a = &tool(r, name).unwrap_or_else(|| panic!("{name} not listed: {}", r["tools"]))["annotations"];
    ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"].map(|h| a[h].as_bool().unwrap_or_else(|| panic!("{name} has no {h}: {a}")))
}

mod body {
    use super::*;

    pub fn identity_annotations_structured_base64(backend: &str) {
        let tmp = project(ZONES);
        let r = identity(tmp.path(), backend, &["--approve-all"]);
        assert_eq!(r["server"]["name"], "workcell");
        assert_eq!(r["server"]["version"], env!("CARGO_PKG_VERSION"));

        // Every listed tool has a title and all four hints, as docs/tools.md documents them.
        let names: Vec<&str> = r["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, ["read_file", "write_file", "edit_file", "delete_file", "list_files", "shell"], "no workers, no dynamic: {names:?}");
        for t in r["tools"].as_array().expect("tools") {
            assert!(t["annotations"]["title"].as_str().is_some_and(|s| !s.is_empty()), "{t}");
        }
        //                         readOnly destructive idempotent openWorld
        assert_eq!(hints(&r, "read_file"), [true, false, true, false]);
        assert_eq!(hints(&r, "list_files"), [true, false, true, false]);
        assert_eq!(hints(&r, "write_file"), [false, true, true, false]);
        assert_eq!(hints(&r, "edit_file"), [false, true, false, false]);
        assert_eq!(hints(&r, "delete_file"), [false, true, true, false]);
        // A writable zone and no network: it may change files, reaches no open world.
        assert_eq!(hints(&r, "shell"), [false, true, false, false]);

        // shell: outputSchema, and structuredContent valid against it; the text stays.
        let schema = &tool(&r, "shell").expect("shell")["outputSchema"];
        assert_eq!(schema["type"], "object", "{schema}");
        for f in ["exit_code", "stdout", "stderr", "timed_out", "stdout_truncated_bytes", "stderr_truncated_bytes"] {
            assert!(schema["properties"].get(f).is_some(), "outputSchema lacks {f}: {schema}");
        }
        let shell = &r["shell"];
        assert_eq!(shell["error"], false, "{shell}");
        assert_eq!(shell["valid"], true, "{shell}");
        assert_eq!(shell["structured"]["exit_code"], 0, "{shell}");
        assert_eq!(shell["structured"]["stdout"], "hello from the data zone\n");
        assert_eq!(shell["structured"]["stdout_truncated_bytes"], 0);
        assert!(shell["text"].as_str().unwrap_or("").contains("hello from the data zone"), "{shell}");
        // Other tools declare no output schema and send none.
        assert!(tool(&r, "read_file").expect("read_file").get("outputSchema").is_none());

        // Bytes 0..=255 there and back, exactly.
        assert_eq!(r["write_b64"]["error"], false, "{}", r["write_b64"]);
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(std::fs::read(tmp.path().join("out/bytes.bin")).expect("written"), all);
        assert_eq!(r["read_b64"]["error"], false, "{}", r["read_b64"]);
        let decoded: Vec<u8> = r["read_b64"]["decoded"].as_array().expect("decoded").iter().map(|b| b.as_u64().expect("byte") as u8).collect();
        assert_eq!(decoded, all);
        assert_eq!(r["read_b64"]["body"]["total_bytes"], 256);
        assert_eq!(r["read_b64"]["body"]["truncated"], false);
        // A window by byte offset: 250..254, and where to go on.
        let w: Value = serde_json::from_str(r["read_b64_window"]["text"].as_str().expect("text")).expect("json");
        assert_eq!(w["content"], "+vv8/Q==", "{w}");
        assert_eq!((w["truncated"].as_bool(), w["next_offset"].as_u64()), (Some(true), Some(254)), "{w}");
        // Bad base64 is refused, naming the encoding; nothing is written.
        let bad = r["write_bad_b64"]["text"].as_str().unwrap_or("");
        assert!(r["write_bad_b64"]["error"] == true && bad.contains("not valid base64"), "{bad}");
        assert!(!tmp.path().join("out/bad.bin").exists());
        // Reading it as text says to use base64.
        let t = r["read_text"]["text"].as_str().unwrap_or("");
        assert!(r["read_text"]["error"] == true && t.contains("encoding \"base64\""), "{t}");

        // Tools that are not listed are refused by name, saying why and what is listed.
        let cw = r["call_call_worker"]["text"].as_str().unwrap_or("");
        assert!(r["call_call_worker"]["error"] == true && cw.contains("'call_worker' is not available") && cw.contains("defines no workers"), "{cw}");
        let ra = r["call_request_access"]["text"].as_str().unwrap_or("");
        assert!(r["call_request_access"]["error"] == true && ra.contains("sandbox.dynamic: true") && ra.contains("Tools: read_file"), "{ra}");
        assert!(r["call_no_such_tool"]["text"].as_str().unwrap_or("").contains("there is no tool 'no_such_tool'"));
        // ...and audited as such.
        let log = std::fs::read_to_string(tmp.path().join(".workcell/audit.jsonl")).expect("audit log");
        let unavailable =
            log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|e| e["event"] == "tool_call" && e["kind"] == "unavailable").count();
        assert_eq!(unavailable, 3, "{log}");
    }

    /// With workers, dynamic expansion and the network on, call_worker and request_access
    /// are listed and shell reaches the open world; a read-only sandbox lists no write tools.
    pub fn identity_listing_follows_the_configuration(backend: &str) {
        let tmp = project("sandbox:\n  dynamic: true\n  network: true\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw}\n");
        support::write_project(
            tmp.path(),
            &std::fs::read_to_string(tmp.path().join("workcell.yaml")).expect("config"),
            &[
                ("helper", "---\ncommand: [true]\n---\n"),
                ("locked", "---\nworkers: [helper, locked]\ntool_rules: {shell: {allowed: false}}\nsandbox:\n  zones:\n    - {name: data, mode: ro}\ncommand: [true]\n---\n"),
                ("alone", "---\nworkers: [alone, nobody]\nsandbox:\n  zones:\n    - {name: out, mode: rw}\ncommand: [true]\n---\n"),
            ],
        );
        let r = identity(tmp.path(), backend, &["--approve-all"]);
        let names: Vec<&str> = r["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
        assert!(names.contains(&"call_worker") && names.contains(&"request_access"), "{names:?}");
        assert_eq!(hints(&r, "shell"), [false, true, false, true]);
        assert_eq!(hints(&r, "request_access"), [false, false, false, true]);
        // --strict: nothing request_access asks for can ever be granted.
        let r = identity(tmp.path(), backend, &["--strict"]);
        let names: Vec<&str> = r["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
        assert!(!names.contains(&"request_access") && !names.contains(&"call_worker"), "{names:?}");
        assert!(r["call_request_access"]["text"].as_str().unwrap_or("").contains("--strict"), "{}", r["call_request_access"]);

        // A worker's own rules: shell disabled; it may call helper (not itself). Its zones are
        // read-only, but request_access could grant a writable one: the write tools stay.
        let r = identity(tmp.path(), backend, &["--approve-all", "--worker", "locked"]);
        let names: Vec<&str> = r["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, ["read_file", "write_file", "edit_file", "delete_file", "list_files", "call_worker", "request_access"]);
        let r = identity(tmp.path(), backend, &["--strict", "--worker", "locked"]);
        let names: Vec<&str> = r["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, ["read_file", "list_files"]);
        // Only itself and a worker the project lacks: call_worker could only refuse.
        let r = identity(tmp.path(), backend, &["--approve-all", "--worker", "alone"]);
        let names: Vec<&str> = r["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
        assert!(!names.contains(&"call_worker") && names.contains(&"write_file"), "{names:?}");
        let cw = r["call_call_worker"]["text"].as_str().unwrap_or("");
        assert!(cw.contains("outside this call chain"), "{cw}");

        let ro = project("sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n");
        let r = identity(ro.path(), backend, &["--approve-all"]);
        let names: Vec<&str> = r["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, ["read_file", "list_files", "shell"]);
        // No writable zone, no network: shell only reads.
        assert_eq!(hints(&r, "shell"), [true, false, false, false]);
    }
}

/// `encoding: "base64"` is no way around a zone's `max_file_bytes`: a write whose decoded
/// bytes exceed it, and a read of a larger file (even a small window of it), are refused.
#[test]
fn base64_keeps_the_size_limit() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let tmp = project("sandbox:\n  zones:\n    out: {path: ./out, mode: rw, max_file_bytes: 100}\n");
    std::fs::write(tmp.path().join("out/big.bin"), [7u8; 101]).expect("write");
    support::give_to_worker(tmp.path());
    assert!(support::python_ready(&["mcp"]), "the mcp Python package is required");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_calls.py");
    let calls = serde_json::json!([
        // 135 base64 digits and one pad: 101 bytes, one over the limit.
        ["write_file", {"path": "/out/new.bin", "content": "A".repeat(135) + "=", "encoding": "base64"}],
        ["read_file", {"path": "/out/big.bin", "encoding": "base64", "max_chars": 10}],
        ["write_file", {"path": "/out/ok.bin", "content": "AAEC", "encoding": "base64"}],
    ]);
    let launch = serde_json::json!([env!("CARGO_BIN_EXE_workcell")]).to_string();
    let out = Command::new(support::python()).arg(script).arg(launch).arg(tmp.path()).arg("bwrap").arg(calls.to_string()).output().expect("python client");
    assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
    let r: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
    for (i, call) in r.iter().take(2).enumerate() {
        let t = call["text"].as_str().unwrap_or("");
        assert!(call["error"] == true && t.contains("max_file_bytes"), "call {i}: {t}");
    }
    assert!(!tmp.path().join("out/new.bin").exists());
    assert_eq!(r[2]["error"], false, "{}", r[2]);
    assert_eq!(std::fs::read(tmp.path().join("out/ok.bin")).expect("written"), [0, 1, 2]);
}

support::backend_suite!(bwrap, "bwrap", [identity_annotations_structured_base64, identity_listing_follows_the_configuration]);
support::backend_suite!(docker, "docker", [identity_annotations_structured_base64]);

/// The full tool list (every tool, for a session with a writable zone and no network), as
/// a client receives it.
#[test]
fn tool_list_json() {
    let tools = workcell::tools::mcp::tools(workcell::tools::service::Facts { network: false, writable: true });
    insta::assert_json_snapshot!(tools);
}
