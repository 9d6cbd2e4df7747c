//! End to end through the broker, against the real backends: a worker asks the host to write
//! into an `ask` zone (answered through a pseudo-terminal), and delegates to child workers
//! that run in their own containers / bwrap sandboxes. The same bodies run on docker and on
//! bwrap.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod support;

use support::write_project;

const CURL: &str = r#"curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json'"#;

/// Runs `workcell ARGS` on a pseudo-terminal, answering every approval prompt with `answer`.
fn run_on_pty(dir: &Path, answer: &str, args: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pty_run.py");
    let out =
        Command::new("python3").arg(script).arg(answer).arg(env!("CARGO_BIN_EXE_workcell")).args(args).current_dir(dir).output().expect("pty driver runs");
    assert!(out.status.success(), "pty driver failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("driver prints JSON")
}

fn audit(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join(".workcell/audit.jsonl")).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// As root, the worker of a project root owns is nobody: the zones it (and the tools acting
/// for it) write must be nobody's, or the run is refused before it starts.
fn worker_owns(path: &Path) {
    if rustix::process::geteuid().is_root() {
        let nobody = (Some(rustix::fs::Uid::from_raw(65534)), Some(rustix::fs::Gid::from_raw(65534)));
        rustix::fs::chown(path, nobody.0, nobody.1).expect("chown");
    }
}

/// A worker file whose command is `sh -c SCRIPT`; the command is written as JSON (which is
/// YAML) so the script needs no YAML quoting.
fn worker(front: &str, script: &str) -> String {
    let command = serde_json::to_string(&["sh", "-c", script]).expect("json");
    format!("---\n{front}command: {command}\n---\nInstructions.\n")
}

fn ask_zone_project(dir: &Path) {
    std::fs::create_dir_all(dir.join("drafts")).expect("mkdir");
    worker_owns(&dir.join("drafts"));
    let worker = worker(
        "sandbox:\n  zones:\n    - {name: drafts, mode: rw}\n",
        &format!(
            r#"echo direct > /drafts/direct.txt 2>/dev/null || echo DIRECT-WRITE-FAILED; {CURL} --data-binary '{{"path":"/drafts/report.txt","content":"from the worker"}}' http://workcell/v1/tools/write_file; echo"#
        ),
    );
    write_project(dir, "sandbox:\n  zones:\n    drafts: {path: ./drafts, mode: rw, approval: {write: ask}}\n", &[("drafter", &worker)]);
    // The broker writes as the worker: `drafts/` must be the worker's to write.
    support::give_to_worker(dir);
}

fn approved_write_lands_on_the_host(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    ask_zone_project(tmp.path());
    let r = run_on_pty(tmp.path(), "y", &["run", "--backend", backend, "drafter"]);
    let output = r["output"].as_str().unwrap_or("");
    assert_eq!(r["exit"], 0, "{output}");
    assert_eq!(r["prompts"], 1, "{output}");
    assert!(output.contains("DIRECT-WRITE-FAILED"), "the ask zone is mounted read-only: {output}");
    assert!(output.contains("\"ok\":true"), "{output}");
    assert_eq!(std::fs::read_to_string(tmp.path().join("drafts/report.txt")).expect("written"), "from the worker");
    assert!(!tmp.path().join("drafts/direct.txt").exists());
    let events = audit(tmp.path());
    assert!(events.iter().any(|e| e["event"] == "decision" && e["subject"] == "/drafts/report.txt" && e["decision"]["by"] == "user_once"), "{events:?}");
    assert!(events.iter().any(|e| e["event"] == "tool_call" && e["tool"] == "write_file" && e["ok"] == true));
    assert!(events.iter().any(|e| e["event"] == "run_start") && events.iter().any(|e| e["event"] == "run_end"));
    // `workcell audit` shows the same log readably, and raw with --json.
    let shown = Command::new(env!("CARGO_BIN_EXE_workcell")).arg("audit").current_dir(tmp.path()).output().expect("audit");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.status.success() && text.contains("decision") && text.contains("/drafts/report.txt") && text.contains("run_end"), "{text}");
    let raw = Command::new(env!("CARGO_BIN_EXE_workcell")).args(["audit", "--json"]).current_dir(tmp.path()).output().expect("audit");
    let lines: Vec<Value> = String::from_utf8_lossy(&raw.stdout).lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert_eq!(lines.len(), events.len());
}

