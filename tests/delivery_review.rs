//! The review of a `delivery: copy` zone as a person meets it, through the real `workcell`
//! binary on a pseudo-terminal (`tests/pty_review.py`, whose screen is a terminal emulator):
//! what the worker drew or left set on the terminal cannot frame or replace the summary; the
//! question says what it asks (a deletion-only review asks to delete); `p` goes through the
//! changes one by one and `v` shows the escaped start of a file; each zone's result is printed
//! once; a run whose delivery held anything back ends with exit status 3 unless the worker's
//! own status is non-zero; a name with a format character reaches neither stderr nor the
//! audit log raw.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use support::give_to_worker;
use support::scratch::Project;

/// Exit status of a run whose delivery held something back (docs/commands.md, "Exit statuses").
const HELD_BACK: i64 = 3;

/// `tmp/proj` with `out/`, copy-delivered, writes and deletes pre-approved (so a prompt comes
/// from `--review`), any suffix.
struct Scratch(Project);

impl std::ops::Deref for Scratch {
    type Target = Project;
    fn deref(&self) -> &Project {
        &self.0
    }
}

impl Scratch {
    fn new(extra: &str) -> Scratch {
        let config =
            format!("sandbox:\n  zones:\n    out: {{path: ./out, mode: rw, delivery: copy, approval: {{write: preApproved, delete: preApproved}}{extra}}}\n");
        Scratch(Project::new(&["out"], &config))
    }

    /// `workcell run --backend B <extra> -- sh -c SCRIPT` with `answers` typed at the
    /// prompts, on a pseudo-terminal: pty_review.py's report.
    fn on_pty(&self, backend: &str, extra: &[&str], answers: &[&str], script: &str) -> Value {
        self.on_pty_typed_ahead(backend, extra, "", answers, script)
    }

    /// [`Scratch::on_pty`], with `ahead` typed as soon as workcell starts.
    fn on_pty_typed_ahead(&self, backend: &str, extra: &[&str], ahead: &str, answers: &[&str], script: &str) -> Value {
        let bin = assert_cmd::cargo::cargo_bin("workcell");
        let mut argv = vec![bin.to_str().unwrap(), "run", "--backend", backend];
        argv.extend_from_slice(extra);
        argv.extend_from_slice(&["--", "sh", "-c", script]);
        self.run_driver(ahead, answers, &argv)
    }

    /// `argv` on the pseudo-terminal, `answers` typed at the prompts.
    fn on_pty_command(&self, answers: &[&str], argv: &[&str]) -> Value {
        self.run_driver("", answers, argv)
    }

    fn run_driver(&self, ahead: &str, answers: &[&str], argv: &[&str]) -> Value {
        assert!(support::python_ready(&["pyte"]), "pyte (the terminal emulator that reads the screen) is required");
        let driver = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pty_review.py");
        let out = Command::new(support::python())
            .arg(driver)
            .arg(serde_json::to_string(answers).unwrap())
            .args(argv)
            .current_dir(&self.dir)
            .env_remove("RUST_LOG")
            .env("PTY_TYPEAHEAD", ahead)
            .stdin(Stdio::null())
            .output()
            .expect("run pty_review.py");
        assert!(out.status.success(), "pty_review.py failed: {}", String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).expect("pty_review.py prints JSON");
        eprintln!("exit {}\nterminal:\n{}", report["exit"], report["output"].as_str().unwrap_or_default());
        report
    }

    /// The same run without a controlling terminal (`setsid`): nobody could be asked.
    fn run(&self, backend: &str, extra: &[&str], script: &str) -> Output {
        let out = Command::new("setsid")
            .arg("-w")
            .arg(assert_cmd::cargo::cargo_bin("workcell"))
            .current_dir(&self.dir)
            .env_remove("RUST_LOG")
            .args(["run", "--backend", backend])
            .args(extra)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("run workcell");
        eprintln!("exit {:?}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
        out
    }
}

fn screen(report: &Value, i: usize) -> String {
    let lines = report["screens"][i].as_array().unwrap_or_else(|| panic!("no prompt {i} was seen: {report}"));
    lines.iter().map(|l| l.as_str().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

fn delivery_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.find("{\"delivery\"").map(|at| &l[at..]))
        .map(|l| serde_json::from_str::<Value>(l.trim_end()).expect("a delivery line is JSON")["delivery"].clone())
        .collect()
}

mod body {
    use super::*;

