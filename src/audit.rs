//! The audit log: every tool call, decision, expansion and run start/end as one JSON line in
//! `.workcell/audit.jsonl` of the project. Each event is written with a single `write` on a
//! file opened for appending, so concurrent writers do not interleave within a line.
//!
//! The project directory can be inside a worker's zone (the root form makes the whole
//! project writable), so a worker — or anybody else who could write there earlier — may
//! have put a symlink, a FIFO or a device where the log goes. The log is therefore opened
//! beneath a handle on the project directory taken when the [`AuditLog`] is made, with no
//! symlink followed at `.workcell` or at `audit.jsonl`, and only a regular file with a
//! single link is written to; anything else is refused with an error naming the path.
//!
//! Much of what is logged comes from a worker (paths, commands, names), so no string is
//! written whole past [`FIELD_MAX`] bytes: it is cut and marked with how much was left out
//! ([`cut`]), and one event cannot make the log grow by more than its fields allow.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use serde::Serialize;

/// The directory of workcell's own files in a project, and the log's name in it.
const DIR_NAME: &str = ".workcell";
const FILE_NAME: &str = "audit.jsonl";

/// Where the audit log of a project lives.
pub fn audit_path(project_dir: &Path) -> PathBuf {
    project_dir.join(DIR_NAME).join(FILE_NAME)
}

/// The most of one string field written by [`AuditLog::record`], counted as it is written in
/// JSON (an escaped control character counts six); the rest is cut.
pub const FIELD_MAX: usize = 4096;

/// `s` cut to at most about `max` bytes of JSON, marked `…[cut N bytes]` when it was longer.
/// Counts a character as its JSON width, so that escapes cannot multiply the bound.
pub fn cut(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    let width = |c: char| match c {
        '"' | '\\' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    };
    let mut used = 0;
    for (i, c) in s.char_indices() {
        used += width(c);
        if used > max {
            return format!("{}…[cut {} bytes]", &s[..i], s.len() - i).into();
        }
    }
    s.into()
}

/// Every string in `value` cut to `max` (see [`cut`]).
pub fn cut_strings(value: &mut serde_json::Value, max: usize) {
    match value {
        serde_json::Value::String(s) => {
            if let std::borrow::Cow::Owned(c) = cut(s, max) {
                *s = c;
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|v| cut_strings(v, max)),
        serde_json::Value::Object(o) => o.values_mut().for_each(|v| cut_strings(v, max)),
        _ => {}
    }
}

/// An appender for one project's audit log.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
    /// The project directory, opened when the log was made (or why it could not be).
    project: Arc<Result<OwnedFd, ProjectDirError>>,
    run_id: String,
}

/// The project directory could not be opened for the audit log.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot open the project directory {}: {source}", dir.display())]
pub struct ProjectDirError {
    pub dir: PathBuf,
    pub source: rustix::io::Errno,
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
    /// The log of the project in `project_dir`. The directory is opened now; if that fails,
    /// every [`record`](Self::record) reports why.
    pub fn new(project_dir: &Path, run_id: impl Into<String>) -> AuditLog {
        let project = open_project_dir(project_dir).map_err(|source| ProjectDirError { dir: project_dir.to_path_buf(), source });
        AuditLog { path: audit_path(project_dir), project: Arc::new(project), run_id: run_id.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event, every string in it cut to [`FIELD_MAX`]. Failing to audit is
    /// reported to the caller: an operation that cannot be recorded should not proceed silently.
    pub fn record<T: Serialize>(&self, event: &str, data: T) -> std::io::Result<()> {
        let mut data = serde_json::to_value(data).map_err(std::io::Error::other)?;
        cut_strings(&mut data, FIELD_MAX);
        let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as f64 / 1000.0).unwrap_or(0.0);
        let mut line = serde_json::to_vec(&Line { ts, run_id: &self.run_id, event, data }).map_err(std::io::Error::other)?;
        line.push(b'\n');
        // Its kind (not found, permission) stays that of the failed open.
        let project = self.project.as_ref().as_ref().map_err(|e| std::io::Error::new(std::io::Error::from(e.source).kind(), e.clone()))?;
        let mut f = open_log(project, &self.path, true)?;
        f.write_all(&line)
    }
}

fn open_project_dir(dir: &Path) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
}

