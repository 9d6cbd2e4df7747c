//! A command line of the shell tool, parsed as POSIX/bash syntax (`brush-parser`) and walked
//! for everything it would run: every simple command of its pipelines, lists, subshells,
//! groups, `if`/`while`/`for`/`case` bodies, function bodies, `$(…)` and backticks,
//! process substitutions, here-documents, `sh -c` strings, `eval` and `trap` strings. What the
//! walk cannot tell (a program named by an expansion, `source`, aliases, arithmetic that reads
//! variables) is listed as opaque, naming the part. Pure: the sandbox is consulted later.
//!
//! The text is parsed as bash. It is judged in the dialect of the shell that runs it
//! (`dialect`): as bash when bash runs it, else as POSIX sh, where every construct sh
//! reads otherwise is listed as foreign and the line refused. Nested strings are judged in
//! the dialect of the shell that runs them (`sh -c` POSIX, `bash -c` bash, `zsh -c` not at all).

use std::collections::BTreeSet;

use brush_parser::ast;
use brush_parser::ParserOptions;

use super::dialect::{grammar_differs, lexical_trap, Dialect};
use crate::tools::launchers::{analyse, is_launcher, Chain};

/// Marks a word the shell expands (its source text follows): never equal to a literal word,
/// since a command holding U+0000 is refused before it is parsed.
pub const NONLITERAL: char = '\u{0}';

/// Shell strings nested deeper than this (`sh -c "sh -c …"`, `$( $( … ) )`) are opaque.
const MAX_DEPTH: usize = 16;

/// Directory sets larger than this are given up on (every `cd` may fail, so they grow).
const MAX_DIRS: usize = 16;

/// Everything a command line runs, as far as its text shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script {
    /// Every simple command, in the order of the text.
    pub commands: Vec<Command>,
    /// Parts whose program cannot be told, each saying which part and why.
    pub opaque: Vec<String>,
    /// Constructs the shell that runs the line reads otherwise than the judge: the line is
    /// refused, each saying what to write instead.
    pub foreign: Vec<String>,
    /// Redirections to files.
    pub redirects: Vec<Redirect>,
    /// Variables the command line sets (they change what programs run; no allow rule covers
    /// a command line that sets any).
    pub assigns: Vec<String>,
    /// The words of a command line that is one simple command using no shell feature: it is
    /// run directly, without a shell.
    pub argv: Option<Vec<String>>,
}

/// One simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Its words: literal ones as the program gets them, others as [`NONLITERAL`] + source.
    pub words: Vec<String>,
    /// The programs it runs through launchers (`nice`, `env`, `find -exec`, …).
    pub chain: Chain,
    /// Where it may run.
    pub cwd: Cwd,
    /// False when started by a builtin (`exec`, `command`, `builtin`) rather than the shell.
    pub direct: bool,
    /// True when it carries `NAME=value` assignments for its environment.
    pub assigned: bool,
}

impl Command {
    /// The command as shown in messages.
    pub fn text(&self) -> String {
        self.words.iter().map(|w| w.trim_start_matches(NONLITERAL)).collect::<Vec<_>>().join(" ")
    }
}

/// A redirection to (or from) a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    /// The redirection as written (`> /data/x`).
    pub text: String,
    /// The file, when its word is literal.
    pub target: Option<String>,
    /// True for `>`, `>>`, `>|`, `<>`, `&>`, `>&file`.
    pub write: bool,
    pub cwd: Cwd,
    /// The simple command it belongs to (index in [`Script::commands`]), if any.
    pub command: Option<usize>,
}

/// The directories a point of the script may run in: every `cd` may fail, so both the old
/// and the new directory stay possible unless `&&` says which.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cwd {
    pub dirs: BTreeSet<String>,
    /// Why the directory is not known (`cd $X`, a `cd` inside a loop or a function).
    pub unknown: Option<String>,
}

impl Cwd {
    pub fn at(dir: &str) -> Cwd {
        Cwd { dirs: BTreeSet::from([dir.to_string()]), unknown: None }
    }

    pub fn unknown(why: impl Into<String>) -> Cwd {
        Cwd { dirs: BTreeSet::new(), unknown: Some(why.into()) }
    }

    pub(super) fn union(mut self, other: &Cwd) -> Cwd {
        self.dirs.extend(other.dirs.iter().cloned());
        if self.unknown.is_none() {
            self.unknown.clone_from(&other.unknown);
        }
        self.bounded()
    }

    fn bounded(self) -> Cwd {
        if self.dirs.len() > MAX_DIRS {
            return Cwd::unknown("after more directory changes than are followed");
        }
        self
    }

