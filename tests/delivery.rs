//! `delivery: copy` on the real backends, through the real `workcell` binary: what a worker
//! leaves in a copy-delivered zone reaches the host only after the checker (files and
//! directories only, the zone's suffixes and sizes, no set-uid bit), deletions included; a
//! host change during the run is a conflict, not overwritten, and is not seen by the worker;
//! a timed-out run, a review answered no (or nobody to ask) and a `--strict` run of a zone
//! that asks publish nothing, while a review answered yes publishes. The reviews are answered
//! at the real prompt, on a pseudo-terminal (`tests/pty_run.py`). The same bodies run on bwrap
//! and docker.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::give_to_worker;
use support::scratch::Project;

/// Exit status of a run whose delivery held something back (docs/commands.md, "Exit statuses").
const HELD_BACK: i32 = 3;

const PRE: &str = "approval: {write: preApproved, delete: preApproved}";

/// `tmp/proj` with `out/` (copy-delivered, `.md` only, at most 1000 bytes per file) and
/// `sig/` (a live bind, for the test and the worker to signal each other).
struct Scratch(Project);

impl std::ops::Deref for Scratch {
    type Target = Project;
    fn deref(&self) -> &Project {
        &self.0
    }
}

impl Scratch {
    fn new(out_approval: &str) -> Scratch {
        let config = format!(
            "sandbox:\n  zones:\n    out: {{path: ./out, mode: rw, suffixes: [.md], max_file_bytes: 1000, delivery: copy, {out_approval}}}\n    sig: {{path: ./sig, mode: rw, {PRE}}}\n"
        );
        Scratch(Project::new(&["out", "sig"], &config))
    }

    /// `workcell run --backend B <extra> -- sh -c SCRIPT`, without a controlling terminal
    /// (`setsid`), so that nothing could ever be asked on one.
    fn command(&self, backend: &str, extra: &[&str], script: &str) -> Command {
        self.argv_command(backend, extra, &["sh", "-c", script])
    }

    /// The same with the worker's command as given (no shell).
    fn argv_command(&self, backend: &str, extra: &[&str], argv: &[&str]) -> Command {
        let mut c = Command::new("setsid");
        c.arg("-w")
            .arg(assert_cmd::cargo::cargo_bin("workcell"))
            .current_dir(&self.dir)
            .env_remove("RUST_LOG")
            .args(["run", "--backend", backend])
            .args(extra)
            .arg("--")
            .args(argv)
            .stdin(Stdio::null());
        c
    }

