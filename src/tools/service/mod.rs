//! `ToolService`: the operations a worker (through the broker socket) or an agent (through
//! MCP) asks for, checked against the sandbox and its policies, gated by approvals, and
//! recorded in the audit log. One service, two transports.

use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::approval::{Action, ApprovalRequest, Approver, Decision, Reach};
use super::git_guard;
use super::launchers::analyse;
pub use super::shell::dialect::Dialect;
use super::shell::{ShellDecision, ShellPolicy};
use crate::audit::AuditLog;
use crate::config::{Project, Worker};
use crate::sandbox::{Approval, Mount, Sandbox, SandboxError};

pub mod attachments;
mod available;
mod encoding;
mod expansion;
mod requests;
mod shell_args;

pub use available::Facts;
pub use expansion::Expansion;
pub use requests::{AccessArgs, CallWorkerArgs, EditArgs, Encoding, ListArgs, PathArgs, ReadArgs, ShellArgs, WriteArgs};

/// Default and largest `read_file` window, in characters.
pub const DEFAULT_MAX_CHARS: usize = 200_000;
/// Shell timeout when a call names none (a call may ask for 1 to 3600 s).
pub const DEFAULT_SHELL_TIMEOUT_SECS: u64 = 30;
/// Output kept per stream of a shell command or a child worker (the backends keep no more
/// while they read it).
pub const SHELL_OUTPUT_CAP: usize = crate::backend::capture::OUTPUT_CAP;
/// Deepest chain of worker calls.
pub const MAX_DEPTH: usize = 5;

/// Why a tool call did not happen. Every variant's message is meant for the caller (often an
/// LLM) to act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The sandbox refused (outside, read-only, suffix, size…).
    #[error("{0}")]
    Sandbox(#[from] SandboxError),
    /// A person (or the approval mode) said no, or the zone blocks the operation.
    #[error("{0}")]
    Denied(String),
    /// The request itself is not allowed or malformed (shell rule, unknown worker, cycle…).
    #[error("{0}")]
    Refused(String),
    /// Something failed while carrying the request out.
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::Sandbox(e) => e.kind(),
            ToolError::Denied(_) => "denied",
            ToolError::Refused(_) => "refused",
            ToolError::Failed(_) => "failed",
        }
    }
}

/// Output of a command run inside the sandbox: at most [`SHELL_OUTPUT_CAP`] bytes per
/// stream, and how many bytes of each were cut beyond that.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ShellOutput {
    /// The exit status of the command (see `timed_out` for a command killed at its timeout).
    pub exit_code: i32,
    /// Standard output, at most 50 000 bytes (invalid UTF-8 replaced).
    pub stdout: String,
    /// Standard error, at most 50 000 bytes, with workcell's notes appended.
    pub stderr: String,
    /// True when the command was killed at its timeout.
    pub timed_out: bool,
    /// Bytes of standard output cut beyond the cap (0: nothing was cut).
    pub stdout_truncated_bytes: u64,
    /// Bytes of standard error cut beyond the cap (0: nothing was cut).
    pub stderr_truncated_bytes: u64,
}

/// Why a [`SandboxRunner`] could not run a command or a child worker (their own failures are
/// in their [`ShellOutput`]): the runner's own typed error (`run::runner::RunnerError`),
/// boxed with its sources so the tool service does not depend on how commands are run.
pub type RunFailure = Box<dyn std::error::Error + Send + Sync>;

/// Runs commands inside a sandbox: a fresh boundary per call (bwrap, docker, or — only when
/// chosen — none). Injected so the service does not depend on one backend.
pub trait SandboxRunner: Send + Sync {
    /// Runs `cmd` with `sandbox`'s filesystem and network, within `timeout_secs`.
    fn run(&self, sandbox: &Sandbox, cmd: &ShellRun, timeout_secs: u64) -> Result<ShellOutput, RunFailure>;
    /// The working directory a shell command would get by default: the shell rules judge
    /// relative paths from it, and [`SandboxRunner::run`] is then given it explicitly.
    fn workdir(&self, sandbox: &Sandbox) -> String;
    /// The shell the sandbox runs command lines with (bash where it is known to have one):
    /// the shell rules judge a line in its grammar.
    fn dialect(&self) -> Dialect;
    /// Runs a child worker with `sandbox`, its input and its attachments (host files copied
    /// into a private directory the child sees read-only); returns its output.
    fn run_worker(
        &self,
        worker: &Worker,
        sandbox: &Sandbox,
        input: &str,
        attachments: &[Attachment],
        depth: usize,
        chain: &[String],
    ) -> Result<ShellOutput, RunFailure>;
}

