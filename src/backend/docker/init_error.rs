//! The init's report of a command it could not start, rewritten into workcell's words.
//!
//! docker-init (tini) says `[FATAL tini (7)] exec CMD failed: No such file or directory` and
//! exits 127 (126 for permission denied). Podman's init, catatonit, says
//! `ERROR (catatonit:6): failed to exec pid1: No such file or directory` and exits 1, so for
//! it the filter also remembers what it saw ([`InitErrorFilter::verdict`]) and the run maps
//! that exit to 127 or 126, as on Docker.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use crate::backend::outcome::Explained;

const PREFIXES: &[&[u8]] = &[b"[FATAL tini", b"ERROR (catatonit"];
/// An init's report is one short line; a stderr that starts like it and goes on longer
/// without a newline is the worker's own output, passed through rather than held (it could
/// be endless).
const LINE_MAX: usize = 4096;

/// What the init reported, shared with the run that waits for the exit status.
#[derive(Debug, Clone, Default)]
pub struct Verdict(Arc<AtomicU8>);

const NONE: u8 = 0;
const NOT_FOUND: u8 = 127;
const NOT_EXECUTABLE: u8 = 126;

impl Verdict {
    /// The exit status the run reports for the init's own `status`: catatonit's 1 becomes
    /// 127/126 when it reported the command unrunnable.
    pub fn status(&self, status: i32) -> i32 {
        match self.0.load(Ordering::Relaxed) {
            NONE => status,
            code if status == 1 => i32::from(code),
            _ => status,
        }
    }
}

/// Holds back the start of stderr while it could still be an init's one-line report of an
/// unrunnable command (it may arrive in several frames), then passes everything through.
pub struct InitErrorFilter {
    command: String,
    pending: Vec<u8>,
    done: bool,
    verdict: Verdict,
}

impl InitErrorFilter {
    pub fn new(command: String, tty: bool) -> Self {
        InitErrorFilter { command, pending: Vec::new(), done: tty, verdict: Verdict::default() }
    }

    /// What the init reported, readable once the stream is done.
    pub fn verdict(&self) -> Verdict {
        self.verdict.clone()
    }

    /// The bytes to write now for this chunk of stderr.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.done {
            return chunk.to_vec();
        }
        self.pending.extend_from_slice(chunk);
        let like = |p: &[u8]| {
            let n = self.pending.len().min(p.len());
            self.pending[..n] == p[..n]
        };
        if !PREFIXES.iter().any(|p| like(p)) {
            self.done = true;
            return std::mem::take(&mut self.pending);
        }
        match self.pending.iter().position(|b| *b == b'\n') {
            None if self.pending.len() > LINE_MAX => {
                self.done = true;
                std::mem::take(&mut self.pending)
            }
            Some(i) => {
                self.done = true;
                let rest = self.pending.split_off(i + 1);
                let line = std::mem::take(&mut self.pending);
                let mut out = self.rewrite(&line).unwrap_or(line);
                out.extend_from_slice(&rest);
                out
            }
            None => Vec::new(),
        }
    }

    /// Whatever is still held back at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        self.done = true;
        let line = std::mem::take(&mut self.pending);
        self.rewrite(&line).unwrap_or(line)
    }

    fn rewrite(&self, line: &[u8]) -> Option<Vec<u8>> {
        let (explained, code) = rewrite_init_error(line, &self.command)?;
        if let Some(code) = code {
            self.verdict.0.store(code, Ordering::Relaxed);
        }
        Some(explained.into_bytes())
    }
}

/// The message for an init's report `message`, and, when it said the command is missing or
/// not executable, 127 or 126.
fn rewrite_init_error(message: &[u8], command: &str) -> Option<(String, Option<u8>)> {
    let text = std::str::from_utf8(message).ok()?;
    let reason = if text.starts_with("[FATAL tini") && text.contains(" exec ") {
        text.rsplit_once(" failed: ").map(|(_, r)| r.trim()).unwrap_or("")
    } else if text.starts_with("ERROR (catatonit") && text.contains("failed to exec pid1: ") {
        text.rsplit_once("failed to exec pid1: ").map(|(_, r)| r.trim()).unwrap_or("")
    } else {
        return None;
    };
    Some(if reason.contains("No such file") {
        (Explained::NotFound(command.to_string()).message(), Some(NOT_FOUND))
    } else if reason.contains("Permission denied") {
        (Explained::NotExecutable(command.to_string()).message(), Some(NOT_EXECUTABLE))
    } else {
        (format!("workcell: {command}: cannot be executed inside the worker: {reason}\n"), None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tini_and_catatonit_errors_are_rewritten() {
        let (m, code) = rewrite_init_error(b"[FATAL tini (7)] exec /nonexistent failed: No such file or directory\n", "/nonexistent").unwrap();
        assert!(m.contains("/nonexistent: command not found") && code == Some(127), "{m}");
        let (m, code) = rewrite_init_error(b"[FATAL tini (7)] exec /in/f failed: Permission denied\n", "/in/f").unwrap();
        assert!(m.contains("not executable") && code == Some(126));
        let (m, code) = rewrite_init_error(b"ERROR (catatonit:6): failed to exec pid1: No such file or directory\n", "/no").unwrap();
        assert!(m.contains("/no: command not found") && code == Some(127), "{m}");
        assert!(rewrite_init_error(b"hello\n", "x").is_none());
    }

    #[test]
    fn filter_joins_split_frames_and_passes_other_output() {
        let mut f = InitErrorFilter::new("/nope".into(), false);
        assert!(f.push(b"[FATAL tini (7)] ").is_empty());
        let out = f.push(b"exec /nope failed: No such file or directory\nmore\n");
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("/nope: command not found") && out.ends_with("more\n"), "{out}");
        assert_eq!(f.push(b"x"), b"x");
        let mut g = InitErrorFilter::new("c".into(), false);
        assert_eq!(g.push(b"[FA"), b"");
        assert_eq!(g.push(b"ST"), b"[FAST");
        let mut h = InitErrorFilter::new("c".into(), false);
        assert_eq!(h.push(b"[FATAL"), b"");
        assert_eq!(h.finish(), b"[FATAL");
    }

    #[test]
    fn catatonits_exit_1_becomes_127_only_after_its_report() {
        let mut f = InitErrorFilter::new("/no".into(), false);
        let v = f.verdict();
        assert_eq!(v.status(1), 1);
        f.push(b"ERROR (catatonit:6): failed to exec pid1: No such file or directory\n");
        assert_eq!((v.status(1), v.status(0), v.status(7)), (127, 0, 7));
    }
}
