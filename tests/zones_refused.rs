//! Zones that would hand a worker the host: a project whose `./data` a pull request swapped
//! for a link to `/` is refused when `workcell run` starts, on every backend, before any
//! worker runs; the same for `--zone`; and a directory swapped between the config's check
//! and the handle the sandbox keeps is caught on that handle.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use workcell::sandbox::{Addressing, Approvals, Delivery, Mount, Sandbox, SandboxError, ZoneMode};

/// A project with zones `data` (ro) and `out` (rw, owned by the test worker), where `data`
/// is a symlink to `/`, as a checked-out pull request can have it.
fn swapped_project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("out")).unwrap();
    support::give_to_worker(&dir);
    std::os::unix::fs::symlink("/", dir.join("data")).unwrap();
    fs::write(
        dir.join("workcell.yaml"),
        "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
    )
    .unwrap();
    (tmp, dir)
}

fn run(dir: &Path, args: &[&str]) -> Output {
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell")).current_dir(dir).arg("run").args(args).output().unwrap();
    eprintln!("{args:?} -> {:?}\n{}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    out
}

/// The worker would leave `out/ran` and print RAN; neither may happen.
fn assert_refused_before_running(dir: &Path, out: &Output, wording: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "refused as a configuration error: {err}");
    assert!(err.contains(wording), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN"), "the worker ran");
    assert!(!dir.join("out/ran").exists(), "the worker ran");
}

const WORKER: &[&str] = &["--", "sh", "-c", "touch /out/ran; ls /data/etc >/dev/null && echo RAN"];

fn symlinked_zone_to_root(backend: &str) {
    let (_t, dir) = swapped_project();
    let mut args = vec!["--backend", backend];
    args.extend_from_slice(WORKER);
    let out = run(&dir, &args);
    assert_refused_before_running(&dir, &out, "workcell.yaml:3:18: zone 'data': ./data resolves to / through a symlink, outside the project");

    // Written as an absolute path, the link is still judged by where it leads.
    let yaml = fs::read_to_string(dir.join("workcell.yaml")).unwrap().replace("./data", &dir.join("data").display().to_string());
    fs::write(dir.join("workcell.yaml"), yaml).unwrap();
    let out = run(&dir, &args);
    assert_refused_before_running(&dir, &out, "zone 'data': / may not be a zone");

    // And given on the command line.
    fs::remove_file(dir.join("workcell.yaml")).unwrap();
    let mut args = vec!["--backend", backend, "--zone", "data=./data:ro", "--zone", "out=./out:rw"];
    args.extend_from_slice(WORKER);
    let out = run(&dir, &args);
    assert_refused_before_running(&dir, &out, "invalid --zone 'data=./data:ro': ./data resolves to / through a symlink");
    let mut args = vec!["--backend", backend, "--zone", "data=/:ro", "--zone", "out=./out:rw"];
    args.extend_from_slice(WORKER);
    let out = run(&dir, &args);
    assert_refused_before_running(&dir, &out, "zone 'data': / may not be a zone");

    // The control: with a real directory there, the same worker runs and leaves its mark.
    fs::remove_file(dir.join("data")).unwrap();
    fs::create_dir_all(dir.join("data/etc")).unwrap();
    let mut args = vec!["--backend", backend, "--zone", "data=./data:ro", "--zone", "out=./out:rw"];
    args.extend_from_slice(WORKER);
    let out = run(&dir, &args);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("RAN") && dir.join("out/ran").exists(), "the control run did not run");
}

#[test]
fn bwrap_refuses_a_zone_swapped_for_a_link_to_root() {
    if support::backend_ready("bwrap") {
        symlinked_zone_to_root("bwrap");
    }
}

#[test]
fn docker_refuses_a_zone_swapped_for_a_link_to_root() {
    if support::backend_ready("docker") {
        symlinked_zone_to_root("docker");
    }
}

fn mount(host: PathBuf) -> Mount {
    Mount {
        name: "data".into(),
        host_path: host,
        mount_point: "/data".into(),
        mode: ZoneMode::Ro,
        suffixes: None,
        max_file_bytes: None,
        approval: Approvals::default(),
        delivery: Delivery::Bind,
        protection: Default::default(),
    }
}

#[test]
fn a_directory_swapped_after_the_check_is_caught_on_the_handle() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    let data = dir.join("data");
    fs::create_dir_all(dir.join("elsewhere")).unwrap();
    // Checked (canonical) as a directory, then swapped for a link before the sandbox opens it.
    std::os::unix::fs::symlink("/", &data).unwrap();
    let e = Sandbox::new(vec![mount(data.clone())], Addressing::Zones, false).unwrap_err();
    assert!(matches!(e, SandboxError::UnsafeZone(_)), "{e}");
    assert!(e.to_string().contains("zone 'data': / may not be a zone"), "{e}");
    fs::remove_file(&data).unwrap();
    std::os::unix::fs::symlink(dir.join("elsewhere"), &data).unwrap();
    let e = Sandbox::new(vec![mount(data.clone())], Addressing::Zones, false).unwrap_err();
    assert!(e.to_string().contains("the directory changed while workcell opened it"), "{e}");
    fs::remove_file(&data).unwrap();
    fs::create_dir(&data).unwrap();
    Sandbox::new(vec![mount(data)], Addressing::Zones, false).expect("the real directory");
}
