//! Publishing a `delivery: copy` zone exactly, through the real `workcell` binary on bwrap
//! and docker: a host edit made while a large file is being published is kept (a conflict),
//! never overwritten; a new host file made meanwhile is not replaced; a file system that
//! fills part-way gives a summary that names what landed and what did not, and deletions
//! wait; 30,000 refused names keep workcell's memory, its output and the audit log small;
//! new and removed directories are named.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::give_to_worker;
use support::scratch::Project;

/// `tmp/proj` with the copy-delivered zone `z/` (no limits, writes pre-approved).
struct Scratch(Project);

impl std::ops::Deref for Scratch {
    type Target = Project;
    fn deref(&self) -> &Project {
        &self.0
    }
}

impl Scratch {
    fn new() -> Scratch {
        let config = "sandbox:\n  zones:\n    z: {path: ./z, mode: rw, delivery: copy, approval: {write: preApproved, delete: preApproved}}\n";
        Scratch(Project::new(&["z"], config))
    }

    fn z(&self, name: &str) -> PathBuf {
        self.dir.join("z").join(name)
    }

    fn run(&self, backend: &str, extra: &[&str], script: &str) -> Output {
        let out = support::workcell_sh(&self.dir, backend, extra, script).output().expect("run workcell");
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("exit {:?}\nstderr ({} bytes): {}", out.status.code(), err.len(), err.chars().take(4000).collect::<String>());
        out
    }

    /// The audit log's `delivery` events.
    fn delivery_events(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.join(".workcell/audit.jsonl")).expect("audit log");
        log.lines().filter(|l| l.contains("\"event\":\"delivery\"")).map(str::to_string).collect()
    }
}

/// The `--json` delivery summary on stderr.
fn summary(out: &Output) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).unwrap_or_else(|| panic!("no delivery summary in: {err}"));
    serde_json::from_str::<Value>(line).expect("json")["delivery"].clone()
}

fn paths(v: &Value) -> Vec<String> {
    v.as_array().expect("a list").iter().map(|p| p.as_str().map(str::to_string).unwrap_or_else(|| p["path"].as_str().expect("path").to_string())).collect()
}

