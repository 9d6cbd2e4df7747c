//! Printing commands with a closed stdout (`workcell schema | head -1`): workcell ends
//! quietly, as `cat` would, instead of panicking; and the completion scripts and man page.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// What a shell reports for a process SIGPIPE ended; workcell exits with it on EPIPE.
const EXIT_CLOSED_PIPE: i32 = 141;

/// A project with one zone, one worker and one audit event (so `audit` has a line to print).
fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("data")).unwrap();
    fs::create_dir_all(dir.join("workers")).unwrap();
    fs::create_dir_all(dir.join(".workcell")).unwrap();
    fs::write(
        dir.join("workcell.yaml"),
        "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\nkubernetes:\n  image: example.org/tools:1\n  zones:\n    data: {claim: data-pvc}\n",
    )
    .unwrap();
    fs::write(dir.join("workers/reader.worker"), "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n---\nRead.\n").unwrap();
    fs::write(dir.join(".workcell/audit.jsonl"), "{\"ts\":\"1\",\"run_id\":\"r1\",\"event\":\"run_start\",\"backend\":\"none\"}\n").unwrap();
    (tmp, dir)
}

fn workcell(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_workcell"));
    c.args(args).current_dir(dir).env("NO_COLOR", "1").env_remove("RUST_LOG").env("HOME", dir).stdin(Stdio::null());
    c
}

/// Runs `args` with stdout a pipe whose read end is closed before workcell starts, so its
/// first write to stdout fails with EPIPE (SIGPIPE is ignored by Rust programs).
fn with_closed_stdout(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    workcell(dir, args).stdout(writer).stderr(Stdio::piped()).output().unwrap()
}

fn assert_quiet_end(args: &[&str], out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    assert!(!stderr.contains("Broken pipe"), "{args:?} complained: {stderr}");
    assert_ne!(out.status.code(), Some(101), "{args:?}: {stderr}");
}

#[test]
fn printing_commands_end_quietly_on_a_closed_stdout() {
    let (_t, dir) = project();
    let commands: &[&[&str]] = &[
        &["plan", "--", "true"],
        &["plan", "--json", "--", "true"],
        &["plan", "reader", "--", "ls", "/data"],
        &["plan", "--backend", "kubernetes", "--", "true"],
        &["schema"],
        &["audit"],
        &["audit", "--json"],
        &["check", "/data", "/etc/passwd"],
        &["doctor"],
        &["doctor", "--json"],
        &["pool", "ls"],
        &["completions", "bash"],
        &["man"],
    ];
    for args in commands {
        // The command prints something when stdout is open: the closed pipe is what is tested.
        let open = workcell(&dir, args).output().unwrap();
        assert!(!open.stdout.is_empty(), "{args:?} printed nothing: {}", String::from_utf8_lossy(&open.stderr));
        let out = with_closed_stdout(&dir, args);
        assert_quiet_end(args, &out);
        assert_eq!(out.status.code(), Some(EXIT_CLOSED_PIPE), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stderr.is_empty(), "{args:?} said: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn check_stdin_ends_quietly_on_a_closed_stdout() {
    let (_t, dir) = project();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let input = fs::File::open(dir.join("workcell.yaml")).unwrap();
    let out = workcell(&dir, &["check", "--stdin"]).stdin(input).stdout(writer).stderr(Stdio::piped()).output().unwrap();
    assert_quiet_end(&["check", "--stdin"], &out);
    assert_eq!(out.status.code(), Some(EXIT_CLOSED_PIPE), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn help_and_version_do_not_panic_on_a_closed_stdout() {
    let (_t, dir) = project();
    for args in [&["--help"][..], &["--version"], &["plan", "--help"], &["pool", "--help"]] {
        let out = with_closed_stdout(&dir, args);
        assert_quiet_end(args, &out);
    }
}

#[test]
fn a_shell_pipeline_into_head_ends_quietly() {
    let (_t, dir) = project();
    let bin = env!("CARGO_BIN_EXE_workcell");
    // `head -c1` exits after one byte; everything workcell writes after that meets EPIPE.
    let script = format!("'{bin}' schema | head -c1 >/dev/null; '{bin}' plan -- true | head -c1 >/dev/null");
    let out = Command::new("sh").arg("-c").arg(script).current_dir(&dir).env("HOME", &dir).output().unwrap();
    assert!(out.status.success());
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn bash_completion_names_the_subcommands() {
    let (_t, dir) = project();
    let out = workcell(&dir, &["completions", "bash"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let script = String::from_utf8(out.stdout).unwrap();
    for word in ["workcell", "pool", "run", "plan", "completions", "--config"] {
        assert!(script.contains(word), "no {word} in:\n{script}");
    }
    for shell in ["zsh", "fish", "powershell", "elvish"] {
        let out = workcell(&dir, &["completions", shell]).output().unwrap();
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("pool"), "{shell}");
    }
}

#[test]
fn man_page_is_roff_for_workcell() {
    let (_t, dir) = project();
    let out = workcell(&dir, &["man"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.starts_with(".ie") || page.starts_with(".TH"), "{}", &page[..page.len().min(200)]);
    assert!(page.contains(".TH workcell 1"), "{page}");
    assert!(page.contains("pool") && page.contains("completions"), "{page}");
}
