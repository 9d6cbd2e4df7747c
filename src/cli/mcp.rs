//! `workcell mcp`: sandboxed tools for an agent on the host, over MCP on stdio.

use std::sync::Arc;

use clap::Args;

use super::{load_project, ApprovalFlags, Cli, CliError};
use crate::config::BackendChoice;
use crate::run::runner::BackendRunner;
use crate::tools::elicit::Elicitation;
use crate::tools::mcp::McpServer;
use crate::tools::service::Caller;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve with this worker's sandbox and rules (default: the project's sandbox).
    #[arg(long)]
    pub worker: Option<String>,
    /// Backend for shell commands and child workers.
    #[arg(long, value_enum)]
    pub backend: Option<BackendChoice>,
    /// Host user the worker runs as, `UID` or `UID:GID` (never 0), like `defaults.user`;
    /// only as root (a normal user's workers run as that user).
    #[arg(long, value_name = "UID[:GID]", value_parser = crate::config::parse_user)]
    pub user: Option<crate::plan::UserSpec>,
    #[command(flatten)]
    pub approvals: ApprovalFlags,
    /// Ask for approvals on workcell's terminal only, never through the MCP client
    /// (elicitation), whatever the client supports.
    #[arg(long)]
    pub no_elicit: bool,
}

pub fn run(cli: &Cli, args: &McpArgs) -> Result<i32, CliError> {
    let mut project = load_project(cli.config.as_deref())?;
    super::user::apply(&mut project, args.user)?;
    let project = Arc::new(project);
    let worker = args.worker.as_deref().map(|w| project.worker(w).cloned()).transpose()?;
    // The tools act as the user a run of this project's workers runs as (see `plan::worker_user`).
    let user = crate::plan::worker_user(&project.dir, project.defaults.user);
    let sandbox = worker.as_ref().map(|w| w.sandbox.clone()).unwrap_or_else(|| project.sandbox.clone()).acting_as(user);
    let mode = args.approvals.mode();
    // Before serving: the tools act as the worker, so a zone its user cannot use is refused
    // now, as a run would refuse it.
    let choice = args.backend.unwrap_or(project.defaults.backend);
    if choice == BackendChoice::Kubernetes {
        return Err(CliError::Usage(crate::backend::BackendError::RenderedOnly.to_string()));
    }
    if choice != BackendChoice::None {
        let user = crate::plan::worker_user(&project.dir, project.defaults.user);
        crate::plan::access::check_sandbox(&sandbox, user, choice == BackendChoice::Bwrap).map_err(|e| CliError::Usage(e.to_string()))?;
    }
    // A zone an earlier run left unverified is refused before serving, as a run refuses it.
    crate::run::unverified::refuse_marked(&project.dir, &sandbox).map_err(|e| match e {
        crate::run::unverified::UnverifiedError::Read { .. } => CliError::Failed(e.to_string()),
        _ => CliError::Unverified(e.to_string()),
    })?;
    // Shell commands and child workers run under the worker's runtime, as in its own run.
    let runtime = worker.as_ref().and_then(|w| w.runtime.clone()).or_else(|| project.defaults.runtime.clone());
    let runner = BackendRunner::new(project.clone(), args.backend.unwrap_or(project.defaults.backend), mode)
        .under_runtime(runtime)
        .preapproving(args.approvals.preapproved());
    // Approvals go to the client once it says it takes elicitations, unless --no-elicit.
    let elicitation = (!args.no_elicit).then(Elicitation::default);
    let runner = match &elicitation {
        Some(e) => runner.eliciting(e.clone()),
        None => runner,
    };
    // One sandbox for the whole session, kept between its shell commands.
    let runner = runner.with_session();
    let session = runner.session.clone();
    let run_id = crate::plan::new_run_id();
    let chain = worker.iter().map(|w| w.name.clone()).collect();
    let service = Arc::new(runner.service_for(Caller { worker, chain }, sandbox, &run_id));
    let _ = service.audit().record("session_start", serde_json::json!({"transport": "mcp"}));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| CliError::Failed(format!("cannot start the runtime: {e}")))?;
    let result = rt.block_on(McpServer::new(service.clone(), elicitation).serve_stdio());
    // The client is gone (or closed stdin): the session's sandbox goes with it.
    if let Some(session) = session {
        session.end();
    }
    let _ = service.audit().record("session_end", serde_json::json!({"transport": "mcp"}));
    if let Some(summary) = service.expansion_summary() {
        eprintln!("{summary}");
    }
    result.map(|_| 0).map_err(|e| CliError::Failed(e.to_string()))
}
