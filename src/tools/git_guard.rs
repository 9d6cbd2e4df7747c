//! Git reads configuration from the repository it runs in (`.git/config`), and several keys
//! name programs it then runs: a pre-approved `git status` in a repository the worker wrote
//! would run the worker's code. Every shell-tool command therefore gets an environment that
//! overrides those keys (git's `GIT_CONFIG_COUNT` settings rank above every config file, and
//! reach git however it is started: directly, through a launcher or from a script), and no
//! system or global config. What this cannot reach is listed in docs/tools.md ("What rules do not protect against").

use super::launchers::Chain;

/// Config keys that name a program to run, set to something inert (or the stock program).
const CONFIG: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", "true"),
    ("sequence.editor", "true"),
    ("core.sshCommand", "ssh"),
    ("core.askPass", "true"),
    // An empty value empties the list of helpers.
    ("credential.helper", ""),
    ("protocol.ext.allow", "never"),
    ("gpg.program", "gpg"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("gpg.x509.program", "gpgsm"),
    // Run to find an ssh signing key when `commit.gpgSign` asks for one: fail instead.
    ("gpg.ssh.defaultKeyCommand", "false"),
    ("log.showSignature", "false"),
    // `git add -p` pipes a coloured diff through it (colour can be forced by config).
    ("interactive.diffFilter", "cat"),
    // Run by fetch and receive-pack to list an alternate's refs; printing none is harmless.
    ("core.alternateRefsCommand", "true"),
];

/// The environment added to every shell-tool command.
pub fn env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("GIT_CONFIG_NOSYSTEM", "1"),
        ("GIT_CONFIG_GLOBAL", "/dev/null"),
        ("GIT_PAGER", "cat"),
        ("PAGER", "cat"),
        ("GIT_EDITOR", "true"),
        ("GIT_SEQUENCE_EDITOR", "true"),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_ASKPASS", "true"),
        ("GIT_SSH_COMMAND", "ssh"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.push(("GIT_CONFIG_COUNT".into(), CONFIG.len().to_string()));
    for (i, (k, v)) in CONFIG.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}"), k.to_string()));
        env.push((format!("GIT_CONFIG_VALUE_{i}"), v.to_string()));
    }
    env
}

/// Git's global options that take the next word as their value.
const GLOBAL_WITH_VALUE: &[&str] = &["-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--super-prefix", "--config-env", "--attr-source"];

/// `git diff`, `log` and `show` run external diff programs and textconv filters named in the
/// repository's config (`diff.external`, `diff.<driver>.command|textconv`), which no single
/// config value can switch off; for a `git` run directly, `--no-ext-diff --no-textconv` are
/// added after those subcommands, and the command's own `--ext-diff` and `--textconv` (which
/// would turn them back on: the last one wins) are dropped before any `--`.
pub fn harden_argv(args: &[String], chain: &Chain) -> Vec<String> {
    let mut out = args.to_vec();
    if chain.stages.first().is_none_or(|s| s.name != "git") {
        return out;
    }
    let mut i = 1;
    while i < args.len() {
        let w = args[i].as_str();
        if GLOBAL_WITH_VALUE.contains(&w) {
            i += 2;
        } else if w.starts_with('-') {
            i += 1;
        } else {
            break;
        }
    }
    if args.get(i).is_some_and(|sub| matches!(sub.as_str(), "diff" | "log" | "show")) {
        let (head, tail) = args.split_at(i + 1);
        let end = tail.iter().position(|w| w == "--").unwrap_or(tail.len());
        out = head.to_vec();
        out.extend(["--no-ext-diff".to_string(), "--no-textconv".to_string()]);
        out.extend(tail[..end].iter().filter(|w| *w != "--ext-diff" && *w != "--textconv").cloned());
        out.extend(tail[end..].iter().cloned());
    }
    out
}
