//! `workcell check` (and the other subcommands' --help) as a user runs them.

use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn workcell(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("workcell").unwrap();
    c.current_dir(dir).env("NO_COLOR", "1").env_remove("RUST_LOG");
    c
}

/// A project with zones data (ro, *.txt only) and out (rw), and a worker `reader` that may
/// only read data.
fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("data/sub")).unwrap();
    fs::create_dir_all(dir.join("out")).unwrap();
    fs::create_dir_all(dir.join("workers")).unwrap();
    fs::write(dir.join("data/a.txt"), "a").unwrap();
    fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    data: {path: ./data, mode: ro, suffixes: [.txt]}\n    out: {path: ./out, mode: rw}\n")
        .unwrap();
    fs::write(dir.join("workers/reader.worker"), "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n---\nRead.\n").unwrap();
    (tmp, dir)
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn exit_0_when_all_allowed() {
    let (_t, dir) = project();
    let out = workcell(&dir).args(["check", "/data/a.txt", "data:sub", "out/new.md"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(stdout(&out), "allowed: /data/a.txt\nallowed: data:sub\nallowed: out/new.md\n");
}

#[test]
fn exit_1_when_any_refused() {
    let (_t, dir) = project();
    let out = workcell(&dir).args(["check", "/data/a.txt", "/data/../../etc/passwd"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.starts_with("allowed: /data/a.txt\nrefused: Cannot access '/data/../../etc/passwd': path is outside the sandbox"), "{text}");
    assert!(!text.contains(&dir.display().to_string()), "no host path: {text}");
    // Suffix policy: an existing directory is fine, a .pdf is not.
    let out = workcell(&dir).args(["check", "/data/x.pdf"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("suffix not allowed"));
}

#[test]
fn exit_2_on_config_or_usage_error() {
    let (_t, dir) = project();
    fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    data: {path: ./data, mode: rx}\n").unwrap();
    let out = workcell(&dir).args(["check", "/data/a.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("workcell.yaml:3:") && err.contains("unknown variant `rx`"), "{err}");

    let (_t2, dir) = project();
    // No path and no --stdin.
    assert_eq!(workcell(&dir).arg("check").output().unwrap().status.code(), Some(2));
    // Unknown worker.
    let out = workcell(&dir).args(["check", "--worker", "ghost", "/data/a.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("known workers: reader"));
    // Missing --config file.
    assert_eq!(workcell(&dir).args(["--config", "nope.yaml", "check", "/data/a.txt"]).output().unwrap().status.code(), Some(2));
}

#[test]
fn stdin_gives_one_verdict_per_line() {
    let (_t, dir) = project();
    let input = "/data/a.txt\n\n/nope/x\r\ndata:a.txt\n~/x\n/data/x.pdf\n";
    let out = workcell(&dir).args(["check", "--stdin"]).write_stdin(input).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(lines[0], "allowed\t/data/a.txt");
    assert!(lines[1].starts_with("refused\t/nope/x\toutside_sandbox\tCannot access '/nope/x'"), "{}", lines[1]);
    assert_eq!(lines[2], "allowed\tdata:a.txt");
    assert!(lines[3].starts_with("refused\t~/x\tinvalid_path\t"), "{}", lines[3]);
    assert!(lines[4].starts_with("refused\t/data/x.pdf\tsuffix_not_allowed\t"), "{}", lines[4]);
    for l in &lines {
        assert!(l.split('\t').count() == 2 || l.split('\t').count() == 4, "{l}");
    }
    // All allowed → 0.
    let out = workcell(&dir).args(["check", "--stdin"]).write_stdin("/data/a.txt\n/out/b\n").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn json_lines_parse() {
    let (_t, dir) = project();
    let out = workcell(&dir).args(["check", "--json", "--stdin", "/data/a.txt"]).write_stdin("/out/../data/a.txt\n/data/sub\n").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let values: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(values.len(), 3);
    assert_eq!(values[0], serde_json::json!({"path": "/data/a.txt", "allowed": true}));
    assert_eq!(values[1]["allowed"], false);
    assert_eq!(values[1]["kind"], "outside_sandbox");
    assert!(values[1]["message"].as_str().unwrap().contains("Readable paths: /data, /out"));
    assert_eq!(values[2]["allowed"], true);
}

#[test]
fn write_flag_checks_writability() {
    let (_t, dir) = project();
    let out = workcell(&dir).args(["check", "--write", "--json", "/out/new.txt", "/data/a.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(v[0]["allowed"], true);
    assert_eq!(v[1]["kind"], "not_writable");
    assert!(v[1]["message"].as_str().unwrap().contains("Writable paths: /out"));
    assert_eq!(workcell(&dir).args(["check", "--write", "/out/x/y.txt"]).output().unwrap().status.code(), Some(0));
}

#[test]
fn worker_flag_uses_the_workers_sandbox() {
    let (_t, dir) = project();
    assert_eq!(workcell(&dir).args(["check", "/out/x"]).output().unwrap().status.code(), Some(0));
    let out = workcell(&dir).args(["check", "--worker", "reader", "--json", "/out/x", "/data/a.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Vec<serde_json::Value> = stdout(&out).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(v[0]["kind"], "outside_sandbox");
    assert_eq!(v[1]["allowed"], true);
    let out = workcell(&dir).args(["check", "--worker", "reader", "--write", "/data/a.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn init_then_check() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("proj");
    let out = workcell(tmp.path()).args(["init", "proj"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    fs::write(dir.join("data/in.txt"), "hello").unwrap();
    assert_eq!(workcell(&dir).args(["check", "/data", "/data/in.txt"]).output().unwrap().status.code(), Some(0));
    assert_eq!(workcell(&dir).args(["check", "--write", "/out/line-counts.txt"]).output().unwrap().status.code(), Some(0));
    assert_eq!(workcell(&dir).args(["check", "--worker", "line-count", "--write", "/out/line-counts.txt"]).output().unwrap().status.code(), Some(0));
    assert_eq!(workcell(&dir).args(["check", "--worker", "line-count", "--write", "/data/in.txt"]).output().unwrap().status.code(), Some(1));
    // From a subdirectory, the config is found upward.
    assert_eq!(workcell(&dir.join("data")).args(["check", "/data/in.txt"]).output().unwrap().status.code(), Some(0));
    // A second init refuses to overwrite.
    assert_eq!(workcell(tmp.path()).args(["init", "proj"]).output().unwrap().status.code(), Some(2));
}

#[test]
fn help_on_every_subcommand() {
    let tmp = tempfile::tempdir().unwrap();
    let top = workcell(tmp.path()).arg("--help").output().unwrap();
    assert_eq!(top.status.code(), Some(0));
    let top = stdout(&top);
    for sub in ["init", "check", "plan", "run", "mcp", "audit", "schema", "doctor", "gc"] {
        let out = workcell(tmp.path()).args([sub, "--help"]).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{sub} --help");
        assert!(stdout(&out).contains("Usage: workcell"), "{sub}: {}", stdout(&out));
        // Each subcommand's help opens with the description `workcell --help` lists for
        // it (not the doc comment of a struct of its arguments).
        let first = stdout(&out).lines().next().unwrap_or_default().to_string();
        let listed = top.lines().find(|l| l.trim_start().starts_with(&format!("{sub} "))).unwrap_or_default();
        assert!(!first.is_empty() && listed.contains(first.trim_end_matches('.')), "{sub}: help opens with '{first}', listed as '{listed}'");
    }
    assert_eq!(workcell(tmp.path()).arg("--version").output().unwrap().status.code(), Some(0));
}

/// The global options are listed once, in `workcell --help`, not in every subcommand's
/// options; they still work after a subcommand.
#[test]
fn global_options_are_listed_once_and_work_anywhere() {
    let (_t, dir) = project();
    let top = stdout(&workcell(&dir).arg("--help").output().unwrap());
    for global in ["--config <FILE>", "--color <WHEN>", "--log-format <LOG_FORMAT>"] {
        assert!(top.contains(global), "{global} in workcell --help: {top}");
    }
    for sub in [&["init"][..], &["check"], &["plan"], &["run"], &["mcp"], &["audit"], &["schema"], &["doctor"], &["gc"], &["pool", "fill"], &["pool", "ls"]] {
        let help = stdout(&workcell(&dir).args(sub).arg("--help").output().unwrap());
        assert!(help.contains("Usage: workcell"), "{sub:?}: {help}");
        for global in ["--config", "--color", "--log-format", "--version"] {
            assert!(!help.contains(global), "{sub:?} --help lists {global}: {help}");
        }
    }
    // After the subcommand, as before: a config elsewhere, and the colour choice.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = workcell(elsewhere.path()).args(["check", "--config"]).arg(dir.join("workcell.yaml")).args(["--color", "never", "/data/a.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = workcell(elsewhere.path()).args(["pool", "ls", "--config"]).arg(dir.join("workcell.yaml")).arg("--json").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `run -h` shows the two ways to run: a worker, and a command on zones named.
#[test]
fn run_help_has_both_examples() {
    let tmp = tempfile::tempdir().unwrap();
    for flag in ["-h", "--help"] {
        let help = stdout(&workcell(tmp.path()).args(["run", flag]).output().unwrap());
        assert!(help.contains("Examples:\n  workcell run line-count\n"), "{help}");
        assert!(help.contains("  workcell run --zone in=./data:ro --zone out=./out:rw -- sh -c"), "{help}");
    }
}

/// `workcell plan` prints values as a person writes them, not Rust debug text.
#[test]
fn plan_summary_reads_as_written() {
    let (_t, dir) = project();
    let yaml = fs::read_to_string(dir.join("workcell.yaml")).unwrap() + "defaults:\n  limits: {timeout: 30s, memory: 512m}\n";
    fs::write(dir.join("workcell.yaml"), yaml).unwrap();
    // As root the worker is nobody: its rw zone is its, or `plan` refuses after the plan.
    if rustix::process::geteuid().is_root() {
        rustix::fs::chown(dir.join("out"), Some(rustix::fs::Uid::from_raw(65534)), Some(rustix::fs::Gid::from_raw(65534))).unwrap();
    }
    let out = workcell(&dir).args(["plan", "--", "true"]).output().unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.lines().any(|l| l == "image:    host"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("limits:   timeout 30s, memory 512 MiB, cpus none, pids ")), "{text}");
    for debug in ["Some(", "None", "Host", " bytes"] {
        assert!(!text.contains(debug), "debug text {debug:?} in the plan:\n{text}");
    }
}

/// `check` is the query API: a file larger than its zone's `max_file_bytes` may not be read,
/// and the refusal names the setting. A write is not judged by size (its content is unknown).
#[test]
fn check_applies_max_file_bytes_to_existing_files() {
    let (_t, dir) = project();
    fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    data: {path: ./data, mode: rw, max_file_bytes: 4}\n").unwrap();
    fs::write(dir.join("data/big.txt"), "0123456789").unwrap();
    fs::write(dir.join("data/small.txt"), "0123").unwrap();
    let out = workcell(&dir).args(["check", "/data/small.txt", "/data/big.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert_eq!(
        stdout(&out),
        "allowed: /data/small.txt\nrefused: Cannot read '/data/big.txt': file too large (10 bytes).\nMaximum allowed: 4 bytes (the max_file_bytes setting of its zone)\n"
    );
    let out = workcell(&dir).args(["check", "--write", "/data/big.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// One broken worker file stops only the commands that use that worker: `check` without
/// `--worker`, `plan` and `check` of other workers keep working; `doctor` lists it.
#[test]
fn a_broken_worker_file_stops_only_its_worker() {
    let (_t, dir) = project();
    fs::write(dir.join("workers/broken.worker"), "---\nsandbox:\n  allow_read: [/nope]\n---\n").unwrap();
    let out = workcell(&dir).args(["check", "/data/a.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = workcell(&dir).args(["check", "--worker", "reader", "/data/a.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = workcell(&dir).args(["plan", "reader", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let out = workcell(&dir).args(["check", "--worker", "broken", "/data/a.txt"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("workers/broken.worker:3:16: Cannot create child sandbox with allow_read='/nope'"), "{err}");
    let out = workcell(&dir).args(["plan", "broken", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));

    let out = workcell(&dir).args(["doctor"]).output().unwrap();
    let text = stdout(&out);
    assert!(text.contains("  workers: reader\n"), "{text}");
    assert!(text.contains("  broken worker 'broken': ") && text.contains("broken.worker:3:16: Cannot create child sandbox"), "{text}");
}

/// `plan` shows a granted directory that does not exist yet, and creates nothing.
#[test]
fn plan_shows_a_missing_granted_directory_without_creating_it() {
    let (_t, dir) = project();
    fs::write(dir.join("workers/rep.worker"), "---\nsandbox:\n  allow_write: [/out/reports]\n---\n").unwrap();
    let out = workcell(&dir).args(["plan", "rep", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("  /out/reports (missing: created by the run, owned by the worker's user (rw))\n"), "{}", stdout(&out));
    let out = workcell(&dir).args(["plan", "--json", "rep", "--", "true"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pending_grants"], serde_json::json!([{"sandbox_path": "/out/reports", "write": true}]));
    assert!(!dir.join("out/reports").exists(), "plan created the directory");
}
