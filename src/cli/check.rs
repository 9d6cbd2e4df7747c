//! `workcell check`: the query API on the command line, one verdict per path.

use std::io::{BufRead, Read, Write};

/// Longest line `--stdin` reads (a path is at most a few KiB; PATH_MAX is 4096).
const MAX_LINE: usize = 64 * 1024;

use clap::Args;
use serde::Serialize;

use super::{load_project, Cli, CliError};
use crate::sandbox::{FileKind, Sandbox, SandboxError};

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Check with this worker's effective sandbox instead of the project's.
    #[arg(long, value_name = "WORKER")]
    pub worker: Option<String>,
    /// Check for writing instead of reading.
    #[arg(long)]
    pub write: bool,
    /// Read paths from standard input, one per line, and print one verdict per line.
    #[arg(long)]
    pub stdin: bool,
    /// Print verdicts as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Sandbox paths to check (`/data/a.txt`, `data/a.txt`, `data:a.txt`).
    #[arg(value_name = "PATH", required_unless_present = "stdin")]
    pub paths: Vec<String>,
}

/// One path's verdict.
#[derive(Debug, Serialize)]
pub struct Verdict<'a> {
    pub path: &'a str,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Whether `path` may be read (or written): resolution, then the suffix policy for
/// anything that is not an existing directory, then, for reading an existing file, the size
/// policy (`max_file_bytes`). A write is not judged by size: its content is not known here.
pub fn verdict(sandbox: &Sandbox, path: &str, write: bool) -> Result<(), SandboxError> {
    if write {
        sandbox.resolve_for_write(path)?;
    } else {
        sandbox.resolve(path)?;
    }
    let stat = sandbox.stat(path).ok();
    if !stat.as_ref().is_some_and(|s| s.kind == FileKind::Directory) {
        sandbox.check_suffix(path)?;
    }
    if let (false, Some(s)) = (write, &stat) {
        if s.kind == FileKind::File {
            sandbox.check_size(path, s.size)?;
        }
        // The file tools read regular files only (a FIFO would wait for a writer).
        if s.kind == FileKind::Other {
            return Err(SandboxError::WrongKind {
                op: "read",
                path: crate::term::escape_quoted(path).into_owned(),
                found: "special file",
                expected: "regular file",
            });
        }
    }
    Ok(())
}

pub fn run(cli: &Cli, args: &CheckArgs) -> Result<i32, CliError> {
    let project = load_project(cli.config.as_deref())?;
    let sandbox = match &args.worker {
        Some(w) => project.worker(w)?.sandbox.clone(),
        None => project.sandbox.clone(),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut refused = false;
    let mut check_one = |path: &str, out: &mut dyn Write| -> std::io::Result<()> {
        let result = verdict(&sandbox, path, args.write);
        // The path is quoted back: paths piped in may be names a worker chose.
        let shown = crate::term::escape_quoted(path);
        refused |= result.is_err();
        if args.json {
            let v = Verdict {
                path,
                allowed: result.is_ok(),
                kind: result.as_ref().err().map(SandboxError::kind),
                message: result.as_ref().err().map(ToString::to_string),
            };
            writeln!(out, "{}", crate::term::json_for_terminal(&serde_json::to_string(&v).unwrap_or_default()))
        } else if args.stdin {
            match &result {
                Ok(()) => writeln!(out, "allowed\t{shown}"),
                Err(e) => writeln!(out, "refused\t{shown}\t{}\t{}", e.kind(), e.to_string().replace('\n', " ")),
            }
        } else {
            match &result {
                Ok(()) => writeln!(out, "allowed: {shown}"),
                Err(e) => writeln!(out, "refused: {e}"),
            }
        }
    };
    let io_err = |e: std::io::Error| CliError::Failed(format!("cannot write the verdicts: {e}"));
    for p in &args.paths {
        check_one(p, &mut out).map_err(io_err)?;
    }
    if args.stdin {
        let mut input = std::io::stdin().lock();
        let mut buf = Vec::new();
        loop {
            // Bounded: the paths piped in may come from a worker, which could send one
            // endless line.
            buf.clear();
            let n =
                (&mut input).take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf).map_err(|e| CliError::Usage(format!("cannot read standard input: {e}")))?;
            if n == 0 {
                break;
            }
            if buf.len() > MAX_LINE && buf.last() != Some(&b'\n') {
                return Err(CliError::Usage(format!("a line of standard input is longer than {MAX_LINE} bytes; give one path per line")));
            }
            let line = String::from_utf8(std::mem::take(&mut buf)).map_err(|_| CliError::Usage("standard input is not UTF-8 text".into()))?;
            let line = line.strip_suffix('\n').unwrap_or(&line);
            let line = line.strip_suffix('\r').unwrap_or(line);
            if !line.is_empty() {
                check_one(line, &mut out).map_err(io_err)?;
            }
        }
    }
    out.flush().map_err(io_err)?;
    Ok(if refused { 1 } else { 0 })
}
