//! `workcell gc`: remove containers, images, cgroups and broker directories that interrupted
//! runs left behind.

use clap::Args;

use super::out::outln;
use super::CliError;
use crate::backend::docker::maintenance::{gc, GcReport};

/// Arguments of `workcell gc`.
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
    // What runs killed outright leave on the host: the bwrap backend's per-run cgroups,
    // broker directories, and docker staging mounts of runs killed before their container
    // started.
    // Copies and staging of `delivery: copy` whose run is over (its lock released).
    let copies = crate::delivery::scratch::remove_stale();
    let host = [
        ("cgroup", crate::backend::cgroup::remove_leftovers()),
        ("broker directory", crate::tools::broker::remove_stale_dirs()),
        ("staging directory", crate::backend::docker::staging::remove_stale()),
        ("delivery directory", copies.removed),
    ];
    // Without Docker (a bwrap-only machine) the host is still cleaned.
    // Pooled sandboxes no run can use any more (see `pool::gc`).
    let pooled = crate::pool::gc();
    let mut report = gc(args.all).unwrap_or_else(|e| GcReport { docker_unavailable: Some(e.to_string()), ..GcReport::default() });
    report.host = host.iter().flat_map(|(what, dirs)| dirs.iter().map(move |d| format!("{what} {}", d.display()))).collect();
    report.host.extend(pooled);
    report.errors.extend(copies.errors.into_iter().map(|e| format!("delivery directory {e}")));
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        for h in &report.host {
            outln!("removed {h}");
        }
        for c in &report.containers {
            outln!("removed container {c}");
        }
        for n in &report.networks {
            outln!("removed network {n}");
        }
        for v in &report.volumes {
            outln!("removed volume {v}");
        }
        for f in &report.firewall {
            outln!("removed the firewall rules of {f}");
        }
        for i in &report.images {
            outln!("removed image {i}");
        }
        for k in &report.kept {
            outln!("kept container {k}: a running workcell owns it");
        }
        for i in &report.images_in_use {
            outln!("kept image {i}: a container uses it");
        }
        if let Some(why) = &report.docker_unavailable {
            eprintln!("workcell: containers and images were not checked: {why}");
        }
        for e in &report.errors {
            eprintln!("workcell: could not remove {e}");
        }
        if report.host.is_empty()
            && report.containers.is_empty()
            && report.networks.is_empty()
            && report.volumes.is_empty()
            && report.firewall.is_empty()
            && report.images.is_empty()
            && report.errors.is_empty()
        {
            outln!("nothing to remove");
        }
    }
    Ok(if report.errors.is_empty() { 0 } else { 1 })
}
