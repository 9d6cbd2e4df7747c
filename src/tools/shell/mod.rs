//! Shell rules: which command lines a worker may run, and which need a person's yes. A command
//! line is parsed as shell syntax (`script`) and every program it runs is judged: a deny
//! rule matches any of them, an allow rule pre-approves a command line only when it covers each
//! of them, started directly. Redirections into files are judged like the tools' own writes.

use serde::Serialize;

mod builtins;
pub mod dialect;
pub mod paths;
pub mod script;
mod words;

use crate::config::{Rule, ShellRule};
use crate::sandbox::Sandbox;
use crate::tools::launchers::{program_name, Stage};
use dialect::Dialect;
use script::{analyse_script_as, Command, Cwd, Redirect, Script, NONLITERAL};

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

/// A command line holds characters it may not.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandTextError {
    #[error(
        "the command contains the control character U+{:04X}; commands may hold printable characters, spaces, tabs and newlines only (a terminal could otherwise show a different command than the one run)",
        *.0 as u32
    )]
    Control(char),
}

/// Refuses ASCII control characters (and the C1 range), which a terminal showing the command
/// to a person may interpret (`\r` rewrites the line, ESC starts an escape sequence), so the
/// command approved would not be the command run. A tab counts as a space; a newline separates
/// commands (the approval prompt shows it escaped).
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
    stage_match(pattern, stage) == Match::Yes
}

/// Whether a rule names a stage, when some of its words are shell expansions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Match {
    Yes,
    No,
    /// An expanded word stands where the rule's words are compared: it may or may not match.
    Maybe,
}

fn stage_match(pattern: &str, stage: &Stage) -> Match {
    let words = shlex::split(pattern).unwrap_or_default();
    let Some((program, rest)) = words.split_first() else { return Match::No };
    if program_name(program) != stage.name {
        return Match::No;
    }
    for (i, w) in rest.iter().enumerate() {
        match stage.args.get(i) {
            Some(a) if a.starts_with(NONLITERAL) => return Match::Maybe,
            Some(a) if a == w => {}
            // An unquoted expansion earlier may have become several words.
            None if stage.args.iter().any(|a| a.starts_with(NONLITERAL)) => return Match::Maybe,
            _ => return Match::No,
        }
    }
    Match::Yes
}

/// How one simple command fares against the rules.
enum Ruled<'a> {
    Refused(String),
    /// Covered by this allow rule.
    Allowed(&'a ShellRule),
    Unmatched,
}

impl ShellPolicy {
    /// Decides about `command` run in the default working directory of a fresh sandbox.
    pub fn decide(&self, command: &str, sandbox: &Sandbox) -> ShellDecision {
        self.decide_in(command, sandbox, &crate::plan::default_workdir(&crate::plan::mounts_for(sandbox)))
    }

    /// Decides about `command`, run in `workdir` (relative paths are judged from there) by bash.
    pub fn decide_in(&self, command: &str, sandbox: &Sandbox, workdir: &str) -> ShellDecision {
        self.decide_call(command, sandbox, workdir, false, Dialect::Bash)
    }

