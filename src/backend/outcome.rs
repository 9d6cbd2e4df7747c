//! How a run ended, in the same words and exit status on every backend: the table in the
//! docs/commands.md ("Exit statuses") is this file.

use std::time::Duration;

use super::{EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_TIMEOUT};

/// An ending workcell explains on stderr (a plain exit status or a signal needs no words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Explained {
    /// Stopped after the plan's timeout.
    TimedOut(Option<Duration>),
    /// Killed by the kernel for exceeding the memory limit (bytes, when known).
    OutOfMemory(Option<u64>),
    /// The program does not exist inside the worker.
    NotFound(String),
    /// The program exists but cannot be executed.
    NotExecutable(String),
}

impl Explained {
    /// The exit status workcell returns for this ending.
    pub fn code(&self) -> i32 {
        match self {
            Explained::TimedOut(_) => EXIT_TIMEOUT,
            Explained::OutOfMemory(_) => 128 + 9,
            Explained::NotFound(_) => EXIT_NOT_FOUND,
            Explained::NotExecutable(_) => EXIT_NOT_EXECUTABLE,
        }
    }

    /// One line for stderr, ending in a newline; a program name is escaped.
    pub fn message(&self) -> String {
        let code = self.code();
        match self {
            Explained::TimedOut(t) => {
                let t = t.map(|t| format!(" ({})", humantime::format_duration(t))).unwrap_or_default();
                format!("workcell: the worker ran longer than its timeout{t} and was stopped (exit {code}); raise it with --timeout or `limits: {{timeout: ...}}`\n")
            }
            Explained::OutOfMemory(limit) => {
                let limit = limit.map(|b| format!(" ({b} bytes)")).unwrap_or_default();
                format!("workcell: the worker was killed for using more than its memory limit{limit} (exit {code}); raise --memory or `limits: {{memory: ...}}` if it needs more\n")
            }
            Explained::NotFound(p) => format!(
                "workcell: {}: command not found inside the worker (exit {code}); it must be on the worker's PATH or in a zone or system directory\n",
                crate::term::escape(p)
            ),
            Explained::NotExecutable(p) => format!(
                "workcell: {}: not executable inside the worker (exit {code}); check its mode (chmod +x) and that it is a program, not a directory\n",
                crate::term::escape(p)
            ),
        }
    }
}
