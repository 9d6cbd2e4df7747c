//! The shell tool runs real shell syntax (quotes, pipelines, lists, `cd`, redirections) on
//! bwrap and docker, and the rules judge every program and redirection in it: a denied `rm`
//! hidden anywhere in the command line is refused and the file it names is still there.

mod support;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{json, Value};
use workcell::audit::AuditLog;
use workcell::config::{BackendChoice, Project};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::{ApprovalMode, Approver};
use workcell::tools::service::{Caller, ToolService};
use workcell::tools::shell::{ShellDecision, ShellPolicy};

/// `data/` (ro) and `out/` (rw, holding `keep`, `dir/f` and a repository's `.git/hooks`).
fn project(front: &str) -> (tempfile::TempDir, PathBuf, Arc<Project>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    for d in ["data", "out/dir", "out/.git/hooks"] {
        std::fs::create_dir_all(dir.join(d)).expect("mkdir");
    }
    std::fs::write(dir.join("out/keep"), "precious").expect("write");
    std::fs::write(dir.join("out/dir/f"), "in dir\n").expect("write");
    std::fs::write(dir.join("data/doc"), "doc").expect("write");
    let worker = format!("---\nsandbox:\n  zones:\n    - {{name: data, mode: ro}}\n    - {{name: out, mode: rw}}\n{front}command: [true]\n---\n");
    support::write_project(
        &dir,
        "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
        &[("w", &worker)],
    );
    support::give_to_worker(&dir);
    let p = Arc::new(Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project"));
    (tmp, dir, p)
}

const DENY_RM: &str = "shell_rules:\n  - {pattern: rm, allowed: false}\n  - {pattern: cat, approval_required: false}\n  - {pattern: wc, approval_required: false}\nshell_default: {allowed: true, approval_required: false}\n";

fn service(p: &Arc<Project>, choice: BackendChoice) -> ToolService {
    let w = p.worker("w").expect("worker").clone();
    let runner = Arc::new(BackendRunner::new(p.clone(), choice, ApprovalMode::Strict));
    ToolService::new(
        p.clone(),
        Caller { worker: Some(w.clone()), chain: vec!["w".into()] },
        w.sandbox.clone(),
        Approver::new(ApprovalMode::Strict, None),
        AuditLog::new(&p.dir, "t"),
        runner,
    )
}

fn policy(p: &Project) -> ShellPolicy {
    let w = p.worker("w").expect("worker");
    ShellPolicy { tool: Default::default(), rules: w.shell_rules.clone(), default: w.shell_default }
}

fn refusal(d: ShellDecision) -> String {
    match d {
        ShellDecision::Refused { reason } => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Variants that hide `rm` in every construct the walk knows (the unit tests have more).
const HIDDEN_RM: &[&str] = &[
    "echo x | rm -f keep",
    "echo $(rm -f keep)",
    "echo `rm keep`",
    "sh -c 'rm keep'",
    "(rm keep)",
    "f(){ rm keep; }; f",
    "true && rm keep",
    "false || rm keep",
    "true; rm keep",
    "exec rm keep",
    "command rm keep",
    "builtin eval 'rm keep'",
    "xargs rm keep",
    "nohup rm keep",
    "time rm keep",
    "! rm keep",
    "coproc rm keep",
    "cat <(rm keep)",
    "echo ${x:-$(rm keep)}",
    "cat <<EOF\n$(rm keep)\nEOF",
    "if true; then rm keep; fi",
    "for i in 1; do rm keep; done",
    "case a in a) rm keep;; esac",
    "trap 'rm keep' EXIT",
    "bash -c \"sh -c 'rm keep'\"",
];

/// Variants whose program (or write) cannot be told.
const OPAQUE: &[&str] = &[
    "$X keep",
    "\"$(echo rm)\" keep",
    "eval \"$X\"",
    "exec $X",
    ". ./script",
    "alias r=rm",
    "echo $((a[$(rm keep)]))",
    "echo rm keep | sh",
    "/bin/r? keep",
    "env -S 'rm keep'",
];

#[test]
fn a_deny_rule_catches_rm_anywhere_and_names_what_cannot_be_told() {
    let (_t, _d, p) = project(DENY_RM);
    let pol = policy(&p);
    for cmd in HIDDEN_RM {
        let r = refusal(pol.decide_in(cmd, &p.worker("w").unwrap().sandbox, "/out"));
        assert!(r.contains("'rm' is not allowed"), "{cmd:?}: {r}");
    }
    for cmd in OPAQUE {
        let r = refusal(pol.decide_in(cmd, &p.worker("w").unwrap().sandbox, "/out"));
        assert!(r.contains("cannot be told"), "{cmd:?}: {r}");
    }
    let r = refusal(pol.decide_in("$X keep", &p.worker("w").unwrap().sandbox, "/out"));
    assert!(r.contains("the program '$X' is named by a shell expansion") && r.contains("rule 'rm'"), "{r}");
}

#[test]
fn allow_rules_pre_approve_only_when_they_cover_every_program() {
    let strict = "shell_rules:\n  - {pattern: cat, approval_required: false}\n  - {pattern: wc, approval_required: false}\nshell_default: {allowed: false}\n";
    let (_t, _d, p) = project(strict);
    let pol = policy(&p);
    let sb = &p.worker("w").unwrap().sandbox;
    for cmd in ["cat f | wc -l", "cat a && cat b", "cat a; wc b", "cat a 2>/dev/null | wc -c"] {
        match pol.decide_in(cmd, sb, "/out") {
            ShellDecision::Allowed { approval_required: false, rule: Some(r), args } => {
                assert!(r.contains("cat"), "{cmd}: {r}");
                assert_eq!(args, ["/bin/bash", "-p", "-c", cmd]);
            }
            other => panic!("{cmd}: {other:?}"),
        }
    }
    // A program no rule covers, a variable set, a launcher, an expansion in the program word:
    // not pre-approved, and shell_default refuses the rest.
    for cmd in ["cat f | sort", "LD_PRELOAD=/out/x.so cat f", "X=1; cat f", "nice cat f", "cat f | $P", "cd /out && cat f", "cat f > copy"] {
        let r = refusal(pol.decide_in(cmd, sb, "/out"));
        assert!(r.contains("shell_default does not allow others"), "{cmd}: {r}");
    }
    // A write into a file is pre-approved only where the rule's sandbox_paths cover it.
    let (_t, _d, p) = project("shell_rules:\n  - {pattern: cat, sandbox_paths: [/out], approval_required: false}\nshell_default: {allowed: false}\n");
    let (pol, sb) = (policy(&p), &p.worker("w").unwrap().sandbox);
    assert!(matches!(pol.decide_in("cat f > copy", sb, "/out"), ShellDecision::Allowed { approval_required: false, .. }));
    for cmd in ["cat f > /tmp/copy", "cat /data/doc", "cat < /data/doc", "cat f > ../data/x", "cat f > .git/hooks/x"] {
        let r = refusal(pol.decide_in(cmd, sb, "/out"));
        assert!(r.contains("outside the paths this command may use") || r.contains("the redirection"), "{cmd}: {r}");
    }
}

#[test]
fn redirections_into_read_only_or_protected_paths_are_refused() {
    let (_t, _d, p) = project(DENY_RM);
    let pol = policy(&p);
    let sb = &p.worker("w").unwrap().sandbox;
    for (cmd, what) in [
        ("echo x > /data/file", "/data/file"),
        ("echo x >> /data/doc", "/data/doc"),
        ("cd /data && echo x > new", "/data/new"),
        ("echo x > .git/hooks/pre-commit", ".git/hooks/pre-commit"),
        ("echo x > /out/.git/config", ".git/config"),
        ("cd dir; cd ..; echo x > .envrc", ".envrc"),
        ("{ echo x; } > /data/x", "/data/x"),
        ("echo x &> /data/y", "/data/y"),
        ("echo x 2> /data/z", "/data/z"),
    ] {
        let r = refusal(pol.decide_in(cmd, sb, "/out"));
        assert!(r.contains("the redirection") && r.contains(what), "{cmd}: {r}");
    }
    // Where a relative write goes after `cd $D` cannot be told: opaque, so refused with a deny rule.
    let r = refusal(pol.decide_in("cd $D && echo x > f", sb, "/out"));
    assert!(r.contains("cannot be told") && r.contains("after 'cd $D'"), "{r}");
    for cmd in ["echo x > /out/new", "echo x 2>&1 >/dev/null", "cat < /data/doc", "cd dir && echo x > g", "echo x > /tmp/t"] {
        assert!(matches!(pol.decide_in(cmd, sb, "/out"), ShellDecision::Allowed { .. }), "{cmd}");
    }
}

fn call(svc: &ToolService, args: Value) -> Result<Value, String> {
    svc.call("shell", args).map_err(|e| e.to_string())
}

fn stdout(v: &Value) -> String {
    assert_eq!(v["exit_code"], 0, "{v}");
    v["stdout"].as_str().unwrap_or_default().to_string()
}

fn shell_syntax_runs(backend: &str) {
    let choice = if backend == "docker" { BackendChoice::Docker } else { BackendChoice::Bwrap };
    let (_t, dir, p) = project(DENY_RM);
    let svc = service(&p, choice);
    let run = |cmd: &str| call(&svc, json!({"command": cmd, "cwd": "/out"})).unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert_eq!(stdout(&run("python3 -c 'import os; print(1)'")).trim(), "1");
    assert_eq!(stdout(&run("printf 'a\\nb\\n' | wc -l")).trim(), "2");
    assert_eq!(stdout(&run("cd dir && cat f")), "in dir\n");
    assert_eq!(stdout(&run("echo one; echo two\necho three")), "one\ntwo\nthree\n");
    assert_eq!(stdout(&run("false || echo fallback")).trim(), "fallback");
    assert_eq!(stdout(&run("(cd dir; pwd); pwd")), "/out/dir\n/out\n");
    run("echo written > made && echo more >> made");
    assert_eq!(std::fs::read_to_string(dir.join("out/made")).expect("made"), "written\nmore\n");
    // stdin, env and cwd arguments.
    let v = call(&svc, json!({"command": "wc -c", "stdin": "hello"})).expect("stdin");
    assert_eq!(stdout(&v).trim(), "5");
    let v = call(&svc, json!({"command": "cat | tr a-z A-Z", "stdin": "piped\n"})).expect("stdin in a pipeline");
    assert_eq!(stdout(&v), "PIPED\n");
    let v = call(&svc, json!({"command": "echo \"$GREETING\"", "env": {"GREETING": "hi there"}})).expect("env");
    assert_eq!(stdout(&v), "hi there\n");
    let v = call(&svc, json!({"command": "pwd", "cwd": "/out/dir"})).expect("cwd");
    assert_eq!(stdout(&v).trim(), "/out/dir");
    let v = call(&svc, json!({"command": "cat f", "cwd": "dir"})).expect("relative cwd");
    assert_eq!(stdout(&v), "in dir\n");
    for (args, what) in [
        (json!({"command": "pwd", "cwd": "/out/missing"}), "cwd '/out/missing' cannot be used"),
        (json!({"command": "pwd", "cwd": "/out/keep"}), "not a directory"),
        (json!({"command": "true", "env": {"LD_PRELOAD": "/out/x.so"}}), "'LD_PRELOAD' may not be set"),
        (json!({"command": "true", "env": {"WORKCELL_TOKEN": "x"}}), "'WORKCELL_TOKEN' may not be set"),
        (json!({"command": "true", "env": {"GIT_CONFIG_COUNT": "0"}}), "'GIT_CONFIG_COUNT' may not be set"),
        (json!({"command": "true", "env": {"1X": "x"}}), "not a variable name"),
        (json!({"command": "true", "env": {"X": "a\u{1b}b"}}), "control character"),
        (json!({"command": "true", "stdin": "x".repeat((1 << 20) + 1)}), "at most 1048576 bytes"),
    ] {
        let e = call(&svc, args.clone()).expect_err("refused");
        assert!(e.contains(what), "{args}: {e}");
    }
    // A deny rule catches rm wherever it hides; nothing ran.
    for cmd in HIDDEN_RM.iter().chain(OPAQUE) {
        let e = call(&svc, json!({"command": cmd, "cwd": "/out"})).expect_err("refused");
        assert!(e.contains("'rm' is not allowed") || e.contains("cannot be told"), "{cmd}: {e}");
    }
    for cmd in ["echo x > /data/file", "echo x > .git/hooks/pre-commit"] {
        let e = call(&svc, json!({"command": cmd, "cwd": "/out"})).expect_err("refused");
        assert!(e.contains("the redirection"), "{cmd}: {e}");
    }
    assert_eq!(std::fs::read_to_string(dir.join("out/keep")).expect("keep is still there"), "precious");
    assert!(!dir.join("data/file").exists() && !dir.join("out/.git/hooks/pre-commit").exists());
    // The control: the same sandbox lets a worker remove a file when no rule denies it.
    let (_t2, dir2, p2) = project("shell_default: {allowed: true, approval_required: false}\n");
    let v = call(&service(&p2, choice), json!({"command": "echo x | rm -f keep && echo gone", "cwd": "/out"})).expect("runs");
    assert_eq!(stdout(&v).trim(), "gone");
    assert!(!dir2.join("out/keep").exists());
}

fn ready(backend: &str) -> bool {
    support::backend_ready(backend)
}

#[test]
fn bwrap_runs_shell_syntax_under_the_rules() {
    if ready("bwrap") {
        shell_syntax_runs("bwrap");
    }
}

#[test]
fn docker_runs_shell_syntax_under_the_rules() {
    if ready("docker") {
        shell_syntax_runs("docker");
    }
}
