//! `workcell audit`: the project's audit log, readable or raw.

use clap::Args;

use super::{load_project, Cli, CliError};
use crate::tools::audit::read_all;

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
            println!("{e}");
            continue;
        }
        let mut rest = e.clone();
        let obj = rest.as_object_mut();
        let take = |o: &mut Option<&mut serde_json::Map<String, serde_json::Value>>, k: &str| o.as_mut().and_then(|m| m.remove(k)).unwrap_or_default();
        let mut obj = obj;
        let ts = take(&mut obj, "ts");
        let run = take(&mut obj, "run_id");
        let event = take(&mut obj, "event");
        let detail: Vec<String> = obj.map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect()).unwrap_or_default();
        println!("{:>14} {} {:<12} {}", ts, run.as_str().unwrap_or(""), event.as_str().unwrap_or(""), detail.join(" "));
    }
    Ok(0)
}