/// A worker names files to rewrite the approval prompt: a control sequence that erases the
/// line is refused before any prompt; a right-to-left override reaches the prompt escaped.
fn spoofing_paths_never_reach_the_terminal(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(tmp.path().join("drafts")).expect("mkdir");
    worker_owns(&tmp.path().join("drafts"));
    let worker = worker(
        "sandbox:\n  zones:\n    - {name: drafts, mode: rw}\n",
        &format!(
            r#"{CURL} --data-binary '{{"path":"/drafts/x\u001b[2K\rworkcell: allow read /drafts/ok.txt","content":"a"}}' http://workcell/v1/tools/write_file; echo; {CURL} --data-binary '{{"path":"/drafts/report\u202etxt.exe","content":"b"}}' http://workcell/v1/tools/write_file; echo"#
        ),
    );
    write_project(tmp.path(), "sandbox:\n  zones:\n    drafts: {path: ./drafts, mode: rw, approval: {write: ask}}\n", &[("spoofer", &worker)]);
    let r = run_on_pty(tmp.path(), "n", &["run", "--backend", backend, "spoofer"]);
    let output = r["output"].as_str().unwrap_or("");
    assert_eq!(r["prompts"], 1, "only the override reaches a prompt: {output}");
    assert!(output.contains("control character U+001B"), "the erasing path is refused: {output}");
    assert!(output.contains("allow write to /drafts/report\\u{202e}txt.exe?"), "the prompt shows the override escaped: {output}");
    // (The first docker run may draw an image-build progress bar: our own escapes, not these.)
    assert!(!output.contains("\u{1b}[2K\rworkcell: allow") && !output.contains('\u{202e}'), "no raw escape or override reached the terminal: {output:?}");
    assert_eq!(std::fs::read_dir(tmp.path().join("drafts")).expect("drafts").count(), 0, "nothing was written");
}

fn denied_write_changes_nothing(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    ask_zone_project(tmp.path());
    let r = run_on_pty(tmp.path(), "n", &["run", "--backend", backend, "drafter"]);
    let output = r["output"].as_str().unwrap_or("");
    assert_eq!(r["prompts"], 1, "{output}");
    assert!(output.contains("the user denied"), "the worker gets the refusal: {output}");
    assert!(!tmp.path().join("drafts/report.txt").exists());
    assert_eq!(std::fs::read_dir(tmp.path().join("drafts")).expect("dir").count(), 0, "nothing at all was written");
    let events = audit(tmp.path());
    assert!(events.iter().any(|e| e["event"] == "decision" && e["decision"]["outcome"] == "denied"), "{events:?}");
}

