//! `workcell mcp`: the tool service as an MCP server on stdio (the official Rust SDK, rmcp),
//! for an agent running on the host. Approval prompts go to the terminal, never to the MCP
//! channel; refusals come back as tool errors whose text the agent can act on.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde_json::Value;

use super::service::{AccessArgs, CallWorkerArgs, EditArgs, ListArgs, PathArgs, ReadArgs, ShellArgs, ToolService, WriteArgs};

/// The MCP face of a [`ToolService`].
#[derive(Clone)]
pub struct McpServer {
    service: Arc<ToolService>,
}

fn schema<T: JsonSchema>() -> Arc<serde_json::Map<String, Value>> {
    let v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

/// The tools with their descriptions and argument schemas.
pub fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "read_file",
            "Read a text file in the sandbox. Paths are sandbox paths such as /data/notes.md; list_files('/') shows the directories you can use.",
            schema::<ReadArgs>(),
        ),
        Tool::new("write_file", "Write a text file in the sandbox (atomically). Writes to some directories need a person's approval.", schema::<WriteArgs>()),
        Tool::new("edit_file", "Replace old_text, which must occur exactly once, with new_text.", schema::<EditArgs>()),
        Tool::new("delete_file", "Delete a file in the sandbox.", schema::<PathArgs>()),
        Tool::new("list_files", "List files below a sandbox directory matching a glob ('*' one level, '**' any depth).", schema::<ListArgs>()),
        Tool::new(
            "shell",
            "Run one command (no pipes, redirections or chains) inside the sandbox: it sees only the sandbox's directories and, unless allowed, no network.",
            schema::<ShellArgs>(),
        ),
        Tool::new("call_worker", "Call another worker with input text and attachments (sandbox paths it receives read-only).", schema::<CallWorkerArgs>()),
        Tool::new(
            "request_access",
            "Ask the person for session access to a host directory outside the sandbox (only when the project enables it).",
            schema::<AccessArgs>(),
        ),
    ]
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
    pub fn new(service: Arc<ToolService>) -> McpServer {
        McpServer { service }
    }

    /// Serves on stdin/stdout until the client disconnects.
    pub async fn serve_stdio(self) -> Result<(), McpError> {
        let running = self.serve(rmcp::transport::stdio()).await.map_err(Box::new)?;
        running.waiting().await?;
        Ok(())
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "workcell sandboxed tools: every path is a sandbox path; list_files('/') shows the directories available. Refusals say what is allowed instead.",
        )
    }

    async fn list_tools(&self, _request: Option<PaginatedRequestParams>, _context: RequestContext<RoleServer>) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult { tools: tools(), ..Default::default() })
    }

    async fn call_tool(&self, request: CallToolRequestParams, _context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        let service = self.service.clone();
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        // Tool calls block (file I/O, terminal prompts, sandboxed commands).
        let result = tokio::task::spawn_blocking(move || service.call(&name, args))
            .await
            .map_err(|e| ErrorData::internal_error(format!("tool task failed: {e}"), None))?;
        Ok(match result {
            Ok(v) => CallToolResult::success(vec![ContentBlock::text(serde_json::to_string_pretty(&v).unwrap_or_default())]),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("[{}] {e}", e.kind()))]),
        }
        .into())
    }
}