    /// After `cd target` succeeded. `cd` follows the logical path (`link/..` is the
    /// directory holding `link`) and `cd -P` the physical one: both are kept.
    pub(super) fn join(&self, target: &str) -> Cwd {
        let mut dirs = BTreeSet::new();
        for d in &self.dirs {
            let raw = if target.starts_with('/') { target.to_string() } else { format!("{}/{target}", d.trim_end_matches('/')) };
            dirs.insert(lexical(&raw));
            dirs.insert(raw);
        }
        Cwd { dirs, unknown: self.unknown.clone() }.bounded()
    }
}

/// `path` with `.` and `..` removed by name, as `cd -L` does.
fn lexical(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    format!("/{}", out.join("/"))
}

/// The command line cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(String);

pub(super) fn options() -> ParserOptions {
    // Extended globs (`@(…)`) off, as in a non-interactive bash and in every other sh.
    ParserOptions { enable_extended_globbing: false, ..ParserOptions::default() }
}

fn parse(text: &str) -> Result<ast::Program, ParseError> {
    let mut parser = brush_parser::Parser::new(std::io::Cursor::new(text.as_bytes()), &options());
    parser.parse_program().map_err(|e| ParseError(e.to_string()))
}

/// Parses `text` (run in `workdir` by bash) and lists what it runs.
pub fn analyse_script(text: &str, workdir: &str) -> Result<Script, ParseError> {
    analyse_script_as(text, workdir, Dialect::Bash)
}

/// Parses `text` (run in `workdir` by the shell of `dialect`) and lists what it runs.
pub fn analyse_script_as(text: &str, workdir: &str, dialect: Dialect) -> Result<Script, ParseError> {
    let program = parse(text)?;
    let mut w = Walker { dialect, ..Walker::default() };
    w.checked(text, &program, |w| w.program(&program, &Cwd::at(workdir)));
    let mut script = w.out;
    script.argv = super::builtins::direct_argv(&program, &script);
    let mut seen = BTreeSet::new();
    script.opaque.retain(|o| seen.insert(o.clone()));
    let mut seen = BTreeSet::new();
    script.foreign.retain(|o| seen.insert(o.clone()));
    Ok(script)
}

/// Variables whose value a shell or the loader runs or reads as code (`PS4` is expanded with
/// command substitution when tracing, `BASH_ENV`/`ENV` name a script, `BASH_FUNC_*` imports
/// functions, `LD_*` loads libraries, `CDPATH` moves `cd`).
pub fn dangerous_name(name: &str) -> bool {
    // POSIXLY_CORRECT changes bash's grammar (`time -x` is then a program, not the keyword).
    matches!(name, "PS0" | "PS1" | "PS2" | "PS4" | "PROMPT_COMMAND" | "BASH_ENV" | "ENV" | "SHELLOPTS" | "BASHOPTS" | "CDPATH" | "POSIXLY_CORRECT")
        || name.starts_with("BASH_FUNC_")
        || name.starts_with("LD_")
}

/// Builtins taking variable names, which bash evaluates as `name[subscript]` (arithmetic,
/// so `a[$(cmd)]` runs `cmd`).
pub(super) const NAME_BUILTINS: &[&str] =
    &["declare", "typeset", "local", "export", "readonly", "unset", "read", "printf", "mapfile", "readarray", "getopts", "wait", "test", "["];

#[derive(Default)]
pub(super) struct Walker {
    pub(super) out: Script,
    /// The dialect of the shell running the text walked now, and that text.
    pub(super) dialect: Dialect,
    pub(super) text: String,
    depth: usize,
    functions: BTreeSet<String>,
    /// `cd`s walked so far (to tell whether a function body changes directory).
    pub(super) cds: usize,
    functions_cd: bool,
}

pub(super) type Word = (String, Option<String>);

impl Walker {
    pub(super) fn opaque(&mut self, why: String) {
        self.out.opaque.push(why);
    }

    fn program(&mut self, p: &ast::Program, cwd: &Cwd) -> Cwd {
        let mut cur = cwd.clone();
        for list in &p.complete_commands {
            cur = self.list(list, &cur);
        }
        cur
    }

    /// Walks `text` (parsed as `program`) with `walk`, and adds what the shell of this
    /// walk's dialect would read otherwise than the parser did: the constructs the walk names,
    /// else, for sh, any difference between the parser's bash and sh readings.
    fn checked<T>(&mut self, text: &str, program: &ast::Program, walk: impl FnOnce(&mut Walker) -> T) -> T {
        if let Some(why) = lexical_trap(text) {
            self.out.foreign.push(why);
        }
        let named = self.out.foreign.len();
        let outer = std::mem::replace(&mut self.text, text.to_string());
        let end = walk(self);
        self.text = outer;
        if self.dialect == Dialect::Posix && self.out.foreign.len() == named {
            if let Some(why) = grammar_differs(text, program, &options()) {
                self.out.foreign.push(why);
            }
        }
        end
    }

