//! Copy delivery publishes only what the worker's own user could do to the zone (issue 37,
//! finding 3). The copy is taken as the worker, so in the copy a root-owned `0755` folder is
//! the worker's; publishing must not then write with root's rights. As root, with the worker
//! running as uid 1000 (the project's owner), on bwrap and docker: the worker overwrites a
//! root-owned `0644` file, creates a file in a root-owned `0755` folder and deletes one there;
//! the host keeps all three as they were, the summary names each as refused with the uid, and
//! the run exits 3. What the worker may do lands: its own file changed, a new file in a
//! `0777` folder (the worker's), and a root-owned `0666` file it may write (changed in place
//! of the old one, still root's) and a read-only file of its own. The same on a remote engine (`support::remote`), whose
//! zones, copy-delivered or not, are shipped and published through the same path.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use support::remote::RemoteEngine;
use support::{backend_ready, give_to_worker, write_project, TEST_WORKER_UID};

/// Exit status of a run whose delivery held something back (docs/commands.md, "Exit statuses").
const HELD_BACK: i32 = 3;

/// `tmp/proj` with the copy-delivered zone `z/` (writes and deletes pre-approved), all the
/// test worker's, then root's entries added beneath it by [`Scratch::root_owned`].
struct Scratch {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Scratch {
    /// `None` (the test returns) when not run as root: a normal user cannot make root's files.
    fn new() -> Option<Scratch> {
        Scratch::with_zone("z: {path: ./z, mode: rw, delivery: copy, approval: {write: preApproved, delete: preApproved}}")
    }

    /// The same with the zone `z` declared as `zone` (YAML).
    fn with_zone(zone: &str) -> Option<Scratch> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("note: skipping: only root can make the root-owned files this test needs");
            return None;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod tmp");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
        std::fs::create_dir_all(dir.join("z")).expect("mkdir z");
        write_project(&dir, &format!("sandbox:\n  zones:\n    {zone}\n"), &[]);
        give_to_worker(&dir);
        Some(Scratch { _tmp: tmp, dir })
    }

    fn z(&self, name: &str) -> PathBuf {
        self.dir.join("z").join(name)
    }

    /// A root-owned directory (`mode`) or, with `content`, file beneath the zone.
    fn root_owned(&self, name: &str, content: Option<&str>, mode: u32) {
        let p = self.z(name);
        match content {
            Some(c) => std::fs::write(&p, c).expect("write"),
            None => std::fs::create_dir(&p).expect("mkdir"),
        }
        std::os::unix::fs::chown(&p, Some(0), Some(0)).expect("chown");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    fn run(&self, backend: &str, extra: &[&str], script: &str) -> Output {
        let out = support::workcell_sh(&self.dir, backend, extra, script).output().expect("run workcell");
        eprintln!("exit {:?}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
        out
    }
}

/// The `--json` delivery summary on stderr.
fn summary(out: &Output) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).unwrap_or_else(|| panic!("no delivery summary in: {err}"));
    serde_json::from_str::<Value>(line).expect("json")["delivery"].clone()
}

fn paths(v: &Value) -> Vec<String> {
    let mut out: Vec<String> =
        v.as_array().expect("a list").iter().map(|p| p.as_str().map(str::to_string).unwrap_or_else(|| p["path"].as_str().expect("path").to_string())).collect();
    out.sort();
    out
}

/// The refusals of `sum` that say the worker's user may not write there: path -> uid.
fn refused_as_worker(sum: &Value) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = sum["refused"]
        .as_array()
        .expect("refused")
        .iter()
        .filter(|r| r["reason"] == "worker_may_not_write")
        .map(|r| (r["path"].as_str().expect("path").to_string(), r["uid"].as_u64().expect("uid")))
        .collect();
    out.sort();
    out
}

/// Content, owner and mode of a host file.
fn state(p: &Path) -> (String, u32, u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (std::fs::read_to_string(p).expect("read"), m.uid(), m.gid(), m.mode() & 0o7777)
}

mod body {
    use super::*;

    pub fn only_what_the_worker_may_write_is_published(backend: &str) {
        let Some(s) = Scratch::new() else { return };
        let out = s.run(backend, &["--json"], &host_entries(&s));
        judge(&s, &out);
    }

