//! `workcell mcp` driven by the official MCP Python SDK (installed by `bash .ci/test`):
//! initialise, list tools, read/write/list within zones, a refused traversal, and a shell
//! command that runs inside the bwrap sandbox. Audit lines are asserted for each.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod support;

fn project() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let p = tmp.path();
    std::fs::create_dir_all(p.join("data")).expect("mkdir");
    std::fs::create_dir_all(p.join("out")).expect("mkdir");
    // As root the worker (and the tools acting for it) is nobody: `out` is its.
    if rustix::process::geteuid().is_root() {
        rustix::fs::chown(p.join("out"), Some(rustix::fs::Uid::from_raw(65534)), Some(rustix::fs::Gid::from_raw(65534))).expect("chown");
    }
    std::fs::write(p.join("data/hello.txt"), "hello from the data zone\n").expect("write");
    std::fs::write(p.join("workcell.yaml"), "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw}\n").expect("write");
    // The tools act as the worker (the project's owner; as root, the test worker): it
    // writes `out/` like the worker's own commands would.
    support::give_to_worker(p);
    tmp
}

#[test]
fn mcp_python_sdk_drives_the_sandboxed_tools() {
    if !support::python_ready(&["mcp"]) {
        return;
    }
    let tmp = project();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let out =
        Command::new(support::python()).arg(script).arg(env!("CARGO_BIN_EXE_workcell")).arg(tmp.path()).arg("bwrap").output().expect("run the python client");
    assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).expect("client output is JSON");

    let tools: Vec<&str> = r["tools"].as_array().expect("tools").iter().filter_map(Value::as_str).collect();
    for t in ["read_file", "write_file", "edit_file", "delete_file", "list_files", "shell"] {
        assert!(tools.contains(&t), "missing tool {t}: {tools:?}");
    }
    // No workers and no dynamic expansion: those tools could only refuse, so are not listed
    // (tests/mcp_identity.rs covers the listing).
    for t in ["call_worker", "request_access"] {
        assert!(!tools.contains(&t), "{t} listed though it cannot work here: {tools:?}");
    }
    assert_eq!(r["list_root"]["error"], false);
    assert!(r["list_root"]["text"].as_str().unwrap_or("").contains("/data/"));
    assert_eq!(r["read"]["error"], false);
    assert!(r["read"]["text"].as_str().unwrap_or("").contains("hello from the data zone"));
    assert_eq!(r["write"]["error"], false);
    assert_eq!(std::fs::read_to_string(tmp.path().join("out/from-mcp.txt")).expect("written"), "written via MCP\n");
    assert_eq!(r["write_ro"]["error"], true);
    assert!(r["write_ro"]["text"].as_str().unwrap_or("").contains("read-only"), "{}", r["write_ro"]);
    assert!(!tmp.path().join("data/nope.txt").exists());
    let trav = r["traversal"]["text"].as_str().unwrap_or("");
    assert_eq!(r["traversal"]["error"], true);
    assert!(trav.contains("outside the sandbox") && trav.contains("Readable paths: /data, /out"), "{trav}");
    assert!(!trav.contains(tmp.path().to_str().expect("utf8")), "refusals never show host paths: {trav}");
    assert!(r["list_data"]["text"].as_str().unwrap_or("").contains("/data/hello.txt"));
    // The shell runs inside bwrap: it sees the zone at /data, and not the host's /root.
    let cat = r["shell_cat"]["text"].as_str().unwrap_or("");
    assert!(cat.contains("hello from the data zone") && cat.contains("\"exit_code\": 0"), "{cat}");
    let outside = r["shell_outside"]["text"].as_str().unwrap_or("");
    assert!(outside.contains("No such file or directory") && !outside.contains("\"exit_code\": 0"), "{outside}");
    // Shell syntax that does not parse is refused, saying so.
    let meta = r["shell_meta"]["text"].as_str().unwrap_or("");
    assert!(meta.contains("cannot be parsed as a shell command line"), "{meta}");

    // Every call is in the audit log, with its outcome.
    let log = std::fs::read_to_string(tmp.path().join(".workcell/audit.jsonl")).expect("audit log");
    let events: Vec<Value> = log.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    let calls: Vec<&Value> = events.iter().filter(|e| e["event"] == "tool_call").collect();
    assert_eq!(calls.len(), 9, "{log}");
    assert!(calls.iter().any(|e| e["tool"] == "read_file" && e["ok"] == false && e["kind"] == "outside_sandbox"));
    assert!(calls.iter().any(|e| e["tool"] == "write_file" && e["ok"] == true && e["args"]["content"] == "<16 bytes>"));
    assert!(calls.iter().any(|e| e["tool"] == "shell" && e["ok"] == false && e["kind"] == "refused"));
    assert!(events.iter().any(|e| e["event"] == "session_start") && events.iter().any(|e| e["event"] == "session_end"));
}