    /// `p` asks about each change: `a.md` yes, `b.md` viewed (its start shown escaped,
    /// at most 20 lines) then no, the deletion of `old.md` no. Only `a.md` lands; the run ends
    /// with the held-back status and one delivery line naming the declined changes.
    pub fn changes_are_reviewed_one_by_one(backend: &str) {
        let s = Scratch::new("");
        std::fs::write(s.out("old.md"), "host\n").unwrap();
        give_to_worker(&s.dir);
        let script = r"echo a > /out/a.md && printf 'bee\033[2Jline\n' > /out/b.md && seq 1 40 >> /out/b.md && rm /out/old.md";
        let r = s.on_pty(backend, &["--review", "--json"], &["p", "y", "v", "n", "n"], script);
        let output = r["output"].as_str().unwrap_or_default();
        assert_eq!(r["prompts"], 5, "{output}");
        assert!(screen(&r, 0).contains("publish these changes (2 added, 0 changed, 1 deleted) into zone out?"), "{}", screen(&r, 0));
        assert!(screen(&r, 1).contains("workcell: add a.md (2 bytes)? [y]es / [n]o / [v]iew:"), "{}", screen(&r, 1));
        assert!(output.contains("bee\\e[2Jline"), "the preview shows the escape, escaped: {output}");
        let line = |n: &str| output.lines().any(|l| l.trim_end() == n);
        assert!(line("19") && !line("20"), "at most 20 lines of preview: {output}");
        assert!(screen(&r, 4).contains("workcell: delete old.md? [y]es / [n]o:"), "{}", screen(&r, 4));
        assert_eq!(s.listing(), ["a.md", "old.md"]);
        assert_eq!(std::fs::read_to_string(s.out("old.md")).unwrap(), "host\n");
        assert_eq!(r["exit"], HELD_BACK, "{output}");
        let lines = delivery_lines(output);
        assert_eq!(lines.len(), 1, "one delivery line per zone: {output}");
        assert_eq!(lines[0]["added"], json!(["a.md"]), "{}", lines[0]);
        assert_eq!(lines[0]["declined"], json!(["b.md", "old.md"]), "{}", lines[0]);
    }

    /// A review of deletions only asks to delete (a removed directory listed and counted), and
    /// a no keeps the host's files.
    pub fn a_deletion_only_review_asks_to_delete(backend: &str) {
        let s = Scratch::new("");
        std::fs::write(s.out("old.md"), "host\n").unwrap();
        std::fs::create_dir(s.out("gone")).unwrap();
        std::fs::write(s.out("gone/x.md"), "x\n").unwrap();
        give_to_worker(&s.dir);
        let r = s.on_pty(backend, &["--review"], &["n"], "rm -r /out/old.md /out/gone");
        let output = r["output"].as_str().unwrap_or_default();
        let shown = screen(&r, 0);
        assert!(shown.contains("workcell: delete 2 file(s) and 1 directory(ies) from zone out, as the worker did?"), "{shown}");
        assert!(shown.contains("dir gone  gone/"), "the removed directory is listed before the question: {shown}");
        assert!(!output.contains("allow write"), "{output}");
        assert_eq!(s.listing(), ["gone", "old.md"]);
        assert_eq!(r["exit"], HELD_BACK, "{output}");
    }

    /// Answered yes, the summary is shown once (before the question), then one result line.
    pub fn the_summary_is_printed_once(backend: &str) {
        let s = Scratch::new("");
        give_to_worker(&s.dir);
        let r = s.on_pty(backend, &["--review"], &["y"], "echo a > /out/a.md");
        let output = r["output"].as_str().unwrap_or_default();
        assert_eq!(output.matches("added     a.md").count(), 1, "{output}");
        assert!(output.contains("workcell: delivery of zone out: published as shown"), "{output}");
        assert_eq!(s.listing(), ["a.md"]);
        assert_eq!(r["exit"], 0, "{output}");
        let r = s.on_pty(backend, &["--review", "--json"], &["y"], "echo b > /out/b.md");
        let output = r["output"].as_str().unwrap_or_default();
        assert_eq!(delivery_lines(output).len(), 1, "{output}");
        assert_eq!(output.matches("added     b.md").count(), 1, "{output}");
        // Reviewed on the terminal, stderr into a file: the file has the whole summary.
        let bin = assert_cmd::cargo::cargo_bin("workcell");
        let wrapped = format!("exec {} run --backend {backend} --review -- sh -c 'echo c > /out/c.md' 2>../err.txt", bin.display());
        let r = s.on_pty_command(&["y"], &["sh", "-c", &wrapped]);
        let logged = std::fs::read_to_string(s.dir.join("../err.txt")).expect("stderr file");
        assert!(logged.contains("added     c.md") && logged.contains("published"), "{logged}\n{}", r["output"]);
        assert!(!logged.contains('\u{1b}'), "no escapes into a file: {logged:?}");
    }

