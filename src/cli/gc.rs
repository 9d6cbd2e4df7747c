//! `workcell gc`: remove containers, images, cgroups and broker directories that interrupted
//! runs left behind.

use clap::Args;

use super::CliError;
use crate::backend::docker::maintenance::gc;

// Arguments of `workcell gc` (a plain comment, see `DoctorArgs`).
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Also remove the cached host base image and every image built from `build:` folders.
    #[arg(long)]
    pub all: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Removes leftovers labelled `dev.workcell.managed=true` and prints what went.
pub fn run(args: &GcArgs) -> Result<i32, CliError> {
    // The bwrap backend's per-run cgroups of runs that were killed outright.
    for dir in crate::backend::cgroup::remove_leftovers() {
        eprintln!("removed cgroup {}", dir.display());
    }
    // The broker directories of runs that were killed outright.
    for dir in crate::tools::broker::remove_stale_dirs() {
        eprintln!("removed broker directory {}", dir.display());
    }
    // The docker staging mounts of runs that were killed before their container started.
    for dir in crate::backend::docker::staging::remove_stale() {
        eprintln!("removed staging directory {}", dir.display());
    }
    let report = gc(args.all).map_err(|e| CliError::Failed(e.to_string()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        for c in &report.containers {
            println!("removed container {c}");
        }
        for i in &report.images {
            println!("removed image {i}");
        }
        for k in &report.kept {
            println!("kept container {k}: a running workcell owns it");
        }
        for e in &report.errors {
            eprintln!("workcell: could not remove {e}");
        }
        if report.containers.is_empty() && report.images.is_empty() && report.errors.is_empty() {
            println!("nothing to remove");
        }
    }
    Ok(if report.errors.is_empty() { 0 } else { 1 })
}