    /// Decides about `command`, run in `workdir` by the shell of `dialect` (the line is
    /// judged in its grammar, and the decision's args run it there); `env_given` when the call adds environment
    /// variables (which change what a program does, so no allow rule pre-approves it then):
    /// `tool_rules.shell.allowed` → every program against the rules in order (a deny rule
    /// matching any program, or any part that cannot be judged while a deny rule exists,
    /// refuses) → redirections into files → pre-approval when allow rules cover every program
    /// → `shell_default` → `tool_rules.shell.approval_required` (default: ask).
    pub fn decide_call(&self, command: &str, sandbox: &Sandbox, workdir: &str, env_given: bool, dialect: Dialect) -> ShellDecision {
        let refuse = |reason: String| ShellDecision::Refused { reason };
        if self.tool.allowed == Some(false) {
            return refuse("the shell tool is disabled for this worker (tool_rules.shell.allowed: false)".into());
        }
        if let Err(e) = check_control_characters(command) {
            return refuse(e.to_string());
        }
        let script = match analyse_script_as(command, workdir, dialect) {
            Ok(s) => s,
            Err(e) => return refuse(format!("the command cannot be parsed as a shell command line ({e})")),
        };
        // Read otherwise by the shell that would run it: what the judge saw is not what runs.
        if let Some(why) = script.foreign.first() {
            return refuse(why.clone());
        }
        if script.commands.is_empty() && script.redirects.is_empty() && script.assigns.is_empty() && script.opaque.is_empty() {
            return refuse("the command is empty".into());
        }
        let denies = self.rules.iter().find(|r| !r.allowed);
        let mut covered: Vec<Option<&ShellRule>> = Vec::new();
        for cmd in &script.commands {
            match self.rule_for(cmd) {
                Ruled::Refused(reason) => return refuse(reason),
                Ruled::Allowed(rule) => covered.push(Some(rule)),
                Ruled::Unmatched => covered.push(None),
            }
        }
        let mut unjudged: Vec<String> = script.opaque.clone();
        for r in script.redirects.iter().filter(|r| r.write) {
            match judge_write(r, sandbox) {
                Ok(()) => {}
                Err(Unjudged::Refused(reason)) => return refuse(reason),
                Err(Unjudged::Opaque(why)) => unjudged.push(why),
            }
        }
        if let (Some(rule), Some(why)) = (denies, unjudged.first()) {
            return refuse(format!(
                "which programs this command runs, or where it writes, cannot be told: {why}; and rule '{}' denies some programs. Write the program and paths literally",
                rule.pattern
            ));
        }
        if let Some(pre) = self.preapproved(&script, &covered, unjudged.is_empty() && !env_given, sandbox) {
            return match pre {
                Ok((approval_required, rule)) => ShellDecision::Allowed { args: run_args(&script, command, dialect), approval_required, rule: Some(rule) },
                Err(reason) => refuse(reason.to_string()),
            };
        }
        // Why an allow rule did not apply, when it names a program this command runs.
        let launched = script
            .commands
            .iter()
            .filter(|c| !plain(c))
            .flat_map(|c| self.rules.iter().filter(|r| r.allowed && c.chain.stages.iter().any(|s| names_stage(&r.pattern, s))))
            .map(|r| {
                format!(
                    " (rule '{}' covers that program only when it is run directly, not through a launcher, find -exec, exec or with variables set)",
                    r.pattern
                )
            })
            .next()
            .unwrap_or_default();
        if self.default.allowed == Some(false) {
            let allowed: Vec<&str> = self.rules.iter().filter(|r| r.allowed).map(|r| r.pattern.as_str()).collect();
            return refuse(format!(
                "no shell rule covers every program of this command and shell_default does not allow others; allowed commands start with: {}{launched}",
                if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
            ));
        }
        let approval_required = self.default.approval_required.or(self.tool.approval_required).unwrap_or(true);
        ShellDecision::Allowed { args: run_args(&script, command, dialect), approval_required, rule: None }
    }

    /// The first rule that decides about `cmd`: a deny rule naming any program it runs (or
    /// possibly naming one, through an expansion, or with launchers that cannot be read), or an
    /// allow rule matching it as a plain program.
    fn rule_for<'a>(&'a self, cmd: &Command) -> Ruled<'a> {
        for rule in &self.rules {
            if !rule.allowed {
                let via = || {
                    if cmd.chain.stages.len() > 1 {
                        format!(" (the command runs {})", cmd.chain.stages.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(" → "))
                    } else {
                        String::new()
                    }
                };
                for stage in &cmd.chain.stages {
                    match stage_match(&rule.pattern, stage) {
                        Match::Yes => {
                            return Ruled::Refused(format!("'{}' is not allowed for this worker (rule '{}' denies it){}", stage.name, rule.pattern, via()))
                        }
                        Match::Maybe => {
                            return Ruled::Refused(format!(
                                "which program '{}' runs cannot be told (a shell expansion stands where rule '{}' names its arguments); write them literally",
                                cmd.text(),
                                rule.pattern
                            ))
                        }
                        Match::No => {}
                    }
                }
                if let Some(why) = &cmd.chain.opaque {
                    return Ruled::Refused(format!(
                        "which program '{}' runs cannot be told ({why}), and rule '{}' denies some programs; run the program directly",
                        cmd.text(),
                        rule.pattern
                    ));
                }
                continue;
            }
            let n = shlex::split(&rule.pattern).map(|w| w.len()).unwrap_or(0);
            let literal = |w: &[String]| w.iter().all(|w| !w.starts_with(NONLITERAL));
            // Words after the pattern may be expansions only when no path of theirs is checked.
            let words_ok = literal(&cmd.words[..n.min(cmd.words.len())]) && (rule.sandbox_paths.is_empty() || literal(&cmd.words));
            if plain(cmd) && words_ok && matches(&rule.pattern, &cmd.words) {
                return Ruled::Allowed(rule);
            }
        }
        Ruled::Unmatched
    }

    /// `Some` when allow rules cover every program (`clean`: nothing unjudged, no variables
    /// set): whether a person must still approve, and the rules; or why a rule's
    /// `sandbox_paths` refuse it.
    fn preapproved(
        &self,
        script: &Script,
        covered: &[Option<&ShellRule>],
        clean: bool,
        sandbox: &Sandbox,
    ) -> Option<Result<(bool, String), paths::PathsError>> {
        if !clean || !script.assigns.is_empty() || covered.is_empty() || covered.iter().any(Option::is_none) {
            return None;
        }
        let rules: Vec<&ShellRule> = covered.iter().flatten().copied().collect();
        // A rule says which files its program may use only through sandbox_paths: a write
        // into a file is pre-approved only where those cover it (checked below).
        let writes_covered = script.redirects.iter().filter(|r| r.write && !r.target.as_deref().is_some_and(harmless)).all(|r| match r.command {
            Some(i) => !rules[i].sandbox_paths.is_empty(),
            None => rules.iter().any(|rule| !rule.sandbox_paths.is_empty()),
        });
        if !writes_covered {
            return None;
        }
        for (i, (cmd, rule)) in script.commands.iter().zip(&rules).enumerate() {
            if rule.sandbox_paths.is_empty() {
                continue;
            }
            let n = shlex::split(&rule.pattern).map(|w| w.len()).unwrap_or(0);
            // Redirections of this command name files too.
            let mut args = cmd.words[n..].to_vec();
            let own = script.redirects.iter().filter(|r| r.command == Some(i));
            args.extend(own.map(redirect_arg));
            if let Err(e) = paths_in(&args, &rule.sandbox_paths, sandbox, &cmd.cwd)? {
                return Some(Err(e));
            }
        }
        // Redirections of groups and loops: every rule with sandbox_paths must allow them.
        for r in script.redirects.iter().filter(|r| r.command.is_none()) {
            for rule in rules.iter().filter(|r| !r.sandbox_paths.is_empty()) {
                let arg = vec![redirect_arg(r)];
                if let Err(e) = paths_in(&arg, &rule.sandbox_paths, sandbox, &r.cwd)? {
                    return Some(Err(e));
                }
            }
        }
        let mut patterns: Vec<&str> = rules.iter().map(|r| r.pattern.as_str()).collect();
        patterns.dedup();
        Some(Ok((rules.iter().any(|r| r.approval_required), patterns.join(", "))))
    }
}

