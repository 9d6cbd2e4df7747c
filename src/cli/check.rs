//! `workcell check`: the query API on the command line, one verdict per path.

mod stdin;

use std::io::Write;

use clap::Args;
use serde::Serialize;

use super::style::Role;
use super::{load_project, Cli, CliError};
use crate::sandbox::SandboxError;

// Paths, or `--stdin`, or both: the group makes the usage line say so (`<PATH|--stdin>`)
// where `required_unless_present` showed `[PATH]...`, as if nothing were needed.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("input").args(["paths", "stdin"]).required(true).multiple(true)))]
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
    /// Sandbox paths to check (`/data/a.txt`, `data/a.txt`, `data:a.txt`); at least one,
    /// unless --stdin gives them.
    #[arg(value_name = "PATH")]
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

/// How verdicts are printed: `--json` lines, `--stdin`'s tab-separated lines, or prose for
/// paths given as arguments.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Style {
    Json,
    Tabs,
    Prose,
}

impl Style {
    fn of(args: &CheckArgs) -> Style {
        if args.json {
            Style::Json
        } else if args.stdin {
            Style::Tabs
        } else {
            Style::Prose
        }
    }

    /// Appends `path`'s verdict line to `out`.
    pub(crate) fn render(self, out: &mut Vec<u8>, path: &str, result: &Result<(), SandboxError>) {
        // The path is quoted back: paths piped in may be names a worker chose.
        let shown = crate::term::escape_quoted(path);
        // Writing to a Vec cannot fail.
        let _ = match self {
            Style::Json => {
                let v = Verdict {
                    path,
                    allowed: result.is_ok(),
                    kind: result.as_ref().err().map(SandboxError::kind),
                    message: result.as_ref().err().map(ToString::to_string),
                };
                writeln!(out, "{}", crate::term::json_for_terminal(&serde_json::to_string(&v).unwrap_or_default()))
            }
            Style::Tabs => match result {
                Ok(()) => writeln!(out, "allowed\t{shown}"),
                Err(e) => writeln!(out, "refused\t{shown}\t{}\t{}", e.kind(), e.to_string().replace('\n', " ")),
            },
            // Colour only here: the other two are read by programs.
            Style::Prose => match result {
                Ok(()) => writeln!(out, "{} {shown}", Role::Ok.out("allowed:")),
                Err(e) => writeln!(out, "{} {e}", Role::Denied.out("refused:")),
            },
        };
    }
}

pub fn run(cli: &Cli, args: &CheckArgs) -> Result<i32, CliError> {
    let project = load_project(cli.config.as_deref())?;
    let sandbox = match &args.worker {
        Some(w) => project.worker(w)?.sandbox.clone(),
        None => project.sandbox.clone(),
    };
    let style = Style::of(args);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut refused = false;
    let mut line = Vec::new();
    for p in &args.paths {
        let result = sandbox.verdict(p, args.write);
        refused |= result.is_err();
        line.clear();
        style.render(&mut line, p, &result);
        out.write_all(&line).map_err(stdin::write_failed)?;
    }
    if args.stdin {
        refused |= stdin::check_all(&sandbox, args.write, style, &mut out)?;
    }
    out.flush().map_err(stdin::write_failed)?;
    Ok(if refused { 1 } else { 0 })
}