/// Waits (on a thread) for the publish's temporary file to appear in `dir`, then runs `act`:
/// the host acts while workcell is still copying a large file into place.
fn when_publishing(dir: PathBuf, act: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<bool> {
    std::thread::spawn(move || {
        let give_up = Instant::now() + Duration::from_secs(300);
        while Instant::now() < give_up {
            let publishing =
                std::fs::read_dir(&dir).map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with(".workcell-publish-"))).unwrap_or(false);
            if publishing {
                act();
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    })
}

/// A dense file of `mib` MiB.
fn dense(path: &Path, mib: usize) {
    std::fs::write(path, vec![7u8; mib << 20]).expect("write");
}

/// A small file system (tmpfs of `mib` MiB) mounted at `at`; unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, mib: usize) -> Tmpfs {
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m,mode=0755"), "workcell-test", &at.display().to_string()])
            .status()
            .expect("mount");
        assert!(ok.success(), "mount a tmpfs at {} (these tests run as root)", at.display());
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

mod body {
    use super::*;

    pub fn a_host_edit_during_the_publish_is_kept(backend: &str) {
        let s = Scratch::new();
        dense(&s.z("big.bin"), 128);
        give_to_worker(&s.dir);
        let target = s.z("big.bin");
        let host = when_publishing(s.dir.join("z"), move || std::fs::write(&target, "host edit").expect("host edit"));
        let out = s.run(backend, &["--json"], "echo worker >> /z/big.bin");
        assert!(host.join().expect("watcher"), "the publish never wrote a temporary file");
        assert!(std::fs::read(s.z("big.bin")).expect("read") == b"host edit", "the host's edit was overwritten");
        let sum = summary(&out);
        assert_eq!(paths(&sum["conflicts"]), ["big.bin"], "{sum}");
        assert_eq!(paths(&sum["changed"]), Vec::<String>::new(), "{sum}");
        assert_no_temporaries(&s.dir.join("z"));
    }

    pub fn a_host_file_made_during_the_publish_is_kept(backend: &str) {
        let s = Scratch::new();
        give_to_worker(&s.dir);
        let target = s.z("new.bin");
        let host = when_publishing(s.dir.join("z"), move || std::fs::write(&target, "the host's").expect("host file"));
        let out = s.run(backend, &["--json"], "head -c 134217728 /dev/zero | tr '\\0' x > /z/new.bin");
        assert!(host.join().expect("watcher"), "the publish never wrote a temporary file");
        assert!(std::fs::read(s.z("new.bin")).expect("read") == b"the host's", "the host's new file was replaced");
        let sum = summary(&out);
        assert_eq!(paths(&sum["conflicts"]), ["new.bin"], "{sum}");
        assert_eq!(paths(&sum["added"]), Vec::<String>::new(), "{sum}");
        assert_no_temporaries(&s.dir.join("z"));
    }

    pub fn a_full_file_system_publishes_in_part_and_says_so(backend: &str) {
        let s = Scratch::new();
        let _fs = Tmpfs::mount(&s.dir.join("z"), 4);
        std::fs::write(s.z("d.txt"), "keep me unless all landed").expect("write");
        give_to_worker(&s.dir);
        let out = s.run(
            backend,
            &["--json"],
            // Not zeros: those are published as holes and would fit.
            "cd /z && x() { head -c $1 /dev/zero | tr '\\0' x; } && x 1048576 > a.bin && x 1048576 > b.bin && x 3145728 > c.bin && rm d.txt",
        );
        let sum = summary(&out);
        assert_eq!(sum["status"], "partial", "{sum}");
        assert_eq!(sum["published"], true, "{sum}");
        assert_eq!(paths(&sum["added"]), ["a.bin", "b.bin"], "{sum}");
        let failed: Vec<String> = sum["failed"].as_array().expect("failed").iter().map(|f| f["path"].as_str().unwrap().to_string()).collect();
        assert_eq!(failed, ["c.bin", "d.txt"], "{sum}");
        assert!(sum["failed"][0]["error"].as_str().unwrap().contains("No space left"), "{sum}");
        assert_eq!(std::fs::metadata(s.z("a.bin")).expect("a.bin landed").len(), 1 << 20);
        assert!(!s.z("c.bin").exists(), "c.bin did not land");
        assert!(s.z("d.txt").exists(), "the deletion waits when a write failed");
        assert_no_temporaries(&s.dir.join("z"));
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!text.contains("nothing published"), "{text}");
        let events = s.delivery_events();
        assert_eq!(events.len(), 1);
        let event: Value = serde_json::from_str(&events[0]).expect("json");
        assert_eq!(event["summary"]["status"], "partial", "{event}");
    }

    pub fn thousands_of_refused_names_stay_small(backend: &str) {
        let s = Scratch::new();
        give_to_worker(&s.dir);
        // 15 directories of 250-character names, then 30,000 links of 200-character names:
        // 30,000 refused names of about 4 KB each (120 MB of names).
        let long = "d".repeat(249);
        let script = format!(
            "cd /z && for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do mkdir {long}$i && cd {long}$i || exit 1; done; \
             seq 1 30000 | sed 's/^/{}/' | xargs ln -s -t . && ls | wc -l",
            "l".repeat(190)
        );
        let out = s.run(backend, &["--json"], &script);
        assert!(String::from_utf8_lossy(&out.stdout).trim() == "30000", "the worker made its links: {}", String::from_utf8_lossy(&out.stdout));
        assert!(out.stderr.len() < 256 << 10, "stderr: {} bytes", out.stderr.len());
        let sum = summary(&out);
        assert_eq!(sum["counts"]["refused"], 30_000, "{}", sum["counts"]);
        assert!(sum["refused"].as_array().unwrap().len() <= 50);
        for e in s.delivery_events() {
            assert!(e.len() < 256 << 10, "an audit line of {} bytes", e.len());
        }
        let peak = peak_rss_of_children_kib();
        assert!(peak < 256 << 10, "workcell's peak memory: {peak} KiB");
    }

    pub fn new_and_removed_directories_are_named(backend: &str) {
        let s = Scratch::new();
        std::fs::create_dir_all(s.z("old/inner")).expect("mkdir");
        give_to_worker(&s.dir);
        let out = s.run(backend, &[], "cd /z && rm -r old && mkdir -p new/deeper && echo x > new/deeper/f.txt");
        let text = String::from_utf8_lossy(&out.stderr);
        for line in ["new dir   new/", "new dir   new/deeper/", "dir gone  old/inner/", "dir gone  old/", "added     new/deeper/f.txt (2 B)"] {
            assert!(text.contains(line), "{line:?} not in {text}");
        }
        assert!(s.z("new/deeper/f.txt").is_file() && !s.z("old").exists());
    }
}

/// No temporary file of a publish is left in `dir`.
fn assert_no_temporaries(dir: &Path) {
    for e in std::fs::read_dir(dir).expect("read zone").flatten() {
        assert!(!e.file_name().to_string_lossy().starts_with(".workcell-"), "left behind: {:?}", e.file_name());
    }
}

/// The largest resident set of the children this test waited for (workcell), in KiB.
fn peak_rss_of_children_kib() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        assert_eq!(libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()), 0);
        usage.assume_init()
    };
    usage.ru_maxrss
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [
        a_host_edit_during_the_publish_is_kept,
        a_host_file_made_during_the_publish_is_kept,
        a_full_file_system_publishes_in_part_and_says_so,
        thousands_of_refused_names_stay_small,
        new_and_removed_directories_are_named
    ]
);
support::backend_suite!(
    docker,
    "docker",
    [
        a_host_edit_during_the_publish_is_kept,
        a_host_file_made_during_the_publish_is_kept,
        a_full_file_system_publishes_in_part_and_says_so,
        thousands_of_refused_names_stay_small,
        new_and_removed_directories_are_named
    ]
);
