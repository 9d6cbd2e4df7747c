//! `workcell mcp`: the tool service as an MCP server on stdio (the official Rust SDK, rmcp),
//! for an agent running on the host. Approvals are asked through the client when it takes
//! elicitations (`super::elicit`; not with `--no-elicit`), else on the terminal; refusals
//! come back as tool errors whose text the agent can act on.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde_json::Value;

use super::elicit::Elicitation;
use super::service::{AccessArgs, CallWorkerArgs, EditArgs, Facts, ListArgs, PathArgs, ReadArgs, ShellArgs, ShellOutput, ToolService, WriteArgs};

/// The MCP face of a [`ToolService`].
#[derive(Clone)]
pub struct McpServer {
    service: Arc<ToolService>,
    /// Where approvals are elicited, unless `--no-elicit`.
    elicitation: Option<Elicitation>,
}

fn schema<T: JsonSchema>() -> Arc<serde_json::Map<String, Value>> {
    let v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

/// One tool's description, schema and annotations (MCP `ToolAnnotations`), as chosen from
/// what the tool does and the session's [`Facts`]; docs/tools.md (the table of tool hints) explains each choice.
struct Spec {
    name: &'static str,
    title: &'static str,
    description: &'static str,
    input: Arc<serde_json::Map<String, Value>>,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    open_world: bool,
}

fn specs(facts: Facts) -> Vec<Spec> {
    let spec = |name, title, description, input, read_only, destructive, idempotent, open_world| Spec {
        name,
        title,
        description,
        input,
        read_only,
        destructive,
        idempotent,
        open_world,
    };
    vec![
        spec(
            "read_file",
            "Read a file",
            "Read a file in the sandbox: text by default, or its bytes as base64 with encoding \"base64\". Paths are sandbox paths such as /data/notes.md; list_files('/') shows the directories you can use.",
            schema::<ReadArgs>(),
            true,
            false,
            true,
            false,
        ),
        // Destructive: it replaces a file that exists. Idempotent: the same content twice
        // leaves the same file.
        spec(
            "write_file",
            "Write a file",
            "Write a file in the sandbox (atomically, replacing any file there): text by default, or bytes sent as base64 with encoding \"base64\". Writes to some directories need a person's approval.",
            schema::<WriteArgs>(),
            false,
            true,
            true,
            false,
        ),
        // Not idempotent: a new text that contains the old one can be replaced again.
        spec("edit_file", "Edit a file", "Replace old_text, which must occur exactly once, with new_text.", schema::<EditArgs>(), false, true, false, false),
        spec("delete_file", "Delete a file", "Delete a file in the sandbox.", schema::<PathArgs>(), false, true, true, false),
        spec(
            "list_files",
            "List files",
            "List files below a sandbox directory matching a glob ('*' one level, '**' any depth).",
            schema::<ListArgs>(),
            true,
            false,
            true,
            false,
        ),
        // A command changes nothing outside the sandbox's writable zones and network: with
        // neither, it only reads; with the network on, it reaches the open world.
        spec(
            "shell",
            "Run a command in the sandbox",
            "Run a shell command line inside the sandbox (pipelines, &&, ||, ;, redirections, subshells, cd and quoting work; every program it runs and every file it redirects into is judged by the worker's rules): it sees only the sandbox's directories and, unless allowed, no network.",
            schema::<ShellArgs>(),
            !facts.writable && !facts.network,
            facts.writable,
            false,
            facts.network,
        ),
        // A child worker writes in its own zones; its network is never more than this
        // sandbox's.
        spec(
            "call_worker",
            "Call another worker",
            "Call another worker with input text and attachments (sandbox paths it receives read-only).",
            schema::<CallWorkerArgs>(),
            false,
            true,
            false,
            facts.network,
        ),
        // Grants the session a host directory outside the sandbox: changes what the other
        // tools reach, deletes nothing, and reaches beyond the sandbox.
        spec(
            "request_access",
            "Request access to a host directory",
            "Ask the person for session access to a host directory outside the sandbox.",
            schema::<AccessArgs>(),
            false,
            false,
            false,
            true,
        ),
    ]
}

/// The tools, all of them, with descriptions, schemas and annotations for `facts`; `shell`
/// declares its structured output ([`ShellOutput`]).
pub fn tools(facts: Facts) -> Vec<Tool> {
    specs(facts)
        .into_iter()
        .map(|s| {
            let annotations =
                ToolAnnotations::with_title(s.title).read_only(s.read_only).destructive(s.destructive).idempotent(s.idempotent).open_world(s.open_world);
            let tool = Tool::new(s.name, s.description, s.input).with_title(s.title).with_annotations(annotations);
            if s.name == "shell" {
                tool.with_output_schema::<ShellOutput>()
            } else {
                tool
            }
        })
        .collect()
}

/// The tools this session can use (see [`ToolService::available_tools`]).
pub fn tools_for(service: &ToolService) -> Vec<Tool> {
    let available = service.available_tools();
    tools(service.facts()).into_iter().filter(|t| available.contains(&t.name.as_ref())).collect()
}

/// Why the MCP server could not start, or stopped other than by the client leaving.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// Boxed: the SDK's error holds a whole JSON-RPC message.
    #[error("MCP initialisation failed: {0}")]
    Init(#[from] Box<rmcp::service::ServerInitializeError>),
    #[error("MCP server stopped: {0}")]
    Stopped(#[from] tokio::task::JoinError),
}

impl McpServer {
    pub fn new(service: Arc<ToolService>, elicitation: Option<Elicitation>) -> McpServer {
        McpServer { service, elicitation }
    }

    /// Takes the client as the place to ask, when it declared elicitation (idempotent; every
    /// request checks, in case a client sends one before its `initialized` notification).
    fn connect(&self, peer: &rmcp::Peer<RoleServer>) {
        if let Some(e) = &self.elicitation {
            if e.connect(peer) {
                tracing::debug!("approvals are asked through the MCP client (elicitation)");
            }
        }
    }

    /// Serves on stdin/stdout until the client disconnects; a message over the transport's
    /// limit is answered with an error ([`super::mcp_stdio`]).
    pub async fn serve_stdio(self) -> Result<(), McpError> {
        let (stdin, stdout) = rmcp::transport::stdio();
        let running = self.serve(super::mcp_stdio::Stdio::new(stdin, stdout)).await.map_err(Box::new)?;
        running.waiting().await?;
        Ok(())
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        // Our name and version, not the SDK's (rmcp's default is its own crate's).
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("workcell", env!("CARGO_PKG_VERSION")).with_title("workcell sandboxed tools"))
            .with_instructions(
            "workcell sandboxed tools: every path is a sandbox path; list_files('/') shows the directories available. Refusals say what is allowed instead.",
        )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.connect(&context.peer);
    }

    async fn list_tools(&self, _request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>) -> Result<ListToolsResult, ErrorData> {
        self.connect(&context.peer);
        Ok(ListToolsResult { tools: tools_for(&self.service), ..Default::default() })
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        self.connect(&context.peer);
        let service = self.service.clone();
        let name = request.name.to_string();
        // A tool that is not listed is refused by name, with why and what is listed, before
        // its arguments are looked at.
        if let Some(why) = service.unavailable(&name) {
            let listed = service.available_tools().join(", ");
            let text = format!("[unavailable] the tool '{}' is not available in this session: {why}. Tools: {listed}", crate::term::escape(&name));
            // Audited like any refused call: an agent probing for tools shows in the log.
            let _ = service.audit().record("tool_call", serde_json::json!({"tool": name, "ok": false, "kind": "unavailable", "error": why}));
            return Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into());
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let structured = name == "shell";
        // Tool calls block (file I/O, prompts, sandboxed commands); an elicited approval is
        // sent from this runtime while the call's thread waits for it.
        let result = tokio::task::spawn_blocking(move || service.call(&name, args))
            .await
            .map_err(|e| ErrorData::internal_error(format!("tool task failed: {e}"), None))?;
        Ok(match result {
            // The text stays for clients that do not read structured content.
            Ok(v) if structured => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(serde_json::to_string_pretty(&v).unwrap_or_default())]);
                r.structured_content = Some(v);
                r
            }
            Ok(v) => CallToolResult::success(vec![ContentBlock::text(serde_json::to_string_pretty(&v).unwrap_or_default())]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("[{}] {e}", e.kind()))]),
        }
        .into())
    }
}
