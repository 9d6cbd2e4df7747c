//! The host side of tools (docs/tools.md): shell rules, approvals and the audit log. The tool
//! service and its transports (broker socket, MCP) build on these.

pub mod approval;
pub mod attach;
pub mod broker;
pub mod elicit;
pub mod git_guard;
pub mod launchers;
pub mod mcp;
mod mcp_id;
pub mod mcp_stdio;
pub mod service;
pub mod shell;
