//! The audit log: every tool call, decision, expansion and run start/end as one JSON line in
//! `.workcell/audit.jsonl` of the project. Each event is written with a single `write` on a
//! file opened for appending, so concurrent writers do not interleave within a line.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Where the audit log of a project lives.
pub fn audit_path(project_dir: &Path) -> PathBuf {
    project_dir.join(".workcell").join("audit.jsonl")
}

/// An appender for one project's audit log.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
    run_id: String,
}

/// One event, as written.
#[derive(Debug, Serialize)]
struct Line<'a, T: Serialize> {
    /// Seconds since the Unix epoch, with milliseconds.
    ts: f64,
    run_id: &'a str,
    event: &'a str,
    #[serde(flatten)]
    data: T,
}

impl AuditLog {
    pub fn new(project_dir: &Path, run_id: impl Into<String>) -> AuditLog {
        AuditLog { path: audit_path(project_dir), run_id: run_id.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event. Failing to audit is reported to the caller: an operation that
    /// cannot be recorded should not proceed silently.
    pub fn record<T: Serialize>(&self, event: &str, data: T) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as f64 / 1000.0).unwrap_or(0.0);
        let mut line = serde_json::to_vec(&Line { ts, run_id: &self.run_id, event, data }).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut f = OpenOptions::new().create(true).append(true).open(&self.path)?;
        f.write_all(&line)
    }
}

/// Reads every event of a project's audit log as JSON values (bad lines are skipped).
pub fn read_all(project_dir: &Path) -> std::io::Result<Vec<serde_json::Value>> {
    let text = match std::fs::read_to_string(audit_path(project_dir)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}
