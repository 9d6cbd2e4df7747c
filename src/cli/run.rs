//! `workcell run`: run a worker (or an ad-hoc command) inside its boundary.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use std::sync::Arc;

use super::{load_project, ApprovalFlags, Cli, CliError};
use crate::backend::{Output, Selected};
use crate::config::{describe_char, find_config, parse_cpus, parse_memory, parse_pids, parse_timeout, BackendChoice, Limits, MountError, Project};
use crate::plan::Overrides;
use crate::run::runner::BackendRunner;
use crate::run::{RunError, Services, Session, Spec};
use crate::sandbox::{Addressing, Approval, Approvals, Delivery, Mount, Sandbox, ZoneMode};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Worker to run (from workers/NAME.worker).
    pub worker: Option<String>,
    /// Ad-hoc zone NAME=HOSTPATH[:ro|rw], mounted at /NAME (repeatable). Replaces the
    /// project's zones for this run; `rw` zones given here are writable without prompts.
    #[arg(long = "zone", value_name = "NAME=HOSTPATH[:ro|rw]")]
    pub zones: Vec<String>,
    /// Allow network access for this run.
    #[arg(long)]
    pub network: bool,
    /// Image to use: `host` or a local image name.
    #[arg(long)]
    pub image: Option<String>,
    // The limits go through the parsers of `limits:` in the YAML files, so that a value is
    // accepted, or refused with the same words, wherever it is written.
    /// Kill the worker after this long (exit 124), e.g. 30s, 5m; at most 365 days.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,
    /// Memory limit, e.g. 512m, 2g; at least 6m.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory, allow_negative_numbers = true)]
    pub memory: Option<u64>,
    /// CPU limit, e.g. 0.5, 2; from 0.01 to 1024.
    #[arg(long, value_name = "CPUS", value_parser = parse_cpus, allow_negative_numbers = true)]
    pub cpus: Option<f64>,
    /// Process limit, from 1 to 4194304 (default 512).
    #[arg(long, value_name = "N", value_parser = parse_pids, allow_negative_numbers = true)]
    pub pids: Option<i64>,
    /// NAME=VALUE sets a variable; NAME passes the host's value through (repeatable).
    #[arg(long = "env", short = 'e', value_name = "NAME[=VALUE]")]
    pub env: Vec<String>,
    /// Working directory inside the worker.
    #[arg(long, short = 'w')]
    pub workdir: Option<String>,
    /// Keep standard input open and connected to the worker.
    #[arg(short = 'i', long)]
    pub interactive: bool,
    /// Give the worker a terminal.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Host user the worker runs as, `UID` or `UID:GID` (never 0), like `defaults.user`;
    /// only as root (a normal user's workers run as that user).
    #[arg(long, value_name = "UID[:GID]", value_parser = crate::config::parse_user)]
    pub user: Option<crate::plan::UserSpec>,
    /// Isolation backend (default: the project's `defaults.backend`, else auto).
    #[arg(long, value_enum)]
    pub backend: Option<BackendChoice>,
    /// Docker runtime to run under, e.g. `runsc` (gVisor); replaces the worker's and the
    /// project's `runtime:`, for child workers too. Must be one the daemon lists (`workcell doctor`).
    #[arg(long, value_name = "NAME", value_parser = crate::config::parse_runtime)]
    pub runtime: Option<String>,
    /// Run without the tool broker: the worker cannot ask the host for anything (no
    /// socket is mounted). Its zones and network are unchanged.
    #[arg(long)]
    pub no_broker: bool,
    /// Show what the worker left in zones with `delivery: copy` and ask before publishing
    /// it (without a terminal to ask on, nothing is published).
    #[arg(long)]
    pub review: bool,
    /// Print the delivery summaries of `delivery: copy` zones, and what was moved into the
    /// quarantine (files the host runs), as JSON lines (on stderr).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub approvals: ApprovalFlags,
    /// Command and arguments (overrides the worker's command).
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Why a `--zone NAME=HOSTPATH[:ro|rw]` cannot be used; `spec` is the flag's value.
#[derive(Debug, thiserror::Error)]
pub enum ZoneSpecError {
    #[error("invalid --zone '{spec}': use NAME=HOSTPATH[:ro|rw]")]
    Syntax { spec: String },
    #[error("invalid --zone '{spec}': {source}")]
    MountPoint { spec: String, source: MountError },
    #[error("invalid --zone '{spec}': the zone name must be one path component")]
    NotOneComponent { spec: String },
    #[error("invalid --zone '{}': the host path contains the control character {}", .spec.escape_debug(), describe_char(*.found))]
    Control { spec: String, found: char },
    #[error("invalid --zone '{spec}': host directory '{}' cannot be used: {source}", .host.display())]
    Host { spec: String, host: PathBuf, source: std::io::Error },
    /// A relative host path that a symlink leads out of the current directory.
    #[error("invalid --zone '{spec}': {reason}")]
    Escapes { spec: String, reason: String },
    #[error("invalid --zone '{spec}': '{}' is not a directory", .host.display())]
    NotADirectory { spec: String, host: PathBuf },
    #[error("invalid --zone '{spec}': the mode '{mode}' is not one of ro (read-only) or rw (read-write)")]
    Mode { spec: String, mode: String },
}