/// A shell command as the tool service runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellRun {
    pub args: Vec<String>,
    /// Added to the run's environment (see `git_guard`).
    pub env: Vec<(String, String)>,
    /// The directory the command starts in (the one its paths were judged from).
    pub workdir: String,
    /// Bytes given to the command on its standard input (empty: an empty input).
    pub stdin: Vec<u8>,
}

pub use attachments::Attachment;

/// Who is calling: the worker (for `workers:` and rules) and its place in a delegation chain.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    pub worker: Option<Worker>,
    /// Worker names from the top of the chain to this caller.
    pub chain: Vec<String>,
}

/// The tool service of one run (or one MCP session).
pub struct ToolService {
    project: Arc<Project>,
    caller: Caller,
    sandbox: RwLock<Sandbox>,
    shell: ShellPolicy,
    approver: Mutex<Approver>,
    audit: AuditLog,
    runner: Arc<dyn SandboxRunner>,
    expansions: Mutex<Vec<Expansion>>,
    /// Whether any consent can be given in this session now (read without the approver's
    /// lock, which a prompt holds while a person answers; an MCP client's elicitation
    /// support is known only once it has initialised).
    can_approve: Reach,
}

impl std::fmt::Debug for ToolService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolService").field("caller", &self.caller.chain).finish()
    }
}

/// Names of the tools, as both transports expose them.
pub const TOOL_NAMES: &[&str] = &["read_file", "write_file", "edit_file", "delete_file", "list_files", "shell", "call_worker", "request_access"];

fn args<T: for<'de> Deserialize<'de>>(tool: &str, v: Value) -> Result<T, ToolError> {
    serde_json::from_value(v).map_err(|e| ToolError::Refused(format!("invalid arguments for {tool}: {e}")))
}

