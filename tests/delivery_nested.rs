//! `delivery: copy` with `--review` covers everything a run does to the zone, not only the
//! worker's own writes (issue 25, findings 4 and 5): a `shell` tool command and a child
//! worker (`call_worker`) work on the run's private copy instead of publishing a copy of
//! their own, and the broker's `write_file`, `delete_file` and `read_file` act on that copy
//! too. With `--review` and no terminal the review cannot ask, so nothing of any of them may
//! reach the host, and the summary lists them all. Real bwrap and docker, through the
//! `workcell` binary; the same bodies on both.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use support::{give_to_worker, write_project};

const CURL: &str = r#"curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json'"#;
const ZONE: &str = "sandbox:\n  zones:\n    - {name: out, mode: rw}\n";

/// `tmp/proj` whose `out/` is copy-delivered, pre-approved, and holds `old.md` ("host").
struct Proj {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Proj {
    fn new(workers: &[(&str, &str)]) -> Proj {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
        std::fs::create_dir_all(dir.join("out")).expect("mkdir out");
        std::fs::write(dir.join("out/old.md"), "host\n").expect("old.md");
        let config = "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, delivery: copy, approval: {write: preApproved, delete: preApproved}}\n";
        write_project(&dir, config, workers);
        give_to_worker(&dir);
        Proj { _tmp: tmp, dir }
    }

    /// Every file beneath the host's `out/`, with its content.
    fn host(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut stack = vec![self.dir.join("out")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("read_dir") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(self.dir.join("out")).expect("beneath").display().to_string();
                    out.push((rel, std::fs::read_to_string(&p).unwrap_or_default()));
                }
            }
        }
        out.sort();
        out
    }

    /// `workcell run --backend B --approve-all --json [--review] WORKER` without a
    /// controlling terminal (`setsid`) and with stdin closed: a review cannot ask anybody.
    fn run(&self, backend: &str, review: bool, worker: &str) -> Output {
        let mut c = Command::new("setsid");
        c.arg("-w")
            .arg(assert_cmd::cargo::cargo_bin("workcell"))
            .current_dir(&self.dir)
            .env_remove("RUST_LOG")
            .args(["run", "--backend", backend, "--approve-all", "--json"])
            .args(review.then_some("--review"))
            .arg(worker)
            .stdin(Stdio::null());
        let out = c.output().expect("run workcell");
        eprintln!("exit {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        out
    }

    fn untouched(&self) -> Vec<(String, String)> {
        vec![("old.md".into(), "host\n".into())]
    }
}

/// The one `--json` delivery summary of zone `out`.
fn summary(out: &Output) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("{\"delivery\"")).collect();
    assert_eq!(lines.len(), 1, "one delivery summary, the run's own (a nested run publishes none): {err}");
    serde_json::from_str::<Value>(lines[0]).expect("JSON")["delivery"].clone()
}

fn assert_withheld(sum: &Value) {
    assert_eq!(sum["published"], false, "{sum}");
    assert!(sum["withheld"].as_str().unwrap_or_default().contains("nobody could be asked"), "{sum}");
}

/// A worker script line: one broker call, its answer on a line of its own.
fn call(tool: &str, args: &Value) -> String {
    format!("{CURL} --data-binary '{args}' http://workcell/v1/tools/{tool}; echo")
}

fn worker(header: &str, script: &str) -> String {
    let command = serde_json::to_string(&["sh", "-c", script]).expect("json");
    format!("---\n{header}command: {command}\n---\nWork.\n")
}

/// The broker's answers the worker printed, in order.
fn answers(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.get("ok").is_some()).collect()
}

mod body {
    use super::*;

    /// A `shell` tool command that writes into the zone: under bwrap it runs in a fresh
    /// sandbox (it used to copy the zone and publish its change unreviewed), under docker in
    /// the worker's container; either way it lands in the run's copy.
    pub fn a_shell_command_keeps_the_review(backend: &str) {
        let script = format!("{}; {}", call("shell", &json!({"command": "touch /out/s.md"})), call("shell", &json!({"command": "rm /out/old.md"})));
        let header = format!("{ZONE}shell_default: {{allowed: true, approval_required: false}}\n");
        let p = Proj::new(&[("sheller", &worker(&header, &script))]);
        let out = p.run(backend, true, "sheller");
        let a = answers(&out);
        assert_eq!(a.len(), 2, "{a:?}");
        assert!(a.iter().all(|x| x["ok"] == true && x["result"]["exit_code"] == 0), "the commands ran: {a:?}");
        assert_eq!(p.host(), p.untouched(), "a shell command published past the review");
        let sum = summary(&out);
        assert_withheld(&sum);
        assert_eq!(sum["added"], json!(["s.md"]), "the command's file is in the run's review: {sum}");
        assert_eq!(sum["deleted"], json!(["old.md"]), "{sum}");
    }

