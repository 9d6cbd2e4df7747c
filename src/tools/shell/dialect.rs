//! Which shell runs the shell tool's command lines, and the grammar they are judged in. The
//! judge and the shell must read a line the same way, or the judge approves programs the
//! shell never runs while the shell runs programs the judge never saw (`[[ a || sh x ]]` is a
//! test to bash and runs `sh` under dash; `$'\''` is one word to bash and a quote and a
//! half to dash). So a line is either run by bash, which the parser (`brush-parser`) reads,
//! or judged as POSIX `sh`: every construct whose meaning differs between bash and the
//! sh's a sandbox may have (dash, busybox ash, bash as sh) is refused, naming what to
//! write instead.

use brush_parser::ast;
use brush_parser::word::{ParameterExpr, WordPiece};

use super::script::Walker;
use crate::config::ImageRef;

/// The shell a command line runs in, and so the grammar it is judged in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// `/bin/bash -c`: bash's own grammar, the one the parser reads.
    #[default]
    Bash,
    /// `/bin/sh -c`, whatever sh the sandbox has: only what every sh reads alike.
    Posix,
}

/// bash as the host has it: `image: host` sandboxes see the host's `/bin/bash`.
const BASH: &str = "/bin/bash";

impl Dialect {
    /// The shell of a sandbox on `image`: bash where the sandbox is known to have it (the
    /// host's own system, `image: host`, with a `/bin/bash`), else POSIX sh. A named or built
    /// image may have no bash (busybox, distroless) or an old one; nothing is assumed.
    pub fn for_image(image: &ImageRef) -> Dialect {
        // macOS's /bin/bash is 3.2, whose grammar is not the parser's (`;&`, `|&`, `coproc`).
        if *image == ImageRef::Host && cfg!(target_os = "linux") && host_has_bash() {
            Dialect::Bash
        } else {
            Dialect::Posix
        }
    }

    /// The argv that runs `command` in this dialect. bash gets `-p` so that it reads no
    /// `BASH_ENV`/`ENV` file, imports no functions and ignores `SHELLOPTS`/`BASHOPTS` from its
    /// environment (the run's uid is its euid, so `-p` changes nothing else).
    /// (`POSIXLY_CORRECT`, which bash reads before its options, is refused in a call's `env`
    /// and in the line itself.)
    pub fn argv(self, command: &str) -> Vec<String> {
        match self {
            Dialect::Bash => [BASH, "-p", "-c", command].map(String::from).to_vec(),
            Dialect::Posix => ["/bin/sh", "-c", command].map(String::from).to_vec(),
        }
    }

    /// Variables every command line of the shell tool gets, emptied: a shell the line starts
    /// itself (`sh -c`, `bash -c`, a script) would otherwise run the file `BASH_ENV` or `ENV`
    /// names, or take options from `SHELLOPTS`/`BASHOPTS`, before the text that was judged.
    pub fn neutral_env() -> Vec<(String, String)> {
        ["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "CDPATH"].map(|n| (n.to_string(), String::new())).to_vec()
    }

    /// The dialect of a shell program named `name` running a `-c` string; `None` for a shell
    /// whose own grammar is not judged (zsh, ksh, …).
    pub fn of_shell(name: &str) -> Option<Dialect> {
        match name {
            "bash" => Some(Dialect::Bash),
            "sh" | "dash" | "ash" | "posh" => Some(Dialect::Posix),
            _ => None,
        }
    }

    /// What `plan`, `doctor` and the docs say.
    pub fn describe(self) -> &'static str {
        match self {
            Dialect::Bash => "/bin/bash -c, judged as bash",
            Dialect::Posix => "/bin/sh -c, judged as POSIX sh (bash-only syntax such as [[ ]], $'…', arrays, <(…), {a,b} is refused)",
        }
    }
}

fn host_has_bash() -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(BASH).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Quoting the parser reads differently from every shell: it takes `'` after *any* `$` as
/// the start of `$'…'`, where bash and sh read `$$'…'` as the pid and a quoted string and
/// `\$'…'` as a dollar sign and a quoted string. The words (and so the commands) would differ.
pub fn lexical_trap(text: &str) -> Option<String> {
    for trap in ["$$'", "\\$'"] {
        if text.contains(trap) {
            return Some(format!(
                "the text '{trap}' is read differently by the shell and by workcell's parser; write \"$$\" or '$' in quotes of their own (\"$$\"'…')"
            ));
        }
    }
    None
}