fn delegation_derives_the_child_sandbox(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    for d in ["data", "out"] {
        std::fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
        worker_owns(&tmp.path().join(d));
    }
    std::fs::write(tmp.path().join("data/doc.txt"), "the document").expect("write");
    let call = |name: &str, input: &str| {
        format!(r#"{CURL} --data-binary '{{"name":"{name}","input":"{input}","attachments":["/data/doc.txt"]}}' http://workcell/v1/tools/call_worker; echo"#)
    };
    let parent = worker(
        "workers: [child, greedy]\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n    - {name: out, mode: rw}\n",
        &format!("{}; {}", call("child", "hello child"), call("greedy", "x")),
    );
    let child = worker(
        "workers: [parent]\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n",
        &format!(
            r#"echo CHILD-INPUT=$(cat $WORKCELL_INPUT); echo CHILD-ATTACHMENT=$(cat $WORKCELL_ATTACHMENTS/doc.txt); ls /out 2>&1 | head -1; echo x > $WORKCELL_ATTACHMENTS/doc.txt 2>/dev/null || echo ATTACHMENT-READ-ONLY; {CURL} --data-binary '{{"name":"parent"}}' http://workcell/v1/tools/call_worker"#
        ),
    );
    let greedy = worker("sandbox:\n  zones:\n    - {name: data, mode: rw}\n", "true");
    write_project(
        tmp.path(),
        "sandbox:\n  zones:\n    data: {path: ./data, mode: rw}\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
        &[("parent", &parent), ("child", &child), ("greedy", &greedy)],
    );
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .args(["run", "--approve-all", "--backend", backend, "parent"])
        .current_dir(tmp.path())
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The child ran with its input and attachment, and sees only its derived zones.
    assert!(stdout.contains("CHILD-INPUT=hello child"), "{stdout}");
    assert!(stdout.contains("CHILD-ATTACHMENT=the document"), "{stdout}");
    assert!(stdout.contains("ATTACHMENT-READ-ONLY"), "{stdout}");
    assert!(stdout.contains("cannot access '/out': No such file or directory"), "the child has no /out: {stdout}");
    // The child calling back its parent is a cycle, refused with the chain.
    assert!(stdout.contains("parent -> child -> parent"), "{stdout}");
    // A child asking for rw where the parent has ro is refused.
    assert!(stdout.contains("permission_escalation") && stdout.contains("'rw'"), "{stdout}");
    let events = audit(tmp.path());
    assert!(events.iter().any(|e| e["event"] == "delegation" && e["worker"] == "child"), "{events:?}");
}

fn shell_runs_inside_the_sandbox_under_its_rules(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(tmp.path().join("data")).expect("mkdir");
    worker_owns(&tmp.path().join("data"));
    std::fs::write(tmp.path().join("data/doc.txt"), "shell can read this").expect("write");
    let shell = |cmd: &str| format!(r#"{CURL} --data-binary '{{"command":"{cmd}"}}' http://workcell/v1/tools/shell; echo"#);
    // Standard input reaches the command (docker: through the exec into the container).
    let with_stdin = format!(r#"{CURL} --data-binary '{{"command":"cat","stdin":"given-on-stdin"}}' http://workcell/v1/tools/shell; echo"#);
    let w = worker(
        "sandbox:\n  zones:\n    - {name: data, mode: ro}\nshell_rules:\n  - {pattern: cat, sandbox_paths: [/data], approval_required: false}\n  - {pattern: touch, approval_required: false}\nshell_default: {allowed: false}\n",
        &format!(
            "{}; {}; {}; {}; {}; test -e /tmp/made-by-shell && echo SAME-CONTAINER || echo FRESH-SANDBOX",
            shell("cat /data/doc.txt"),
            shell("cat /etc/hostname"),
            shell("ls /"),
            shell("touch /tmp/made-by-shell"),
            with_stdin
        ),
    );
    write_project(tmp.path(), "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n", &[("sheller", &w)]);
    let out =
        Command::new(env!("CARGO_BIN_EXE_workcell")).args(["run", "--strict", "--backend", backend, "sheller"]).current_dir(tmp.path()).output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("shell can read this"), "{stdout}");
    assert!(stdout.contains("outside the paths this command may use: /data"), "sandbox_paths confine arguments: {stdout}");
    assert!(stdout.contains("shell_default does not allow others") && stdout.contains("cat, touch"), "{stdout}");
    // docker: the shell tool runs in the worker's own container (same private /tmp);
    // bwrap: in a fresh sandbox with the same mounts.
    let expected = if backend == "docker" { "SAME-CONTAINER" } else { "FRESH-SANDBOX" };
    assert!(stdout.contains(expected), "{stdout}");
    assert!(stdout.contains(r#""stdout":"given-on-stdin""#), "stdin reached the command: {stdout}");
    let events = audit(tmp.path());
    assert!(events.iter().filter(|e| e["event"] == "tool_call" && e["tool"] == "shell").count() == 5, "{events:?}");
}

/// A child worker's own limits hold in its sandbox: 60 background processes against its
/// limit of 20 (docker: the child's container; bwrap: the child run's own cgroup).
fn child_worker_limits_hold(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    if backend == "bwrap" && !support::cgroup_ready(workcell::backend::cgroup::Controller::Pids) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(tmp.path().join("data")).expect("mkdir");
    worker_owns(&tmp.path().join("data"));
    let parent = worker(
        "workers: [bomber]\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n",
        &format!(r#"{CURL} --data-binary '{{"name":"bomber","input":"go"}}' http://workcell/v1/tools/call_worker; echo"#),
    );
    let bomber = worker(
        "limits: {pids: 20, timeout: 60s}\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n",
        "echo BOMBER-STARTED; for i in $(seq 60); do sleep 2 & done; wait",
    );
    write_project(tmp.path(), "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n", &[("parent", &parent), ("bomber", &bomber)]);
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .args(["run", "--approve-all", "--backend", backend, "parent"])
        .current_dir(tmp.path())
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("BOMBER-STARTED"), "the child ran: {stdout}");
    // The shell reports the fork that failed (and gives up).
    assert!(stdout.to_lowercase().contains("fork"), "60 processes started under the child's limit of 20: {stdout}");
    if backend == "bwrap" {
        // No cgroup of the child's (or the parent's) run is left behind.
        support::assert_no_cgroup_left(tmp.path());
    }
}

fn no_broker_means_no_socket_and_no_token(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(tmp.path().join("in")).expect("mkdir");
    worker_owns(&tmp.path().join("in"));
    let script = "test -e /run/workcell && echo HAS-BROKER-DIR; echo token=${WORKCELL_TOKEN:-none}";
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
            .args(["run", "--backend", backend, "--zone", "in=./in:ro"])
            .args(extra)
            .args(["--", "sh", "-c", script])
            .current_dir(tmp.path())
            .output()
            .expect("run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let with = run(&[]);
    assert!(with.contains("HAS-BROKER-DIR") && !with.contains("token=none"), "{with}");
    let without = run(&["--no-broker"]);
    assert_eq!(without, "token=none\n");
}

/// Shell rules through the real shell tool: a denied `rm` stays denied under other names and
/// launchers, `sandbox_paths` judge relative paths from the working directory (`/out`), and a
/// pre-approved `git status` / `git commit` in a repository whose config and hooks the worker
/// wrote run none of them.
fn shell_rules_see_through_launchers_and_git(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(out.join("pub")).expect("mkdir");
    worker_owns(&out.join("pub"));
    std::fs::write(out.join("pub/ok.txt"), "PUBLIC-TEXT").expect("write");
    std::fs::write(out.join("secret.txt"), "SECRET-TEXT").expect("write");
    std::fs::write(out.join("victim"), "still here").expect("write");
    let git = |args: &[&str]| assert!(Command::new("git").args(args).current_dir(&out).status().expect("git").success(), "git {args:?}");
    git(&["init", "-q", "."]);
    git(&["config", "user.email", "w@example.invalid"]);
    git(&["config", "user.name", "worker"]);
    git(&["config", "core.fsmonitor", "touch /out/FSMONITOR-RAN;"]);
    std::fs::write(out.join(".git/hooks/pre-commit"), "#!/bin/sh\ntouch /out/HOOK-RAN\n").expect("hook");
    std::fs::set_permissions(out.join(".git/hooks/pre-commit"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let shell = |cmd: &str| format!(r#"{CURL} --data-binary '{{"command":"{cmd}"}}' http://workcell/v1/tools/shell; echo"#);
    let cmds = [
        "/bin/rm victim",
        "busybox rm victim",
        "env rm victim",
        "nice -n 5 rm victim",
        "cat pub/ok.txt",
        "cat secret.txt",
        "git status",
        "git commit --allow-empty -q -m x",
    ];
    let w = worker(
        "sandbox:\n  zones:\n    - {name: out, mode: rw}\nshell_rules:\n  - {pattern: rm, allowed: false}\n  - {pattern: cat, sandbox_paths: [/out/pub], approval_required: false}\n  - {pattern: git status, approval_required: false}\n  - {pattern: git commit, approval_required: false}\nshell_default: {allowed: true, approval_required: false}\n",
        &cmds.iter().map(|c| shell(c)).collect::<Vec<_>>().join("; "),
    );
    // Writes need nobody: the zone is writable in the OS sandbox, so only the rules stand
    // between `rm` and the victim.
    write_project(
        tmp.path(),
        "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
        &[("sheller", &w)],
    );
    support::give_to_worker(tmp.path());
    let run =
        Command::new(env!("CARGO_BIN_EXE_workcell")).args(["run", "--strict", "--backend", backend, "sheller"]).current_dir(tmp.path()).output().expect("run");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(stdout.matches("'rm' is not allowed").count(), 4, "every form of rm is refused: {stdout}");
    assert!(out.join("victim").exists(), "{stdout}");
    assert!(stdout.contains("PUBLIC-TEXT"), "{stdout}");
    assert!(!stdout.contains("SECRET-TEXT") && stdout.contains("the argument 'secret.txt' is outside the paths this command may use: /out/pub"), "{stdout}");
    assert!(stdout.contains("On branch") || stdout.contains("No commits yet"), "git status ran: {stdout}");
    assert!(!out.join("FSMONITOR-RAN").exists(), "core.fsmonitor ran: {stdout}");
    assert!(!out.join("HOOK-RAN").exists(), "the pre-commit hook ran: {stdout}");
    let log =
        Command::new("git").args(["-c", "safe.directory=*", "-c", "core.fsmonitor=false", "log", "--oneline"]).current_dir(&out).output().expect("git log");
    assert!(String::from_utf8_lossy(&log.stdout).contains(" x"), "git commit ran: {stdout}");
}

macro_rules! suite {
    ($($backend:ident),*) => {$(
        mod $backend {
            #[test]
            fn approved_write_lands_on_the_host() { super::approved_write_lands_on_the_host(stringify!($backend)) }
            #[test]
            fn spoofing_paths_never_reach_the_terminal() { super::spoofing_paths_never_reach_the_terminal(stringify!($backend)) }
            #[test]
            fn denied_write_changes_nothing() { super::denied_write_changes_nothing(stringify!($backend)) }
            #[test]
            fn delegation_derives_the_child_sandbox() { super::delegation_derives_the_child_sandbox(stringify!($backend)) }
            #[test]
            fn child_worker_limits_hold() { super::child_worker_limits_hold(stringify!($backend)) }
            #[test]
            fn no_broker_means_no_socket_and_no_token() { super::no_broker_means_no_socket_and_no_token(stringify!($backend)) }
            #[test]
            fn shell_runs_inside_the_sandbox_under_its_rules() { super::shell_runs_inside_the_sandbox_under_its_rules(stringify!($backend)) }
            #[test]
            fn shell_rules_see_through_launchers_and_git() { super::shell_rules_see_through_launchers_and_git(stringify!($backend)) }
        }
    )*};
}

suite!(docker, bwrap);
