//! Command line: one module per subcommand. Parsing and dispatch only; the library decides.

mod audit;
mod check;
mod docs;
mod doctor;
mod gc;
mod init;
mod mcp;
pub(crate) mod out;
mod plan;
mod pool;
mod run;
/// On the ground floor, so that the backends' own notes and warnings use it too.
pub(crate) use crate::style;
mod unverified;
mod user;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use out::outln;

use crate::config::{ConfigError, Project, WorkerError};

/// Exit status of a usage or configuration error.
pub const EXIT_USAGE: i32 = 2;
pub use crate::backend::EXIT_INTERNAL;

/// A failure that ends a command, with the exit status it maps to.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error(transparent)]
    Zone(#[from] run::ZoneSpecError),
    #[error("{0}")]
    Failed(String),
    /// A zone's check for files the host runs could not finish, now or in an earlier run.
    #[error("{0}")]
    Unverified(String),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) | CliError::Config(_) | CliError::Worker(_) | CliError::Zone(_) => EXIT_USAGE,
            CliError::Failed(_) => EXIT_INTERNAL,
            CliError::Unverified(_) => crate::run::unverified::EXIT_UNVERIFIED,
        }
    }
}

/// workcell runs untrusted work inside an isolation boundary derived from a declarative
/// sandbox of zones (host directories, read-only or read-write).
#[derive(Debug, Parser)]
#[command(name = "workcell", version = env!("WORKCELL_VERSION"), about, long_about = None)]
pub struct Cli {
    /// Project file (default: the nearest workcell.yaml, searching upward).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format on stderr (filter with RUST_LOG).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// When to colour workcell's own output: auto (when that stream is a terminal and
    /// NO_COLOR is unset or empty), always, never.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = clap::ColorChoice::Auto)]
    pub color: clap::ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

/// The two ways to run, under `workcell run -h`.
const RUN_EXAMPLES: &str = "Examples:
  workcell run line-count
      the worker workers/line-count.worker, with the zones it asks for
  workcell run --zone in=./data:ro --zone out=./out:rw -- sh -c 'wc -l /in/* > /out/counts.txt'
      one command, with the directories named (no workcell.yaml needed)";

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a starter workcell.yaml and one example worker.
    Init(init::InitArgs),
    /// Check whether sandbox paths may be read (or written).
    Check(check::CheckArgs),
    /// Print what a run would do, without running anything.
    Plan(plan::PlanArgs),
    /// Run a worker, or a command, inside its isolation boundary.
    #[command(after_help = RUN_EXAMPLES)]
    Run(run::RunArgs),
    /// Serve sandboxed tools to an agent over MCP on stdio.
    Mcp(mcp::McpArgs),
    /// Show the audit log.
    Audit(audit::AuditArgs),
    /// Print the JSON Schema of workcell.yaml and of worker files.
    Schema,
    /// Say which isolation backends work here, and what to fix when they do not.
    Doctor(doctor::DoctorArgs),
    /// Remove containers and images that interrupted runs left behind.
    Gc(gc::GcArgs),
    /// List the zones whose check after a run could not finish; clear one after looking.
    Unverified(unverified::UnverifiedArgs),
    /// Start docker sandboxes ahead of time, so that runs start warm.
    #[command(subcommand)]
    Pool(pool::PoolCommand),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    Completions(docs::CompletionsArgs),
    /// Print workcell's man page (roff).
    Man,
    /// Internal: the watchdog of one docker run (see `backend::docker::reaper`).
    #[command(name = "__reap", hide = true)]
    Reap {
        /// The container to remove if the run's workcell dies without removing it.
        container: String,
    },
    /// Internal: the exec agent of a session sandbox, its first process (see `agent`).
    #[command(name = "__agent", hide = true)]
    Agent {
        /// The socket workcell listens on, inside the sandbox.
        socket: std::path::PathBuf,
        /// A FIFO to wait on before connecting (a pooled sandbox, see `pool`).
        #[arg(long, value_name = "FIFO")]
        wake: Option<std::path::PathBuf>,
    },
}

