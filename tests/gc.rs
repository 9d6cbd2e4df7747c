//! `workcell gc` finds what killed runs leave on the host wherever the run made it: cgroups
//! beside another process's cgroup, broker directories under another `TMPDIR`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn backdate(path: &Path, secs: u64) {
    let since = (SystemTime::now() - Duration::from_secs(secs)).duration_since(UNIX_EPOCH).expect("time");
    let ts = rustix::fs::Timespec { tv_sec: since.as_secs() as i64, tv_nsec: 0 };
    rustix::fs::utimensat(rustix::fs::CWD, path, &rustix::fs::Timestamps { last_access: ts, last_modification: ts }, rustix::fs::AtFlags::empty())
        .expect("backdate");
}

/// A cgroup hierarchy this process may create cgroups in: one nested parent of our own
/// (standing for another session's cgroup) in the pids hierarchy, v1 or v2.
fn foreign_cgroup_parent() -> Option<PathBuf> {
    let root = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup"].iter().map(PathBuf::from).find(|p| p.join("cgroup.procs").exists())?;
    let parent = root.join(format!("wc-test-elsewhere-{}", std::process::id())).join("session");
    match std::fs::create_dir_all(&parent) {
        Ok(()) => Some(parent),
        Err(e) => {
            assert!(std::env::var("WORKCELL_REQUIRE_CGROUP").as_deref() != Ok("1"), "WORKCELL_REQUIRE_CGROUP=1 but no cgroup can be created: {e}");
            eprintln!("note: skipping the cgroup part ({e})");
            None
        }
    }
}

#[test]
fn gc_finds_leftovers_wherever_a_run_made_them() {
    // A broker directory a run with TMPDIR=/var/tmp left (this environment's bases are
    // /dev/shm and the default temp directory).
    let broker = tempfile::Builder::new().prefix("workcell-broker-").tempdir_in("/var/tmp").expect("dir").keep();
    backdate(&broker, 600);
    // A run's cgroup beside a cgroup that is not gc's own.
    let parent = foreign_cgroup_parent();
    let cgroup = parent.as_ref().map(|p| {
        let c = p.join("workcell-00112233aabbccdd");
        std::fs::create_dir(&c).expect("cgroup");
        backdate(&c, 600);
        c
    });
    // And one that is young (its run may be starting): kept.
    let young = parent.as_ref().map(|p| {
        let c = p.join("workcell-ffeeddccbbaa9988");
        std::fs::create_dir(&c).expect("cgroup");
        c
    });

    // Docker out of reach: this test is about the host, and must not race other tests' images.
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .arg("gc")
        .env_remove("TMPDIR")
        .env_remove("XDG_RUNTIME_DIR")
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .expect("gc runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // Gone is what counts: another test's gc, running concurrently, may have been first.
    assert!(!broker.exists(), "the broker directory under /var/tmp is found: {stdout}");
    if let (Some(cgroup), Some(young)) = (&cgroup, &young) {
        assert!(!cgroup.exists(), "the cgroup beside another cgroup is found: {stdout}");
        assert!(young.exists(), "a cgroup younger than a minute stays");
        std::fs::remove_dir(young).expect("cleanup");
    }
    assert!(!(stdout.contains("removed ") && stdout.contains("nothing to remove")), "gc removed things, so it must not say it removed nothing: {stdout}");
    if let Some(p) = parent {
        let _ = std::fs::remove_dir(&p);
        let _ = std::fs::remove_dir(p.parent().expect("parent"));
    }
}

/// `delivery: copy` directories (`workcell-copy-*`, `workcell-delivery-*`) in `TMPDIR`: one
/// whose run is over (its lock file there, nobody holding it; deep inside, as a killed run
/// leaves it) is removed; one whose lock a live process holds (here a `sleep` holding it, standing
/// for the run) stays, however old it is.
#[test]
fn gc_removes_a_dead_runs_copy_and_keeps_a_live_one() {
    let tmpdir = tempfile::tempdir().expect("tempdir");
    let dead = tmpdir.path().join("workcell-copy-dead01");
    let mut deep = dead.join("zone");
    for _ in 0..300 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep).expect("deep copy");
    std::fs::write(dead.join(".workcell-lock"), "").expect("lock file");
    let live = tmpdir.path().join("workcell-delivery-live01");
    std::fs::create_dir_all(live.join("zone")).expect("live copy");
    std::fs::write(live.join(".workcell-lock"), "").expect("lock file");
    backdate(&live, 7 * 24 * 3600);
    // The lock taken by the very process that is then killed: nothing is left running.
    let mut holder =
        Command::new("sh").args(["-c", "exec 9<\"$0\" && flock 9 && exec sleep 600"]).arg(live.join(".workcell-lock")).spawn().expect("the holder runs");
    // Until the holder has the lock (a lock we can take is not held yet).
    let lock = std::fs::File::open(live.join(".workcell-lock")).expect("open lock");
    while rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared).is_ok() {
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::Unlock).expect("unlock");
        std::thread::yield_now();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .arg("gc")
        .env("TMPDIR", tmpdir.path())
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output()
        .expect("gc runs");
    let _ = holder.kill();
    let _ = holder.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dead.exists(), "the dead run's copy is removed: {stdout}");
    assert!(stdout.contains(&format!("removed delivery directory {}", dead.display())), "{stdout}");
    assert!(live.join("zone").exists(), "a live run's copy stays: {stdout}");
}
