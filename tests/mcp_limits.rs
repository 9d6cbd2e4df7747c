//! The size limits of `workcell mcp`, spoken to as raw JSON-RPC lines on its stdin (issue 36,
//! finding 6): a message over the transport's 16 MiB limit is answered with a JSON-RPC error
//! naming the limit (with the request's `id` when it can be found, else `id: null`), its bytes
//! are skipped without being held, and the session answers the next request; a base64
//! `write_file` whose decoded size is over the zone's `max_file_bytes` is refused before its
//! content is decoded.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

mod support;

/// The transport's limit on one message (docs/agents.md, "Limits").
const LIMIT: usize = 16 * 1024 * 1024;
const MIB: usize = 1024 * 1024;

fn project() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    for d in ["out", "ask"] {
        std::fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
    }
    std::fs::write(tmp.path().join("ask/small.txt"), format!("START\n{}", "x".repeat(600_000))).expect("write");
    std::fs::write(
        tmp.path().join("workcell.yaml"),
        "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, max_file_bytes: 1m}\n    ask: {path: ./ask, mode: rw, max_file_bytes: 1m, approval: {write: ask}}\n",
    )
    .expect("config");
    support::give_to_worker(tmp.path());
    tmp
}

/// `workcell mcp` on pipes, initialised. Only file tools are called: no sandbox is started.
struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Mcp {
    fn start(dir: &Path) -> Mcp {
        Mcp::start_with(dir, "--approve-all")
    }

    fn start_with(dir: &Path, approvals: &str) -> Mcp {
        let mut child = Command::new(env!("CARGO_BIN_EXE_workcell"))
            .current_dir(dir)
            .args(["mcp", "--backend", "bwrap", approvals])
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start workcell mcp");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut mcp = Mcp { child, stdin, stdout };
        mcp.line(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "limits", "version": "0"}}}).to_string().as_bytes());
        assert!(mcp.answer()["result"].is_object());
        mcp.line(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        mcp
    }

    /// Writes one message and its newline.
    fn line(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).and_then(|_| stdin.write_all(b"\n")).and_then(|_| stdin.flush()).expect("write to workcell mcp");
    }

    /// The next answer (a message with a result or an error). The order of the answers is
    /// what the tests assert: nothing here waits for a given id, so an unanswered message
    /// shows as the next request's answer coming first, not as a hang.
    fn answer(&mut self) -> Value {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read from workcell mcp");
            assert!(n > 0, "workcell mcp closed its output");
            let msg: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if msg.get("result").is_some() || msg.get("error").is_some() {
                return msg;
            }
        }
    }

    fn ping(&mut self, id: u64) {
        self.line(json!({"jsonrpc": "2.0", "id": id, "method": "ping"}).to_string().as_bytes());
        let pong = self.answer();
        assert_eq!(pong["id"], id, "the session does not answer after the oversized message: {pong}");
        assert!(pong["result"].is_object(), "{pong}");
    }

    /// The peak resident memory of the workcell process (VmHWM), in bytes.
    fn peak_rss(&self) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("status");
        let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).expect("VmHWM").trim().trim_end_matches("kB").trim();
        kb.parse::<usize>().expect("kB") * 1024
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `tools/call` of `write_file` with `content` (base64) as one line, `id` first or last
/// (the Python SDK writes it before the params, the TypeScript SDK after them).
fn write_call(id: Value, content: &str, id_last: bool) -> Vec<u8> {
    let params = json!({"name": "write_file", "arguments": {"path": "/out/big.bin", "content": content, "encoding": "base64"}});
    let (id, params) = (id.to_string(), params.to_string());
    if id_last {
        format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{params},"id":{id}}}"#).into_bytes()
    } else {
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#).into_bytes()
    }
}

fn assert_names_the_limit(answer: &Value) {
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or("");
    assert!(message.contains(&LIMIT.to_string()) && message.contains("16 MiB"), "the error does not name the limit: {answer}");
}

