//! `workcell audit`: local times, aligned columns, one line per event, run durations, the
//! filters, `--json` as logged, and no control character from the log on the terminal.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

/// 2026-11-27 10:00:00 UTC.
const T: f64 = 1_795_773_600.0;

/// The events of two runs (one of worker `reader`, one ad hoc) two days apart, and one of
/// a third run a few seconds ago; a logged path carries control and layout characters.
fn events() -> Vec<Value> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    vec![
        json!({"ts": T - 2.0 * 86400.0, "run_id": "old1", "event": "run_start", "worker": null, "chain": [], "backend": "docker", "command": ["sh", "-c", "ls /"], "network": "off"}),
        json!({"ts": T - 2.0 * 86400.0 + 3.0, "run_id": "old1", "event": "run_end", "worker": null, "exit_code": 0, "error": null}),
        json!({"ts": T + 0.4, "run_id": "r-reader-1", "event": "run_start", "worker": "reader", "chain": ["reader"], "backend": "bwrap", "command": ["ls", "/data"], "network": "off"}),
        json!({"ts": T + 1.0, "run_id": "r-reader-1", "event": "tool_call", "tool": "read_file", "args": {"path": "/data/a\u{1b}[2K\u{7}\u{9b}31m\u{202e}b"}, "ok": true}),
        json!({"ts": T + 2.0, "run_id": "r-reader-1", "event": "decision", "action": "write", "subject": "/out/x", "scope": "/out", "decision": {"outcome": "approved", "by": "user_once"}}),
        json!({"ts": T + 3.0, "run_id": "r-reader-1", "event": "decision", "action": "shell", "subject": "rm -r /", "scope": "rm", "decision": {"outcome": "denied", "reason": "the user denied: rm -r /"}}),
        json!({"ts": T + 4.0, "run_id": "r-reader-1", "event": "tool_call", "tool": "shell", "args": {"command": "make test"}, "ok": true}),
        json!({"ts": T + 125.4, "run_id": "r-reader-1", "event": "run_end", "worker": "reader", "exit_code": 3, "error": null}),
        json!({"ts": now - 5.0, "run_id": "recent", "event": "run_start", "worker": "writer", "chain": [], "backend": "none", "command": ["true"], "network": "on"}),
    ]
}

fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("data")).unwrap();
    fs::create_dir_all(dir.join(".workcell")).unwrap();
    fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n").unwrap();
    let log: String = events().iter().map(|e| format!("{e}\n")).collect();
    fs::write(dir.join(".workcell/audit.jsonl"), log).unwrap();
    (tmp, dir)
}