/// How requests that need a person's yes are answered.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct ApprovalFlags {
    /// Approve every request that needs consent, without asking.
    #[arg(long, conflicts_with = "strict")]
    pub approve_all: bool,
    /// Deny every request that needs consent, without asking.
    #[arg(long)]
    pub strict: bool,
    /// Approve one kind of request in advance: `shell` approves the shell commands whose
    /// rules would ask (deny rules still deny); never writes to `ask` zones, delegation,
    /// network connections or access requests.
    #[arg(long = "approve", value_enum, value_name = "PRESET")]
    pub preset: Option<Preset>,
}

/// Requests `--approve` can approve in advance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// Shell commands whose rules would ask.
    Shell,
}

impl ApprovalFlags {
    pub fn preapproved(self) -> crate::tools::approval::Preapproved {
        crate::tools::approval::Preapproved { shell: self.preset == Some(Preset::Shell) }
    }

    pub fn mode(self) -> crate::tools::approval::ApprovalMode {
        use crate::tools::approval::ApprovalMode;
        if self.approve_all {
            ApprovalMode::ApproveAll
        } else if self.strict {
            ApprovalMode::Strict
        } else {
            ApprovalMode::Interactive
        }
    }
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let ansi = style::stderr_has_color();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Loads the project named by `--config`, or found from the current directory.
pub fn load_project(config: Option<&std::path::Path>) -> Result<Project, CliError> {
    let cwd = std::env::current_dir().map_err(|e| CliError::Usage(format!("cannot read the current directory: {e}")))?;
    Ok(Project::load(config, &cwd)?)
}

/// The command line as parsed: [`Cli`], with the global options (`--config`, `--color`,
/// `--log-format`) listed once, in `workcell --help`. clap copies a global option into every
/// subcommand and lists it there too; a subcommand that already has the option keeps its own,
/// so each gets a hidden copy first. The copies stay global, so `workcell run --config F`
/// works as before and its value reaches [`Cli`].
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    fn hide_globals(cmd: clap::Command, globals: &[clap::Arg]) -> clap::Command {
        cmd.mut_subcommands(|sc| {
            let sc = globals.iter().fold(sc, |sc, a| sc.arg(a.clone().hide(true)));
            hide_globals(sc, globals)
        })
    }
    let cmd = Cli::command();
    let globals: Vec<clap::Arg> = cmd.get_arguments().filter(|a| a.is_global_set()).cloned().collect();
    hide_globals(cmd, &globals)
}

/// Runs the command line; returns the process exit status.
pub fn main() -> i32 {
    use clap::FromArgMatches;
    // Before parsing: clap's own help and usage errors follow `--color` too.
    style::init(style::early_choice(std::env::args_os()));
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.format(&mut command()).exit());
    // The agent runs inside the sandbox: no logging set-up, no watchdog, nothing else.
    if let Command::Agent { socket, wake } = &cli.command {
        return crate::agent::serve::main(socket, wake.as_deref());
    }
    style::init(cli.color);
    init_logging(cli.log_format);
    // Runs started from this binary can leave a watchdog behind (it runs this binary again).
    crate::backend::docker::reaper::enable();
    let result = match &cli.command {
        Command::Init(a) => init::run(a),
        Command::Check(a) => check::run(&cli, a),
        Command::Plan(a) => plan::run(&cli, a),
        Command::Run(a) => run::run(&cli, a),
        Command::Mcp(a) => mcp::run(&cli, a),
        Command::Audit(a) => audit::run(&cli, a),
        Command::Doctor(a) => doctor::run(&cli, a),
        Command::Gc(a) => gc::run(a),
        Command::Unverified(a) => unverified::run(&cli, a),
        Command::Pool(a) => pool::run(&cli, a),
        Command::Completions(a) => docs::completions(a),
        Command::Man => docs::man(),
        Command::Reap { container } => Ok(crate::backend::docker::reaper::watch(container)),
        Command::Agent { socket, wake } => Ok(crate::agent::serve::main(socket, wake.as_deref())),
        Command::Schema => {
            outln!("{}", serde_json::to_string_pretty(&crate::config::raw::schemas()).unwrap_or_default());
            Ok(0)
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{} {}", style::error_prefix(), crate::term::escape_lines(&e.to_string()));
            e.exit_code()
        }
    }
}