    /// A child worker (`call_worker`) that writes and deletes in the zone works on the
    /// parent's copy: its changes are the parent's, withheld with them.
    pub fn a_child_worker_keeps_the_review(backend: &str) {
        let parent = worker(&format!("workers: [child]\n{ZONE}"), &format!("{}; echo p > /out/p.md", call("call_worker", &json!({"name": "child"}))));
        let child = worker(ZONE, "echo c > /out/c.md && mkdir -p /out/sub && echo d > /out/sub/d.md && rm /out/old.md && cat /out/p.md 2>/dev/null; true");
        let p = Proj::new(&[("parent", &parent), ("child", &child)]);
        let out = p.run(backend, true, "parent");
        let a = answers(&out);
        assert_eq!(a.len(), 1, "{a:?}");
        assert_eq!(a[0]["result"]["exit_code"], 0, "the child ran: {a:?}");
        assert_eq!(p.host(), p.untouched(), "a child worker published past the review");
        let sum = summary(&out);
        assert_withheld(&sum);
        assert_eq!(sum["added"], json!(["c.md", "p.md", "sub/d.md"]), "the child's files are in the parent's review: {sum}");
        assert_eq!(sum["deleted"], json!(["old.md"]), "{sum}");
    }

    /// The broker's writes and deletions go into the copy (in the summary, withheld with the
    /// rest); its reads see the copy, the worker sees the broker's writes. Without
    /// `--review` the same run publishes them, once, at the end.
    pub fn the_brokers_writes_go_into_the_copy(backend: &str) {
        let script = [
            call("write_file", &json!({"path": "/out/w.md", "content": "broker"})),
            call("write_file", &json!({"path": "/out/deep/er/w.md", "content": "deep"})),
            call("delete_file", &json!({"path": "/out/old.md"})),
            "echo mine > /out/mine.md".into(),
            call("read_file", &json!({"path": "/out/mine.md"})),
            call("list_files", &json!({"path": "/out"})),
            // A file the host runs stays refused in the copy as on the host.
            call("write_file", &json!({"path": "/out/.git/hooks/pre-commit", "content": "#!/bin/sh\n"})),
            r#"echo "SEEN:$(cat /out/w.md):$(test -e /out/old.md && echo old || echo gone)""#.into(),
        ]
        .join("; ");
        let p = Proj::new(&[("writer", &worker(ZONE, &script))]);
        let out = p.run(backend, true, "writer");
        let a = answers(&out);
        assert_eq!(a.len(), 6, "{a:?}");
        assert!(a[..5].iter().all(|x| x["ok"] == true), "{a:?}");
        assert!(a[3].to_string().contains("mine"), "read_file reads the copy: {}", a[3]);
        let listed = a[4].to_string();
        assert!(listed.contains("w.md") && listed.contains("mine.md") && !listed.contains("old.md"), "list_files lists the copy: {listed}");
        assert_eq!(a[5]["error"]["kind"], "protected", "{}", a[5]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("SEEN:broker:gone"), "the worker sees the broker's changes in its copy");
        assert_eq!(p.host(), p.untouched(), "a broker write reached the host past the review");
        let sum = summary(&out);
        assert_withheld(&sum);
        assert_eq!(sum["added"], json!(["deep/er/w.md", "mine.md", "w.md"]), "{sum}");
        assert_eq!(sum["deleted"], json!(["old.md"]), "{sum}");

        // Without --review the pre-approved zone publishes them, after the run.
        let out = p.run(backend, false, "writer");
        let sum = summary(&out);
        assert_eq!(sum["published"], true, "{sum}");
        let host: Vec<String> = p.host().into_iter().map(|(n, c)| format!("{n}={c}")).collect();
        assert_eq!(host, ["deep/er/w.md=deep", "mine.md=mine\n", "w.md=broker"]);
    }

    /// A worker granted only a directory inside the zone gets a copy of that directory: the
    /// broker writes into it, and judges the files the host runs from the zone's root (the
    /// grant's place in the zone comes first), so `sub/.git/hooks/…` stays refused.
    pub fn a_grant_inside_the_zone_is_judged_in_its_copy(backend: &str) {
        let script = [
            call("write_file", &json!({"path": "/out/sub/w.md", "content": "broker"})),
            call("write_file", &json!({"path": "/out/sub/.git/hooks/pre-commit", "content": "#!/bin/sh\n"})),
            call("write_file", &json!({"path": "/out/sub/.envrc", "content": "x"})),
        ]
        .join("; ");
        let header = "sandbox: {inherit: false, allow_read: [/out], allow_write: [/out/sub]}\n";
        let p = Proj::new(&[("granted", &worker(header, &script))]);
        std::fs::create_dir_all(p.dir.join("out/sub")).expect("mkdir sub");
        give_to_worker(&p.dir);
        let out = p.run(backend, true, "granted");
        let a = answers(&out);
        assert_eq!(a.len(), 3, "{a:?}");
        assert_eq!(a[0]["ok"], true, "{a:?}");
        assert_eq!(a[1]["error"]["kind"], "protected", "{}", a[1]);
        assert_eq!(a[2]["error"]["kind"], "protected", "{}", a[2]);
        assert_eq!(p.host(), p.untouched(), "a broker write reached the host past the review");
        let sum = summary(&out);
        assert_withheld(&sum);
        assert_eq!(sum["added"], json!(["w.md"]), "{sum}");
    }
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [a_shell_command_keeps_the_review, a_child_worker_keeps_the_review, the_brokers_writes_go_into_the_copy, a_grant_inside_the_zone_is_judged_in_its_copy]
);
support::backend_suite!(
    docker,
    "docker",
    [a_shell_command_keeps_the_review, a_child_worker_keeps_the_review, the_brokers_writes_go_into_the_copy, a_grant_inside_the_zone_is_judged_in_its_copy]
);
