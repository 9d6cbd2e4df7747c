//! Colour (`--color`, `NO_COLOR`): workcell's own words are styled on a terminal or when
//! asked to, never in a pipe by default; a worker's output is never touched; a closed pipe
//! still ends workcell quietly. Terminals are real: `tests/pty_run.py` runs workcell on a
//! pseudo-terminal and reports what it showed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const ESC: &str = "\u{1b}[";

/// A project whose backend is `none`, with a zone, a worker and an audit log holding a
/// run's start and a denied decision.
fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    for d in ["data", "workers", ".workcell"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\ndefaults:\n  backend: none\n").unwrap();
    fs::write(dir.join("workers/reader.worker"), "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n---\nRead.\n").unwrap();
    fs::write(
        dir.join(".workcell/audit.jsonl"),
        "{\"ts\":1,\"run_id\":\"r1\",\"event\":\"run_start\",\"backend\":\"none\"}\n\
         {\"ts\":2,\"run_id\":\"r1\",\"event\":\"decision\",\"action\":\"write\",\"subject\":\"/data/a\",\"decision\":{\"outcome\":\"denied\",\"reason\":\"strict\"}}\n",
    )
    .unwrap();
    (tmp, dir)
}

/// `workcell ARGS` in `dir` with no colour settings from the environment of the test run.
fn workcell(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_workcell"));
    c.args(args).current_dir(dir).env("HOME", dir).env("TERM", "xterm").stdin(Stdio::null());
    for var in ["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "CI", "RUST_LOG"] {
        c.env_remove(var);
    }
    c
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What a terminal showed while `workcell ARGS` ran on it, with `env` set.
fn on_terminal(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let driver = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pty_run.py");
    let mut c = Command::new("python3");
    c.arg(driver).arg("n").arg(env!("CARGO_BIN_EXE_workcell")).args(args).current_dir(dir).env("HOME", dir).env("TERM", "xterm").stdin(Stdio::null());
    for var in ["NO_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "CI", "RUST_LOG"] {
        c.env_remove(var);
    }
    c.envs(env.iter().copied());
    let out = c.output().expect("run pty_run.py (python3)");
    assert!(out.status.success(), "pty_run.py failed: {}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("pty_run.py prints JSON");
    report["output"].as_str().unwrap_or_default().to_string()
}

#[test]
fn always_colours_errors_refusals_and_headings_in_a_pipe() {
    let (_tmp, dir) = project();
    let err = workcell(&dir, &["--color", "always", "run", "nosuchworker"]).output().unwrap();
    assert_eq!(err.status.code(), Some(2));
    assert!(text(&err.stderr).starts_with("\u{1b}[1m\u{1b}[31mworkcell:\u{1b}[0m no worker named 'nosuchworker'"), "{:?}", text(&err.stderr));

    let plan = workcell(&dir, &["plan", "--color=always"]).output().unwrap();
    let shown = text(&plan.stdout);
    assert!(shown.contains("\u{1b}[1mzones:\u{1b}[0m\n"), "{shown:?}");

    let doctor = workcell(&dir, &["--color", "always", "doctor"]).output().unwrap();
    assert!(text(&doctor.stdout).contains("\u{1b}[1mproject:\u{1b}[0m "), "{:?}", text(&doctor.stdout));

    let check = workcell(&dir, &["--color", "always", "check", "/data", "/elsewhere"]).output().unwrap();
    let shown = text(&check.stdout);
    assert!(shown.contains("\u{1b}[32mallowed:\u{1b}[0m /data\n"), "{shown:?}");
    assert!(shown.contains("\u{1b}[31mrefused:\u{1b}[0m "), "{shown:?}");

    let audit = workcell(&dir, &["--color", "always", "audit"]).output().unwrap();
    let shown = text(&audit.stdout);
    assert!(shown.contains("\u{1b}[31mdecision \u{1b}[0m"), "a denial is red: {shown:?}");
    assert!(shown.contains("\u{1b}[1mrun_start\u{1b}[0m"), "{shown:?}");

    // clap's own help follows the choice too.
    let help = workcell(&dir, &["--color", "always", "--help"]).output().unwrap();
    assert!(text(&help.stdout).contains(ESC), "{:?}", text(&help.stdout));
}

#[test]
fn always_wins_over_no_color() {
    let (_tmp, dir) = project();
    let out = workcell(&dir, &["--color", "always", "plan"]).env("NO_COLOR", "1").output().unwrap();
    assert!(text(&out.stdout).contains(ESC), "{:?}", text(&out.stdout));
}

#[test]
fn a_pipe_gets_no_colour_by_default_and_the_same_bytes_as_never() {
    let (_tmp, dir) = project();
    for args in [&["plan"][..], &["check", "/data", "/elsewhere"], &["audit"], &["doctor"], &["run", "nosuchworker"], &["--help"], &["bogus"]] {
        let auto = workcell(&dir, args).output().unwrap();
        let mut never_args = vec!["--color", "never"];
        never_args.extend_from_slice(args);
        let never = workcell(&dir, &never_args).output().unwrap();
        for (name, bytes) in [("stdout", &auto.stdout), ("stderr", &auto.stderr)] {
            assert!(!text(bytes).contains('\u{1b}'), "{args:?} {name}: {:?}", text(bytes));
        }
        if args != ["doctor"] {
            // (doctor asks the Docker daemon twice: its answers need not be the same.)
            assert_eq!(text(&auto.stdout), text(&never.stdout), "{args:?}");
            assert_eq!(text(&auto.stderr), text(&never.stderr), "{args:?}");
        }
    }
}

#[test]
fn auto_colours_a_terminal_unless_no_color_is_set() {
    let (_tmp, dir) = project();
    let shown = on_terminal(&dir, &["plan"], &[]);
    assert!(shown.contains("\u{1b}[1mzones:\u{1b}[0m"), "auto on a terminal colours: {shown:?}");
    let shown = on_terminal(&dir, &["run", "nosuchworker"], &[]);
    assert!(shown.contains("\u{1b}[31mworkcell:"), "{shown:?}");

    for (args, env) in [(&["plan"][..], &[("NO_COLOR", "1")][..]), (&["run", "nosuchworker"], &[("NO_COLOR", "1")]), (&["--color", "never", "plan"], &[])] {
        let shown = on_terminal(&dir, args, env);
        assert!(shown.contains("zones:") || shown.contains("no worker named"), "{args:?}: {shown:?}");
        assert!(!shown.contains('\u{1b}'), "{args:?} {env:?}: {shown:?}");
    }
    // An empty NO_COLOR is no choice (no-color.org): auto still colours.
    let shown = on_terminal(&dir, &["plan"], &[("NO_COLOR", "")]);
    assert!(shown.contains(ESC), "{shown:?}");
}

#[test]
fn a_workers_output_is_its_own_with_colour_on() {
    let (_tmp, dir) = project();
    // Plain text stays plain.
    let out = workcell(&dir, &["--color", "always", "run", "--", "printf", "plain words\\n"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(out.stdout, b"plain words\n");
    // A worker's escape sequence reaches its stdout as it was written, colour or none:
    // workcell neither strips nor adds anything there.
    for choice in ["always", "never", "auto"] {
        let out = workcell(&dir, &["--color", choice, "run", "--", "printf", "a\\033[31mb\\n"]).output().unwrap();
        assert_eq!(out.stdout, b"a\x1b[31mb\n", "--color {choice}");
    }
    // On a terminal too: the worker's words arrive unpainted.
    let shown = on_terminal(&dir, &["--color", "always", "run", "--", "printf", "plain words\\n"], &[]);
    assert!(shown.contains("\nplain words\r\n") || shown.starts_with("plain words\r\n"), "{shown:?}");
    // workcell's own warning on stderr is painted: it is workcell's.
    assert!(text(&workcell(&dir, &["--color", "always", "run", "--", "true"]).output().unwrap().stderr).contains("\u{1b}[33mwarning:"));
}

/// Runs `args` with stdout a pipe whose reader is gone.
fn with_closed_stdout(dir: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    workcell(dir, args).stdout(writer).stderr(Stdio::piped()).output().unwrap()
}

#[test]
fn a_closed_pipe_ends_quietly_with_colour_on() {
    let (_tmp, dir) = project();
    for args in [&["--color", "always", "plan"][..], &["--color", "always", "audit"], &["--color", "always", "check", "/data"]] {
        let out = with_closed_stdout(&dir, args);
        assert_eq!(out.status.code(), Some(141), "{args:?}: {}", text(&out.stderr));
        assert!(out.stderr.is_empty(), "{args:?}: {}", text(&out.stderr));
    }
    let bin = env!("CARGO_BIN_EXE_workcell");
    let out = Command::new("sh").args(["-c", &format!("'{bin}' --color always plan | head -1")]).current_dir(&dir).stdin(Stdio::null()).output().unwrap();
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("\u{1b}[1mThe project's sandbox"), "{:?}", text(&out.stdout));
}
