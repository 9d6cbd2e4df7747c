//! Standard output of the command line: `outln!`/`out!` instead of `println!`/`print!`.
//!
//! `println!` panics when stdout's reader has gone (`workcell schema | head -1`). Restoring
//! SIGPIPE's default action would end that too, but it would also kill workcell when a
//! worker's socket or pipe closes under it; so SIGPIPE stays ignored (Rust's default) and
//! the cli's own printing ends the process quietly instead, on EPIPE only.

use std::io::{self, Write};

/// Exit status when stdout's reader went away: the status a shell reports for a process
/// that SIGPIPE ended (128 + 13), so `set -o pipefail` sees workcell as it sees `cat`.
pub const EXIT_CLOSED_PIPE: i32 = 128 + 13;

/// Writes to stdout; ends the process when that fails (see [`write_failed`]).
pub fn print(args: std::fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        write_failed(e)
    }
}

/// Ends the process after a failed write to stdout: quietly when the reader went away,
/// with a message otherwise (a full disk, say), never with a panic.
pub fn write_failed(e: io::Error) -> ! {
    quit_if_closed(&e);
    eprintln!("{} cannot write to standard output: {e}", super::style::error_prefix());
    std::process::exit(super::EXIT_INTERNAL)
}

/// Ends the process quietly if `e` says stdout's reader went away; returns otherwise.
///
/// `process::exit` flushes stdout on the way out; that write fails too and is ignored.
pub fn quit_if_closed(e: &io::Error) {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(EXIT_CLOSED_PIPE);
    }
}

/// `print!` that ends workcell quietly when stdout is closed.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::out::print(format_args!($($arg)*))
    };
}

/// `println!` that ends workcell quietly when stdout is closed.
macro_rules! outln {
    () => {
        $crate::cli::out::print(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::out::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

/// Writes bytes to stdout and flushes them; ends the process when that fails.
pub fn write_all(bytes: &[u8]) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        write_failed(e)
    }
}
