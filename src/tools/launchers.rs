//! Which programs a command line runs, as far as its words show: the program word normalised
//! to its name (`/bin/rm` → `rm`), then through known launchers (`env rm`, `busybox rm`,
//! `nice -n 5 rm`, `sh -c "rm x"`, `find -exec rm {} +`, …) recursively. Shell rules deny a
//! command when *any* of these programs is denied, and pre-approve one only when it runs no
//! launcher at all. A launcher whose program is only known at run time (`xargs -I`, `xargs sh`,
//! `find -exec sh -c {}`, `parallel`, `env -S`) cannot be read: the chain is opaque.

use super::shell::dialect::Dialect;

/// Launchers nested deeper than this are not followed (the command is then opaque).
const MAX_DEPTH: usize = 16;

/// One program the command line runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    /// The program's name: the last component of its word (`/usr/bin/rm` → `rm`).
    pub name: String,
    /// Its arguments (the words after the program word).
    pub args: Vec<String>,
}

/// Every program of a command line, the first word's first.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Chain {
    pub stages: Vec<Stage>,
    /// Set when a launcher's words could not be read (an option it is not known to take, a
    /// shell string with globs, nesting too deep): which program runs is then unknown.
    pub opaque: Option<String>,
    /// Shell strings the chain runs (`sh -c STRING`, at any depth), with the dialect of the
    /// shell that runs each: the caller parses and judges them as scripts (`shell::script`).
    pub scripts: Vec<(String, Dialect)>,
}

impl Chain {
    /// True when the command is exactly one program, started directly.
    pub fn is_plain(&self) -> bool {
        self.stages.len() == 1 && self.opaque.is_none() && self.scripts.is_empty()
    }
}

/// The name a program word runs: its last path component (`./rm`, `/bin/rm/` → `rm`).
pub fn program_name(word: &str) -> &str {
    let w = word.trim_end_matches('/');
    w.rsplit('/').next().unwrap_or(w)
}

/// Programs whose words name another program to run (what [`analyse`] follows): a word of
/// theirs that the shell expands could name any program.
pub fn is_launcher(name: &str) -> bool {
    matches!(
        name,
        "env"
            | "busybox"
            | "nice"
            | "nohup"
            | "setsid"
            | "time"
            | "timeout"
            | "stdbuf"
            | "ionice"
            | "chrt"
            | "taskset"
            | "sudo"
            | "doas"
            | "xargs"
            | "flock"
            | "find"
            | "parallel"
    ) || SHELLS.contains(&name)
}

/// The programs `argv` runs.
pub fn analyse(argv: &[String]) -> Chain {
    let mut chain = Chain::default();
    walk(argv, &mut chain, 0, Via::default());
    chain
}

/// Why a launcher's words cannot be read, so which program it runs is unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Unreadable {
    #[error("unknown option '{0}'")]
    UnknownOption(String),
    /// `-S`, `--split-string` or a cluster holding `S` (`-iS…`): env splits the string by
    /// rules of its own (escapes, `${NAME}`, comments).
    #[error("'{0}' splits a string into the program and its words by env's own rules")]
    Split(String),
    #[error("-c runs a shell string")]
    FlockShell,
    #[error("without -c (or with -s) the shell reads its commands from standard input")]
    ShellStdin,
    #[error("-c runs a string in {0}'s own language, which is not judged")]
    ShellGrammar(String),
    #[error("'{0}' puts each input line into the command, so the program it runs is only known at run time")]
    XargsReplace(String),
    #[error("xargs adds words from its input to '{0}', which may make it run any program")]
    XargsLauncher(String),
    #[error("xargs gives words from its input to the shell, which may run them as commands")]
    XargsShell,
    #[error("find puts each file name into '{0}', where it is read as a program or as shell code")]
    FindName(String),
    #[error("parallel builds its commands from its arguments and input at run time")]
    Parallel,
}

/// What started the program being walked: which of its words are only known at run time.
#[derive(Debug, Clone, Copy, Default)]
struct Via {
    /// `xargs` (at any depth above): words from its input are added at the end.
    xargs: bool,
    /// `find -exec` (at any depth above): `{}` becomes a file name.
    find: bool,
    /// `busybox` right above: its `sh`, `ash`, `bash` are all ash.
    busybox: bool,
}

/// Options of one launcher: short letters taking a value, short flags, long options taking
/// a value, long flags (long options with `=value` are accepted for both).
struct Opts {
    short_val: &'static str,
    short_flag: &'static str,
    long_val: &'static [&'static str],
    long_flag: &'static [&'static str],
    /// `nice -5 cmd`: a bare number is an option.
    numeric: bool,
}

