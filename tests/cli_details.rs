//! Small things of the command line a newcomer meets first: `--zone` errors that name the
//! bad part, `plan` with nothing to run showing the project's sandbox, `doctor` without
//! another platform's caveats, `--version` with the commit, and completions without the
//! internal subcommands.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A project with a read-only zone `data`, a writable zone `out` whose writes ask, and a
/// worker.
fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    for d in ["data", "out", "workers"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    fs::write(
        dir.join("workcell.yaml"),
        "sandbox:\n  network: false\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw, approval: {write: ask, delete: blocked}}\n\
         defaults:\n  backend: none\n  limits: {timeout: 30s, memory: 512MiB}\n",
    )
    .unwrap();
    fs::write(dir.join("workers/reader.worker"), "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n---\nRead.\n").unwrap();
    (tmp, dir)
}

fn workcell(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env("HOME", dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!("{args:?} -> {:?}\n{}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_bad_zone_mode_is_named_as_the_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("data")).unwrap();
    for (spec, mode) in [("in=./data:readonly", "readonly"), ("in=./data:RO", "RO"), ("in=./data:", "")] {
        let out = workcell(&dir, &["run", "--backend", "none", "--zone", spec, "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "{spec}");
        let err = stderr(&out);
        assert!(err.contains(&format!("invalid --zone '{spec}': the mode '{mode}' is not one of ro (read-only) or rw (read-write)")), "{spec}: {err}");
        assert!(!err.contains("does not exist") && !err.contains("No such file"), "{err}");
    }
    // A directory whose name ends in `:word` is still that directory.
    fs::create_dir_all(dir.join("v:latest")).unwrap();
    let out = workcell(&dir, &["run", "--backend", "none", "--zone", "in=./v:latest", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A suffix that is no word is part of the path: the missing directory is what is named.
    let out = workcell(&dir, &["run", "--backend", "none", "--zone", "in=./data:2", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("host directory './data:2' cannot be used"), "{}", stderr(&out));
    // And good modes still work.
    let out = workcell(&dir, &["run", "--backend", "none", "--zone", "in=./data:rw", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn plan_without_worker_or_command_shows_the_project_sandbox() {
    let (_t, dir) = project();
    let out = workcell(&dir, &["plan"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(&format!("project:  {}", dir.join("workcell.yaml").display())), "{text}");
    let data = text.lines().find(|l| l.trim_start().starts_with("/data")).unwrap_or_else(|| panic!("{text}"));
    assert!(data.contains(&format!("ro <- {}", dir.join("data").display())) && data.contains("reads pre-approved"), "{data}");
    let out_zone = text.lines().find(|l| l.trim_start().starts_with("/out")).unwrap_or_else(|| panic!("{text}"));
    assert!(out_zone.contains("rw <- ") && out_zone.contains("writes ask") && out_zone.contains("deletes blocked"), "{out_zone}");
    assert!(text.contains("network:  off"), "{text}");
    assert!(text.contains("limits:   timeout 30s, memory 512 MiB"), "{text}");
    assert!(text.contains("workers:  reader"), "{text}");
    assert!(!text.contains("command:"), "no stand-in command is shown: {text}");

    let out = workcell(&dir, &["plan", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let zones = v["zones"].as_array().unwrap();
    assert_eq!(zones.len(), 2, "{v}");
    assert!(zones.iter().any(|z| z["mount_point"] == "/out" && z["mode"] == "rw"), "{v}");
    assert_eq!(v["network"], "off", "{v}");

    // A rendering is of a run: it still needs a command.
    let out = workcell(&dir, &["plan", "--backend", "bwrap"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nothing to run"), "{}", stderr(&out));
}

#[test]
#[cfg(target_os = "linux")]
fn doctor_on_linux_says_nothing_of_seatbelt() {
    let (_t, dir) = project();
    let out = workcell(&dir, &["doctor"]);
    let text = stdout(&out);
    assert!(text.contains("bwrap:"), "{text}");
    let lower = text.to_lowercase();
    assert!(!lower.contains("seatbelt") && !lower.contains("macos") && !lower.contains("sandbox-exec"), "{text}");
}

#[test]
fn version_names_the_crate_version() {
    let (_t, dir) = project();
    let out = workcell(&dir, &["--version"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.starts_with(&format!("workcell {}", env!("CARGO_PKG_VERSION"))), "{text}");
    assert!(text.starts_with("workcell 0.1.0"), "{text}");
    // Built from a checkout (this test is), the commit follows in parentheses.
    let commit = Command::new("git").args(["rev-parse", "--short", "HEAD"]).current_dir(env!("CARGO_MANIFEST_DIR")).output();
    if let Some(c) = commit.ok().filter(|c| c.status.success()) {
        let short = String::from_utf8_lossy(&c.stdout).trim().to_string();
        let shown = text.trim().strip_prefix(&format!("workcell {} (", env!("CARGO_PKG_VERSION"))).and_then(|r| r.strip_suffix(')'));
        // The binary was built at some commit of this checkout; it is one git knows.
        let shown = shown.unwrap_or_else(|| panic!("no commit in {text}"));
        let known = Command::new("git").args(["cat-file", "-e", &format!("{shown}^{{commit}}")]).current_dir(env!("CARGO_MANIFEST_DIR")).status().unwrap();
        assert!(known.success() && shown.len() >= 7 && short.len() >= 7, "{text} vs {short}");
    }
}

#[test]
fn completions_leave_out_the_internal_subcommands() {
    let (_t, dir) = project();
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = workcell(&dir, &["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = stdout(&out);
        assert!(script.contains("audit") && script.contains("pool"), "{shell}");
        assert!(!script.contains("__agent") && !script.contains("__reap"), "{shell}:\n{script}");
    }
}

#[test]
fn run_with_nothing_to_run_says_what_to_give() {
    let (_t, dir) = project();
    let out = workcell(&dir, &["run"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    for part in ["nothing to run", "name a worker (`workcell run WORKER`; this project's: reader)", "give a command after `--`"] {
        assert!(err.contains(part), "{part:?}: {err}");
    }
}

#[test]
fn check_without_a_path_says_what_to_give() {
    let (_t, dir) = project();
    let out = workcell(&dir, &["check"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("the following required arguments were not provided:\n  <PATH|--stdin>"), "{err}");
    let help = stdout(&workcell(&dir, &["check", "--help"]));
    assert!(help.contains("Usage: workcell check [OPTIONS] <PATH|--stdin>"), "{help}");
    assert!(help.contains("at least one,") && help.contains("unless --stdin gives them"), "{help}");
    // Paths given, or --stdin alone, are enough.
    assert_eq!(workcell(&dir, &["check", "/data/a"]).status.code(), Some(0));
    assert_eq!(workcell(&dir, &["check", "--stdin"]).status.code(), Some(0));
}

/// Outside any project the commands that need one say so and suggest `workcell init`, and
/// leave the directory as it was (no default zones under `.sandbox/`, no `.workcell/`).
#[test]
fn outside_a_project_nothing_is_created_and_init_is_suggested() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    for args in [&["run", "--", "true"][..], &["run"], &["plan"], &["plan", "--", "true"], &["check", "/x"], &["audit"], &["mcp"], &["pool", "fill"]] {
        let out = workcell(&dir, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("no workcell.yaml here or in any directory above") && err.contains("`workcell init`"), "{args:?}: {err}");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "{args:?} created something in {}", dir.display());
    }
    let err = stderr(&workcell(&dir, &["run"]));
    assert!(err.contains("workcell run --zone"), "a run without a project is still possible: {err}");
    // An ad-hoc run with zones needs no project.
    fs::create_dir(dir.join("in")).unwrap();
    let out = workcell(&dir, &["run", "--backend", "none", "--zone", "in=./in", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!dir.join(".sandbox").exists());
}

/// A `rw` zone whose writes ask is mounted read-only: the run says so before the worker
/// starts, naming the zone and the setting that makes it writable.
#[test]
fn a_rw_zone_mounted_read_only_is_named_when_the_run_starts() {
    let (_t, dir) = project();
    let out = workcell(&dir, &["run", "--", "true"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let named: Vec<&str> = err.lines().filter(|l| l.contains("gets it read-only")).collect();
    assert_eq!(named.len(), 1, "{err}");
    assert!(named[0].starts_with("workcell: zone 'out' is rw, but its writes or deletes need approval"), "{err}");
    assert!(named[0].contains("`approval: {write: preApproved, delete: preApproved}`"), "{err}");
    // Pre-approved, it is writable and nothing is said.
    let yaml = fs::read_to_string(dir.join("workcell.yaml")).unwrap().replace("{write: ask, delete: blocked}", "{write: preApproved, delete: preApproved}");
    fs::write(dir.join("workcell.yaml"), yaml).unwrap();
    let out = workcell(&dir, &["run", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("read-only"), "{}", stderr(&out));
}
