//! Shell rules judge the program actually run (launchers, path forms, `find -exec`, `sh -c`)
//! and the files actually named (relative paths, symlinks), with property tests of both.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use workcell::config::{Project, Rule, ShellRule};
use workcell::tools::git_guard;
use workcell::tools::launchers::analyse;
use workcell::tools::shell::paths::path_candidates;
use workcell::tools::shell::{ShellDecision, ShellPolicy};

/// `data/` (ro) and `out/` (rw) zones. `data/pub` is what `sandbox_paths` allows; links in it
/// lead out of it in several ways.
fn project() -> (tempfile::TempDir, PathBuf, Project) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    for d in ["data/pub", "data/other/x/y", "out"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    for f in ["data/pub/a.txt", "data/secret.txt", "data/other/x/a.txt", "out/secret.txt"] {
        std::fs::write(root.join(f), "x").expect("write");
    }
    symlink("../secret.txt", root.join("data/pub/link")).expect("symlink");
    symlink("a.txt", root.join("data/pub/inlink")).expect("symlink");
    symlink("..", root.join("data/pub/dirlink")).expect("symlink");
    symlink("../other/x/y", root.join("data/pub/sub")).expect("symlink");
    let yaml = "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw}\n";
    let p = Project::from_text(yaml, &root.join("workcell.yaml"), &root).expect("project");
    (tmp, root, p)
}

fn rule(pattern: &str, paths: &[&str], allowed: bool) -> ShellRule {
    ShellRule { pattern: pattern.into(), sandbox_paths: paths.iter().map(|s| s.to_string()).collect(), approval_required: false, allowed }
}

fn deny_rm() -> ShellPolicy {
    ShellPolicy { rules: vec![rule("git status", &[], true), rule("rm", &[], false)], ..ShellPolicy::default() }
}

fn is_refused(d: &ShellDecision) -> bool {
    matches!(d, ShellDecision::Refused { .. })
}

