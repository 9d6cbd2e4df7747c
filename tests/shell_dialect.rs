//! One dialect (issue 36, findings 2–4): the shell that runs a command line reads it as the
//! judge did. A corpus of tricky lines goes through the judge and through the real shell — on
//! the host (bash, dash, busybox sh) and in each backend's sandbox (bwrap and docker with
//! `image: host`: bash; a named image with only busybox: its sh) — and every program that ran
//! must be one the judge listed. The programs are stubs that log their own name.

mod support;

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use workcell::config::{BackendChoice, Project, Rule, ShellRule};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::ApprovalMode;
use workcell::tools::service::Caller;
use workcell::tools::shell::dialect::Dialect;
use workcell::tools::shell::script::analyse_script_as;
use workcell::tools::shell::{ShellDecision, ShellPolicy};

#[path = "shell_dialect/corpus.rs"]
mod corpus;

use corpus::{CORPUS, STUBS};

fn rule(pattern: &str, allowed: bool) -> ShellRule {
    ShellRule { pattern: pattern.into(), sandbox_paths: Vec::new(), approval_required: false, allowed }
}

/// Deny `rm` (so that what cannot be told is refused), allow everything else unasked.
fn deny_rm() -> ShellPolicy {
    ShellPolicy { rules: vec![rule("rm", false)], default: Rule { allowed: Some(true), approval_required: Some(false) }, ..ShellPolicy::default() }
}

/// Only `ls` and `cat`, nothing else: the issue's `--strict` session.
fn only_ls_cat() -> ShellPolicy {
    ShellPolicy { rules: vec![rule("ls", true), rule("cat", true)], default: Rule { allowed: Some(false), approval_required: None }, ..ShellPolicy::default() }
}

fn project() -> (tempfile::TempDir, Project) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    std::fs::create_dir_all(root.join("out")).expect("mkdir");
    let p = Project::from_text("sandbox:\n  zones:\n    out: {path: ./out, mode: rw}\n", &root.join("workcell.yaml"), &root).expect("project");
    (tmp, p)
}

fn refused(d: &ShellDecision) -> Option<&str> {
    match d {
        ShellDecision::Refused { reason } => Some(reason),
        ShellDecision::Allowed { .. } => None,
    }
}

/// The issue's two lines: under rules allowing only ls and cat, never pre-approved where sh
/// runs them; where bash runs them, `[[ … ]]` is a test and `$'…'` one word, as judged.
#[test]
fn the_issue_lines_are_judged_in_the_grammar_of_the_shell_that_runs_them() {
    let (_t, p) = project();
    let policy = only_ls_cat();
    for (line, construct) in [("ls /dev/null; [[ a || sh -ef /out/s ]]", "[[ … ]]"), ("ls /dev/null $'\\' ; sh -ef /out/s ; # '", "$'…'")] {
        let posix = policy.decide_call(line, &p.sandbox, "/out", false, Dialect::Posix);
        let why = refused(&posix).unwrap_or_else(|| panic!("{line}: allowed under sh: {posix:?}"));
        assert!(why.contains(construct) && why.contains("write"), "{line}: the refusal names the construct and what to write: {why}");
        match policy.decide_call(line, &p.sandbox, "/out", false, Dialect::Bash) {
            ShellDecision::Allowed { args, .. } => assert_eq!(args, ["/bin/bash", "-p", "-c", line], "run by the bash that judged it"),
            d => panic!("{line}: bash reads it as ls alone: {d:?}"),
        }
    }
}