/// Index of the first word after `words`' options, or why they cannot be read.
fn skip_opts(words: &[String], o: &Opts) -> Result<usize, Unreadable> {
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        if w == "--" {
            return Ok(i + 1);
        }
        if let Some(long) = w.strip_prefix("--") {
            let (name, has_value) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            if o.long_val.contains(&name) {
                i += if has_value { 1 } else { 2 };
            } else if o.long_flag.contains(&name) {
                i += 1;
            } else {
                return Err(Unreadable::UnknownOption(w.into()));
            }
            continue;
        }
        if w.len() > 1 && w.starts_with('-') {
            let body = &w[1..];
            if o.numeric && body.chars().all(|c| c.is_ascii_digit()) {
                i += 1;
                continue;
            }
            let mut step = 1;
            for (at, c) in body.char_indices() {
                if o.short_val.contains(c) {
                    // The value is the rest of this word, else the next word.
                    if at + c.len_utf8() == body.len() {
                        step = 2;
                    }
                    break;
                }
                if !o.short_flag.contains(c) {
                    return Err(Unreadable::UnknownOption(w.into()));
                }
            }
            i += step;
            continue;
        }
        return Ok(i);
    }
    Ok(words.len())
}

const SHELLS: &[&str] = &["sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "yash", "posh", "hush"];

fn walk(argv: &[String], chain: &mut Chain, depth: usize, via: Via) {
    let Some(word) = argv.first() else { return };
    if depth > MAX_DEPTH {
        chain.opaque = Some("launchers are nested too deeply".into());
        return;
    }
    let name = program_name(word).to_string();
    let rest = &argv[1..];
    chain.stages.push(Stage { name: name.clone(), args: rest.to_vec() });
    let next: Result<Option<Vec<String>>, Unreadable> = match name.as_str() {
        _ if via.find && word.contains("{}") => Err(Unreadable::FindName(word.clone())),
        // xargs appends its input's words: to find they can be `-exec PROGRAM`, to xargs options.
        "find" | "xargs" if via.xargs => Err(Unreadable::XargsLauncher(name.clone())),
        n if via.xargs && SHELLS.contains(&n) => Err(Unreadable::XargsShell),
        "parallel" => Err(Unreadable::Parallel),
        "env" => env_program(rest),
        "busybox" => Ok(rest.first().filter(|w| !w.starts_with('-')).map(|_| rest.to_vec())),
        "nice" => after(rest, &Opts { short_val: "n", short_flag: "", long_val: &["adjustment"], long_flag: &[], numeric: true }, 0),
        "nohup" | "setsid" => after(rest, &Opts { short_val: "", short_flag: "cfw", long_val: &[], long_flag: &["ctty", "fork", "wait"], numeric: false }, 0),
        "time" => after(
            rest,
            &Opts {
                short_val: "fo",
                short_flag: "apqv",
                long_val: &["format", "output"],
                long_flag: &["append", "portability", "quiet", "verbose"],
                numeric: false,
            },
            0,
        ),
        "timeout" => after(
            rest,
            &Opts {
                short_val: "ks",
                short_flag: "fpv",
                long_val: &["kill-after", "signal"],
                long_flag: &["foreground", "preserve-status", "verbose"],
                numeric: false,
            },
            1,
        ),
        "stdbuf" => after(rest, &Opts { short_val: "ioe", short_flag: "", long_val: &["input", "output", "error"], long_flag: &[], numeric: false }, 0),
        "ionice" => after(
            rest,
            &Opts { short_val: "cnpPu", short_flag: "t", long_val: &["class", "classdata", "pid", "pgid", "uid"], long_flag: &["ignore"], numeric: false },
            0,
        ),
        "chrt" => after(
            rest,
            &Opts {
                short_val: "TPD",
                short_flag: "abdfiomprRv",
                long_val: &["sched-runtime", "sched-period", "sched-deadline"],
                long_flag: &["all-tasks", "batch", "deadline", "fifo", "idle", "other", "max", "pid", "rr", "reset-on-fork", "verbose"],
                numeric: false,
            },
            1,
        ),
        "taskset" => after(rest, &Opts { short_val: "", short_flag: "acp", long_val: &[], long_flag: &["all-tasks", "cpu-list", "pid"], numeric: false }, 1),
        "sudo" | "doas" => after(
            rest,
            &Opts {
                short_val: "CDghpRrTtUu",
                short_flag: "AbEeHiKklLnPSsVv",
                long_val: &["close-from", "chdir", "group", "host", "prompt", "chroot", "role", "command-timeout", "type", "other-user", "user"],
                long_flag: &[
                    "askpass",
                    "background",
                    "preserve-env",
                    "edit",
                    "set-home",
                    "login",
                    "remove-timestamp",
                    "reset-timestamp",
                    "list",
                    "non-interactive",
                    "preserve-groups",
                    "stdin",
                    "shell",
                ],
                numeric: false,
            },
            0,
        ),
        "xargs" => xargs_program(rest),
        "flock" => flock_program(rest),
        "find" => {
            find_programs(rest, chain, depth, via);
            Ok(None)
        }
        n if SHELLS.contains(&n) => match shell_program(rest) {
            Ok(Some(script)) => match if via.busybox { Some(Dialect::Posix) } else { Dialect::of_shell(n) } {
                None => Err(Unreadable::ShellGrammar(n.to_string())),
                Some(_) if via.find && script.contains("{}") => Err(Unreadable::FindName(script)),
                Some(dialect) => {
                    chain.scripts.push((script, dialect));
                    Ok(None)
                }
            },
            Ok(None) => Ok(None),
            Err(e) => Err(e),
        },
        _ => Ok(None),
    };
    let via = Via { busybox: name == "busybox", xargs: via.xargs || name == "xargs", ..via };
    match next {
        Ok(Some(words)) => walk(&words, chain, depth + 1, via),
        // A launcher with no program of its own under xargs gets its program from the input.
        Ok(None) if via.xargs && name != "xargs" && is_launcher(&name) && !SHELLS.contains(&name.as_str()) && name != "find" => {
            chain.opaque.get_or_insert(format!("{name}: {}", Unreadable::XargsLauncher(name.clone())));
        }
        Ok(None) => {}
        Err(why) => {
            chain.opaque.get_or_insert(format!("{name}: {why}"));
        }
    }
}

/// The words after `rest`'s options and `positional` fixed operands (timeout's duration,
/// chrt's priority, taskset's mask): the program and its arguments, if any.
fn after(rest: &[String], o: &Opts, positional: usize) -> Result<Option<Vec<String>>, Unreadable> {
    let i = skip_opts(rest, o)? + positional;
    Ok((i < rest.len()).then(|| rest[i..].to_vec()))
}

/// `env [-i] [-u NAME] [-C DIR] [-S STRING] [NAME=VALUE]... [PROGRAM ARGS]`.
fn env_program(rest: &[String]) -> Result<Option<Vec<String>>, Unreadable> {
    let o = Opts {
        short_val: "uCS",
        short_flag: "i0v",
        long_val: &["unset", "chdir", "split-string"],
        long_flag: &["ignore-environment", "null", "debug", "default-signal", "ignore-signal", "block-signal", "list-signal-handling"],
        numeric: false,
    };
    // Only env's own options are read: the first word that is neither an option nor an
    // option's value ends them (`env ls -S` passes `-S` to ls). `-S STRING` would split STRING
    // into words by env's own rules: not read.
    let mut words: Vec<String> = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let w = &rest[i];
        if w == "--" || !w.starts_with('-') {
            break;
        }
        if w.starts_with("-S") || w.starts_with("--split-string") {
            return Err(Unreadable::Split(w.clone()));
        }
        // `env -` is `env -i`.
        if w != "-" {
            words.push(w.clone());
            if env_value_in_next_word(w)? {
                i += 1;
                words.extend(rest.get(i).cloned());
            }
        }
        i += 1;
    }
    words.extend(rest[i.min(rest.len())..].iter().cloned());
    let mut i = skip_opts(&words, &o)?;
    while words.get(i).is_some_and(|w| w.contains('=') && !w.starts_with('=')) {
        i += 1;
    }
    Ok((i < words.len()).then(|| words[i..].to_vec()))
}