fn reason(d: &ShellDecision) -> String {
    match d {
        ShellDecision::Refused { reason } => reason.clone(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_denied_program_is_refused_however_it_is_started() {
    let (_t, _r, p) = project();
    let policy = deny_rm();
    for cmd in [
        "rm x",
        "/bin/rm x",
        "/usr/bin/rm -rf /out",
        "./rm x",
        "/usr/bin//rm/ x",
        "env rm x",
        "env -i -u PATH FOO=1 rm x",
        "busybox rm x",
        "nice -n 5 rm x",
        "nice -5 rm x",
        "nohup setsid rm x",
        "timeout -s KILL 5 rm x",
        "stdbuf -o0 -eL rm x",
        "ionice -c 3 rm x",
        "chrt -o 0 rm x",
        "taskset 1 rm x",
        "sudo -u root rm x",
        "doas rm x",
        "time -p rm x",
        "xargs -0 rm",
        "flock /tmp/l rm x",
        "sh -c 'rm x'",
        "bash -ec \"env busybox rm x\"",
        "find /out -delete",
        "find /out -name '*.tmp' -exec rm {} +",
        "find /out -execdir nice /bin/rm {} +",
        "nice env busybox sh -c 'timeout 1 rm x'",
        // Shell strings are parsed as scripts: builtins and assignments in them are read.
        "bash -c 'eval rm x'",
        "sh -c 'X=1 rm x'",
        "sh -c 'echo a | rm x'",
    ] {
        let d = policy.decide(cmd, &p.sandbox);
        assert!(reason(&d).contains("'rm' is not allowed"), "{cmd}: {d:?}");
    }
    // Launcher words that cannot be read, or shell strings the shell would expand: which
    // program runs is unknown, and a deny rule exists.
    for cmd in [
        "sh -c '/bin/r? x'",
        "nice --weird rm x",
        "bash -c 'eval \"$X\"'",
        "sh -c '$P x'",
        "flock -c 'rm x' /tmp/l",
        "env -iS 'rm x'",
        "env -S 'rm x'",
        "echo 'rm x' | sh",
    ] {
        assert!(reason(&policy.decide(cmd, &p.sandbox)).contains("cannot be told"), "{cmd}");
    }
    // Words that merely mention rm are fine.
    for cmd in ["echo rm", "git rm --cached x", "ls rm", "find /out -name rm", "env ls -lS", "env - ls"] {
        assert!(!is_refused(&policy.decide(cmd, &p.sandbox)), "{cmd}");
    }
}

#[test]
fn an_allow_rule_covers_the_program_run_directly_only() {
    let (_t, _r, p) = project();
    let strict = ShellPolicy { default: Rule { allowed: Some(false), approval_required: None }, ..deny_rm() };
    assert!(matches!(strict.decide("git status --short", &p.sandbox), ShellDecision::Allowed { approval_required: false, .. }));
    assert!(reason(&strict.decide("env LD_PRELOAD=/out/x.so git status", &p.sandbox)).contains("sets LD_PRELOAD"));
    for cmd in ["env git status", "nice git status", "./git status", "/out/git status", "xargs git status"] {
        let r = reason(&strict.decide(cmd, &p.sandbox));
        assert!(r.contains("shell_default does not allow others"), "{cmd}: {r}");
    }
    assert!(reason(&strict.decide("env git status", &p.sandbox)).contains("only when it is run directly"));
    // With an asking default, a launcher is not refused: it is asked about.
    let asking = ShellPolicy { default: Rule { allowed: Some(true), approval_required: Some(true) }, ..deny_rm() };
    assert!(matches!(asking.decide("nice git status", &p.sandbox), ShellDecision::Allowed { approval_required: true, rule: None, .. }));
}

#[test]
fn control_characters_are_refused_and_tabs_are_spaces() {
    let (_t, _r, p) = project();
    let policy = ShellPolicy::default();
    for cmd in ["ls\r", "ls \u{1b}[2J", "ls\u{7}", "ls\u{0}", "ls\u{7f}", "ls \u{9b}31m", "echo a\rrm -rf /out"] {
        assert!(reason(&policy.decide(cmd, &p.sandbox)).contains("control character"), "{cmd:?}");
    }
    match policy.decide("ls\t-l", &p.sandbox) {
        ShellDecision::Allowed { args, .. } => assert_eq!(args, ["ls", "-l"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sandbox_paths_judge_relative_paths_and_symlinks() {
    let (_t, _r, p) = project();
    let policy = ShellPolicy { rules: vec![rule("cat", &["/data/pub"], true)], ..ShellPolicy::default() };
    let ok = |cmd: &str, wd: &str| matches!(policy.decide_in(cmd, &p.sandbox, wd), ShellDecision::Allowed { .. });
    for (cmd, wd) in [
        ("cat a.txt", "/data/pub"),
        ("cat inlink", "/data/pub"),
        ("cat ../pub/a.txt", "/data/pub"),
        ("cat dirlink/pub/a.txt", "/data/pub"),
        ("cat -- -n", "/data/pub"),
        ("cat -n /data/pub/a.txt -", "/out"),
        ("cat new-file", "/data/pub"),
    ] {
        assert!(ok(cmd, wd), "{cmd} in {wd}: {:?}", policy.decide_in(cmd, &p.sandbox, wd));
    }
    for (cmd, wd) in [
        ("cat secret.txt", "/out"),
        ("cat secret.txt", "/data"),
        ("cat link", "/data/pub"),
        ("cat dirlink/secret.txt", "/data/pub"),
        // Lexically /data/pub/a.txt; the kernel goes through the link to /data/other/x.
        ("cat sub/../a.txt", "/data/pub"),
        ("cat /data/pub/../secret.txt", "/out"),
        ("cat --file=/out/secret.txt", "/data/pub"),
        ("cat -f/out/secret.txt", "/data/pub"),
        ("cat -xo../secret.txt", "/data/pub"),
        ("cat ../../etc/passwd", "/data/pub"),
        ("cat /etc/../data/pub/a.txt", "/data/pub"),
        ("cat a.txt", "/tmp"),
    ] {
        assert!(!ok(cmd, wd), "{cmd} in {wd} was allowed");
    }
    let r = reason(&policy.decide_in("cat link", &p.sandbox, "/data/pub"));
    assert!(r.contains("outside the paths this command may use: /data/pub") && r.contains("/data/secret.txt"), "{r}");
}

#[test]
fn absolute_symlink_targets_are_sandbox_paths() {
    let (_t, root, p) = project();
    symlink("/out/secret.txt", root.join("data/pub/abs")).expect("symlink");
    symlink("/data/pub/a.txt", root.join("data/pub/absin")).expect("symlink");
    symlink("loop", root.join("data/pub/loop")).expect("symlink");
    let policy = ShellPolicy { rules: vec![rule("cat", &["/data/pub"], true)], ..ShellPolicy::default() };
    assert!(reason(&policy.decide_in("cat abs", &p.sandbox, "/data/pub")).contains("/out/secret.txt"));
    assert!(matches!(policy.decide_in("cat absin", &p.sandbox, "/data/pub"), ShellDecision::Allowed { .. }));
    assert!(reason(&policy.decide_in("cat loop", &p.sandbox, "/data/pub")).contains("symlinks"));
}

#[test]
fn git_gets_no_repository_programs() {
    let env = git_guard::env();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("GIT_CONFIG_GLOBAL").as_deref(), Some("/dev/null"));
    assert_eq!(get("GIT_CONFIG_NOSYSTEM").as_deref(), Some("1"));
    let n: usize = get("GIT_CONFIG_COUNT").and_then(|v| v.parse().ok()).expect("count");
    let keys: Vec<String> = (0..n).filter_map(|i| get(&format!("GIT_CONFIG_KEY_{i}"))).collect();
    assert!(keys.iter().any(|k| k == "core.fsmonitor") && keys.iter().any(|k| k == "core.hooksPath"), "{keys:?}");
    let args = |s: &str| shlex::split(s).expect("split");
    let hardened = |s: &str| git_guard::harden_argv(&args(s), &analyse(&args(s)));
    assert_eq!(hardened("git -C /out diff x"), args("git -C /out diff --no-ext-diff --no-textconv x"));
    assert_eq!(hardened("git status"), args("git status"));
    assert_eq!(hardened("ls diff"), args("ls diff"));
}

const LAUNCHERS: &[&[&str]] = &[
    &["env"],
    &["env", "-i"],
    &["env", "FOO=1", "BAR=2"],
    &["env", "-u", "X"],
    &["busybox"],
    &["nice"],
    &["nice", "-n", "5"],
    &["nohup"],
    &["setsid", "-f"],
    &["timeout", "5"],
    &["timeout", "-k", "1", "-s", "KILL", "5"],
    &["stdbuf", "-o0"],
    &["ionice", "-c", "3"],
    &["chrt", "-b", "0"],
    &["taskset", "-c", "0"],
    &["xargs"],
    &["xargs", "-0", "-n", "1"],
    &["sudo", "-u", "root"],
    &["doas"],
    &["time", "-p"],
    &["flock", "/tmp/l"],
];
const RM_FORMS: &[&str] = &["rm", "/bin/rm", "/usr/bin/rm", "./rm", "../bin/rm", "/usr//bin/rm", "bin/rm"];

/// A command: launchers, then rm in some path form, with arguments; optionally inside
/// `sh -c '…'` or `find … -exec … +`.
fn wrapped_rm() -> impl Strategy<Value = String> {
    let launchers = prop::collection::vec(prop::sample::select(LAUNCHERS), 0..4);
    let args = prop::collection::vec("[a-z/.]{1,8}", 0..3);
    (launchers, prop::sample::select(RM_FORMS), args, 0..3u8).prop_map(|(ls, rm, args, outer)| {
        let mut words: Vec<String> = ls.iter().flat_map(|l| l.iter().map(|s| s.to_string())).collect();
        words.push(rm.to_string());
        words.extend(args);
        let inner = shlex::try_join(words.iter().map(String::as_str)).expect("join");
        match outer {
            0 => inner,
            1 => format!("sh -c {}", shlex::try_quote(&inner).expect("quote")),
            _ => format!("find /out -exec {inner} +"),
        }
    })
}

/// Resolves `path` (as the command sees it) on the host with the kernel's own lookups, one
/// component at a time, never above the project root (the sandbox's `/`).
fn kernel_resolve(root: &Path, path: &str) -> PathBuf {
    let mut cur = root.to_path_buf();
    let mut missing = false;
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if cur != root {
                    cur.pop();
                }
            }
            _ if missing => cur.push(c),
            _ => {
                let next = cur.join(c);
                match std::fs::canonicalize(&next) {
                    Ok(n) => cur = n,
                    Err(_) => {
                        missing = true;
                        cur = next;
                    }
                }
            }
        }
    }
    cur
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_denied_program_behind_any_launchers_is_refused(cmd in wrapped_rm()) {
        let (_t, _r, p) = project();
        let d = deny_rm().decide(&cmd, &p.sandbox);
        prop_assert!(is_refused(&d), "{} was not refused: {:?}", cmd, d);
    }

    #[test]
    fn sandbox_paths_never_allow_an_argument_that_leads_outside(
        parts in prop::collection::vec((0..3u8, prop::collection::vec(prop::sample::select(&["pub", "a.txt", "link", "inlink", "dirlink", "sub", "secret.txt", "..", ".", "data", "out", "other", "x", "y"][..]), 1..5)), 1..4),
        wd in prop::sample::select(&["/data/pub", "/data", "/out", "/data/pub/sub"][..]),
    ) {
        let (_t, root, p) = project();
        let args: Vec<String> = parts.iter().map(|(form, comps)| {
            let path = comps.join("/");
            match form { 0 => path, 1 => format!("/{path}"), _ => format!("--file={path}") }
        }).collect();
        let cmd = format!("cat {}", shlex::try_join(args.iter().map(String::as_str)).expect("join"));
        let policy = ShellPolicy { rules: vec![rule("cat", &["/data/pub"], true)], ..ShellPolicy::default() };
        if let ShellDecision::Allowed { .. } = policy.decide_in(&cmd, &p.sandbox, wd) {
            for c in path_candidates(&args).expect("candidates") {
                let full = if c.starts_with('/') { c.clone() } else { format!("{wd}/{c}") };
                let host = kernel_resolve(&root, &full);
                prop_assert!(host.starts_with(root.join("data/pub")), "{} in {} allowed, but '{}' leads to {}", cmd, wd, c, host.display());
            }
        }
    }
}
