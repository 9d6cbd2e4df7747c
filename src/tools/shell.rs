//! Shell rules (seed 001 phase 6): which command lines a worker may run, and which need a
//! person's yes. Commands are split with shlex and executed without a shell, so shell
//! metacharacters are refused rather than interpreted.

use serde::Serialize;

use crate::config::{Rule, ShellRule};
use crate::sandbox::Sandbox;

/// The shell rules of one worker, in the precedence order of SPEC §6.
#[derive(Debug, Clone, Default)]
pub struct ShellPolicy {
    /// `tool_rules.shell`: whether the shell tool exists at all, and its fallback approval.
    pub tool: Rule,
    pub rules: Vec<ShellRule>,
    /// `shell_default`: for commands no rule matches.
    pub default: Rule,
}

/// What the policy says about one command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ShellDecision {
    /// The command may run, after approval when `approval_required`.
    Allowed {
        args: Vec<String>,
        approval_required: bool,
        /// The pattern of the rule that matched, if any.
        rule: Option<String>,
    },
    /// The command may not run; the reason says why and what would be allowed.
    Refused { reason: String },
}

/// Characters and sequences a shell would interpret. We run no shell, so they would be
/// passed literally — refusing them is clearer than surprising the caller.
const METACHARACTERS: &[(&str, &str)] = &[
    (";", "command separator ';'"),
    ("&&", "'&&'"),
    ("||", "'||'"),
    ("|", "pipe '|'"),
    ("&", "background '&'"),
    (">", "redirection '>'"),
    ("<", "redirection '<'"),
    ("`", "backtick substitution"),
    ("$(", "command substitution '$('"),
    ("${", "variable expansion '${'"),
    ("$", "variable '$'"),
    ("\n", "newline"),
];

/// Refuses shell metacharacters, naming the first one found.
pub fn check_metacharacters(command: &str) -> Result<(), String> {
    for (seq, what) in METACHARACTERS {
        if command.contains(seq) {
            return Err(format!(
                "the command contains {what}; commands run without a shell, so pipes, redirections, substitutions, variables and command chains are not available. Run one command per call"
            ));
        }
    }
    Ok(())
}

/// True when `pattern`'s words are the first words of `args` (whole words: `git` does not
/// match `gitx`).
pub fn matches(pattern: &str, args: &[String]) -> bool {
    let words = shlex::split(pattern).unwrap_or_default();
    !words.is_empty() && args.len() >= words.len() && words.iter().zip(args).all(|(w, a)| w == a)
}

/// Arguments that look like paths: contain `/`, or start with `.` or `~`.
fn path_like(arg: &str) -> bool {
    !arg.starts_with('-') && (arg.contains('/') || arg.starts_with('.') || arg.starts_with('~'))
}

/// Checks that every path-like argument after the pattern lies inside one of `allowed`
/// (sandbox paths, compared after the sandbox's own parsing, so `..` cannot escape).
fn check_sandbox_paths(args: &[String], pattern_len: usize, allowed: &[String], sandbox: &Sandbox) -> Result<(), String> {
    let prefixes: Vec<_> = allowed.iter().filter_map(|p| sandbox.parse_for_compare(p).ok()).collect();
    for arg in args.iter().skip(pattern_len).filter(|a| path_like(a)) {
        let inside = sandbox.parse_for_compare(arg).ok().is_some_and(|vp| prefixes.iter().any(|p| p.mount == vp.mount && vp.rel.starts_with(&p.rel)));
        if !inside {
            return Err(format!("the argument '{arg}' is outside the paths this command may use: {}", allowed.join(", ")));
        }
    }
    Ok(())
}

impl ShellPolicy {
    /// Decides about `command`: `tool_rules.shell.allowed` → the first matching rule →
    /// `shell_default` → `tool_rules.shell.approval_required` (default: ask).
    pub fn decide(&self, command: &str, sandbox: &Sandbox) -> ShellDecision {
        let refuse = |reason: String| ShellDecision::Refused { reason };
        if self.tool.allowed == Some(false) {
            return refuse("the shell tool is disabled for this worker (tool_rules.shell.allowed: false)".into());
        }
        if let Err(reason) = check_metacharacters(command) {
            return refuse(reason);
        }
        let args = match shlex::split(command) {
            Some(a) if !a.is_empty() => a,
            Some(_) => return refuse("the command is empty".into()),
            None => return refuse("the command cannot be split into arguments (unbalanced quotes?)".into()),
        };
        if let Some(rule) = self.rules.iter().find(|r| matches(&r.pattern, &args)) {
            if !rule.allowed {
                return refuse(format!("commands starting with '{}' are not allowed for this worker", rule.pattern));
            }
            if !rule.sandbox_paths.is_empty() {
                let n = shlex::split(&rule.pattern).map(|w| w.len()).unwrap_or(0);
                if let Err(reason) = check_sandbox_paths(&args, n, &rule.sandbox_paths, sandbox) {
                    return refuse(reason);
                }
            }
            return ShellDecision::Allowed { args, approval_required: rule.approval_required, rule: Some(rule.pattern.clone()) };
        }
        if self.default.allowed == Some(false) {
            let allowed: Vec<&str> = self.rules.iter().filter(|r| r.allowed).map(|r| r.pattern.as_str()).collect();
            return refuse(format!(
                "no shell rule matches this command and shell_default does not allow others; allowed commands start with: {}",
                if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
            ));
        }
        let approval_required = self.default.approval_required.or(self.tool.approval_required).unwrap_or(true);
        ShellDecision::Allowed { args, approval_required, rule: None }
    }
}