/// Whether env's option word `w` (not `-S…`) takes the next word as its value: `-u`, `-C`,
/// `--unset`, `--chdir`, or a cluster ending in one of them (`-iu NAME`, where `-iuNAME`
/// holds it). A cluster holding `S` hides a split string, which is not read.
fn env_value_in_next_word(w: &str) -> Result<bool, Unreadable> {
    if w.starts_with("--") {
        return Ok(w == "--unset" || w == "--chdir");
    }
    for (at, c) in w.char_indices().skip(1) {
        match c {
            'S' => return Err(Unreadable::Split(w.into())),
            'u' | 'C' => return Ok(at + 1 == w.len()),
            _ => {}
        }
    }
    Ok(false)
}

/// `xargs [OPTIONS] [PROGRAM ARGS]`: the program (default `echo`) gets more arguments from
/// standard input (empty in the shell tool) or from `-a FILE`.
fn xargs_program(rest: &[String]) -> Result<Option<Vec<String>>, Unreadable> {
    let o = Opts {
        short_val: "adEIJLnPs",
        short_flag: "0eilprtx",
        long_val: &["arg-file", "delimiter", "max-lines", "max-args", "max-procs", "max-chars", "process-slot-var"],
        long_flag: &["null", "eof", "replace", "interactive", "no-run-if-empty", "verbose", "exit", "show-limits", "open-tty"],
        numeric: false,
    };
    let i = skip_opts(rest, &o)?;
    // `-I R`, `-i`, `--replace` (GNU) and `-J R` (BSD) put input lines anywhere in the
    // command, the program word included.
    for w in rest[..i].iter().take_while(|w| *w != "--") {
        let short = w.strip_prefix('-').filter(|b| !b.starts_with('-')).unwrap_or_default();
        let replaces = short.chars().take_while(|c| !"adELnPs".contains(*c)).any(|c| "iIJ".contains(c));
        if w.starts_with("--replace") || replaces {
            return Err(Unreadable::XargsReplace(w.clone()));
        }
    }
    Ok(Some(if i < rest.len() { rest[i..].to_vec() } else { vec!["echo".into()] }))
}