    /// Root's entries and the worker's own beneath the zone; the worker's script.
    pub fn host_entries(s: &Scratch) -> String {
        s.root_owned("root.txt", Some("host\n"), 0o644);
        s.root_owned("rootdir", None, 0o755);
        s.root_owned("rootdir/inside.txt", Some("inside\n"), 0o644);
        s.root_owned("rootdir/shared.txt", Some("shared\n"), 0o666);
        s.root_owned("open", None, 0o777);
        std::fs::write(s.z("mine.txt"), "mine\n").expect("write");
        give_to_worker(&s.z("mine.txt"));
        // Read-only, but the worker's: it may make it writable, so it may change it.
        std::fs::write(s.z("mine-ro.txt"), "mine\n").expect("write");
        give_to_worker(&s.z("mine-ro.txt"));
        std::fs::set_permissions(s.z("mine-ro.txt"), std::fs::Permissions::from_mode(0o444)).expect("chmod");
        "cd /z && rm -f mine-ro.txt && echo worker > mine-ro.txt && echo worker > root.txt && echo planted > rootdir/new.txt && rm rootdir/inside.txt && echo worker > rootdir/shared.txt \
         && echo ok > open/w.txt && echo worker > mine.txt"
            .into()
    }

    /// After the run of [`host_entries`]' script: the host as it must be, and the summary.
    pub fn judge(s: &Scratch, out: &Output) {
        // Everything the worker's own user may not do on the host stayed as the host had it.
        assert_eq!(state(&s.z("root.txt")), ("host\n".into(), 0, 0, 0o644), "a root-owned 0644 file was overwritten");
        assert!(!s.z("rootdir/new.txt").exists(), "a file was created in a root-owned 0755 folder");
        assert_eq!(state(&s.z("rootdir/inside.txt")), ("inside\n".into(), 0, 0, 0o644), "a file was deleted from a root-owned 0755 folder");
        // What it may do landed: its own file, a new file in a 0777 folder (its own, as in a
        // bind zone), and a root-owned 0666 file it may write (still root's, same mode).
        assert_eq!(std::fs::read_to_string(s.z("mine.txt")).expect("read"), "worker\n");
        assert_eq!(state(&s.z("mine-ro.txt")), ("worker\n".into(), TEST_WORKER_UID, TEST_WORKER_UID, 0o444));
        assert_eq!(state(&s.z("open/w.txt")), ("ok\n".into(), TEST_WORKER_UID, TEST_WORKER_UID, 0o644));
        assert_eq!(state(&s.z("rootdir/shared.txt")), ("worker\n".into(), 0, 0, 0o666));
        let sum = summary(out);
        assert_eq!(refused_as_worker(&sum), [("root.txt".into(), 1000), ("rootdir/inside.txt".into(), 1000), ("rootdir/new.txt".into(), 1000)], "{sum}");
        assert_eq!(paths(&sum["changed"]), ["mine-ro.txt", "mine.txt", "rootdir/shared.txt"], "{sum}");
        assert_eq!(paths(&sum["added"]), ["open/w.txt"], "{sum}");
        assert_eq!(out.status.code(), Some(HELD_BACK), "a refused change is held back: exit 3");
    }

    pub fn a_deletion_the_worker_may_not_make_is_refused(backend: &str) {
        let Some(s) = Scratch::new() else { return };
        s.root_owned("rootdir", None, 0o755);
        s.root_owned("rootdir/inside.txt", Some("inside\n"), 0o644);
        // A sticky folder (like /tmp): the worker may not remove root's file from it, though
        // it may write the folder; its own file there it may.
        s.root_owned("sticky", None, 0o1777);
        s.root_owned("sticky/roots.txt", Some("root's\n"), 0o644);
        std::fs::write(s.z("sticky/own.txt"), "own\n").expect("write");
        give_to_worker(&s.z("sticky/own.txt"));
        let out = s.run(backend, &[], "cd /z && rm rootdir/inside.txt sticky/roots.txt sticky/own.txt");
        assert_eq!(state(&s.z("rootdir/inside.txt")), ("inside\n".into(), 0, 0, 0o644), "a file was deleted from a root-owned 0755 folder");
        assert_eq!(state(&s.z("sticky/roots.txt")), ("root's\n".into(), 0, 0, 0o644), "root's file was deleted from a sticky folder");
        assert!(!s.z("sticky/own.txt").exists(), "the worker's own file in the sticky folder is deleted");
        let err = String::from_utf8_lossy(&out.stderr);
        for name in ["rootdir/inside.txt", "sticky/roots.txt"] {
            assert!(err.contains(&format!("refused   {name}: the worker (uid 1000) may not write here")), "{name} is not named as refused: {err}");
        }
        assert!(err.contains("deleted   sticky/own.txt"), "{err}");
        assert_eq!(out.status.code(), Some(HELD_BACK), "a refused change is held back: exit 3");
    }