/// Parses `NAME=HOSTPATH[:ro|rw]` into a mount at `/NAME`.
///
/// A directory's name may contain `:`, so a suffix after the last `:` is a mode only when it
/// reads as one: `ro` or `rw` always are; any other suffix of letters only (`readonly`,
/// `RO`, or nothing after a trailing `:`) is refused as a bad mode unless the whole of
/// HOSTPATH exists as given, in which case it is that directory (read-only). A suffix with
/// anything else in it (`./a:b/c`, `./v:2`) is part of the path.
pub fn parse_zone(spec: &str, cwd: &Path) -> Result<Mount, ZoneSpecError> {
    let (name, rest) = spec.split_once('=').ok_or_else(|| ZoneSpecError::Syntax { spec: spec.into() })?;
    let (host, mode) = match rest.rsplit_once(':') {
        Some((h, "ro")) => (h, ZoneMode::Ro),
        Some((h, "rw")) => (h, ZoneMode::Rw),
        Some((_, m)) if m.chars().all(|c| c.is_ascii_alphabetic()) && std::fs::symlink_metadata(cwd.join(rest)).is_err() => {
            return Err(ZoneSpecError::Mode { spec: spec.into(), mode: m.into() });
        }
        _ => (rest, ZoneMode::Ro),
    };
    let point = format!("/{name}");
    crate::config::check_mount_point(&point).map_err(|source| ZoneSpecError::MountPoint { spec: spec.into(), source })?;
    if name.is_empty() || name.contains('/') {
        return Err(ZoneSpecError::NotOneComponent { spec: spec.into() });
    }
    if let Some(found) = crate::config::forbidden_char(host) {
        return Err(ZoneSpecError::Control { spec: spec.into(), found });
    }
    let host_path = std::fs::canonicalize(cwd.join(host)).map_err(|source| ZoneSpecError::Host { spec: spec.into(), host: host.into(), source })?;
    if let Some(m) = crate::sandbox::hostdir::leaves_through_symlink(cwd, host, &host_path) {
        return Err(ZoneSpecError::Escapes { spec: spec.into(), reason: m.replace("the project", "the current directory") });
    }
    if !host_path.is_dir() {
        return Err(ZoneSpecError::NotADirectory { spec: spec.into(), host: host.into() });
    }
    let write = if mode == ZoneMode::Rw { Approval::PreApproved } else { Approval::Ask };
    Ok(Mount {
        name: name.to_string(),
        host_path,
        mount_point: point,
        mode,
        suffixes: None,
        max_file_bytes: None,
        approval: Approvals { read: Approval::PreApproved, write, delete: write },
        delivery: Delivery::Bind,
        protection: crate::hostrun::Protection::default(),
    })
}

