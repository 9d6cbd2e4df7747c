//! Shell rules: which command lines a worker may run, and which need a
//! person's yes. Commands are split with shlex and executed without a shell, so shell
//! metacharacters are refused rather than interpreted.

use serde::Serialize;

use super::launchers::{analyse, program_name, Stage};
use super::shell_paths;
use crate::config::{Rule, ShellRule};
use crate::sandbox::Sandbox;

/// The shell rules of one worker. Precedence: `tool_rules.shell.allowed: false` disables the
/// tool; else the first matching `shell_rules` entry decides; else `shell_default`; else
/// `tool_rules.shell.approval_required`; else ask.
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

/// A command line holds characters it may not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandTextError {
    /// `0` names the metacharacter ("pipe '|'").
    #[error(
        "the command contains {0}; commands run without a shell, so pipes, redirections, substitutions, variables and command chains are not available. Run one command per call"
    )]
    Metacharacter(&'static str),
    #[error(
        "the command contains the control character U+{:04X}; commands may hold printable characters, spaces and tabs only (a terminal could otherwise show a different command than the one run)",
        *.0 as u32
    )]
    Control(char),
}

/// Refuses shell metacharacters, naming the first one found.
pub fn check_metacharacters(command: &str) -> Result<(), CommandTextError> {
    match METACHARACTERS.iter().find(|(seq, _)| command.contains(seq)) {
        Some((_, what)) => Err(CommandTextError::Metacharacter(what)),
        None => Ok(()),
    }
}

/// Refuses ASCII control characters (and the C1 range), which a terminal showing the command
/// to a person may interpret (`\r` rewrites the line, ESC starts an escape sequence), so the
/// command approved would not be the command run. A tab counts as a space.
pub fn check_control_characters(command: &str) -> Result<(), CommandTextError> {
    match command.chars().find(|&c| c != '\t' && c != '\n' && (c.is_ascii_control() || ('\u{80}'..='\u{9f}').contains(&c))) {
        Some(c) => Err(CommandTextError::Control(c)),
        None => Ok(()),
    }
}

/// True when `pattern`'s words are the first words of `args` (whole words: `git` does not
/// match `gitx`), compared literally.
pub fn matches(pattern: &str, args: &[String]) -> bool {
    let words = shlex::split(pattern).unwrap_or_default();
    !words.is_empty() && args.len() >= words.len() && words.iter().zip(args).all(|(w, a)| w == a)
}

/// True when `pattern` names `stage`'s program (by name: a rule `rm` or `/bin/rm` covers
/// `/usr/bin/rm` and `./rm`) and its further words start the stage's arguments.
pub fn names_stage(pattern: &str, stage: &Stage) -> bool {
    let words = shlex::split(pattern).unwrap_or_default();
    match words.split_first() {
        Some((program, rest)) => program_name(program) == stage.name && stage.args.len() >= rest.len() && rest.iter().zip(&stage.args).all(|(w, a)| w == a),
        None => false,
    }
}

impl ShellPolicy {
    /// Decides about `command` run in the default working directory of a fresh sandbox.
    pub fn decide(&self, command: &str, sandbox: &Sandbox) -> ShellDecision {
        self.decide_in(command, sandbox, &crate::plan::default_workdir(&crate::plan::mounts_for(sandbox)))
    }

    /// Decides about `command`, run in `workdir` (relative paths are judged from there):
    /// `tool_rules.shell.allowed` → the first matching rule → `shell_default` →
    /// `tool_rules.shell.approval_required` (default: ask). A deny rule matches when any
    /// program the command runs (through launchers, `find -exec`, `sh -c`) is the one it
    /// names; an allow rule only when the command is that program, started directly.
    pub fn decide_in(&self, command: &str, sandbox: &Sandbox, workdir: &str) -> ShellDecision {
        let refuse = |reason: String| ShellDecision::Refused { reason };
        if self.tool.allowed == Some(false) {
            return refuse("the shell tool is disabled for this worker (tool_rules.shell.allowed: false)".into());
        }
        if let Err(e) = check_control_characters(command).and_then(|_| check_metacharacters(command)) {
            return refuse(e.to_string());
        }
        let args = match shlex::split(command) {
            Some(a) if !a.is_empty() => a,
            Some(_) => return refuse("the command is empty".into()),
            None => return refuse("the command cannot be split into arguments (unbalanced quotes?)".into()),
        };
        let chain = analyse(&args);
        for rule in &self.rules {
            if !rule.allowed {
                if let Some(stage) = chain.stages.iter().find(|s| names_stage(&rule.pattern, s)) {
                    let via = if chain.stages.len() > 1 {
                        format!(" (the command runs {})", chain.stages.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(" → "))
                    } else {
                        String::new()
                    };
                    return refuse(format!("'{}' is not allowed for this worker (rule '{}' denies it){via}", stage.name, rule.pattern));
                }
                if let Some(why) = &chain.opaque {
                    return refuse(format!(
                        "which program this command runs cannot be told ({why}), and rule '{}' denies some programs; run the program directly",
                        rule.pattern
                    ));
                }
                continue;
            }
            if !(chain.is_plain() && matches(&rule.pattern, &args)) {
                continue;
            }
            if !rule.sandbox_paths.is_empty() {
                let n = shlex::split(&rule.pattern).map(|w| w.len()).unwrap_or(0);
                if let Err(e) = shell_paths::check(&args[n..], &rule.sandbox_paths, sandbox, workdir) {
                    return refuse(e.to_string());
                }
            }
            return ShellDecision::Allowed { args, approval_required: rule.approval_required, rule: Some(rule.pattern.clone()) };
        }
        // Why an allow rule did not apply, when it names a program this command runs.
        let launched = self
            .rules
            .iter()
            .filter(|r| r.allowed && !chain.is_plain() && chain.stages.iter().any(|s| names_stage(&r.pattern, s)))
            .map(|r| format!(" (rule '{}' covers that program only when it is run directly, not through a launcher or find -exec)", r.pattern))
            .next()
            .unwrap_or_default();
        if self.default.allowed == Some(false) {
            let allowed: Vec<&str> = self.rules.iter().filter(|r| r.allowed).map(|r| r.pattern.as_str()).collect();
            return refuse(format!(
                "no shell rule matches this command and shell_default does not allow others; allowed commands start with: {}{launched}",
                if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
            ));
        }
        let approval_required = self.default.approval_required.or(self.tool.approval_required).unwrap_or(true);
        ShellDecision::Allowed { args, approval_required, rule: None }
    }
}
