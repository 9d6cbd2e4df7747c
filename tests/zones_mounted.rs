//! Zones and what is mounted in them: every backend binds a zone with the mounts inside it,
//! so a bind of `/` or a procfs inside a zone's directory (as a chroot or a build tool
//! leaves them), or a zone that is itself a fresh procfs or cgroup hierarchy, hands a worker
//! the host; a container engine socket bound anywhere beneath a zone is root on the host.
//! All are refused before any worker runs; a harmless mount inside a zone is not. The
//! mounts are made by the test (as root) and undone when it ends.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A mount made for a test, detached when dropped (also when the test fails).
struct Mounted(PathBuf);

impl Mounted {
    fn new(args: &[&str], at: &Path) -> Option<Mounted> {
        fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount").args(args).arg(at).status().is_ok_and(|s| s.success());
        if !ok {
            // Only root may mount; the rules themselves are covered without mounts elsewhere.
            assert!(!rustix::process::geteuid().is_root(), "root cannot mount {args:?} at {}", at.display());
            eprintln!("skipped: cannot mount (not root)");
        }
        ok.then(|| Mounted(at.to_path_buf()))
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("data")).unwrap();
    fs::create_dir_all(dir.join("out")).unwrap();
    support::give_to_worker(&dir);
    (tmp, dir)
}

fn run(dir: &Path, backend: &str, zone: &str, script: &str) -> Output {
    let out = Command::new(assert_cmd::cargo::cargo_bin("workcell"))
        .current_dir(dir)
        .args(["run", "--backend", backend, "--zone", zone, "--zone", "out=./out:rw", "--", "sh", "-c"])
        .arg(format!("touch /out/ran; {script} && echo RAN"))
        .output()
        .unwrap();
    eprintln!("{zone} -> {:?}\n{}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    out
}

fn assert_refused(dir: &Path, out: &Output, wording: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "refused as a configuration error: {err}");
    assert!(err.contains(wording), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("RAN") && !dir.join("out/ran").exists(), "the worker ran");
}

fn mounts_inside_a_zone(backend: &str) {
    let (_t, dir) = project();
    let inner = dir.join("data/inner");

    // A bind of the host's root inside a read-only zone: /data/inner/etc would be the host's.
    let Some(m) = Mounted::new(&["--bind", "/"], &inner) else { return };
    let out = run(&dir, backend, "data=./data:ro", "ls /data/inner/etc >/dev/null");
    assert_refused(
        &dir,
        &out,
        &format!("zone 'data': {} has {} mounted inside it (it shows /: / may not be a zone", dir.join("data").display(), inner.display()),
    );
    drop(m);

    // A bind of /etc/cron.d is judged as /etc/cron.d: refused read-write, fine read-only.
    let _m = Mounted::new(&["--bind", "/etc/ssl"], &inner).unwrap();
    let out = run(&dir, backend, "data=./data:rw", "ls /data/inner >/dev/null");
    assert_refused(&dir, &out, "(it shows /etc/ssl: /etc/ssl (inside /etc) may not be a read-write zone");
    let out = run(&dir, backend, "data=./data:ro", "ls /data/inner/certs >/dev/null");
    assert_eq!(out.status.code(), Some(0), "a read-only bind of /etc/ssl is allowed like a read-only zone /etc/ssl");
    fs::remove_file(dir.join("out/ran")).unwrap();
    drop(_m);

    // A procfs of its own, inside the zone or as the zone: /proc/1/root is the host's root.
    let m = Mounted::new(&["-t", "proc", "proc"], &inner).unwrap();
    let out = run(&dir, backend, "data=./data:ro", "cat /data/inner/1/cmdline");
    assert_refused(&dir, &out, &format!("has {} mounted inside it (a proc file system, kernel state)", inner.display()));
    let out = run(&dir, backend, "data=./data/inner:ro", "cat /data/1/cmdline");
    assert_refused(&dir, &out, &format!("zone 'data': {} (a proc file system) may not be a zone", inner.display()));
    drop(m);

    // A cgroup hierarchy as a writable zone: the worker could move itself out of its limits.
    let m = Mounted::new(&["-t", "cgroup", "-o", "pids", "none"], &inner).unwrap();
    let out = run(&dir, backend, "data=./data/inner:rw", "ls /data/cgroup.procs");
    assert_refused(&dir, &out, "(a cgroup file system) may not be a zone");
    drop(m);

    // The control: an ordinary tmpfs inside the zone is no reason to refuse it.
    let _m = Mounted::new(&["-t", "tmpfs", "tmpfs"], &inner).unwrap();
    fs::write(inner.join("note"), "hi").unwrap();
    let out = run(&dir, backend, "data=./data:ro", "cat /data/inner/note");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("hiRAN"));
}

#[test]
fn bwrap_refuses_zones_with_the_host_mounted_inside() {
    if support::backend_ready("bwrap") {
        mounts_inside_a_zone("bwrap");
    }
}

#[test]
fn docker_refuses_zones_with_the_host_mounted_inside() {
    if support::backend_ready("docker") {
        mounts_inside_a_zone("docker");
    }
}

/// An engine listening on a socket deep inside a zone (`dockerd -H unix://DIR/docker.sock`),
/// not only in the zone itself or at the usual places.
fn engine_socket_deep_inside(backend: &str) {
    let (_t, dir) = project();
    fs::create_dir_all(dir.join("data/ci/run")).unwrap();
    let socket = dir.join("data/ci/run/docker.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let out = run(&dir, backend, "data=./data:ro", "test -S /data/ci/run/docker.sock");
    assert_refused(&dir, &out, &format!("holds the container engine socket {}", socket.display()));
    drop(listener);
    fs::remove_file(&socket).unwrap();
    let out = run(&dir, backend, "data=./data:ro", "test -d /data/ci/run");
    assert_eq!(out.status.code(), Some(0), "without the socket the zone is fine");
}

#[test]
fn bwrap_refuses_a_zone_with_an_engine_socket_deep_inside() {
    if support::backend_ready("bwrap") {
        engine_socket_deep_inside("bwrap");
    }
}

#[test]
fn docker_refuses_a_zone_with_an_engine_socket_deep_inside() {
    if support::backend_ready("docker") {
        engine_socket_deep_inside("docker");
    }
}