    /// Something refused ends a run the worker ended with 0 with status 3; the worker's own
    /// non-zero status wins; a clean delivery keeps 0.
    pub fn a_delivery_that_held_back_ends_with_its_own_status(backend: &str) {
        let s = Scratch::new(", suffixes: [.md]");
        give_to_worker(&s.dir);
        assert_eq!(s.run(backend, &[], "echo a > /out/a.md").status.code(), Some(0));
        let out = s.run(backend, &[], "echo x > /out/x.exe");
        assert_eq!(out.status.code(), Some(HELD_BACK as i32));
        assert!(String::from_utf8_lossy(&out.stderr).contains("refused   x.exe"));
        assert_eq!(s.run(backend, &[], "echo y > /out/y.exe; exit 5").status.code(), Some(5));
        // Nobody to ask for a review: nothing published, held back.
        assert_eq!(s.run(backend, &["--review"], "echo b > /out/b.md").status.code(), Some(HELD_BACK as i32));
        assert_eq!(s.listing(), ["a.md"]);
    }

    /// A name with a right-to-left override is refused; the raw character reaches neither
    /// stderr (text or JSON) nor the audit log.
    pub fn a_format_character_never_reaches_the_terminal(backend: &str) {
        let s = Scratch::new("");
        give_to_worker(&s.dir);
        let script = "printf x > \"/out/a$(printf '\\342\\200\\256')txt.md\"";
        for extra in [&["--json"][..], &[]] {
            let out = s.run(backend, extra, script);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains('\u{202e}'), "{err}");
            assert!(err.contains("\\u{202e}"), "the refusal names it escaped: {err}");
            assert_eq!(out.status.code(), Some(HELD_BACK as i32));
        }
        let log = std::fs::read_to_string(s.dir.join(".workcell/audit.jsonl")).expect("audit");
        assert!(log.contains("\"delivery\"") && !log.contains('\u{202e}'), "{log}");
        assert!(s.listing().is_empty(), "{:?}", s.listing());
    }
}

/// The worker clears the screen, draws a fake "no changes" summary, confines scrolling to
/// the top two lines in origin mode, hides the cursor and text and leaves the cursor there
/// (and, in turn, an OSC or DCS string never ended, or half a control sequence), having also
/// left `run.sh` (executable) in the zone. At the question, the screen shows the real summary
/// line for `run.sh` and the question, and not the fake.
#[test]
fn the_review_cannot_be_spoofed_by_the_worker() {
    if !support::backend_ready("bwrap") {
        return;
    }
    for tail in ["", r"\033]0;", r"\033P", r"\033[1;"] {
        let s = Scratch::new("");
        give_to_worker(&s.dir);
        let script = format!(
            r"printf '#!/bin/sh\necho hi\n' > /out/run.sh && chmod 755 /out/run.sh && printf '\033[2J\033[H\033[12;1Hworkcell: delivery of zone out:\n  no changes\n\033[?25l\033[8m\033[1;2r\033[?6h\033[1;1H{tail}'"
        );
        let r = s.on_pty("bwrap", &["--review"], &["y"], &script);
        let shown = screen(&r, 0);
        assert!(shown.contains("added     run.sh (") && shown.contains(", executable)"), "{tail}: the real summary is not on the screen:\n{shown}");
        assert!(shown.contains("workcell: publish these changes (1 added, 0 changed, 0 deleted) into zone out?"), "{tail}:\n{shown}");
        assert!(!shown.contains("no changes"), "{tail}: the worker's fake summary is still on the screen:\n{shown}");
        assert_eq!(r["exit"], 0);
        let mode = std::fs::metadata(s.out("run.sh")).unwrap().permissions().mode();
        assert_eq!(mode & 0o111, 0o111, "published executable, as the review said");
    }
}

/// A `y` typed before the question (here: as the run starts) does not answer it; a worker
/// that set its terminal to turn Enter into a carriage return (`stty inlcr`) and stop echoing
/// does not leave the review unanswerable.
#[test]
fn only_an_answer_to_the_question_counts() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let s = Scratch::new("");
    give_to_worker(&s.dir);
    let r = s.on_pty_typed_ahead("bwrap", &["--review"], "y\n", &["n"], "echo a > /out/a.md");
    assert!(s.listing().is_empty(), "the type-ahead answered the review: {}", r["output"]);
    assert_eq!(r["exit"], HELD_BACK);
    let r = s.on_pty("bwrap", &["--review"], &["y"], "echo b > /out/b.md; stty inlcr -echo <&1");
    assert_eq!(s.listing(), ["b.md"], "the answer never reached workcell: {}", r["output"]);
    assert_eq!(r["exit"], 0);
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [
        changes_are_reviewed_one_by_one,
        a_deletion_only_review_asks_to_delete,
        the_summary_is_printed_once,
        a_delivery_that_held_back_ends_with_its_own_status,
        a_format_character_never_reaches_the_terminal
    ]
);
support::backend_suite!(
    docker,
    "docker",
    [
        changes_are_reviewed_one_by_one,
        a_deletion_only_review_asks_to_delete,
        the_summary_is_printed_once,
        a_delivery_that_held_back_ends_with_its_own_status,
        a_format_character_never_reaches_the_terminal
    ]
);