#[test]
fn a_48_mib_write_file_is_answered_with_the_limit_and_the_session_goes_on() {
    let tmp = project();
    let mut mcp = Mcp::start(tmp.path());
    let before = mcp.peak_rss();
    let content = "A".repeat(48 * MIB);
    mcp.line(&write_call(json!(7), &content, false));
    let answer = mcp.answer();
    assert_eq!(answer["id"], 7, "the oversized request is not the one answered: {answer}");
    assert_names_the_limit(&answer);
    mcp.ping(8);
    // The 48 MiB were skipped, not held: workcell's peak is what it had before plus at most
    // one message's worth (the limit), far below the message's size.
    let peak = mcp.peak_rss();
    assert!(peak < before + LIMIT + 8 * MIB && peak < 48 * MIB, "peak RSS {peak} bytes (before: {before}) for a 48 MiB message");
    assert!(!tmp.path().join("out/big.bin").exists());
}

#[test]
fn an_oversized_message_is_answered_whatever_its_id_and_shape() {
    let tmp = project();
    let mut mcp = Mcp::start(tmp.path());
    let content = "A".repeat(LIMIT + MIB);
    // The id after the 17 MiB of params (as the TypeScript SDK writes it), a string id.
    mcp.line(&write_call(json!("req-9"), &content, true));
    let answer = mcp.answer();
    assert_eq!(answer["id"], "req-9", "{answer}");
    assert_names_the_limit(&answer);
    mcp.ping(10);
    // No id to be found (not even JSON): an error with id null, as JSON-RPC answers a
    // request it cannot parse.
    let mut junk = vec![b'x'; LIMIT + 1];
    junk[..2].copy_from_slice(b"{\"");
    mcp.line(&junk);
    let answer = mcp.answer();
    assert!(answer.get("id").is_some_and(Value::is_null), "{answer}");
    assert_names_the_limit(&answer);
    mcp.ping(11);
}

#[test]
fn a_message_at_the_limit_is_read() {
    let tmp = project();
    let mut mcp = Mcp::start(tmp.path());
    // A ping padded with spaces to exactly the limit: a message, not an oversized one.
    let ping = br#"{"jsonrpc":"2.0","id":12,"method":"ping"}"#;
    let mut line = ping.to_vec();
    line.resize(LIMIT, b' ');
    mcp.line(&line);
    let answer = mcp.answer();
    assert_eq!(answer["id"], 12, "{answer}");
    assert!(answer["result"].is_object(), "{answer}");
}

/// Under the message limit but over `max_file_bytes` once decoded: refused on the size the
/// base64 stands for, before any of it is decoded (this content is not even valid base64
/// beyond its first bytes), naming the limit; nothing is written.
#[test]
fn base64_over_max_file_bytes_is_refused_before_decoding() {
    let tmp = project();
    let mut mcp = Mcp::start(tmp.path());
    let mut content = "AAAA".repeat(700_000);
    content.replace_range(8..9, "!");
    mcp.line(&write_call(json!(20), &content, false));
    let answer = mcp.answer();
    assert_eq!(answer["id"], 20, "{answer}");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap_or("");
    assert!(text.starts_with("[too_large]") && text.contains("2100000 bytes") && text.contains("1048576") && text.contains("max_file_bytes"), "{text}");
    // Within the limit and valid, the same call writes the file.
    let small = base64_of(&[7u8; 1000]);
    mcp.line(&write_call(json!(21), &small, false));
    let answer = mcp.answer();
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(std::fs::read(tmp.path().join("out/big.bin")).expect("written"), vec![7u8; 1000]);
}

/// A write or an edit whose result is over `max_file_bytes` is refused as too large before
/// anybody is asked (here `--strict` would deny the ask zone's write): the person is never
/// asked about a write that cannot happen.
#[test]
fn a_write_too_large_is_refused_before_the_approval() {
    let tmp = project();
    let mut mcp = Mcp::start_with(tmp.path(), "--strict");
    let calls = [
        json!({"name": "write_file", "arguments": {"path": "/ask/big.txt", "content": "y".repeat(1_100_000)}}),
        json!({"name": "edit_file", "arguments": {"path": "/ask/small.txt", "old_text": "START", "new_text": "z".repeat(500_000)}}),
    ];
    for (id, params) in (30..).zip(calls) {
        mcp.line(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).to_string().as_bytes());
        let answer = mcp.answer();
        let text = answer["result"]["content"][0]["text"].as_str().unwrap_or("");
        assert!(text.starts_with("[too_large]") && text.contains("1048576") && text.contains("max_file_bytes"), "{text}");
    }
    assert!(!tmp.path().join("ask/big.txt").exists());
    assert_eq!(std::fs::read(tmp.path().join("ask/small.txt")).expect("kept").len(), 600_006);
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