impl ToolService {
    pub fn new(project: Arc<Project>, caller: Caller, sandbox: Sandbox, approver: Approver, audit: AuditLog, runner: Arc<dyn SandboxRunner>) -> ToolService {
        let shell = match &caller.worker {
            Some(w) => ShellPolicy { tool: w.tool_rules.get("shell").copied().unwrap_or_default(), rules: w.shell_rules.clone(), default: w.shell_default },
            None => ShellPolicy::default(),
        };
        let can_approve = approver.reach();
        ToolService {
            project,
            caller,
            sandbox: RwLock::new(sandbox),
            shell,
            approver: Mutex::new(approver),
            audit,
            runner,
            expansions: Mutex::new(Vec::new()),
            can_approve,
        }
    }

    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// The current effective sandbox (including session expansions).
    pub fn sandbox(&self) -> Sandbox {
        self.sandbox.read().map(|s| s.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Session expansions granted so far.
    pub fn expansions(&self) -> Vec<Expansion> {
        self.expansions.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Calls a tool by name with JSON arguments; records the call and its outcome.
    pub fn call(&self, tool: &str, arguments: Value) -> Result<Value, ToolError> {
        // Summarised before the call takes the arguments: contents (up to the broker's 2 MiB)
        // are neither copied for the log nor held twice.
        let args = redact(&arguments);
        let result = self.dispatch(tool, arguments);
        let outcome = match &result {
            Ok(_) => json!({"tool": tool, "args": args, "ok": true}),
            Err(e) => json!({"tool": tool, "args": args, "ok": false, "kind": e.kind(), "error": e.to_string()}),
        };
        if let Err(e) = self.audit.record("tool_call", outcome) {
            return Err(ToolError::Failed(format!("cannot write the audit log: {e}")));
        }
        result
    }

    fn dispatch(&self, tool: &str, v: Value) -> Result<Value, ToolError> {
        match tool {
            "read_file" => {
                let a: ReadArgs = args(tool, v)?;
                match a.encoding {
                    Encoding::Utf8 => self.read_file(&a.path, a.max_chars.unwrap_or(DEFAULT_MAX_CHARS), a.offset.unwrap_or(0)),
                    Encoding::Base64 => self.read_file_base64(&a.path, a.max_chars.unwrap_or(DEFAULT_MAX_CHARS), a.offset.unwrap_or(0)),
                }
            }
            "write_file" => {
                let a: WriteArgs = args(tool, v)?;
                match a.encoding {
                    Encoding::Utf8 => self.write_file(&a.path, &a.content),
                    Encoding::Base64 => self.write_file_base64(&a.path, &a.content),
                }
            }
            "edit_file" => {
                let a: EditArgs = args(tool, v)?;
                self.edit_file(&a.path, &a.old_text, &a.new_text)
            }
            "delete_file" => {
                let a: PathArgs = args(tool, v)?;
                self.delete_file(&a.path)
            }
            "list_files" => {
                let a: ListArgs = args(tool, v)?;
                self.list_files(a.path.as_deref().unwrap_or("/"), a.pattern.as_deref().unwrap_or("*"))
            }
            "shell" => {
                let a: ShellArgs = args(tool, v)?;
                self.shell(&a)
            }
            "call_worker" => {
                let a: CallWorkerArgs = args(tool, v)?;
                self.call_worker(&a.name, &a.input, &a.attachments)
            }
            "request_access" => {
                let a: AccessArgs = args(tool, v)?;
                self.request_access(&a.path, &a.mode)
            }
            other => Err(ToolError::Refused(format!("unknown tool '{other}'; tools: {}", TOOL_NAMES.join(", ")))),
        }
    }

    fn tool_allowed(&self, tool: &str) -> Result<(), ToolError> {
        let rule = self.caller.worker.as_ref().and_then(|w| w.tool_rules.get(tool).copied());
        if rule.and_then(|r| r.allowed) == Some(false) {
            return Err(ToolError::Refused(format!("the {tool} tool is disabled for this worker (tool_rules.{tool}.allowed: false)")));
        }
        Ok(())
    }

    /// Asks for consent when the zone's approval for `action` is `ask`; refuses `blocked`.
    fn gate(&self, mount: Option<&Mount>, action: Action, path: &str) -> Result<(), ToolError> {
        let Some(m) = mount else { return Ok(()) };
        let setting = match action {
            Action::Read => m.approval.read,
            Action::Write => m.approval.write,
            Action::Delete => m.approval.delete,
            _ => Approval::Ask,
        };
        match setting {
            Approval::PreApproved => Ok(()),
            Approval::Blocked => {
                let what = match action {
                    Action::Delete => "deletes",
                    Action::Read => "reads",
                    _ => "writes",
                };
                Err(ToolError::Denied(format!("{what} in {} are blocked by the project's approval settings", m.mount_point)))
            }
            Approval::Ask => self.consent(ApprovalRequest::file(action, path)),
        }
    }

    /// Asks (per the run's approval mode) whether the worker may connect to `destination`
    /// (`host:port`), which no network rule lists; audited like every decision. A session
    /// approval covers that destination.
    pub fn consent_to_connect(&self, destination: &str) -> Result<(), ToolError> {
        self.consent(ApprovalRequest::new(Action::Connect, destination, destination))
    }

    /// Decides a consent request and audits the decision.
    fn consent(&self, req: ApprovalRequest) -> Result<(), ToolError> {
        let decision = match self.approver.lock() {
            Ok(mut a) => a.decide(&req),
            Err(_) => Decision::Denied { reason: "the approval engine failed earlier in this session".into() },
        };
        self.audit
            .record("decision", json!({"action": req.action, "subject": req.subject, "scope": req.scope, "decision": decision}))
            .map_err(|e| ToolError::Failed(format!("cannot write the audit log: {e}")))?;
        match decision {
            Decision::Approved { .. } => Ok(()),
            Decision::Denied { reason } => Err(ToolError::Denied(reason)),
        }
    }

    pub fn read_file(&self, path: &str, max_chars: usize, offset: usize) -> Result<Value, ToolError> {
        self.tool_allowed("read_file")?;
        let sb = self.sandbox();
        sb.resolve(path)?;
        self.gate(sb.mount_of(path), Action::Read, path)?;
        let r = sb.read(path, max_chars.min(DEFAULT_MAX_CHARS), offset)?;
        Ok(serde_json::to_value(r).unwrap_or(Value::Null))
    }

    pub fn write_file(&self, path: &str, content: &str) -> Result<Value, ToolError> {
        self.write_file_bytes(path, content.as_bytes())
    }

    /// `write_file` of any bytes (text, or decoded base64).
    pub fn write_file_bytes(&self, path: &str, content: &[u8]) -> Result<Value, ToolError> {
        self.tool_allowed("write_file")?;
        let sb = self.sandbox();
        // Sandbox refusals come before any prompt: nobody is asked about the impossible.
        sb.resolve_for_write(path)?;
        sb.check_suffix(path)?;
        sb.check_hostrun(path)?;
        sb.check_write_size(path, content.len() as u64)?;
        self.gate(sb.mount_of(path), Action::Write, path)?;
        sb.write_bytes(path, content)?;
        Ok(json!({"path": path, "bytes": content.len()}))
    }

    pub fn edit_file(&self, path: &str, old: &str, new: &str) -> Result<Value, ToolError> {
        self.tool_allowed("edit_file")?;
        let sb = self.sandbox();
        sb.resolve_for_write(path)?;
        sb.check_suffix(path)?;
        sb.check_hostrun(path)?;
        // Check the match before asking, so a person approves an edit that can happen.
        // And the size of the result, so nobody is asked about a file too large to write.
        let text = sb.check_edit(path, old)?;
        sb.check_write_size(path, (text.len() - old.len() + new.len()) as u64)?;
        drop(text);
        self.gate(sb.mount_of(path), Action::Write, path)?;
        sb.edit(path, old, new)?;
        Ok(json!({"path": path, "edited": true}))
    }

    pub fn delete_file(&self, path: &str) -> Result<Value, ToolError> {
        self.tool_allowed("delete_file")?;
        let sb = self.sandbox();
        // Checked (and the directory held) before anybody is asked; a link is deleted itself.
        let pending = sb.prepare_delete(path)?;
        self.gate(sb.mount_of(path), Action::Delete, path)?;
        pending.remove()?;
        Ok(json!({"path": path, "deleted": true}))
    }

    pub fn list_files(&self, path: &str, pattern: &str) -> Result<Value, ToolError> {
        self.tool_allowed("list_files")?;
        let listing = self.sandbox().list(path, pattern)?;
        let mut v = json!({"path": path, "entries": listing.entries});
        if listing.truncated {
            v["truncated"] = json!(format!("only the first {} entries are listed; narrow the path or the pattern", crate::sandbox::LIST_LIMIT));
        }
        if !listing.unreadable.is_empty() {
            v["unreadable"] = json!(listing.unreadable);
        }
        Ok(v)
    }

    /// Runs a command line the shell rules allow (after approval when they ask for it), with
    /// the call's working directory, environment and standard input (`shell_args`).
    pub fn shell(&self, a: &ShellArgs) -> Result<Value, ToolError> {
        let command = a.command.as_str();
        let timeout = a.timeout.unwrap_or(DEFAULT_SHELL_TIMEOUT_SECS);
        let sb = self.sandbox();
        let default_dir = self.runner.workdir(&sb);
        let bad = |e: shell_args::ArgsError| ToolError::Refused(format!("cannot run '{command}': {e}"));
        let workdir = match &a.cwd {
            Some(dir) => shell_args::cwd(dir, &default_dir, &sb).map_err(bad)?,
            None => default_dir,
        };
        let extra_env = shell_args::env(&a.env).map_err(bad)?;
        let stdin = shell_args::stdin(a.stdin.as_deref()).map_err(bad)?;
        let (args, approval_required, rule) = match self.shell.decide_call(command, &sb, &workdir, !extra_env.is_empty(), self.runner.dialect()) {
            ShellDecision::Refused { reason } => return Err(ToolError::Refused(format!("cannot run '{command}': {reason}"))),
            ShellDecision::Allowed { args, approval_required, rule } => (args, approval_required, rule),
        };
        if approval_required {
            let scope = rule.clone().unwrap_or_else(|| command.to_string());
            self.consent(ApprovalRequest::new(Action::Shell, command, scope))?;
        }
        // The guard's variables come last: a call cannot override them (shell_args refuses
        // their names too). A command line run by a shell gets only these: git's argv is
        // hardened for a git started directly (`harden_argv`), not inside a shell string.
        let mut env = extra_env;
        env.extend(git_guard::env());
        env.extend(Dialect::neutral_env());
        let run = ShellRun { args: git_guard::harden_argv(&args, &analyse(&args)), env, workdir, stdin };
        let timeout = timeout.clamp(1, 3600);
        let mut out = self.runner.run(&sb, &run, timeout).map_err(|e| ToolError::Failed(format!("cannot run '{command}' in the sandbox: {e}")))?;
        out.stdout_truncated_bytes = cap(&mut out.stdout, out.stdout_truncated_bytes);
        out.stderr_truncated_bytes = cap(&mut out.stderr, out.stderr_truncated_bytes);
        if out.timed_out {
            out.stderr.push_str(&format!("\n[workcell: the command was killed at its timeout ({timeout} s) or at the end of the run's own time]"));
        }
        if out.exit_code != 0 {
            annotate(&mut out, &sb);
        }
        Ok(serde_json::to_value(out).unwrap_or(Value::Null))
    }

    pub fn call_worker(&self, name: &str, input: &str, attachments: &[String]) -> Result<Value, ToolError> {
        let allowed = match &self.caller.worker {
            Some(w) => w.workers.iter().any(|x| x == name || x == "*"),
            // The host agent (MCP) may call any worker of the project.
            None => true,
        };
        if !allowed {
            let list = self.caller.worker.as_ref().map(|w| w.workers.join(", ")).unwrap_or_default();
            return Err(ToolError::Refused(format!("this worker may not call '{name}'; it may call: {}", if list.is_empty() { "no workers" } else { &list })));
        }
        let child = self.project.worker(name).map_err(|e| ToolError::Refused(e.to_string()))?.clone();
        let mut chain = self.caller.chain.clone();
        if chain.iter().any(|c| c == name) {
            chain.push(name.to_string());
            return Err(ToolError::Refused(format!("worker call cycle refused: {}", chain.join(" -> "))));
        }
        if chain.len() >= MAX_DEPTH {
            return Err(ToolError::Refused(format!("worker calls may nest at most {MAX_DEPTH} deep: {} -> {name}", chain.join(" -> "))));
        }
        chain.push(name.to_string());
        let sb = self.sandbox();
        // The child's own network (its project-derived sandbox carries it: off, open or its
        // rules) under the caller's: never more than either; it keeps the caller's hosts:.
        let child_sandbox = child.decl.apply(&sb).map_err(ToolError::Sandbox)?.network_narrowed_by(child.sandbox.network_access());
        let files = attachments::check(&sb, &child, attachments)?;
        let ask = self.caller.worker.as_ref().and_then(|w| w.tool_rules.get("call_worker").and_then(|r| r.approval_required)).unwrap_or(true);
        if ask {
            self.consent(ApprovalRequest::new(Action::Delegate, format!("{name} (chain {})", chain.join(" -> ")), name))?;
        }
        self.audit
            .record("delegation", json!({"worker": name, "chain": chain, "attachments": attachments, "readable": child_sandbox.readable_roots(), "writable": child_sandbox.writable_roots()}))
            .map_err(|e| ToolError::Failed(format!("cannot write the audit log: {e}")))?;
        let mut out = self
            .runner
            .run_worker(&child, &child_sandbox, input, &files, chain.len(), &chain)
            .map_err(|e| ToolError::Failed(format!("worker '{name}' could not run: {e}")))?;
        drop(files);
        // The child's output is the parent's to hold: bounded like a shell command's.
        let output_cut = cap(&mut out.stdout, out.stdout_truncated_bytes);
        let stderr_cut = cap(&mut out.stderr, out.stderr_truncated_bytes);
        Ok(json!({
            "worker": name,
            "exit_code": out.exit_code,
            "output": out.stdout,
            "stderr": out.stderr,
            "timed_out": out.timed_out,
            "output_truncated_bytes": output_cut,
            "stderr_truncated_bytes": stderr_cut,
        }))
    }
}

/// Arguments as audited: file contents are summarised, not copied into the log.
fn redact(v: &Value) -> Value {
    let Some(obj) = v.as_object() else { return v.clone() };
    let summarised = obj.iter().map(|(k, x)| match x {
        Value::String(s) if ["content", "old_text", "new_text", "input"].contains(&k.as_str()) => (k.clone(), json!(format!("<{} bytes>", s.len()))),
        other => (k.clone(), other.clone()),
    });
    Value::Object(summarised.collect())
}

/// Keeps at most [`SHELL_OUTPUT_CAP`] bytes (on a char boundary) and says what was cut:
/// `already_cut` bytes the backend did not keep, plus whatever is cut here (the text may
/// have grown in its UTF-8 repair). Returns the bytes cut in all.
fn cap(s: &mut String, already_cut: u64) -> u64 {
    let mut cut = already_cut;
    if s.len() > SHELL_OUTPUT_CAP {
        let mut end = SHELL_OUTPUT_CAP;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        cut += (s.len() - end) as u64;
        s.truncate(end);
    }
    if cut > 0 {
        s.push_str(&format!("\n[workcell: output truncated, {cut} more bytes]"));
    }
    cut
}

/// Adds the sandbox's context to a failed command's stderr: a permission error names the
/// paths the worker may write, so it can retry there.
fn annotate(out: &mut ShellOutput, sb: &Sandbox) {
    let e = out.stderr.to_lowercase();
    if e.contains("permission denied") || e.contains("read-only file system") || e.contains("operation not permitted") {
        out.stderr.push_str(&format!("\n\nNote: this worker's writable paths are: {}", crate::sandbox::PathList(sb.writable_roots())));
    }
    let net = [
        "network is unreachable",
        "could not resolve",
        "bad address",
        "temporary failure in name resolution",
        "connection refused",
        "name or service not known",
    ];
    if !sb.network() && net.iter().any(|n| e.contains(n)) {
        out.stderr.push_str("\n\nNote: network access is disabled for this worker.");
    }
}
