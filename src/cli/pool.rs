//! `workcell pool fill|ls|drain`: docker sandboxes started ahead of their runs
//! ([`crate::pool`]).

use clap::{Args, Subcommand};

use super::out::outln;
use super::run::{prepare, RunArgs};
use super::{load_project, Cli, CliError};
use crate::pool::{self, Filling};

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Start sandboxes for the runs these arguments make (the same as `workcell run`'s;
    /// a command given is not part of it): a later `workcell run` with the same worker,
    /// zones, image, network, limits and user takes one and starts warm.
    Fill(Box<FillArgs>),
    /// List the pooled sandboxes of this project (`--all`: of every project).
    Ls(ListArgs),
    /// Remove the ready sandboxes of this project (`--all`: of every project).
    Drain(ListArgs),
}

#[derive(Debug, Args)]
pub struct FillArgs {
    /// How many sandboxes to start (1 to 64).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub size: u32,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Every project's, not only this one's.
    #[arg(long)]
    pub all: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cli: &Cli, command: &PoolCommand) -> Result<i32, CliError> {
    match command {
        PoolCommand::Fill(a) => fill(cli, a),
        PoolCommand::Ls(a) => {
            let project = project_dir(cli, a)?;
            let entries = pool::list(project.as_deref());
            if a.json {
                outln!("{}", serde_json::to_string_pretty(&entries).unwrap_or_default());
            } else if entries.is_empty() {
                outln!("no pooled sandboxes{}", if a.all { "" } else { " for this project" });
            } else {
                outln!("{:<16}  {:<8}  {:<16}  {:>8}  CONTAINER", "ID", "STATE", "WORKER", "AGE");
                for e in entries {
                    let worker = crate::term::escape(e.worker.as_deref().unwrap_or("-")).into_owned();
                    outln!("{:<16}  {:<8}  {:<16}  {:>7}s  {}", e.id, e.state, worker, e.age_secs, e.container);
                }
            }
            Ok(0)
        }
        PoolCommand::Drain(a) => {
            let project = project_dir(cli, a)?;
            let (removed, errors) = pool::drain(project.as_deref());
            for id in &removed {
                outln!("removed {id}");
            }
            for e in &errors {
                eprintln!("workcell: could not remove {e}; `workcell gc` tries again");
            }
            if removed.is_empty() && errors.is_empty() {
                outln!("nothing to drain");
            }
            Ok(if errors.is_empty() { 0 } else { 1 })
        }
    }
}

fn project_dir(cli: &Cli, args: &ListArgs) -> Result<Option<std::path::PathBuf>, CliError> {
    if args.all {
        return Ok(None);
    }
    // As for `workcell run --zone` outside any project: the current directory's runs.
    let cwd = std::env::current_dir().map_err(|e| CliError::Usage(format!("cannot read the current directory: {e}")))?;
    if cli.config.is_none() && crate::config::find_config(&cwd).is_none() {
        return Ok(Some(cwd));
    }
    Ok(Some(load_project(cli.config.as_deref())?.dir))
}

fn fill(cli: &Cli, args: &FillArgs) -> Result<i32, CliError> {
    for _ in 0..args.size {
        let filling = Filling::new().map_err(|e| CliError::Failed(e.to_string()))?;
        let prepared = prepare(cli, &args.run, Some(filling.dir()))?;
        let plan = prepared.session.plan();
        if let Some(why) = pool::why_not(plan, prepared.session.backend()) {
            return Err(CliError::Usage(format!("cannot pool these runs: {why}; they start cold (`workcell run` as usual)")));
        }
        filling.share_with(plan.user).map_err(|e| CliError::Failed(e.to_string()))?;
        crate::backend::docker::pooled::start(plan, &filling.container(), &filling.label()).map_err(|e| CliError::Failed(e.to_string()))?;
        let id = filling.ready(plan).map_err(|e| CliError::Failed(e.to_string()))?;
        outln!("{id} ready{}", plan.worker.as_deref().map(|w| format!(" (worker {})", crate::term::escape(w))).unwrap_or_default());
    }
    Ok(0)
}