fn audit_in(dir: &Path, tz: &str, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .arg("audit")
        .args(args)
        .current_dir(dir)
        .env("TZ", tz)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!("audit {args:?} -> {:?}\n{}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    out
}

/// The text lines of `workcell audit ARGS` in UTC.
fn lines(dir: &Path, args: &[&str]) -> Vec<String> {
    let out = audit_in(dir, "UTC", args);
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

fn runs_of(lines: &[String]) -> Vec<String> {
    lines.iter().map(|l| l.split_whitespace().nth(2).unwrap_or("").to_string()).collect()
}

#[test]
fn times_are_local_iso_dates() {
    let (_t, dir) = project();
    let utc = lines(&dir, &["--run", "r-reader-1"]);
    assert!(utc[0].starts_with("2026-11-27 10:00:00  r-reader-1"), "{utc:#?}");
    let tokyo = String::from_utf8(audit_in(&dir, "Asia/Tokyo", &["--run", "r-reader-1"]).stdout).unwrap();
    assert!(tokyo.starts_with("2026-11-27 19:00:00  r-reader-1"), "{tokyo}");
    // No epoch seconds left anywhere.
    assert!(!utc.iter().any(|l| l.contains("17957")), "{utc:#?}");
}

#[test]
fn one_aligned_readable_line_per_event() {
    let (_t, dir) = project();
    let all = lines(&dir, &[]);
    assert_eq!(all.len(), events().len(), "{all:#?}");
    // The kind column starts at the same place on every line, and so does what follows it.
    let kind_at: Vec<usize> = all.iter().zip(events()).map(|(l, e)| l.find(e["event"].as_str().unwrap()).unwrap()).collect();
    assert!(kind_at.iter().all(|c| *c == kind_at[0]), "{all:#?}");
    let text_at = kind_at[0] + "tool_call".len() + 2;
    assert!(all.iter().all(|l| l.as_bytes()[text_at - 1] == b' ' && l.as_bytes()[text_at] != b' '), "{all:#?}");
    let reader: Vec<&String> = all.iter().filter(|l| l.contains("r-reader-1")).collect();
    assert!(reader[0].ends_with("  run_start  reader on bwrap: ls /data  network off"), "{}", reader[0]);
    assert!(reader[2].ends_with("write /out/x  approved by person (once)"), "{}", reader[2]);
    assert!(reader[3].ends_with("shell rm -r /  denied: the user denied: rm -r /"), "{}", reader[3]);
    assert!(reader[4].ends_with("shell make test  ok"), "{}", reader[4]);
    assert!(!all.iter().any(|l| l.contains("{\"") || l.contains("\":")), "no JSON left: {all:#?}");
}

#[test]
fn run_end_says_how_long_the_run_took() {
    let (_t, dir) = project();
    let ends = lines(&dir, &["--event", "run_end"]);
    assert_eq!(ends.len(), 2, "{ends:#?}");
    assert!(ends[0].ends_with("(ad hoc): exit 0 after 3.0s"), "{}", ends[0]);
    assert!(ends[1].ends_with("reader: exit 3 after 2m 05s"), "{}", ends[1]);
}

#[test]
fn filters() {
    let (_t, dir) = project();
    assert_eq!(runs_of(&lines(&dir, &["--run", "old1"])), ["old1", "old1"]);
    // A worker's runs: every event of them, not only those that name the worker.
    assert_eq!(lines(&dir, &["--worker", "reader"]).len(), 6);
    assert!(lines(&dir, &["--worker", "nobody"]).is_empty());
    let kinds = lines(&dir, &["--event", "decision", "--event", "run_start"]);
    assert_eq!(kinds.len(), 5, "{kinds:#?}");
    assert!(kinds.iter().all(|l| l.contains("decision") || l.contains("run_start")), "{kinds:#?}");
    assert_eq!(runs_of(&lines(&dir, &["--tail", "2"])), ["r-reader-1", "recent"]);
    assert_eq!(runs_of(&lines(&dir, &["--worker", "reader", "--tail", "1"])), ["r-reader-1"]);
    assert_eq!(runs_of(&lines(&dir, &["--since", "1h"])), ["recent"]);
    assert_eq!(lines(&dir, &["--since", "2026-11-26"]).len(), 7);
    assert_eq!(lines(&dir, &["--since", "2026-11-27 10:00:02"]).len(), 5);
    assert_eq!(lines(&dir, &["--since", "2026-11-27T11:00:00+01:00", "--event", "run_start"]).len(), 2);
    let bad = audit_in(&dir, "UTC", &["--since", "last tuesday"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("use a duration"), "{}", String::from_utf8_lossy(&bad.stderr));
}

#[test]
fn json_lines_are_the_logged_events() {
    let (_t, dir) = project();
    let logged: Vec<Value> = fs::read_to_string(dir.join(".workcell/audit.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let out = audit_in(&dir, "UTC", &["--json"]);
    let got: Vec<Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(got, logged);
    let out = audit_in(&dir, "UTC", &["--json", "--worker", "reader", "--event", "run_end"]);
    let got: Vec<Value> = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(got, vec![logged[7].clone()]);
}

#[test]
fn no_control_character_from_the_log_reaches_the_terminal() {
    let (_t, dir) = project();
    for args in [&[][..], &["--json"], &["--event", "tool_call"]] {
        let out = audit_in(&dir, "UTC", args);
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("read_file") || text.contains("\"read_file\""), "{text}");
        let bad: Vec<char> = text.chars().filter(|c| *c != '\n' && (c.is_control() || *c == '\u{202e}')).collect();
        assert!(bad.is_empty(), "{args:?}: {bad:?} in {text}");
    }
    let line = lines(&dir, &["--event", "tool_call"]).remove(0);
    assert!(line.ends_with("  tool_call  read_file /data/a\\e[2K\\x07\\x9b31m\\u{202e}b  ok"), "{line}");
}