/// A construct of bash that POSIX sh reads differently, and what to write instead.
pub(super) fn refusal(construct: &str, instead: &str) -> String {
    format!("{construct} is bash syntax, and this sandbox's shell is POSIX sh, which reads it differently; {instead}")
}

/// For a POSIX line: why bash (the parser's grammar) and sh would build different commands
/// from `text`, when the parser in its sh mode reads it otherwise than in bash mode (the
/// `function` keyword, `|&`, `select`, …). Constructs named more precisely are found by the
/// walk; this is the net under it.
pub(super) fn grammar_differs(text: &str, bash: &ast::Program, options: &brush_parser::ParserOptions) -> Option<String> {
    let sh = brush_parser::ParserOptions { sh_mode: true, ..options.clone() };
    let mut parser = brush_parser::Parser::new(std::io::Cursor::new(text.as_bytes()), &sh);
    match parser.parse_program() {
        Ok(p) if format!("{p:?}") == format!("{bash:?}") => None,
        Ok(_) => Some(refusal("a construct of this command line", "write it in POSIX sh (no `function` keyword, `|&`, `select`, …)")),
        Err(e) => Some(refusal(&format!("a construct of this command line (sh reads: {e})"), "write it in POSIX sh")),
    }
}

/// The checks a line judged as POSIX sh gets, called by the walk at each node.
impl Walker {
    /// Records that POSIX sh reads `construct` otherwise than bash: the line is refused.
    pub(super) fn foreign(&mut self, construct: &str, instead: &str) {
        if self.dialect == Dialect::Posix {
            self.out.foreign.push(refusal(construct, instead));
        }
    }

    pub(super) fn posix_command(&mut self, c: &ast::Command) {
        use ast::CompoundCommand as CC;
        match c {
            ast::Command::ExtendedTest(..) => self.foreign("`[[ … ]]`", "write `[ … ]` (sh runs a program named `[[`)"),
            ast::Command::Compound(CC::Arithmetic(_), _) => self.foreign("`(( … ))`", "write `[ $(( … )) -ne 0 ]` (sh reads `((` as two subshells)"),
            ast::Command::Compound(CC::ArithmeticForClause(_), _) => self.foreign("`for (( … ))`", "write a `while` loop"),
            // The parser keeps no trace of the keyword: any word `function` in a line that
            // defines a function counts (sh runs a program named `function`).
            ast::Command::Function(_) if self.text.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|w| w == "function") => {
                self.foreign("the `function` keyword", "write `NAME() { …; }`")
            }
            ast::Command::Compound(CC::Coprocess(_), _) => self.foreign("`coproc`", "run the command with `&` (sh runs a program named `coproc`)"),
            ast::Command::Compound(CC::CaseClause(cc), _) if cc.cases.iter().any(|i| !matches!(i.post_action, ast::CaseItemPostAction::ExitCase)) => {
                self.foreign("`;&` or `;;&` in `case`", "end each branch with `;;`")
            }
            _ => {}
        }
    }

    pub(super) fn posix_pipeline(&mut self, p: &ast::Pipeline) {
        if p.timed.is_some() {
            self.foreign("the `time` keyword", "write `command time …` (sh runs the program `time` with the words after it)");
        }
    }

    pub(super) fn posix_redirect(&mut self, r: &ast::IoRedirect) {
        use ast::IoFileRedirectTarget as T;
        match r {
            ast::IoRedirect::OutputAndError(..) => self.foreign("`&>`", "write `>FILE 2>&1` (sh reads `cmd &> f` as `cmd &` and `> f`)"),
            ast::IoRedirect::HereString(..) => self.foreign("the here-string `<<<`", "write a here-document or `printf '%s\\n' … |`"),
            ast::IoRedirect::File(_, _, T::ProcessSubstitution(..)) => {
                self.foreign("process substitution `<(…)`/`>(…)`", "write to a file first, or use a pipe")
            }
            ast::IoRedirect::File(_, _, T::Duplicate(w)) if !w.value.chars().all(|c| c.is_ascii_digit() || c == '-') => {
                self.foreign(&format!("`>&{}`", w.value), "write `>FILE 2>&1`");
            }
            ast::IoRedirect::HereDocument(_, h) if h.here_end.value.contains(['$', '`']) => {
                self.foreign("a here-document delimiter holding `$` or a backquote", "write a plain word, quoted if the text must not expand ('EOF')");
            }
            _ => {}
        }
    }

    pub(super) fn posix_assignment(&mut self, a: &ast::Assignment) {
        if matches!(a.name, ast::AssignmentName::ArrayElementName(..)) || matches!(a.value, ast::AssignmentValue::Array(_)) {
            self.foreign("an array", "use separate variables or positional parameters (`set -- a b`)");
        }
        if a.append {
            self.foreign("`+=`", "write `X=\"$X…\"` (sh runs a program named `X+=…`)");
        }
    }

    /// A piece of a word: quoting and expansions that only bash has.
    pub(super) fn posix_piece(&mut self, piece: &WordPiece, quoted: bool) {
        match piece {
            WordPiece::AnsiCQuotedText(_) => self.foreign("`$'…'` quoting", "write '…' (or printf for escapes); sh splits `$'\\''` differently"),
            WordPiece::GettextDoubleQuotedSequence(_) => self.foreign("`$\"…\"` quoting", "write \"…\""),
            WordPiece::Text(t) if !quoted && brace_expansion(t) => {
                self.foreign(&format!("the brace expansion in '{t}'"), "write every word out (sh leaves `{a,b}` as it is)")
            }
            WordPiece::ParameterExpansion(e) if !posix_parameter(e) => {
                self.foreign("this `${…}` form", "use the POSIX forms (`${x}`, `${x:-w}`, `${x#p}`, `${x%p}`, `${#x}`) or a program (sed, cut)")
            }
            _ => {}
        }
    }
}