    /// A mode is its owner's to change: the worker may write root's `0666` file, not make it
    /// executable (nor take that away from root's `0777` one), and its content change to
    /// root's `0766` file keeps that mode (not `0777`). Its own file it may make executable.
    pub fn the_mode_of_anothers_file_is_not_the_workers(backend: &str) {
        let Some(s) = Scratch::new() else { return };
        s.root_owned("rootdir", None, 0o755);
        s.root_owned("rootdir/run.sh", Some("echo host\n"), 0o666);
        s.root_owned("rootdir/tool.sh", Some("echo tool\n"), 0o777);
        s.root_owned("rootdir/exe.sh", Some("echo exe\n"), 0o766);
        std::fs::write(s.z("mine.sh"), "echo mine\n").expect("write");
        give_to_worker(&s.z("mine.sh"));
        let out = s.run(
            backend,
            &["--json"],
            "cd /z && echo planted >> rootdir/run.sh && chmod +x rootdir/run.sh && chmod -x rootdir/tool.sh \
             && echo worker > rootdir/exe.sh && echo worker > mine.sh && chmod +x mine.sh",
        );
        assert_eq!(state(&s.z("rootdir/run.sh")), ("echo host\n".into(), 0, 0, 0o666), "root's 0666 file was made executable");
        assert_eq!(state(&s.z("rootdir/tool.sh")), ("echo tool\n".into(), 0, 0, 0o777), "root's 0777 file lost its executable bits");
        assert_eq!(state(&s.z("rootdir/exe.sh")), ("worker\n".into(), 0, 0, 0o766), "root's 0766 file changed mode");
        assert_eq!(state(&s.z("mine.sh")), ("worker\n".into(), TEST_WORKER_UID, TEST_WORKER_UID, 0o755));
        let sum = summary(&out);
        assert_eq!(refused_as_worker(&sum), [("rootdir/run.sh".into(), 1000), ("rootdir/tool.sh".into(), 1000)], "{sum}");
        assert_eq!(paths(&sum["changed"]), ["mine.sh", "rootdir/exe.sh"], "{sum}");
        assert_eq!(out.status.code(), Some(HELD_BACK), "a refused change is held back: exit 3");
    }
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [only_what_the_worker_may_write_is_published, a_deletion_the_worker_may_not_make_is_refused, the_mode_of_anothers_file_is_not_the_workers]
);
support::backend_suite!(
    docker,
    "docker",
    [only_what_the_worker_may_write_is_published, a_deletion_the_worker_may_not_make_is_refused, the_mode_of_anothers_file_is_not_the_workers]
);

/// A remote engine's zones come back through the same publish: a plain `rw` zone (shipped as
/// a copy) and a copy-delivered one.
#[test]
fn remote_zones_publish_only_what_the_worker_may_write() {
    if !backend_ready("remote") {
        return;
    }
    let engine = RemoteEngine::start();
    for zone in [
        "z: {path: ./z, mode: rw, approval: {write: preApproved, delete: preApproved}}",
        "z: {path: ./z, mode: rw, delivery: copy, approval: {write: preApproved, delete: preApproved}}",
    ] {
        let Some(s) = Scratch::with_zone(zone) else { return };
        let script = body::host_entries(&s);
        let out = engine
            .workcell(&s.dir)
            .args(["run", "--backend", "docker", "--image", engine.busybox(), "--json", "--", "/bin/sh", "-c", &script])
            .output()
            .expect("workcell");
        eprintln!("{zone}: exit {:?}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
        engine.assert_nothing_left();
        body::judge(&s, &out);
    }
}