/// `flock [OPTIONS] FILE PROGRAM ARGS` or `flock [OPTIONS] FILE -c STRING`.
fn flock_program(rest: &[String]) -> Result<Option<Vec<String>>, Unreadable> {
    let o = Opts {
        short_val: "wEc",
        short_flag: "sxunoFh",
        long_val: &["timeout", "conflict-exit-code", "command"],
        long_flag: &["shared", "exclusive", "unlock", "nonblock", "close", "no-fork", "verbose"],
        numeric: false,
    };
    if rest.iter().any(|w| w == "-c" || w.starts_with("--command")) {
        return Err(Unreadable::FlockShell);
    }
    let i = skip_opts(rest, &o)? + 1;
    Ok((i < rest.len()).then(|| rest[i..].to_vec()))
}

/// `sh [OPTIONS] -c STRING [NAME ARGS]`: STRING, parsed by the caller. Without `-c` the shell
/// runs a script file (not followed: see docs/tools.md, "Opaque parts") or, with no operand or `-s`, reads its
/// commands from standard input, which cannot be judged.
fn shell_program(rest: &[String]) -> Result<Option<String>, Unreadable> {
    let mut i = 0;
    let mut wants_string = false;
    let mut reads_stdin = false;
    while i < rest.len() {
        let w = &rest[i];
        if w == "--" || w == "-" || !(w.starts_with('-') || w.starts_with('+')) {
            break;
        }
        // A lone `+` is an option word without letters: sh and bash go on reading options.
        if w == "+" {
            i += 1;
            continue;
        }
        if w.starts_with("--") {
            // Of the long options (`--norc`, `--login`, …) only these take a value.
            i += if w == "--rcfile" || w == "--init-file" { 2 } else { 1 };
            continue;
        }
        if w[1..].contains('c') {
            wants_string = true;
        }
        if w.starts_with('-') && w[1..].contains('s') {
            reads_stdin = true;
        }
        // Every `o` (`-o OPTION`) and bash's `O` (`-O SHOPT`) in the word takes one more word,
        // wherever it sits in a cluster (`-oc errexit STRING`).
        i += 1 + w[1..].chars().filter(|c| matches!(c, 'o' | 'O')).count();
    }
    if rest.get(i).is_some_and(|w| w == "--" || w == "-") {
        i += 1;
    }
    if !wants_string {
        return if reads_stdin || i >= rest.len() { Err(Unreadable::ShellStdin) } else { Ok(None) };
    }
    Ok(rest.get(i).cloned())
}

/// `find … -exec PROGRAM ARGS {} +` (and `-execdir`, `-ok`, `-okdir`) runs PROGRAM;
/// `-delete` deletes like `rm` and is listed as `rm`.
fn find_programs(rest: &[String], chain: &mut Chain, depth: usize, via: Via) {
    let mut i = 0;
    while i < rest.len() {
        match rest[i].as_str() {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let start = i + 1;
                let mut end = start;
                // `+` ends the command only right after `{}`; elsewhere it is an argument.
                while end < rest.len() && rest[end] != ";" && !(rest[end] == "+" && end > start && rest[end - 1] == "{}") {
                    end += 1;
                }
                walk(&rest[start..end], chain, depth + 1, Via { find: true, busybox: false, ..via });
                i = end + 1;
            }
            "-delete" => {
                chain.stages.push(Stage { name: "rm".into(), args: Vec::new() });
                i += 1;
            }
            _ => i += 1,
        }
    }
}