/// `{a,b}` or `{1..3}` in unquoted text.
fn brace_expansion(t: &str) -> bool {
    t.find('{').is_some_and(|i| t[i..].find('}').is_some_and(|j| t[i..i + j].contains(',') || t[i..i + j].contains("..")))
}

/// The parameter expansions POSIX sh has: no indices, no `!`, no substrings, replacements,
/// case changes or transforms.
fn posix_parameter(e: &ParameterExpr) -> bool {
    use brush_parser::word::Parameter as Param;
    use ParameterExpr as P;
    let (parameter, indirect) = match e {
        P::Parameter { parameter, indirect }
        | P::UseDefaultValues { parameter, indirect, .. }
        | P::AssignDefaultValues { parameter, indirect, .. }
        | P::IndicateErrorIfNullOrUnset { parameter, indirect, .. }
        | P::UseAlternativeValue { parameter, indirect, .. }
        | P::ParameterLength { parameter, indirect }
        | P::RemoveSmallestSuffixPattern { parameter, indirect, .. }
        | P::RemoveLargestSuffixPattern { parameter, indirect, .. }
        | P::RemoveSmallestPrefixPattern { parameter, indirect, .. }
        | P::RemoveLargestPrefixPattern { parameter, indirect, .. } => (parameter, *indirect),
        _ => return false,
    };
    !indirect && matches!(parameter, Param::Positional(_) | Param::Special(_) | Param::Named(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_runs_without_reading_files_or_options_from_its_environment() {
        assert_eq!(Dialect::Bash.argv("ls"), ["/bin/bash", "-p", "-c", "ls"]);
        assert_eq!(Dialect::Posix.argv("ls"), ["/bin/sh", "-c", "ls"]);
        assert_eq!(Dialect::for_image(&ImageRef::Named("busybox".into())), Dialect::Posix);
    }

    #[test]
    fn quoting_the_parser_misreads_is_named() {
        assert!(lexical_trap("echo $$'\\' ; rm x ; # '").is_some());
        assert!(lexical_trap("echo \\$'\\' ; rm x ; # '").is_some());
        assert!(lexical_trap("echo $'a' '$' \"$\"").is_none());
    }
}
