//! `workcell audit`: the project's audit log, readable or raw, filtered.

mod summary;

use std::collections::HashMap;

use chrono::{DateTime, Local, NaiveDate, NaiveDateTime, TimeZone};
use clap::Args;
use serde_json::Value;

use super::out::outln;
use super::style::Role;
use super::{load_project, Cli, CliError};
use crate::audit::read_all;
use crate::term::{escape, json_for_terminal};

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Print the raw JSON lines (one event a line, as logged; the filters apply).
    #[arg(long)]
    pub json: bool,
    /// Only this run.
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// Only the runs of this worker.
    #[arg(long, value_name = "NAME")]
    pub worker: Option<String>,
    /// Only events of this kind (run_start, run_end, tool_call, decision, egress…);
    /// repeatable.
    #[arg(long = "event", value_name = "KIND")]
    pub events: Vec<String>,
    /// Only events since then: a duration back from now (`30m`, `1h`, `2d`) or a local date
    /// or time (`2026-11-27`, `2026-11-27 14:00`, `2026-11-27T14:00:00+01:00`).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub since: Option<f64>,
    /// Only the last N events (after the other filters).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

/// A `--since` that is neither a duration nor a local date or time.
#[derive(Debug, thiserror::Error)]
#[error("use a duration back from now (30m, 1h, 2d) or a local date or time (2026-11-27, 2026-11-27 14:00)")]
struct SinceUnreadable;

/// `--since` as seconds since the Unix epoch.
fn parse_since(s: &str) -> Result<f64, SinceUnreadable> {
    let now = Local::now();
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now.timestamp_millis() as f64 / 1000.0 - d.as_secs_f64());
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.timestamp_millis() as f64 / 1000.0);
    }
    let naive = ["%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M"]
        .iter()
        .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
        .or_else(|| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok().and_then(|d| d.and_hms_opt(0, 0, 0)));
    // A local time that a clock change skipped has no instant; the earliest of two (a time
    // repeated when clocks go back) keeps every event of the hour.
    match naive.and_then(|n| Local.from_local_datetime(&n).earliest()) {
        Some(t) => Ok(t.timestamp_millis() as f64 / 1000.0),
        None => Err(SinceUnreadable),
    }
}

/// An event's time in seconds since the epoch (logged as a number; a string is accepted).
fn seconds(e: &Value) -> Option<f64> {
    match e.get("ts")? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// `2026-11-27 23:40:01` in the local time zone.
fn local_time(secs: f64) -> Option<String> {
    let millis = (secs * 1000.0).round();
    if !millis.is_finite() {
        return None;
    }
    Local.timestamp_millis_opt(millis as i64).single().map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
}

/// A field of the event's envelope as escaped text (empty when absent).
fn field(e: &Value, k: &str) -> String {
    match e.get(k) {
        Some(Value::String(s)) => escape(s).into_owned(),
        Some(other) => escape(&other.to_string()).into_owned(),
        None => String::new(),
    }
}

/// What the log says about each run: its worker and when it started.
#[derive(Debug, Default)]
struct RunInfo {
    worker: Option<String>,
    started: Option<f64>,
}

fn runs(events: &[Value]) -> HashMap<String, RunInfo> {
    let mut runs: HashMap<String, RunInfo> = HashMap::new();
    for e in events {
        let (Some(id), Some(kind)) = (e.get("run_id").and_then(Value::as_str), e.get("event").and_then(Value::as_str)) else { continue };
        if !matches!(kind, "run_start" | "run_end") {
            continue;
        }
        let info = runs.entry(id.to_string()).or_default();
        if info.worker.is_none() {
            info.worker = e.get("worker").and_then(Value::as_str).map(str::to_string);
        }
        if kind == "run_start" && info.started.is_none() {
            info.started = seconds(e);
        }
    }
    runs
}

pub fn run(cli: &Cli, args: &AuditArgs) -> Result<i32, CliError> {
    let project = load_project(cli.config.as_deref())?;
    let events = read_all(&project.dir).map_err(|e| CliError::Failed(format!("cannot read the audit log: {e}")))?;
    let runs = runs(&events);
    let run_of = |e: &Value| e.get("run_id").and_then(Value::as_str).and_then(|id| runs.get(id));
    let worker_of = |e: &Value| run_of(e).and_then(|r| r.worker.as_deref());
    let kept: Vec<&Value> = events
        .iter()
        .filter(|e| args.run.as_deref().is_none_or(|r| e["run_id"] == r))
        .filter(|e| args.worker.as_deref().is_none_or(|w| worker_of(e) == Some(w)))
        .filter(|e| args.events.is_empty() || args.events.iter().any(|k| e["event"] == k.as_str()))
        .filter(|e| args.since.is_none_or(|since| seconds(e).is_some_and(|t| t >= since)))
        .collect();
    let skip = args.tail.map_or(0, |n| kept.len().saturating_sub(n));
    let kept = &kept[skip..];
    if args.json {
        for e in kept {
            outln!("{}", json_for_terminal(&e.to_string()));
        }
        return Ok(0);
    }
    // Columns as wide as their widest entry, within bounds: a forged line in the log cannot
    // push every other line across the screen.
    let width = |k: &str| kept.iter().map(|e| field(e, k).chars().count()).max().unwrap_or(0).min(24);
    let (run_w, event_w) = (width("run_id"), width("event"));
    for e in kept {
        let time = seconds(e).and_then(local_time).unwrap_or_else(|| format!("{:<19}", field(e, "ts")));
        let run_secs = match (e.get("event").and_then(Value::as_str), run_of(e).and_then(|r| r.started), seconds(e)) {
            (Some("run_end"), Some(start), Some(end)) => Some(end - start),
            _ => None,
        };
        // The kind column reads as a label; a refusal's in red.
        let role = if summary::is_refusal(e) { Role::Denied } else { Role::Heading };
        outln!("{time}  {:<run_w$}  {:<event_w$}  {}", field(e, "run_id"), role.out(field(e, "event")), summary::describe(e, run_secs));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_durations_and_dates() {
        let now = Local::now().timestamp() as f64;
        let hour_ago = parse_since("1h").unwrap();
        assert!((now - 3600.0 - hour_ago).abs() < 5.0, "{hour_ago}");
        assert!(parse_since("2d").unwrap() < hour_ago);
        assert_eq!(parse_since("2026-11-27T10:00:00Z").unwrap(), 1_795_773_600.0);
        assert!(parse_since("2026-11-27").is_ok() && parse_since("2026-11-27 10:00").is_ok());
        assert!(parse_since("yesterday").is_err());
    }
}