/// Every construct whose meaning differs between bash and sh is refused under sh, naming it.
#[test]
fn posix_sh_refuses_bash_only_constructs_naming_them() {
    let (_t, p) = project();
    let policy = deny_rm();
    for (line, named) in [
        ("[[ -f x ]] && ls", "[[ … ]]"),
        ("echo $'a'", "$'…'"),
        ("echo $\"a\"", "$\"…\""),
        ("((1)) && ls", "(( … ))"),
        ("for ((i=0; i<2; i++)); do ls; done", "for (( … ))"),
        ("cat <(ls)", "process substitution"),
        ("ls > >(cat)", "process substitution"),
        ("echo {a,b}", "brace expansion"),
        ("echo x{1..3}", "brace expansion"),
        ("ls &> /dev/null", "&>"),
        ("ls >&/dev/null", ">&"),
        ("ls |& cat", "POSIX sh"),
        ("function f { ls; }; f", "`function`"),
        ("a=(1 2); echo $a", "array"),
        ("a[1]=x", "array"),
        ("echo ${a[0]}", "${…}"),
        ("x=a; x+=b", "+="),
        ("case a in a) ls;& b) ls;; esac", ";&"),
        ("case a in a) ls;;& b) ls;; esac", ";&"),
        ("cat <<< x", "<<<"),
        ("echo ${x/a/b}", "${…}"),
        ("echo ${x:1:2}", "${…}"),
        ("echo ${x^^}", "${…}"),
        ("echo ${!x}", "${…}"),
        ("time ls", "time"),
        ("coproc ls", "coproc"),
        ("alias l=ls", "alias"),
        ("cat <<$E\nx\n$E", "here-document delimiter"),
        // Nested strings are judged in their own shell's grammar.
        ("bash -c 'sh -c \"[[ a ]]\"'", "[[ … ]]"),
        ("eval '[[ a ]]'", "[[ … ]]"),
    ] {
        let d = policy.decide_call(line, &p.sandbox, "/out", false, Dialect::Posix);
        let why = refused(&d).unwrap_or_else(|| panic!("{line:?}: allowed under sh: {d:?}"));
        assert!(why.contains(named) && why.contains("POSIX sh"), "{line:?} should name {named:?}: {why}");
    }
    // POSIX text passes.
    for line in [
        "[ -f x ] && ls",
        "echo \"$x\" '$y' ${x:-a} ${#x} ${x%.c}",
        "case a in a) ls;; esac",
        "f() { ls; }; f",
        "echo $((1 + 2))",
        "cat <<'E'\n$x\nE",
        "ls 2>&1 >/dev/null",
        "awk '{print $1}' /dev/null",
    ] {
        let d = policy.decide_call(line, &p.sandbox, "/out", false, Dialect::Posix);
        assert!(refused(&d).is_none(), "{line:?}: {d:?}");
    }
}

/// Under bash, a nested `sh -c` string is still sh's, and `zsh -c` strings are not judged.
#[test]
fn nested_shell_strings_are_judged_in_their_own_shells_grammar() {
    let (_t, p) = project();
    let policy = deny_rm();
    for line in ["sh -c '[[ a || rm -ef x ]]'", "dash -c 'echo $'\"'\"'a'\"'\"", "busybox sh -c 'echo {a,b}'", "nice sh -c 'cat <<< x'"] {
        let d = policy.decide_call(line, &p.sandbox, "/out", false, Dialect::Bash);
        assert!(refused(&d).is_some_and(|w| w.contains("POSIX sh")), "{line}: {d:?}");
    }
    for line in ["zsh -c 'ls'", "ksh -c 'ls'", "mksh -c ls"] {
        let d = policy.decide_call(line, &p.sandbox, "/out", false, Dialect::Bash);
        assert!(refused(&d).is_some_and(|w| w.contains("own language")), "{line}: {d:?}");
    }
    assert!(refused(&policy.decide_call("bash -c '[[ a ]] && ls'", &p.sandbox, "/out", false, Dialect::Bash)).is_none());
}

/// Quoting the parser misreads is refused whichever shell runs the line.
#[test]
fn quoting_the_parser_reads_otherwise_than_every_shell_is_refused() {
    let (_t, p) = project();
    for dialect in [Dialect::Bash, Dialect::Posix] {
        for line in ["echo $$'\\' ; pa ; # '", "echo \\$'\\' ; pa ; # '", "sh -c \"echo \\\\\\$'\\\\' ; pa ; # '\""] {
            let d = deny_rm().decide_call(line, &p.sandbox, "/out", false, dialect);
            assert!(refused(&d).is_some(), "{dialect:?} {line}: {d:?}");
        }
    }
}

/// Finding 4: launchers whose program is only known at run time are refused while a deny
/// rule exists; the same launchers with programs in their words still work.
#[test]
fn launchers_whose_program_comes_at_run_time_are_refused_under_a_deny_rule() {
    let (_t, p) = project();
    let policy = deny_rm();
    for line in [
        "echo 'rm /out/v' | xargs -I{} sh -c {}",
        "echo 'rm /out/v' | xargs -I {} {}",
        "echo /out/v | xargs -i rm {}",
        "echo x | xargs --replace=X sh -c X",
        "echo x | xargs -0 -J % sh -c %",
        "echo 'rm /out/v' | xargs sh -c",
        "echo 'rm /out/v' | xargs bash -c",
        "echo '-c rm' | xargs sh",
        "echo 'rm /out/v' | xargs env",
        "echo 'rm /out/v' | xargs nice",
        "echo 'rm /out/v' | xargs timeout 5",
        "echo 'rm /out/v' | xargs busybox",
        "echo 'rm /out/v' | xargs env sh -c",
        "echo '-exec rm {} +' | xargs find /out",
        "echo '-I{} rm {}' | xargs xargs",
        "find /out -exec sh -c {} \\;",
        "find /out -exec sh -c 'cat {}' \\;",
        "find /out -execdir bash -c 'x={}' \\;",
        "find /usr/bin -name rm -exec {} /out/v \\;",
        "find /out -exec env {} \\;",
        "find /out -ok nice {} \\;",
        "parallel rm ::: /out/v",
        "parallel ::: 'rm /out/v'",
        "env -S 'rm /out/v'",
        "env --split-string='rm /out/v'",
        "env -iS'rm /out/v'",
    ] {
        let d = policy.decide_call(line, &p.sandbox, "/out", false, Dialect::Bash);
        assert!(refused(&d).is_some(), "{line}: {d:?}");
    }
    for line in [
        "printf 'a\\n' | xargs grep -l x",
        "find /out -exec grep -l x {} +",
        "find /out -exec sh -c 'cat \"$1\"' _ {} \\;",
        "echo a | xargs -n1 echo",
        "env A=1 ls",
    ] {
        let d = policy.decide_call(line, &p.sandbox, "/out", false, Dialect::Bash);
        assert!(refused(&d).is_none(), "{line}: {d:?}");
    }
}

