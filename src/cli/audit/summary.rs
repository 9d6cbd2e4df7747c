//! One readable line per audit event: what happened, without the JSON.
//!
//! Everything here comes from the log, which a worker can influence (paths, commands, and
//! the file itself when the project lies in a writable zone): every string taken from an
//! event passes through [`escape`] before it is part of a line.

use serde_json::{Map, Value};

use crate::term::escape;

/// A string field, escaped; `None` when absent or not a string.
fn text(e: &Value, key: &str) -> Option<String> {
    e.get(key).and_then(Value::as_str).map(|s| escape(s).into_owned())
}

/// Any value as short escaped text: strings bare, arrays comma-joined, the rest as JSON.
pub fn compact(v: &Value) -> String {
    match v {
        Value::String(s) => escape(s).into_owned(),
        Value::Array(a) => a.iter().map(compact).collect::<Vec<_>>().join(", "),
        other => escape(&other.to_string()).into_owned(),
    }
}

/// `k=v` for every field but the envelope (`ts`, `run_id`, `event`) and `skip`.
fn rest(e: &Value, skip: &[&str]) -> String {
    let Some(obj) = e.as_object() else { return String::new() };
    obj.iter()
        .filter(|(k, v)| !["ts", "run_id", "event"].contains(&k.as_str()) && !skip.contains(&k.as_str()) && !v.is_null())
        .map(|(k, v)| format!("{}={}", escape(k), compact(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A command line (an array of words, or one string) as a shell would read it, escaped.
fn command_line(v: Option<&Value>) -> String {
    match v {
        Some(Value::Array(words)) => {
            let words: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
            escape(&shlex::try_join(words.iter().copied()).unwrap_or_else(|_| words.join(" "))).into_owned()
        }
        Some(other) => compact(other),
        None => String::new(),
    }
}

/// The worker's name, or `(ad hoc)` for a run of a command without one.
fn worker(e: &Value) -> String {
    text(e, "worker").unwrap_or_else(|| "(ad hoc)".into())
}

/// `12.3s`, `4m 05s`, `2h 07m`.
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "?".into();
    }
    if secs < 60.0 {
        return format!("{secs:.1}s");
    }
    let s = secs.round() as u64;
    if s < 3600 {
        format!("{}m {:02}s", s / 60, s % 60)
    } else {
        format!("{}h {:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// Who approved (`by` of a decision), in words.
fn approved_by(by: &str) -> String {
    match by {
        "user_once" => "approved by person (once)".into(),
        "user_session" => "approved by person (for the session)".into(),
        "client_once" => "approved by person through the MCP client (once)".into(),
        "client_session" => "approved by person through the MCP client (for the session)".into(),
        "session" => "approved by person (an earlier approval for the session)".into(),
        "preset_shell" => "approved by preset (--approve shell)".into(),
        "approve_all" => "approved by preset (--approve-all)".into(),
        other => format!("approved by {}", escape(other)),
    }
}

/// The argument that says what a tool call was about: its path, command or worker.
fn main_argument(tool: &str, args: &Map<String, Value>) -> String {
    let s = |k: &str| args.get(k).and_then(Value::as_str).map(|v| escape(v).into_owned());
    match tool {
        "shell" => s("command").unwrap_or_default(),
        "call_worker" => s("name").unwrap_or_default(),
        "list_files" => {
            let path = s("path").unwrap_or_else(|| "/".into());
            match s("pattern") {
                Some(p) if p != "*" => format!("{path} {p}"),
                _ => path,
            }
        }
        "request_access" => format!("{} ({})", s("path").unwrap_or_default(), s("mode").unwrap_or_default()),
        _ => s("path").or_else(|| args.values().find_map(Value::as_str).map(|v| escape(v).into_owned())).unwrap_or_default(),
    }
}

/// True for an event that records a refusal: a denied decision or tool call, or a
/// connection the egress rules refused.
pub fn is_refusal(e: &Value) -> bool {
    let at = |pointer: &str| e.pointer(pointer).and_then(Value::as_str);
    match at("/event") {
        Some("decision") => at("/decision/outcome") == Some("denied"),
        Some("tool_call") => e.get("ok").and_then(Value::as_bool) != Some(true) && at("/kind") == Some("denied"),
        Some("egress" | "egress_repeated") => at("/verdict") == Some("refused"),
        _ => false,
    }
}

/// The readable part of one event's line (after its time, run and kind). `run_secs` is the
/// run's duration for a `run_end` whose `run_start` is in the log.
pub fn describe(e: &Value, run_secs: Option<f64>) -> String {
    let event = e.get("event").and_then(Value::as_str).unwrap_or("");
    match event {
        "run_start" => {
            // The chain ends with the run's own worker: those before it called it; a
            // top-level run was called by nobody.
            let callers = e.get("chain").and_then(Value::as_array).map(|c| match (c.split_last(), e.get("worker")) {
                (Some((last, before)), Some(w)) if last == w => before,
                _ => c.as_slice(),
            });
            let chain = callers.filter(|c| !c.is_empty()).map(|c| format!(" (called by {})", c.iter().map(compact).collect::<Vec<_>>().join(" -> ")));
            format!(
                "{} on {}: {}  network {}{}",
                worker(e),
                text(e, "backend").unwrap_or_else(|| "?".into()),
                command_line(e.get("command")),
                e.get("network").map(compact).unwrap_or_else(|| "?".into()),
                chain.unwrap_or_default()
            )
        }
        "run_end" => {
            let how = match (e.get("exit_code").and_then(Value::as_i64), text(e, "error")) {
                (_, Some(err)) => format!("failed: {err}"),
                (Some(code), None) => format!("exit {code}"),
                (None, None) => "ended".into(),
            };
            let took = run_secs.map(|s| format!(" after {}", duration(s))).unwrap_or_default();
            format!("{}: {how}{took}", worker(e))
        }
        "tool_call" => {
            let tool = text(e, "tool").unwrap_or_else(|| "?".into());
            let arg = e.get("args").and_then(Value::as_object).map(|a| main_argument(&tool, a)).unwrap_or_default();
            let outcome = if e.get("ok").and_then(Value::as_bool) == Some(true) {
                "ok".to_string()
            } else {
                format!("{}: {}", text(e, "kind").unwrap_or_else(|| "failed".into()), text(e, "error").unwrap_or_default())
            };
            format!("{tool} {arg}  {outcome}")
        }
        "decision" => {
            let d = e.get("decision");
            let outcome = match d.and_then(|d| d.get("outcome")).and_then(Value::as_str) {
                Some("approved") => approved_by(d.and_then(|d| d.get("by")).and_then(Value::as_str).unwrap_or("?")),
                Some("denied") => format!("denied: {}", d.and_then(|d| d.get("reason")).map(compact).unwrap_or_default()),
                _ => d.map(compact).unwrap_or_default(),
            };
            format!("{} {}  {outcome}", text(e, "action").unwrap_or_else(|| "?".into()), text(e, "subject").unwrap_or_default())
        }
        "expansion" => format!(
            "zone {} ({}) <- {}",
            text(e, "zone").unwrap_or_default(),
            e.get("mode").map(compact).unwrap_or_default(),
            text(e, "host_dir").unwrap_or_default()
        ),
        "delegation" => format!("to {}{}", worker(e), e.get("chain").map(|c| format!(" (chain {})", compact(c))).unwrap_or_default()),
        "delivery" => {
            let s = e.get("summary");
            let status = s.and_then(|s| s.get("status")).map(compact).unwrap_or_default();
            format!("{} {status}", text(e, "target").unwrap_or_default())
        }
        "quarantine" => {
            let n = e.get("areas").and_then(Value::as_array).map_or(0, Vec::len);
            format!("{n} area{} with files moved aside", if n == 1 { "" } else { "s" })
        }
        "egress" => {
            let dest = text(e, "destination").unwrap_or_else(|| "?".into());
            let mut line = format!("{} {dest} {}", text(e, "protocol").unwrap_or_default(), text(e, "verdict").unwrap_or_default());
            if let Some(reason) = text(e, "reason") {
                line.push_str(&format!(": {reason}"));
            }
            if let (Some(up), Some(down)) = (e.get("bytes_up").and_then(Value::as_u64), e.get("bytes_down").and_then(Value::as_u64)) {
                line.push_str(&format!("  {up} B up, {down} B down"));
            }
            line
        }
        "egress_repeated" => format!(
            "{} {} {} {} times{}",
            text(e, "protocol").unwrap_or_default(),
            text(e, "destination").unwrap_or_default(),
            text(e, "verdict").unwrap_or_default(),
            e.get("count").map(compact).unwrap_or_default(),
            text(e, "reason").map(|r| format!(": {r}")).unwrap_or_default()
        ),
        "egress_dropped" => text(e, "reason").unwrap_or_else(|| rest(e, &[])),
        "session_start" | "session_end" => text(e, "transport").map(|t| format!("over {t}")).unwrap_or_else(|| rest(e, &[])),
        _ => rest(e, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_read_as_a_person_would_say_them() {
        assert_eq!(duration(1.25), "1.2s");
        assert_eq!(duration(125.0), "2m 05s");
        assert_eq!(duration(7260.0), "2h 01m");
        assert_eq!(duration(-1.0), "?");
    }

    #[test]
    fn tool_calls_name_their_main_argument() {
        let e = json!({"event": "tool_call", "tool": "shell", "args": {"command": "ls /data", "timeout": 5}, "ok": true});
        assert_eq!(describe(&e, None), "shell ls /data  ok");
        let e = json!({"event": "tool_call", "tool": "write_file", "args": {"path": "/out/a", "content": "<3 bytes>"}, "ok": false, "kind": "denied", "error": "no"});
        assert_eq!(describe(&e, None), "write_file /out/a  denied: no");
    }

    #[test]
    fn decisions_say_by_whom() {
        let e = json!({"event": "decision", "action": "write", "subject": "/out/a", "decision": {"outcome": "approved", "by": "user_once"}});
        assert_eq!(describe(&e, None), "write /out/a  approved by person (once)");
        let e = json!({"event": "decision", "action": "shell", "subject": "rm x", "decision": {"outcome": "approved", "by": "preset_shell"}});
        assert!(describe(&e, None).ends_with("approved by preset (--approve shell)"));
        let e = json!({"event": "decision", "action": "shell", "subject": "rm x", "decision": {"outcome": "denied", "reason": "strict"}});
        assert!(describe(&e, None).ends_with("denied: strict"));
        assert!(is_refusal(&e), "a denied decision is a refusal");
        let e = json!({"event": "egress", "verdict": "refused"});
        assert!(is_refusal(&e));
        let e = json!({"event": "egress", "verdict": "allowed"});
        assert!(!is_refusal(&e));
    }

    #[test]
    fn a_run_is_called_by_the_workers_before_it_in_its_chain() {
        let start = |worker: Value, chain: Value| json!({"event": "run_start", "worker": worker, "chain": chain, "backend": "bwrap", "command": ["wc"], "network": "off"});
        let top = describe(&start(json!("line-count"), json!(["line-count"])), None);
        assert!(!top.contains("called by"), "{top}");
        let ad_hoc = describe(&start(Value::Null, json!([])), None);
        assert!(!ad_hoc.contains("called by"), "{ad_hoc}");
        let child = describe(&start(json!("summarise"), json!(["orchestrate", "review", "summarise"])), None);
        assert!(child.ends_with("(called by orchestrate -> review)"), "{child}");
    }

    #[test]
    fn control_characters_are_escaped() {
        let e = json!({"event": "tool_call", "tool": "read_file", "args": {"path": "/a\u{1b}[2Kb"}, "ok": true});
        assert!(!describe(&e, None).contains('\u{1b}'));
        let e = json!({"event": "unknown", "k\u{7}": "v\u{9b}"});
        let d = describe(&e, None);
        assert!(!d.contains('\u{7}') && !d.contains('\u{9b}'), "{d}");
    }
}