    fn run(&self, backend: &str, extra: &[&str], script: &str) -> Output {
        let out = self.command(backend, extra, script).output().expect("run workcell");
        eprintln!("exit {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        out
    }
}

/// `workcell run --backend B --json --review -- sh -c SCRIPT` on a pseudo-terminal (its
/// controlling terminal), `answer` typed at every approval prompt: pty_run.py's report.
fn review_on_pty(s: &Scratch, backend: &str, answer: &str, script: &str) -> serde_json::Value {
    let driver = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pty_run.py");
    let out = Command::new("python3")
        .arg(driver)
        .arg(answer)
        .arg(assert_cmd::cargo::cargo_bin("workcell"))
        .args(["run", "--backend", backend, "--json", "--review", "--", "sh", "-c", script])
        .current_dir(&s.dir)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run pty_run.py");
    assert!(out.status.success(), "pty_run.py failed: {}", String::from_utf8_lossy(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("pty_run.py prints JSON");
    eprintln!("exit {}\nterminal:\n{}", report["exit"], report["output"].as_str().unwrap_or_default());
    report
}

/// The `--json` delivery summary in what the terminal showed (after the reviewer's answer).
fn summary_on_terminal(output: &str) -> serde_json::Value {
    let at = output.rfind("{\"delivery\"").unwrap_or_else(|| panic!("no delivery summary in: {output}"));
    let mut values = serde_json::Deserializer::from_str(&output[at..]).into_iter::<serde_json::Value>();
    values.next().expect("a summary").expect("the summary is JSON")["delivery"].clone()
}

/// The delivery summary workcell printed with `--json`.
fn summary(out: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).unwrap_or_else(|| panic!("no delivery summary in: {err}"));
    serde_json::from_str::<serde_json::Value>(line).unwrap()["delivery"].clone()
}

fn reason_of(s: &serde_json::Value, path: &str) -> String {
    s["refused"].as_array().unwrap().iter().find(|r| r["path"] == path).map(|r| r["reason"].as_str().unwrap().to_string()).unwrap_or_default()
}

mod body {
    use super::*;

    pub fn only_checked_files_reach_the_host(backend: &str) {
        let s = Scratch::new(PRE);
        std::fs::write(s.out("del.md"), "delete me").unwrap();
        give_to_worker(&s.dir);
        let script = "cd /out && echo ok > ok.md && echo x > bad.exe && head -c 5000 /dev/zero > big.md && ln -s /etc/passwd link.md \
                      && echo h > h.md && ln h.md hard.md && mkfifo fifo.md && echo r > run.md && { chmod 4755 run.md 2>/dev/null; rm del.md; }";
        let out = s.run(backend, &["--json"], script);
        assert_eq!(out.status.code(), Some(HELD_BACK), "refusals end the run with the held-back status");
        assert_eq!(s.listing(), ["ok.md", "run.md"], "the host holds what passed, and nothing else");
        assert_eq!(std::fs::read_to_string(s.out("ok.md")).unwrap(), "ok\n");
        let mode = std::fs::metadata(s.out("run.md")).unwrap().permissions().mode();
        assert_eq!(mode & 0o7000, 0, "run.md kept its set-uid bit: {mode:o}");
        let sum = summary(&out);
        assert_eq!(sum["published"], true);
        assert_eq!(sum["deleted"], serde_json::json!(["del.md"]));
        // bwrap's seccomp filter refuses the set-uid bit already; under docker the checker drops it.
        let dropped = if backend == "bwrap" { serde_json::json!([]) } else { serde_json::json!(["run.md"]) };
        assert_eq!(sum["bits_dropped"], dropped);
        for (path, reason) in
            [("bad.exe", "suffix"), ("big.md", "too_large"), ("link.md", "symlink"), ("h.md", "hard_link"), ("hard.md", "hard_link"), ("fifo.md", "fifo")]
        {
            assert_eq!(reason_of(&sum, path), reason, "{path}: {sum}");
        }
    }

    pub fn a_host_change_during_the_run_is_a_conflict(backend: &str) {
        let s = Scratch::new(PRE);
        std::fs::write(s.out("conf.md"), "orig\n").unwrap();
        give_to_worker(&s.dir);
        // The worker waits for the test (bounded), then reads and writes its copy.
        let script = "touch /sig/started; i=0; while [ ! -e /sig/go ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done; \
                      cat /out/conf.md > /out/seen.md; echo worker > /out/conf.md";
        let child = s.command(backend, &[], script).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(90);
        while !s.dir.join("sig/started").exists() {
            assert!(Instant::now() < deadline, "the worker never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::fs::write(s.out("conf.md"), "host\n").unwrap();
        std::fs::write(s.dir.join("sig/go"), "").unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("{err}");
        assert_eq!(out.status.code(), Some(HELD_BACK), "a conflict ends the run with the held-back status");
        assert_eq!(std::fs::read_to_string(s.out("conf.md")).unwrap(), "host\n", "a host change was overwritten");
        assert_eq!(std::fs::read_to_string(s.out("seen.md")).unwrap(), "orig\n", "the worker saw the live host directory");
        assert!(err.contains("conflict  conf.md"), "{err}");
    }

    pub fn a_timed_out_run_publishes_nothing(backend: &str) {
        let s = Scratch::new(PRE);
        give_to_worker(&s.dir);
        let out = s.run(backend, &["--timeout", "2s"], "echo t > /out/t.md; sleep 60");
        assert_eq!(out.status.code(), Some(124));
        assert!(s.listing().is_empty(), "{:?}", s.listing());
        assert!(String::from_utf8_lossy(&out.stderr).contains("nothing published: the run timed out"));
    }

    pub fn a_command_that_cannot_start_publishes_nothing_and_says_so(backend: &str) {
        let s = Scratch::new(PRE);
        give_to_worker(&s.dir);
        let out = s.argv_command(backend, &[], &["/no/such/program"]).output().expect("run workcell");
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("{err}");
        assert_eq!(out.status.code(), Some(127), "{err}");
        assert!(err.contains("nothing published: the command could not be started (or the worker exited 127)"), "{err}");
        assert!(!err.contains("did not end by itself"), "{err}");
    }

    pub fn a_review_nobody_answers_publishes_nothing(backend: &str) {
        let s = Scratch::new(PRE);
        give_to_worker(&s.dir);
        let out = s.run(backend, &["--review"], "echo r > /out/r.md");
        assert_eq!(out.status.code(), Some(HELD_BACK));
        assert!(s.listing().is_empty(), "{:?}", s.listing());
        assert!(String::from_utf8_lossy(&out.stderr).contains("nothing published: nobody could be asked"));
    }

    /// The host holds `old.md`; the worker adds `r.md` and deletes `old.md`. A reviewer who
    /// says no at the prompt leaves the host as it was.
    pub fn a_review_answered_no_publishes_nothing(backend: &str) {
        let s = Scratch::new(PRE);
        std::fs::write(s.out("old.md"), "host\n").unwrap();
        give_to_worker(&s.dir);
        let r = review_on_pty(&s, backend, "n", "echo r > /out/r.md && rm /out/old.md");
        let output = r["output"].as_str().unwrap_or_default();
        assert_eq!(r["exit"], HELD_BACK, "{output}");
        assert_eq!(r["prompts"], 1, "exactly the delivery review is asked: {output}");
        assert!(output.contains("workcell: publish these changes (1 added, 0 changed, 1 deleted) into zone out?"), "{output}");
        assert!(output.contains("added     r.md") && output.contains("deleted   old.md"), "the reviewer was shown the changes: {output}");
        assert_eq!(s.listing(), ["old.md"], "a change reached the host after a no");
        assert_eq!(std::fs::read_to_string(s.out("old.md")).unwrap(), "host\n");
        let sum = summary_on_terminal(output);
        assert_eq!(sum["published"], false, "{sum}");
        assert_eq!(sum["withheld"], "the reviewer said no", "{sum}");
    }

    /// The same run answered yes at the prompt: the checked changes reach the host.
    pub fn a_review_answered_yes_publishes(backend: &str) {
        let s = Scratch::new(PRE);
        std::fs::write(s.out("old.md"), "host\n").unwrap();
        give_to_worker(&s.dir);
        let r = review_on_pty(&s, backend, "y", "echo r > /out/r.md && echo x > /out/bad.exe && rm /out/old.md");
        let output = r["output"].as_str().unwrap_or_default();
        assert_eq!(r["exit"], HELD_BACK, "bad.exe was refused: {output}");
        assert_eq!(r["prompts"], 1, "exactly the delivery review is asked: {output}");
        assert_eq!(s.listing(), ["r.md"], "the host holds the checked changes, and nothing else");
        assert_eq!(std::fs::read_to_string(s.out("r.md")).unwrap(), "r\n");
        let sum = summary_on_terminal(output);
        assert_eq!(sum["published"], true, "{sum}");
        assert!(sum.get("withheld").is_none(), "{sum}");
        assert_eq!(sum["added"], serde_json::json!(["r.md"]), "{sum}");
        assert_eq!(sum["deleted"], serde_json::json!(["old.md"]), "{sum}");
        assert_eq!(reason_of(&sum, "bad.exe"), "suffix", "{sum}");
    }

    pub fn a_zone_that_asks_publishes_nothing_under_strict(backend: &str) {
        let s = Scratch::new("approval: {write: ask, delete: ask}");
        give_to_worker(&s.dir);
        let out = s.run(backend, &["--strict"], "echo a > /out/a.md");
        assert_eq!(out.status.code(), Some(HELD_BACK));
        assert!(s.listing().is_empty(), "{:?}", s.listing());
        // The same zone with --approve-all publishes.
        let out = s.run(backend, &["--approve-all"], "echo a > /out/a.md");
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(s.listing(), ["a.md"]);
    }

    pub fn a_child_worker_delivers_through_the_checker(backend: &str) {
        use std::sync::Arc;
        use workcell::audit::AuditLog;
        use workcell::config::{BackendChoice, Project};
        use workcell::run::runner::BackendRunner;
        use workcell::tools::approval::{ApprovalMode, Approver};
        use workcell::tools::service::{Caller, ToolService};

        let s = Scratch::new(PRE);
        let zones = "sandbox:\n  zones:\n    - {name: out, mode: rw}\n";
        let parent = format!("---\nworkers: [child]\n{zones}command: [true]\n---\n");
        let child = format!("---\n{zones}command: [sh, -c, 'echo c > /out/c.md; echo x > /out/c.exe; ln -s /etc/passwd /out/l.md']\n---\n");
        std::fs::create_dir_all(s.dir.join("workers")).unwrap();
        std::fs::write(s.dir.join("workers/parent.worker"), parent).unwrap();
        std::fs::write(s.dir.join("workers/child.worker"), child).unwrap();
        give_to_worker(&s.dir);
        let yaml = std::fs::read_to_string(s.dir.join("workcell.yaml")).unwrap();
        let p = Arc::new(Project::from_text(&yaml, &s.dir.join("workcell.yaml"), &s.dir).expect("project"));
        let choice = if backend == "docker" { BackendChoice::Docker } else { BackendChoice::Bwrap };
        let w = p.worker("parent").expect("worker").clone();
        let svc = ToolService::new(
            p.clone(),
            Caller { worker: Some(w.clone()), chain: vec!["parent".into()] },
            w.sandbox.clone(),
            Approver::new(ApprovalMode::ApproveAll, None),
            AuditLog::new(&p.dir, "t"),
            Arc::new(BackendRunner::new(p.clone(), choice, ApprovalMode::ApproveAll)),
        );
        let out = svc.call("call_worker", serde_json::json!({"name": "child"})).expect("the child runs");
        assert_eq!(out["exit_code"], HELD_BACK, "the child's refusals: {out}");
        assert_eq!(s.listing(), ["c.md"], "only the checked file reaches the host");
        let log = std::fs::read_to_string(s.dir.join(".workcell/audit.jsonl")).expect("audit");
        assert!(log.contains("\"event\":\"delivery\"") && log.contains("\"reason\":\"symlink\""), "{log}");
    }
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [
        only_checked_files_reach_the_host,
        a_host_change_during_the_run_is_a_conflict,
        a_timed_out_run_publishes_nothing,
        a_command_that_cannot_start_publishes_nothing_and_says_so,
        a_review_nobody_answers_publishes_nothing,
        a_review_answered_no_publishes_nothing,
        a_review_answered_yes_publishes,
        a_zone_that_asks_publishes_nothing_under_strict,
        a_child_worker_delivers_through_the_checker
    ]
);
support::backend_suite!(
    docker,
    "docker",
    [
        only_checked_files_reach_the_host,
        a_host_change_during_the_run_is_a_conflict,
        a_timed_out_run_publishes_nothing,
        a_command_that_cannot_start_publishes_nothing_and_says_so,
        a_review_nobody_answers_publishes_nothing,
        a_review_answered_no_publishes_nothing,
        a_review_answered_yes_publishes,
        a_zone_that_asks_publishes_nothing_under_strict,
        a_child_worker_delivers_through_the_checker
    ]
);