/// The names of the programs the judge lets a line run, or `None` when it refuses the line.
fn judged(line: &str, dialect: Dialect, sb: &workcell::sandbox::Sandbox) -> Option<Vec<String>> {
    if refused(&deny_rm().decide_call(line, sb, "/out", false, dialect)).is_some() {
        return None;
    }
    let s = analyse_script_as(line, "/out", dialect).expect("judged lines parse");
    Some(s.commands.iter().flat_map(|c| c.chain.stages.iter().map(|s| s.name.clone())).collect())
}

/// Stub programs in `dir` that append their name to `$TRACE`.
fn stubs(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("mkdir");
    for name in STUBS {
        let f = dir.join(name);
        std::fs::write(&f, "#!/bin/sh\necho \"${0##*/}\" >> \"$TRACE\"\n").expect("stub");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

/// Takes what the stubs logged since the last call.
fn ran(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let _ = std::fs::remove_file(log);
    text.lines().map(str::to_string).collect()
}

fn assert_ran_was_judged(shell: &str, line: &str, judged: &Option<Vec<String>>, ran: &[String]) {
    let listed = judged.clone().unwrap_or_default();
    let unjudged: Vec<&String> = ran.iter().filter(|r| !listed.contains(r)).collect();
    assert!(unjudged.is_empty(), "{shell} ran {unjudged:?} for {line:?}, which the judge did not list ({judged:?})");
}

/// The corpus through the host's own shells: bash as the judge's bash dialect runs it, dash and
/// busybox sh as the POSIX dialect's `/bin/sh` would.
#[test]
fn the_corpus_runs_only_judged_programs_in_the_hosts_shells() {
    let (_t, p) = project();
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin = tmp.path().join("bin");
    stubs(&bin);
    let log = tmp.path().join("log");
    let mut shells: Vec<(&str, Dialect, Vec<&str>)> = vec![("bash", Dialect::Bash, vec![])];
    for (name, prefix, package) in [("dash", vec!["dash"], "dash"), ("busybox sh", vec!["busybox", "sh"], "busybox-static")] {
        if support::program_ready(prefix[0], package) {
            shells.push((name, Dialect::Posix, prefix));
        }
    }
    let mut any = Vec::new();
    for (shell, dialect, prefix) in &shells {
        for line in CORPUS {
            let judged = judged(line, *dialect, &p.sandbox);
            let ShellDecision::Allowed { args, .. } = deny_rm().decide_call(line, &p.sandbox, "/out", false, *dialect) else { continue };
            // The argv as the shell tool runs it; POSIX lines in this shell in place of /bin/sh.
            let argv: Vec<String> = match args.first().map(String::as_str) {
                Some("/bin/sh") if !prefix.is_empty() => prefix.iter().map(|s| s.to_string()).chain(args[1..].iter().cloned()).collect(),
                _ => args,
            };
            let _ = std::process::Command::new(&argv[0])
                .args(&argv[1..])
                .env_clear()
                .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .env("TRACE", &log)
                .current_dir(tmp.path())
                .stdin(std::process::Stdio::null())
                .output()
                .expect("shell runs");
            let r = ran(&log);
            assert_ran_was_judged(shell, line, &judged, &r);
            any.extend(r);
        }
    }
    assert!(any.iter().any(|r| r == "pa") && any.iter().any(|r| r == "pb"), "the stubs log when they run: {any:?}");
}

/// A busybox image with `sh` (and `sleep`, for a session container) and nothing else.
struct ShImage(String);

impl ShImage {
    fn build() -> ShImage {
        let tag = format!("workcell-test-busybox-sh:{}", std::process::id());
        let mut b = tar::Builder::new(Vec::new());
        let mut add = |name: &str, data: &[u8], mode: u32| {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(mode);
            b.append_data(&mut h, name, data).expect("tar entry");
        };
        add("Dockerfile", b"FROM scratch\nCOPY bin /bin\n", 0o644);
        add("bin/busybox", &std::fs::read("/usr/bin/busybox").expect("static busybox at /usr/bin/busybox"), 0o755);
        for applet in ["sh", "sleep", "ls", "cat", "true", "false", "echo", "env", "xargs", "find", "nice"] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            h.set_mode(0o777);
            b.append_link(&mut h, format!("bin/{applet}"), "busybox").expect("link");
        }
        let ctx = b.into_inner().expect("tar");
        let mut child = std::process::Command::new("docker")
            .args(["build", "-q", "-t", &tag, "--label", "dev.workcell.managed=true", "--label", "dev.workcell.kind=test", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("docker build");
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), &ctx).expect("context");
        assert!(child.wait().expect("docker build").success(), "building {tag}");
        ShImage(tag)
    }
}

impl Drop for ShImage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

/// The corpus through the shell tool of a session on `choice`, with `image`: each line is
/// refused exactly when the judge of `dialect` refuses it, and runs only what it listed.
fn corpus_in_sandbox(choice: BackendChoice, image: &str, dialect: Dialect) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    stubs(&dir.join("out/t"));
    let config = format!(
        "sandbox:\n  zones:\n    out: {{path: ./out, mode: rw, approval: {{write: preApproved, delete: preApproved}}}}\ndefaults:\n  image: {image}\n  env:\n    PATH: /out/t:/usr/bin:/bin\n    TRACE: /out/log\n"
    );
    let worker = "---\nsandbox:\n  zones:\n    - {name: out, mode: rw}\nshell_rules:\n  - {pattern: rm, allowed: false}\nshell_default: {allowed: true, approval_required: false}\n---\nA worker.\n";
    support::write_project(&dir, &config, &[("w", worker)]);
    // As root, the worker is the project's owner: the zone must be its to write.
    support::give_to_worker(&dir);
    let project = Arc::new(Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project"));
    let w = project.worker("w").expect("worker").clone();
    let user = workcell::plan::worker_user(&project.dir, project.defaults.user);
    let sandbox = w.sandbox.clone().acting_as(user);
    // A fresh sandbox per call (a session's agent is this crate's binary, not the test's): the
    // same plan, image and argv as a session's commands.
    let runner = BackendRunner::new(project.clone(), choice, ApprovalMode::Strict);
    let service = runner.service_for(Caller { worker: Some(w.clone()), chain: vec!["w".into()] }, sandbox.clone(), "dialect");
    let log = dir.join("out/log");
    let mut any = Vec::new();
    for line in CORPUS {
        let judged = judged(line, dialect, &sandbox);
        let answer = service.call("shell", json!({"command": line, "timeout": 10}));
        assert_eq!(answer.is_err(), judged.is_none(), "{line:?}: the session judged it otherwise than the {dialect:?} judge: {answer:?}");
        let r = ran(&log);
        assert_ran_was_judged(&format!("{choice:?} {image}"), line, &judged, &r);
        any.extend(r);
    }
    assert!(any.iter().any(|r| r == "pa"), "the stubs log when they run: {any:?}");
}

mod bwrap {
    use super::*;

    #[test]
    fn the_corpus_runs_only_judged_programs_under_bash() {
        if support::backend_ready("bwrap") {
            corpus_in_sandbox(BackendChoice::Bwrap, "host", Dialect::Bash);
        }
    }
}

mod docker {
    use super::*;

    #[test]
    fn the_corpus_runs_only_judged_programs_under_bash_with_image_host() {
        if support::backend_ready("docker") {
            corpus_in_sandbox(BackendChoice::Docker, "host", Dialect::Bash);
        }
    }

    #[test]
    fn the_corpus_runs_only_judged_programs_under_busybox_sh_in_a_named_image() {
        if support::backend_ready("docker") {
            let image = ShImage::build();
            corpus_in_sandbox(BackendChoice::Docker, &image.0, Dialect::Posix);
        }
    }
}

/// `plan` and `doctor` say which shell runs the shell tool's lines and how they are judged.
#[test]
fn plan_and_doctor_name_the_shell_and_its_grammar() {
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(tmp.path().join("out")).expect("mkdir");
    for (image, says) in [("busybox:1", "/bin/sh -c, judged as POSIX sh"), ("host", "/bin/bash -c, judged as bash")] {
        std::fs::write(tmp.path().join("workcell.yaml"), format!("sandbox:\n  zones:\n    out: {{path: ./out, mode: ro}}\ndefaults:\n  image: {image}\n"))
            .expect("config");
        for args in [&["plan", "--", "ls"][..], &["doctor"][..]] {
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_workcell")).args(args).current_dir(tmp.path()).output().expect("workcell");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains(says), "{image} {args:?}: {text}");
        }
    }
}
