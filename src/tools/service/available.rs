//! Which tools can work in this session's configuration, and what the others lack. The MCP
//! server lists only the former and refuses the latter by name with the reason, rather than
//! offering an agent tools that can only ever refuse.

use super::{ToolService, MAX_DEPTH, TOOL_NAMES};

/// What is known about the session when tools are listed, for their annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// Commands in the sandbox reach a network beyond loopback (open or by rules).
    pub network: bool,
    /// The sandbox has a writable zone now.
    pub writable: bool,
}

impl ToolService {
    /// The session's facts for tool annotations.
    pub fn facts(&self) -> Facts {
        let sb = self.sandbox();
        Facts { network: sb.network(), writable: !sb.writable_roots().is_empty() }
    }

    /// Why `tool` can never succeed in this session, or `None` when it can.
    pub fn unavailable(&self, tool: &str) -> Option<String> {
        if !TOOL_NAMES.contains(&tool) {
            return Some(format!("there is no tool '{tool}'"));
        }
        let rule = self.caller.worker.as_ref().and_then(|w| w.tool_rules.get(tool).copied());
        if rule.and_then(|r| r.allowed) == Some(false) {
            return Some(format!("the {tool} tool is disabled for this worker (tool_rules.{tool}.allowed: false)"));
        }
        let can_approve = (self.can_approve)();
        let no_consent = "every call needs a person's approval and none can be given (no terminal to ask on and no MCP client that takes elicitations, or --strict); run with a terminal, from a client that supports elicitation, or with --approve-all";
        match tool {
            "write_file" | "edit_file" | "delete_file" if !(self.facts().writable || (self.project.dynamic && can_approve)) => {
                Some("the sandbox has no writable zone (every zone is mode: ro)".into())
            }
            "call_worker" => {
                let callable = self.callable_workers();
                if callable.is_empty() {
                    let why = match &self.caller.worker {
                        None => "the project defines no workers".to_string(),
                        Some(w) if w.workers.is_empty() => format!("worker '{}' has no `workers:` it may call", w.name),
                        Some(_) if self.caller.chain.len() >= MAX_DEPTH => format!("worker calls may nest at most {MAX_DEPTH} deep"),
                        Some(w) => {
                            format!("none of worker '{}''s `workers:` ({}) is a worker of the project outside this call chain", w.name, w.workers.join(", "))
                        }
                    };
                    return Some(why);
                }
                let ask = rule.and_then(|r| r.approval_required).unwrap_or(true);
                (ask && !can_approve).then(|| no_consent.to_string())
            }
            "request_access" if !self.project.dynamic => Some("this project does not enable dynamic expansion (sandbox.dynamic: true)".into()),
            "request_access" if !can_approve => Some(no_consent.into()),
            _ => None,
        }
    }

    /// Names of the tools that can work in this session, in [`TOOL_NAMES`] order.
    pub fn available_tools(&self) -> Vec<&'static str> {
        TOOL_NAMES.iter().copied().filter(|t| self.unavailable(t).is_none()).collect()
    }

    /// Workers this caller may call now: listed in its `workers:` (or any, for the host
    /// agent), defined in the project, not already in the chain, and within the depth.
    fn callable_workers(&self) -> Vec<&str> {
        if self.caller.chain.len() >= MAX_DEPTH {
            return Vec::new();
        }
        let listed = |name: &str| match &self.caller.worker {
            Some(w) => w.workers.iter().any(|x| x == name || x == "*"),
            None => true,
        };
        self.project.workers.keys().map(String::as_str).filter(|n| listed(n) && !self.caller.chain.iter().any(|c| c == n)).collect()
    }
}