/// A redirection's file as a word `paths` reads as a path (never as an option).
fn redirect_arg(r: &Redirect) -> String {
    match &r.target {
        Some(t) if t.starts_with('-') => format!("./{t}"),
        Some(t) => t.clone(),
        None => format!("{NONLITERAL}{}", r.text),
    }
}

/// A command an allow rule may cover: one program, started directly by the shell, with no
/// variables set for it.
fn plain(cmd: &Command) -> bool {
    cmd.chain.is_plain() && cmd.direct && !cmd.assigned
}

/// `args` checked against `allowed` from every directory the command may run in; `None` when
/// that is not known (or a word is an expansion): no rule can cover it then.
fn paths_in(args: &[String], allowed: &[String], sandbox: &Sandbox, cwd: &Cwd) -> Option<Result<(), paths::PathsError>> {
    if cwd.unknown.is_some() || args.iter().any(|a| a.starts_with(NONLITERAL)) {
        return None;
    }
    for dir in &cwd.dirs {
        if let Err(e) = paths::check(args, allowed, sandbox, dir) {
            return Some(Err(e));
        }
    }
    Some(Ok(()))
}

/// How the command is run: its words when it is one plain program, else the text given to
/// the shell of the dialect it was judged in, exactly as judged.
fn run_args(script: &Script, command: &str, dialect: Dialect) -> Vec<String> {
    script.argv.clone().unwrap_or_else(|| dialect.argv(command))
}

/// Why a redirection was not accepted.
enum Unjudged {
    /// It writes where the worker may not.
    Refused(String),
    /// Where it writes cannot be told.
    Opaque(String),
}

/// Files every sandbox has that a redirection may write.
fn harmless(path: &str) -> bool {
    matches!(path, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty")
        || path.strip_prefix("/dev/fd/").is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// A redirection that writes a file: into a zone only where the worker may write, and never
/// onto a protected path (a file the host runs, the project's control files). Paths outside
/// the zones are the sandbox's own (`/tmp`, the image): its file system decides.
fn judge_write(r: &Redirect, sandbox: &Sandbox) -> Result<(), Unjudged> {
    let Some(target) = &r.target else {
        return Err(Unjudged::Opaque(format!("the redirection '{}' writes to a file named by a shell expansion", r.text)));
    };
    if harmless(target) {
        return Ok(());
    }
    let full: Vec<String> = if target.starts_with('/') {
        vec![target.clone()]
    } else if let Some(why) = &r.cwd.unknown {
        return Err(Unjudged::Opaque(format!("the redirection '{}' names a relative path {why}", r.text)));
    } else {
        r.cwd.dirs.iter().map(|d| format!("{}/{target}", d.trim_end_matches('/'))).collect()
    };
    for path in full {
        let followed = match sandbox.follow_command_path(&path) {
            Ok(f) => f,
            Err(crate::sandbox::FollowError::Outside | crate::sandbox::FollowError::Unchecked(_)) => continue,
            Err(e) => return Err(Unjudged::Refused(format!("the redirection '{}' cannot be judged: {path}: {e}", r.text))),
        };
        let shown = sandbox.display(&followed.path);
        let leads = if shown != path { format!(" (it leads to {shown})") } else { String::new() };
        if let Err(e) = sandbox.resolve_for_write(&shown).and_then(|_| sandbox.check_hostrun(&shown)) {
            return Err(Unjudged::Refused(format!("the redirection '{}' writes {path}{leads}, which this command may not write: {e}", r.text)));
        }
    }
    Ok(())
}
