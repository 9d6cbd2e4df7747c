//! Backend selection through the `workcell` binary: `auto` falls back to bwrap without a
//! Docker daemon, and with no backend at all (or an explicit one that is missing) the run
//! fails with 125 and says why.

mod support;

use std::path::Path;

fn workcell_in(dir: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("workcell").expect("workcell binary");
    cmd.current_dir(dir).env_remove("WORKCELL_BWRAP").env("DOCKER_HOST", "unix:///nonexistent.sock");
    cmd
}

#[test]
fn auto_uses_bwrap_when_docker_is_unavailable() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("in")).expect("mkdir");
    let out = workcell_in(dir.path()).args(["run", "--zone", "in=./in:ro", "--", "sh", "-c", "echo inside"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    // One line, saying which backend runs instead and why docker does not.
    let said: Vec<&str> = stderr.lines().filter(|l| l.contains("running on bwrap because docker cannot run this here")).collect();
    assert_eq!(said.len(), 1, "stderr: {stderr}");
    assert!(said[0].contains("unix:///nonexistent.sock"), "stderr: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "inside");
}

#[test]
fn auto_without_any_backend_fails_with_125() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("in")).expect("mkdir");
    let out = workcell_in(dir.path()).env("WORKCELL_BWRAP", "/nonexistent").args(["run", "--zone", "in=./in:ro", "--", "true"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert!(stderr.contains("no isolation backend works here"), "stderr: {stderr}");
    assert!(stderr.contains("WORKCELL_BWRAP=/nonexistent is not an executable file"), "stderr: {stderr}");
}

#[test]
fn explicit_bwrap_without_binary_fails_with_125() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("in")).expect("mkdir");
    let out = workcell_in(dir.path())
        .env("WORKCELL_BWRAP", "/nonexistent")
        .args(["run", "--backend", "bwrap", "--zone", "in=./in:ro", "--", "true"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert!(stderr.contains("bwrap backend is unavailable"), "stderr: {stderr}");
}