    /// Parses and walks a string the shell running this walk runs (`$(…)`, `eval`, `trap`).
    pub(super) fn nested(&mut self, text: &str, cwd: &Cwd, what: &str) -> Cwd {
        self.nested_as(text, cwd, what, self.dialect)
    }

    /// Parses and walks a shell string run by a shell of `dialect` (`sh -c`, `bash -c`).
    pub(super) fn nested_as(&mut self, text: &str, cwd: &Cwd, what: &str, dialect: Dialect) -> Cwd {
        if self.depth >= MAX_DEPTH {
            self.opaque(format!("{what} nests shell strings too deeply"));
            return Cwd::unknown("after a nested shell string");
        }
        match parse(text) {
            Ok(p) => {
                let outer = std::mem::replace(&mut self.dialect, dialect);
                self.depth += 1;
                let end = self.checked(text, &p, |w| w.program(&p, cwd));
                self.depth -= 1;
                self.dialect = outer;
                end
            }
            Err(e) => {
                self.opaque(format!("{what} '{text}' cannot be parsed ({e})"));
                Cwd::unknown("after a shell string that cannot be parsed")
            }
        }
    }

    pub(super) fn list(&mut self, list: &ast::CompoundList, cwd: &Cwd) -> Cwd {
        let mut cur = cwd.clone();
        for ast::CompoundListItem(and_or, sep) in &list.0 {
            if matches!(sep, ast::SeparatorOperator::Async) {
                // In the background: a subshell of its own.
                self.and_or(and_or, &cur);
            } else {
                cur = self.and_or(and_or, &cur);
            }
        }
        cur
    }

    /// `A && B` runs B where A succeeded, `A || B` where it failed.
    fn and_or(&mut self, list: &ast::AndOrList, cwd: &Cwd) -> Cwd {
        let (mut ok, mut fail) = self.pipeline(&list.first, cwd);
        for next in &list.additional {
            match next {
                ast::AndOr::And(p) => {
                    let (o, f) = self.pipeline(p, &ok);
                    ok = o;
                    fail = fail.union(&f);
                }
                ast::AndOr::Or(p) => {
                    let (o, f) = self.pipeline(p, &fail);
                    ok = ok.union(&o);
                    fail = f;
                }
            }
        }
        ok.union(&fail)
    }

    fn pipeline(&mut self, p: &ast::Pipeline, cwd: &Cwd) -> (Cwd, Cwd) {
        self.posix_pipeline(p);
        if p.timed.is_some() {
            // bash's `time` keyword; another sh runs the program `time`.
            self.record(vec!["time".into()], false, cwd, true);
        }
        if let [only] = p.seq.as_slice() {
            let (ok, fail) = self.command(only, cwd);
            return if p.bang { (fail, ok) } else { (ok, fail) };
        }
        // Each stage of a pipeline runs in a subshell.
        for c in &p.seq {
            self.command(c, cwd);
        }
        (cwd.clone(), cwd.clone())
    }

