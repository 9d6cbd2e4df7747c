//! `workcell audit`: the project's audit log, readable or raw.

use clap::Args;

use super::{load_project, Cli, CliError};
use crate::term::escape;
use crate::term::needs_escape;
use crate::tools::audit::read_all;
use serde_json::Value;

/// A JSON line safe to print: serde_json escapes C0 controls but leaves DEL, C1 controls and
/// layout characters raw. They only occur inside strings, where `\uXXXX` means the same.
fn json_for_terminal(line: &str) -> String {
    line.chars()
        .map(|c| if needs_escape(c) && c != '\\' { c.encode_utf16(&mut [0; 2]).iter().map(|u| format!("\\u{u:04x}")).collect() } else { c.to_string() })
        .collect()
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Print the raw JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Only this run.
    #[arg(long)]
    pub run: Option<String>,
}

pub fn run(cli: &Cli, args: &AuditArgs) -> Result<i32, CliError> {
    let project = load_project(cli.config.as_deref())?;
    let events = read_all(&project.dir).map_err(|e| CliError::Failed(format!("cannot read the audit log: {e}")))?;
    for e in events.iter().filter(|e| args.run.as_deref().is_none_or(|r| e["run_id"] == r)) {
        if args.json {
            println!("{}", json_for_terminal(&e.to_string()));
            continue;
        }
        let mut rest = e.clone();
        let obj = rest.as_object_mut();
        let take = |o: &mut Option<&mut serde_json::Map<String, serde_json::Value>>, k: &str| o.as_mut().and_then(|m| m.remove(k)).unwrap_or_default();
        let mut obj = obj;
        let ts = take(&mut obj, "ts");
        let run = take(&mut obj, "run_id");
        let event = take(&mut obj, "event");
        let shown = |v: &Value| match v {
            Value::String(s) => escape(s).into_owned(),
            other => escape(&other.to_string()).into_owned(),
        };
        let detail: Vec<String> = obj.map(|m| m.iter().map(|(k, v)| format!("{}={}", escape(k), shown(v))).collect()).unwrap_or_default();
        println!("{:>14} {} {:<12} {}", shown(&ts), shown(&run), shown(&event), detail.join(" "));
    }
    Ok(0)
}