/// An error naming the log's path and why it was refused.
fn refused(path: &Path, why: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("refusing to use the audit log {}: {why}", path.display()))
}

/// Opens `.workcell/audit.jsonl` beneath `project`: for appending (creating the directory
/// and the file when missing) or for reading. Never follows a symlink at either name.
fn open_log(project: &OwnedFd, path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    let dir_path = path.parent().unwrap_or(path);
    let dir = match rustix::fs::statat(project, DIR_NAME, AtFlags::SYMLINK_NOFOLLOW) {
        Err(rustix::io::Errno::NOENT) if append => {
            match rustix::fs::mkdirat(project, DIR_NAME, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(refused(path, format!("cannot create {}: {e}", dir_path.display()))),
            }
            open_dir_nofollow(project, path, dir_path)?
        }
        Err(e) => return Err(failed(path, dir_path, e)),
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => open_dir_nofollow(project, path, dir_path)?,
            FileType::Symlink => return Err(refused(path, format!("{} is a symbolic link, which workcell does not follow", dir_path.display()))),
            other => return Err(refused(path, format!("{} is not a directory (it is a {other:?})", dir_path.display()))),
        },
    };
    // Looked at before opening, so that a FIFO or device is never opened at all; checked
    // again on the opened file, which is what is written.
    match rustix::fs::statat(&dir, FILE_NAME, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => check_regular(path, &st)?,
        Err(rustix::io::Errno::NOENT) if append => {}
        Err(e) => return Err(failed(path, path, e)),
    }
    // NONBLOCK: should something else appear there between the two looks, opening a FIFO
    // fails instead of waiting for a reader.
    let flags = OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
    let flags = if append { flags | OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE } else { flags | OFlags::RDONLY };
    let fd = match rustix::fs::openat(&dir, FILE_NAME, flags, Mode::from_raw_mode(0o666)) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP) => return Err(refused(path, "it is a symbolic link, which workcell does not follow")),
        Err(e) => return Err(failed(path, path, e)),
    };
    check_regular(path, &rustix::fs::fstat(&fd)?)?;
    // Back to blocking writes on the regular file.
    rustix::fs::fcntl_setfl(&fd, rustix::fs::fcntl_getfl(&fd)? - OFlags::NONBLOCK)?;
    Ok(std::fs::File::from(fd))
}

/// An error of `what` (the log or its directory) that keeps the error's kind.
fn failed(path: &Path, what: &Path, e: rustix::io::Errno) -> std::io::Error {
    let e = std::io::Error::from(e);
    std::io::Error::new(e.kind(), format!("cannot use the audit log {}: {}: {e}", path.display(), what.display()))
}

fn open_dir_nofollow(project: &OwnedFd, path: &Path, dir_path: &Path) -> std::io::Result<OwnedFd> {
    rustix::fs::openat(project.as_fd(), DIR_NAME, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()).map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => refused(path, format!("{} is not a directory or is a symbolic link", dir_path.display())),
        e => refused(path, format!("cannot open {}: {e}", dir_path.display())),
    })
}

/// Only a regular file with one name: not a FIFO or device, and not a hard link to a file
/// elsewhere.
fn check_regular(path: &Path, st: &rustix::fs::Stat) -> std::io::Result<()> {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile if st.st_nlink <= 1 => Ok(()),
        FileType::RegularFile => Err(refused(path, format!("it has {} hard links; the audit log must have only its own name", st.st_nlink))),
        FileType::Symlink => Err(refused(path, "it is a symbolic link, which workcell does not follow")),
        other => Err(refused(path, format!("it is not a regular file (it is a {other:?})"))),
    }
}