    pub(super) fn command(&mut self, c: &ast::Command, cwd: &Cwd) -> (Cwd, Cwd) {
        self.posix_command(c);
        match c {
            ast::Command::Simple(s) => self.simple(s, cwd),
            ast::Command::Compound(cc, redirects) => {
                for r in redirects.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r, cwd, None);
                }
                self.compound(cc, cwd)
            }
            ast::Command::Function(f) => {
                self.functions.insert(f.fname.value.clone());
                let before = self.cds;
                let inside = Cwd::unknown("inside a function, which may be called from anywhere");
                for r in f.body.1.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r, &inside, None);
                }
                self.compound(&f.body.0, &inside);
                self.functions_cd |= self.cds != before;
                (cwd.clone(), cwd.clone())
            }
            ast::Command::ExtendedTest(e, redirects) => {
                for r in redirects.iter().flat_map(|r| r.0.iter()) {
                    self.redirect(r, cwd, None);
                }
                self.extended_test(&e.expr, cwd);
                (cwd.clone(), cwd.clone())
            }
        }
    }

    pub(super) fn assign_name(&mut self, name: &str, how: &str) {
        self.out.assigns.push(format!("{how} sets {name}"));
        if dangerous_name(name) {
            self.opaque(format!("{how} sets {name}, which the shell or the loader reads as code"));
        }
    }

    fn assignment(&mut self, a: &ast::Assignment, cwd: &Cwd) {
        self.posix_assignment(a);
        match &a.name {
            ast::AssignmentName::VariableName(n) => self.assign_name(n, "an assignment"),
            ast::AssignmentName::ArrayElementName(n, index) => {
                self.assign_name(n, "an assignment");
                self.arithmetic(index);
            }
        }
        match &a.value {
            ast::AssignmentValue::Scalar(w) => {
                self.word(&w.value, cwd);
            }
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.arithmetic(&k.value);
                    }
                    self.word(&v.value, cwd);
                }
            }
        }
    }

    fn simple(&mut self, c: &ast::SimpleCommand, cwd: &Cwd) -> (Cwd, Cwd) {
        use ast::CommandPrefixOrSuffixItem as I;
        let mut words: Vec<Word> = Vec::new();
        let mut redirects = Vec::new();
        let mut assigned = false;
        for item in c.prefix.iter().flat_map(|p| p.0.iter()) {
            match item {
                I::IoRedirect(r) => redirects.push(r),
                I::AssignmentWord(a, _) => {
                    assigned = true;
                    self.assignment(a, cwd);
                }
                I::Word(w) => words.push((w.value.clone(), self.word(&w.value, cwd))),
                I::ProcessSubstitution(_, s) => {
                    self.foreign("process substitution `<(…)`/`>(…)`", "write to a file first, or use a pipe");
                    self.list(&s.list, cwd);
                }
            }
        }
        if let Some(w) = &c.word_or_name {
            words.push((w.value.clone(), self.word(&w.value, cwd)));
        }
        for item in c.suffix.iter().flat_map(|s| s.0.iter()) {
            match item {
                I::IoRedirect(r) => redirects.push(r),
                // `export X=1`: a word of the builtin (judged with it below).
                I::AssignmentWord(_, w) | I::Word(w) => words.push((w.value.clone(), self.word(&w.value, cwd))),
                I::ProcessSubstitution(kind, s) => {
                    self.foreign("process substitution `<(…)`/`>(…)`", "write to a file first, or use a pipe");
                    self.list(&s.list, cwd);
                    words.push((format!("{kind}(…)"), None));
                }
            }
        }
        let index = (!words.is_empty()).then_some(self.out.commands.len());
        for r in redirects {
            self.redirect(r, cwd, index);
        }
        if words.is_empty() {
            return (cwd.clone(), cwd.clone());
        }
        self.run(&words, assigned, cwd, true)
    }

    /// Records one simple command; returns its index.
    fn record(&mut self, words: Vec<String>, assigned: bool, cwd: &Cwd, direct: bool) -> usize {
        let chain = analyse(&words);
        self.out.commands.push(Command { words, chain, cwd: cwd.clone(), direct, assigned });
        self.out.commands.len() - 1
    }

    /// A simple command's words (the program first): judged, then followed into what they run.
    pub(super) fn run(&mut self, words: &[Word], assigned: bool, cwd: &Cwd, direct: bool) -> (Cwd, Cwd) {
        let (source, literal) = &words[0];
        let Some(prog) = literal.clone() else {
            self.opaque(format!("the program '{source}' is named by a shell expansion"));
            return (cwd.clone(), cwd.clone());
        };
        let lits: Vec<String> = words.iter().map(|(s, l)| l.clone().unwrap_or_else(|| format!("{NONLITERAL}{s}"))).collect();
        let shown = || words.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>().join(" ");
        for l in lits.iter().filter(|l| !l.starts_with(NONLITERAL)) {
            if let Some((name, _)) = l.split_once('=') {
                if dangerous_name(name) {
                    self.opaque(format!("'{}' sets {name}, which the shell or the loader reads as code", shown()));
                }
            }
        }
        let at = self.record(lits.clone(), assigned, cwd, direct);
        let chain = self.out.commands[at].chain.clone();
        if words.iter().any(|(_, l)| l.is_none()) && chain.stages.iter().any(|s| is_launcher(&s.name)) {
            self.opaque(format!(
                "'{}' gives a shell expansion to the launcher '{}', which may make it run any program",
                shown(),
                chain.stages.iter().find(|s| is_launcher(&s.name)).map(|s| s.name.as_str()).unwrap_or_default()
            ));
        }
        for (s, dialect) in &chain.scripts {
            self.nested_as(s, cwd, "the shell string", *dialect);
        }
        if prog.contains('/') {
            return (cwd.clone(), cwd.clone());
        }
        if let Some(ends) = self.builtin(&prog, &words[1..], cwd, &shown()) {
            return ends;
        }
        if self.functions_cd && self.functions.contains(&prog) {
            let u = Cwd::unknown(format!("after calling the function '{prog}', which changes directory"));
            return (u.clone(), u);
        }
        (cwd.clone(), cwd.clone())
    }
}

#[cfg(test)]
#[path = "script_tests.rs"]
mod tests;