/// The project for a run: the config file's, or, for `--zone` runs without one, an empty
/// project (no default zones are created).
fn project_for(cli: &Cli, args: &RunArgs, cwd: &Path) -> Result<Project, CliError> {
    if cli.config.is_none() && find_config(cwd).is_none() {
        if args.zones.is_empty() {
            return Err(CliError::Usage(format!(
                "{}: {}; or run a command on directories you name: `workcell run --zone data=./data -- ls /data`",
                cwd.display(),
                crate::config::NO_PROJECT
            )));
        }
        return Ok(Project::from_text("{}", &cwd.join(crate::config::CONFIG_FILE), cwd)?);
    }
    load_project(cli.config.as_deref())
}

/// Refuses a run with neither a worker nor a command, naming what to give (the project's
/// workers among them). A pool entry needs neither: its command is its agent.
fn something_to_run(args: &RunArgs, project: &Project) -> Result<(), CliError> {
    if args.worker.is_some() || !args.command.is_empty() {
        return Ok(());
    }
    let workers: Vec<String> = project.workers.keys().map(|w| crate::term::escape(w).to_string()).collect();
    let known = if workers.is_empty() { "this project has none yet".to_string() } else { format!("this project's: {}", workers.join(", ")) };
    Err(CliError::Usage(format!(
        "nothing to run: name a worker (`workcell run WORKER`; {known}) or give a command after `--` (`workcell run -- sh -c 'ls /'`)"
    )))
}

pub fn run(cli: &Cli, args: &RunArgs) -> Result<i32, CliError> {
    let session = prepare(cli, args, None)?;
    let choice = session.choice;
    let session = session.session;
    let selected = session.backend();
    // (Why `auto` passed docker over is said once, by `run::choose`.)
    if selected == Selected::None && choice != BackendChoice::None {
        eprintln!("{} no isolation backend works here and require_os_sandbox is false", super::style::warning_prefix());
    }
    for line in read_only_writable_zones(&session) {
        eprintln!("{line}");
    }
    let service = session.service().clone();
    let result = session.run(Output::Inherit).map(|f| f.exit_code);
    if let Some(summary) = service.expansion_summary() {
        eprintln!("{summary}");
    }
    result.map_err(run_error)
}

/// One line for each writable zone this run mounts read-only because its writes or deletes
/// need a person's yes, which a mount cannot ask (docs/backends.md): without it a worker
/// meets "Read-only file system" in a zone the project calls `rw`.
fn read_only_writable_zones(session: &Session) -> Vec<String> {
    let sandbox = session.service().sandbox();
    let mounts = &session.plan().mounts;
    let mut named: Vec<String> = Vec::new();
    for area in sandbox.writable_areas() {
        let target = crate::plan::mount_target(sandbox.addressing(), &area.sandbox_path);
        if mounts.iter().any(|m| m.target == target && m.read_only) && !named.contains(&area.mount) {
            named.push(area.mount);
        }
    }
    named
        .iter()
        .map(|zone| {
            format!(
                "workcell: zone '{}' is rw, but its writes or deletes need approval, so the worker gets it read-only (writing through workcell's tools asks first); to make it writable, give the zone `approval: {{write: preApproved, delete: preApproved}}` in workcell.yaml",
                crate::term::escape(zone)
            )
        })
        .collect()
}

/// A prepared run and the backend choice it was made with.
pub(super) struct Prepared {
    pub session: Session,
    pub choice: BackendChoice,
}

