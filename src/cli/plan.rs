//! `workcell plan`: the resolved launch plan, without running anything.

use clap::Args;

use super::{load_project, Cli, CliError};
use crate::plan::{LaunchPlan, Overrides};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Worker to plan (its sandbox, image, command and limits).
    pub worker: Option<String>,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print this backend's rendering instead of the summary (bwrap: the command line;
    /// seatbelt: the profile and its parameters).
    #[arg(long, value_enum)]
    pub backend: Option<crate::config::BackendChoice>,
    /// Command to plan instead of the worker's.
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub fn run(cli: &Cli, args: &PlanArgs) -> Result<i32, CliError> {
    let project = load_project(cli.config.as_deref())?;
    let worker = args.worker.as_deref().map(|w| project.worker(w)).transpose().map_err(CliError::Usage)?;
    let sandbox = worker.map(|w| w.sandbox.clone()).unwrap_or_else(|| project.sandbox.clone());
    let ov = Overrides { command: (!args.command.is_empty()).then(|| args.command.clone()), ..Overrides::default() };
    let plan = LaunchPlan::build(&project, worker, &sandbox, &ov).map_err(|e| CliError::Usage(e.to_string()))?;
    match args.backend {
        Some(crate::config::BackendChoice::Bwrap) => return Ok(print_rendering(crate::backend::bwrap::plan_text(&plan))),
        Some(crate::config::BackendChoice::Seatbelt) => return Ok(print_rendering(crate::backend::seatbelt::plan_text(&plan))),
        _ => {}
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan).unwrap_or_default());
    } else {
        println!("worker:   {}", plan.worker.as_deref().unwrap_or("(ad hoc)"));
        println!("image:    {:?}", plan.image);
        println!("command:  {}", shlex::try_join(plan.command.iter().map(String::as_str)).unwrap_or_default());
        println!("network:  {}", if plan.network { "on" } else { "off (loopback only)" });
        println!("workdir:  {}", plan.workdir);
        println!("user:     {}:{}", plan.user.uid, plan.user.gid);
        println!("mounts:");
        for m in &plan.mounts {
            println!("  {} <- {} ({})", m.target, m.source.display(), if m.read_only { "ro" } else { "rw" });
        }
        println!("limits:   timeout {:?}, memory {:?} bytes, cpus {:?}, pids {:?}", plan.limits.timeout, plan.limits.memory_bytes, plan.limits.cpus, plan.limits.pids);
    }
    Ok(0)
}

fn print_rendering(text: String) -> i32 {
    print!("{text}");
    0
}
