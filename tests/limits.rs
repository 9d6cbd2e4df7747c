//! Resource limits are read by one parser whether they come from `limits:` in a YAML file or
//! from a `workcell run` flag: the same values are refused, with the same words, located at
//! `file:line:column` for YAML and naming the flag for the command line. (That an accepted
//! `--pids` really limits a worker is `behaviour::*::fork_bomb_is_contained`, on both
//! backends.) Limits bwrap cannot enforce for a normal user are named in one short line.

use std::fs;
use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn workcell(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("workcell").unwrap();
    c.current_dir(dir).env("NO_COLOR", "1").env_remove("RUST_LOG");
    c
}

fn project(yaml: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("data")).unwrap();
    fs::write(dir.join("workcell.yaml"), yaml).unwrap();
    (tmp, dir)
}

/// Runs `workcell run` in `dir` with `args`; the run must be refused before anything starts
/// (exit 2, nothing on stdout). Returns stderr.
fn refused(dir: &Path, args: &[&str]) -> String {
    let out = workcell(dir).arg("run").args(args).args(["--backend", "none", "--", "sh", "-c", "echo RAN"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{args:?} must be refused: {err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"), "{args:?}: the worker ran");
    err
}

/// The reason after `prefix` on the line holding it.
fn reason_after<'a>(text: &'a str, prefix: &str) -> &'a str {
    let at = text.find(prefix).unwrap_or_else(|| panic!("{prefix:?} not in {text:?}"));
    text[at + prefix.len()..].lines().next().unwrap()
}

/// (flag, value name clap shows, YAML key, value): refused in both places, same reason.
const BAD: &[(&str, &str, &str, &str)] = &[
    ("--pids", "N", "pids", "0"),
    ("--pids", "N", "pids", "-1"),
    ("--pids", "N", "pids", "99999999999999999999999"),
    ("--pids", "N", "pids", "1.5"),
    ("--cpus", "CPUS", "cpus", "0"),
    ("--cpus", "CPUS", "cpus", "NaN"),
    ("--cpus", "CPUS", "cpus", "inf"),
    ("--cpus", "CPUS", "cpus", "-1"),
    ("--cpus", "CPUS", "cpus", "0.001"),
    ("--memory", "SIZE", "memory", "0"),
    ("--memory", "SIZE", "memory", "1k"),
    ("--memory", "SIZE", "memory", "5x"),
    ("--memory", "SIZE", "memory", "99999999999999999999999"),
    ("--timeout", "DURATION", "timeout", "0"),
    ("--timeout", "DURATION", "timeout", "soon"),
    ("--timeout", "DURATION", "timeout", "400d"),
];

#[test]
fn flags_and_yaml_refuse_the_same_values_with_the_same_words() {
    let (_t, dir) = project("sandbox:\n  zones:\n    data: {path: ./data}\n");
    for (flag, shown, key, value) in BAD {
        let cli = refused(&dir, &[flag, value]);
        let cli_reason = reason_after(&cli, &format!("invalid value '{value}' for '{flag} <{shown}>': "));

        // Quoted so that YAML reads every value as the text written (`inf` would otherwise
        // be a string either way; `0` a number): the parser sees the same text.
        let (_t2, ydir) = project(&format!("defaults:\n  limits:\n    {key}: '{value}'\n"));
        let yaml = refused(&ydir, &[]);
        let col = 5 + key.len() + 2;
        let yaml_reason = reason_after(&yaml, &format!("workcell.yaml:3:{col}: invalid {key} '{value}': "));
        assert_eq!(cli_reason, yaml_reason, "{flag} {value}: the flag and the YAML key must be refused alike");
        assert!(["use ", "at most", "such as"].iter().any(|w| cli_reason.contains(w)), "the reason says what is allowed: {cli_reason}");
    }
}

#[test]
fn unquoted_yaml_numbers_are_refused_too() {
    for (yaml, line_col, wording) in [
        ("    pids: 0\n", "3:11", "invalid pids '0': must be at least 1"),
        ("    cpus: .nan\n", "3:11", "invalid cpus '.nan': not a finite number"),
        ("    cpus: 0\n", "3:11", "invalid cpus '0': must be at least 0.01"),
        ("    memory: 99999999999999999999999\n", "3:13", "invalid memory '99999999999999999999999': must be at most 8 EiB"),
    ] {
        let (_t, dir) = project(&format!("defaults:\n  limits:\n{yaml}"));
        let err = refused(&dir, &[]);
        assert!(err.contains(&format!("workcell.yaml:{line_col}: {wording}")), "{err}");
    }
}

#[test]
fn worker_file_limits_use_the_same_parser() {
    let (_t, dir) = project("sandbox:\n  zones:\n    data: {path: ./data}\n");
    fs::create_dir_all(dir.join("workers")).unwrap();
    fs::write(dir.join("workers/w.worker"), "---\nlimits:\n  pids: 0\n---\n").unwrap();
    let out = workcell(&dir).args(["run", "w", "--backend", "none", "--", "true"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("w.worker:3:9: invalid pids '0': must be at least 1"), "{err}");
}

#[test]
fn valid_limits_reach_the_plan() {
    let (_t, dir) = project("sandbox:\n  zones:\n    data: {path: ./data}\ndefaults:\n  limits: {pids: 33, cpus: 0.5, memory: 96m, timeout: 1h30m}\n");
    let out = workcell(&dir).args(["plan", "--json", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let limits = &plan["limits"];
    assert_eq!((limits["pids"].as_i64(), limits["cpus"].as_f64(), limits["memory_bytes"].as_u64()), (Some(33), Some(0.5), Some(96 << 20)), "{limits}");
    assert_eq!(limits["timeout"].as_str(), Some("1h 30m"), "{limits}");
}

/// A normal user on bwrap where no cgroup can be made for them (cgroup v1 gives cgroups to
/// root only; on v2, an undelegated subtree): the limits they set are named as not enforced
/// in one short line, not a paragraph per limit on every run. Made as root: a user with no
/// supplementary groups, in a directory of theirs.
#[test]
fn a_normal_users_unenforced_limits_are_one_short_line() {
    if !rustix::process::geteuid().is_root() || workcell::backend::bwrap::probe().is_err() {
        eprintln!("note: needs root (to become a normal user) and a working bwrap");
        return;
    }
    let (tmp, dir) = project("sandbox:\n  zones:\n    data: {path: ./data}\n");
    let ids = "1000";
    let st = std::process::Command::new("chown").args(["-R", &format!("{ids}:{ids}")]).arg(tmp.path()).status().unwrap();
    assert!(st.success());
    let out = std::process::Command::new("setpriv")
        .args(["--reuid", ids, "--regid", ids, "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_workcell"))
        .args(["run", "--backend", "bwrap", "--memory", "512m", "--pids", "100", "--", "true"])
        .current_dir(&dir)
        .env("HOME", &dir)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    // On cgroup v1 a normal user never gets a cgroup; on v2 only an undelegated one does not.
    let v1 = std::path::Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
    let named: Vec<&str> = err.lines().filter(|l| l.contains("not enforced")).collect();
    assert!(named.len() == 1 || (!v1 && named.is_empty()), "at most one line, and one on cgroup v1: {err}");
    for line in named {
        assert!(line.contains("the memory limit and the process limit") && line.contains("--backend docker"), "{err}");
        assert!(line.len() < 200, "a short line ({} characters): {line}", line.len());
        assert!(!v1 || line.contains("cgroup v1 gives cgroups to root only"), "{err}");
    }
}