/// Prepares the run `args` ask for; with `pool`, the sandbox of a pool entry in that
/// directory instead (`workcell pool fill`), for the runs these arguments would make.
pub(super) fn prepare(cli: &Cli, args: &RunArgs, pool: Option<&Path>) -> Result<Prepared, CliError> {
    let cwd = std::env::current_dir().map_err(|e| CliError::Usage(format!("cannot read the current directory: {e}")))?;
    let mut project = project_for(cli, args, &cwd)?;
    if pool.is_none() {
        something_to_run(args, &project)?;
    }
    super::user::apply(&mut project, args.user)?;
    let worker = args.worker.as_deref().map(|w| project.worker(w)).transpose()?;

    let sandbox = if args.zones.is_empty() {
        worker.map(|w| w.sandbox.clone()).unwrap_or_else(|| project.sandbox.clone())
    } else {
        let mut mounts = args.zones.iter().map(|z| parse_zone(z, &cwd)).collect::<Result<Vec<_>, _>>()?;
        // The project's protected entries, as for its own zones (a flag turns none off).
        for m in &mut mounts {
            m.protection = project.sandbox.host_protection().clone();
        }
        for (i, a) in mounts.iter().enumerate() {
            for b in &mounts[i + 1..] {
                if a.mount_point == b.mount_point {
                    return Err(CliError::Usage(format!("zone '{}' is given twice", a.name)));
                }
            }
        }
        // The project's network, rules included; a worker's own `network:` narrows it as
        // it would without --zone.
        let adhoc = Sandbox::new(mounts, Addressing::Zones, project.sandbox.network_access().clone())
            .map_err(|e| CliError::Usage(e.to_string()))?
            .protected_like(&project.sandbox);
        match worker {
            Some(w) => w
                .decl
                .apply(&adhoc)
                .map_err(|e| CliError::Usage(format!("worker '{}' cannot run with these zones: {e}", w.name)))?
                .network_narrowed_by(w.sandbox.network_access()),
            None => adhoc,
        }
    };

    let limits = Limits { timeout: args.timeout, memory_bytes: args.memory, cpus: args.cpus, pids: args.pids };
    let overrides = Overrides {
        image: args.image.clone(),
        // A pool entry's command is its agent (`pool::attach`); the plan only needs one.
        command: (!args.command.is_empty()).then(|| args.command.clone()).or_else(|| pool.map(|_| vec!["true".into()])),
        network: args.network.then_some(true),
        limits,
        env: args.env.clone(),
        workdir: args.workdir.clone(),
        interactive: args.interactive,
        tty: args.tty,
        runtime: args.runtime.clone(),
        stdin: None,
        inherited_runtime: None,
    };
    let choice = args.backend.or(worker.and_then(|w| w.backend)).unwrap_or(project.defaults.backend);
    // Before anything is copied or started (delivery: copy copies while the session is prepared).
    if choice == BackendChoice::Kubernetes {
        return Err(CliError::Usage(crate::backend::BackendError::RenderedOnly.to_string()));
    }
    let worker = worker.cloned();
    let worker = worker.as_ref();
    let project = Arc::new(project);
    let spec = Spec {
        project: project.clone(),
        worker,
        sandbox,
        overrides,
        choice,
        parent: BackendRunner::new(project.clone(), choice, args.approvals.mode())
            .preapproving(args.approvals.preapproved())
            .reviewing(crate::run::Review { review: args.review, json: args.json }),
        chain: worker.iter().map(|w| w.name.clone()).collect(),
        services: match pool {
            Some(entry) => Services::Pool { entry: entry.to_path_buf(), broker: !args.no_broker },
            None if args.no_broker => Services::None,
            None => Services::Broker { instructions: worker.map(|w| w.instructions.as_str()) },
        },
    };
    Ok(Prepared { session: Session::prepare(spec).map_err(run_error)?, choice })
}

/// A run's failure as the CLI reports it: a refused plan is a usage error (2), anything
/// else workcell's own failure (125).
pub(super) fn run_error(e: RunError) -> CliError {
    match e {
        RunError::Plan(_) | RunError::CopyRefused(_) => CliError::Usage(e.to_string()),
        RunError::Unverified(crate::run::unverified::UnverifiedError::Read { .. }) => CliError::Failed(e.to_string()),
        RunError::Unverified(_) => CliError::Unverified(e.to_string()),
        other => CliError::Failed(other.to_string()),
    }
}