/// Reads every event of a project's audit log as JSON values (bad lines are skipped). The
/// log is opened as it is written: no symlink is followed.
pub fn read_all(project_dir: &Path) -> std::io::Result<Vec<serde_json::Value>> {
    let path = audit_path(project_dir);
    let project = open_project_dir(project_dir)?;
    let mut file = match open_log(&project, &path, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut text = String::new();
    std::io::Read::read_to_string(&mut file, &mut text)?;
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_in(dir: &Path) -> AuditLog {
        AuditLog::new(dir, "r1")
    }

    #[test]
    fn records_and_reads_back() {
        let tmp = tempfile::tempdir().unwrap();
        let log = log_in(tmp.path());
        log.record("a", serde_json::json!({"x": 1})).unwrap();
        log.record("b", serde_json::json!({})).unwrap();
        let events = read_all(tmp.path()).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0]["event"], "a");
        assert_eq!(events[0]["x"], 1);
    }

    #[test]
    fn long_strings_are_cut_and_marked() {
        let tmp = tempfile::tempdir().unwrap();
        let long = "x".repeat(60_000);
        log_in(tmp.path()).record("a", serde_json::json!({"path": long, "list": [long.clone()], "short": "ok"})).unwrap();
        let events = read_all(tmp.path()).unwrap();
        let path = events[0]["path"].as_str().unwrap();
        assert!(path.len() < FIELD_MAX + 32 && path.ends_with(&format!("…[cut {} bytes]", 60_000 - FIELD_MAX)), "{}", &path[path.len() - 40..]);
        assert_eq!(events[0]["list"][0], path);
        assert_eq!(events[0]["short"], "ok");
        // Escapes count at their written width.
        assert!(cut(&"\u{1}".repeat(100), 60).starts_with(&"\u{1}".repeat(10)));
        assert_eq!(cut(&"\u{1}".repeat(100), 60).chars().filter(|c| *c == '\u{1}').count(), 10);
        let total = std::fs::metadata(audit_path(tmp.path())).unwrap().len();
        assert!(total < 3 * FIELD_MAX as u64, "{total}");
    }

    #[test]
    fn no_log_reads_as_empty() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(read_all(tmp.path()).unwrap().is_empty());
    }

    #[test]
    fn refuses_a_symlinked_log_and_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let proj = tmp.path().join("proj");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(proj.join(".workcell")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("audit.jsonl"), "host\n").unwrap();
        std::os::unix::fs::symlink(outside.join("audit.jsonl"), proj.join(".workcell/audit.jsonl")).unwrap();
        let log = log_in(&proj);
        let e = log.record("a", serde_json::json!({})).unwrap_err().to_string();
        assert!(e.contains("audit log") && e.contains("symbolic link"), "{e}");
        assert!(read_all(&proj).is_err());
        std::fs::remove_dir_all(proj.join(".workcell")).unwrap();
        std::os::unix::fs::symlink(&outside, proj.join(".workcell")).unwrap();
        let e = log.record("a", serde_json::json!({})).unwrap_err().to_string();
        assert!(e.contains(".workcell") && e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(outside.join("audit.jsonl")).unwrap(), "host\n");
    }

    #[test]
    fn refuses_a_fifo_and_a_hard_link() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join(".workcell")).unwrap();
        let log_path = tmp.path().join(".workcell/audit.jsonl");
        assert!(std::process::Command::new("mkfifo").arg(&log_path).status().unwrap().success());
        let e = log_in(tmp.path()).record("a", serde_json::json!({})).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_file(&log_path).unwrap();
        std::fs::write(tmp.path().join("other"), "other\n").unwrap();
        std::fs::hard_link(tmp.path().join("other"), &log_path).unwrap();
        let e = log_in(tmp.path()).record("a", serde_json::json!({})).unwrap_err().to_string();
        assert!(e.contains("hard links"), "{e}");
        assert_eq!(std::fs::read_to_string(tmp.path().join("other")).unwrap(), "other\n");
    }
}
