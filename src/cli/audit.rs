//! `workcell audit`: the project's audit log, readable or raw.

use clap::Args;

use super::out::outln;
use super::{load_project, Cli, CliError};
use crate::term::escape;
use crate::term::json_for_terminal;
use crate::tools::audit::read_all;
use serde_json::Value;

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
            outln!("{}", json_for_terminal(&e.to_string()));
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
        outln!("{:>14} {} {:<12} {}", shown(&ts), shown(&run), shown(&event), detail.join(" "));
    }
    Ok(0)
}
