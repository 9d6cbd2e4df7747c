//! `delivery: copy` within bounds while the copy is taken, through the real `workcell`
//! binary on bwrap and docker (issue 25 findings 6, 7, 13): a sparse 4 GiB document over
//! `max_file_bytes` is not copied (nothing written, the host file untouched); a sparse file
//! within the bounds is copied sparse, and one the worker leaves is published sparse; a 100,000-level directory chain the worker leaves in
//! its copy does not keep the copy on disk; a zone over the entry limit is refused before the
//! worker starts; too little free space for the copy refuses the run; a zone the worker
//! leaves over the bounds is withheld whole, said so, and the run exits 3. Each run gets a
//! `TMPDIR` of its own, so "nothing left behind" is exact.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::{write_project, TEST_WORKER_UID};

const PRE: &str = "approval: {write: preApproved, delete: preApproved}";

/// `tmp/proj` with a copy-delivered zone `out/` (`zone_extra` added to its settings) and
/// `tmp/tmpdir`, the runs' `TMPDIR`.
struct Proj {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    tmpdir: PathBuf,
}

impl Proj {
    fn new(zone_extra: &str) -> Proj {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let (dir, tmpdir) = (root.join("proj"), root.join("tmpdir"));
        std::fs::create_dir_all(dir.join("out")).expect("mkdir out");
        std::fs::create_dir_all(&tmpdir).expect("mkdir tmpdir");
        write_project(&dir, &format!("sandbox:\n  zones:\n    out: {{path: ./out, mode: rw, delivery: copy, {PRE}{zone_extra}}}\n"), &[]);
        // The worker's user may write the zone (its root only: what is in it stays root's).
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(dir.join("out"), Some(TEST_WORKER_UID), Some(TEST_WORKER_UID)).expect("chown out");
        }
        Proj { _tmp: tmp, dir, tmpdir }
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.join("out").join(name)
    }

    fn command(&self, backend: &str, script: &str) -> Command {
        let mut c = self.command_text(backend, &["--json"]);
        c.args(["--", "sh", "-c", script]);
        c
    }

    /// `workcell run --backend BACKEND EXTRA…`, the command still to add.
    fn command_text(&self, backend: &str, extra: &[&str]) -> Command {
        let mut c = Command::new(assert_cmd::cargo::cargo_bin("workcell"));
        c.current_dir(&self.dir).env_remove("RUST_LOG").env("TMPDIR", &self.tmpdir).args(["run", "--backend", backend]).args(extra).stdin(Stdio::null());
        c
    }

    fn run(&self, backend: &str, script: &str) -> Output {
        report(self.command(backend, script).output().expect("run workcell"))
    }

    /// What the runs left in their `TMPDIR` of copy delivery's directories.
    fn left_behind(&self) -> Vec<String> {
        left_in(&self.tmpdir)
    }
}

fn report(out: Output) -> Output {
    let err = String::from_utf8_lossy(&out.stderr);
    eprintln!("exit {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), &err[..err.len().min(8000)]);
    out
}

fn left_in(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir).expect("list TMPDIR").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned());
    names.filter(|n| n.starts_with("workcell-copy-") || n.starts_with("workcell-delivery-")).collect()
}

/// The delivery summary printed with `--json`.
fn summary(out: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).unwrap_or_else(|| panic!("no delivery summary in: {err}"));
    serde_json::from_str::<serde_json::Value>(line).unwrap()["delivery"].clone()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The number the worker printed after `label` (`label 123`).
fn number_after(text: &str, label: &str) -> u64 {
    let line = text.lines().find_map(|l| l.strip_prefix(label)).unwrap_or_else(|| panic!("no '{label}' in: {text}"));
    line.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no number after '{label}' in: {text}"))
}

/// A file of `size` bytes without data blocks, `head` at its start.
fn sparse(path: &Path, head: &[u8], size: u64) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("create sparse file");
    f.write_all(head).expect("write head");
    f.set_len(size).expect("extend");
}

mod body {
    use super::*;

    pub fn a_sparse_document_over_max_file_bytes_is_not_copied(backend: &str) {
        let p = Proj::new(", max_file_bytes: 1k");
        sparse(&p.out("big.md"), b"", 4 << 30);
        std::fs::write(p.out("small.md"), "small").unwrap();
        // The worker's project and files: it publishes only what its user may write (as root
        // the worker is the project directory's owner).
        support::give_to_worker(&p.dir);
        let before = std::fs::metadata(p.out("big.md")).unwrap();
        // The worker sees no big.md, its copy takes almost no room, and what it writes at
        // big.md's place is refused: the host's is never replaced.
        let script = "cd /out && { test -e big.md && echo SAW-BIG; echo copy-kib $(du -sk . | cut -f1); echo mine > big.md; echo s2 > small.md; }";
        let out = p.run(backend, script);
        // 3: the delivery held something back (the worker's big.md, refused).
        assert_eq!(out.status.code(), Some(3));
        let text = stdout(&out);
        assert!(!text.contains("SAW-BIG"), "the worker saw the file over max_file_bytes: {text}");
        assert!(number_after(&text, "copy-kib ") < 1024, "the copy takes room for the sparse file: {text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("too large to copy (over the zone's max_file_bytes): big.md"), "{err}");
        let s = summary(&out);
        assert_eq!(s["too_large"], serde_json::json!(["big.md"]), "{s}");
        let refused = s["refused"].as_array().expect("refused");
        assert!(refused.iter().any(|r| r["path"] == "big.md" && r["reason"] == "too_large_to_copy"), "{s}");
        let after = std::fs::metadata(p.out("big.md")).unwrap();
        assert_eq!(
            (after.ino(), after.len(), after.blocks(), after.mtime(), after.mtime_nsec()),
            (before.ino(), before.len(), before.blocks(), before.mtime(), before.mtime_nsec()),
            "the host file was touched"
        );
        assert_eq!(std::fs::read_to_string(p.out("small.md")).unwrap(), "s2\n", "the rest is published");
        assert_eq!(p.left_behind(), Vec::<String>::new());
    }

    pub fn a_sparse_file_within_the_bounds_is_copied_sparse(backend: &str) {
        let p = Proj::new("");
        sparse(&p.out("disk.img"), b"head", 256 << 20);
        let out = p.run(backend, "cd /out && echo copy-kib $(du -sk disk.img | cut -f1) && echo size $(wc -c < disk.img) && head -c 4 disk.img");
        assert_eq!(out.status.code(), Some(0));
        let text = stdout(&out);
        assert!(number_after(&text, "copy-kib ") < 1024, "the copy of a sparse file is dense: {text}");
        assert_eq!(number_after(&text, "size "), 256 << 20, "{text}");
        assert!(text.ends_with("head"), "{text}");
        assert_eq!(summary(&out)["status"], "no_changes");
        assert_eq!(p.left_behind(), Vec::<String>::new());
    }

    /// A sparse file the worker leaves within the bounds is published with its holes: the
    /// host's disk gets its data, not its length of zeros.
    pub fn a_sparse_file_the_worker_leaves_is_published_sparse(backend: &str) {
        let p = Proj::new("");
        support::give_to_worker(&p.dir);
        let out = p.run(backend, "cd /out && truncate -s 256M disk.img && echo tail >> disk.img");
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(summary(&out)["added"], serde_json::json!(["disk.img"]));
        let meta = std::fs::metadata(p.out("disk.img")).expect("published");
        assert_eq!(meta.len(), (256 << 20) + 5);
        assert!(meta.blocks() * 512 < 1 << 20, "the host's copy is dense: {} bytes allocated", meta.blocks() * 512);
        assert_eq!(p.left_behind(), Vec::<String>::new());
    }

    pub fn a_deep_chain_in_the_copy_leaves_nothing_behind(backend: &str) {
        let p = Proj::new("");
        // 1,000 times: a 100-level chain, the chain so far moved to its bottom (short paths
        // only; no shell has to `cd` 100,000 levels down).
        let script = "cd /out && p=a; j=0; while [ $j -lt 99 ]; do p=$p/a; j=$((j+1)); done; mkdir chain; i=0; \
                      while [ $i -lt 1000 ]; do mkdir -p next/$p && mv chain next/$p/ && mv next chain || exit 1; i=$((i+1)); done; echo built";
        let out = p.run(backend, script);
        // 3: the delivery refused what lies deeper than 64 levels.
        assert_eq!(out.status.code(), Some(3));
        assert!(stdout(&out).contains("built"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("cannot remove"), "{err}");
        assert_eq!(p.left_behind(), Vec::<String>::new(), "the copy stayed in TMPDIR");
    }

    /// Issue 37 finding 11: a worker that leaves more than the zone's 4 GiB (a sparse file,
    /// free for it) gets nothing delivered; the run must not end 0 with "no changes" while
    /// its other work is lost: exit 3, and the summary says the zone was withheld and why.
    pub fn a_zone_withheld_whole_ends_the_run_with_3(backend: &str) {
        let p = Proj::new("");
        let script = "cd /out && echo work > result.md && truncate -s 5G huge.img && echo DONE";
        let out = report(p.command_text(backend, &[]).args(["--", "sh", "-c", script]).output().expect("run workcell"));
        assert!(stdout(&out).contains("DONE"), "the worker ran");
        assert_eq!(out.status.code(), Some(3), "a zone withheld whole ended the run with its worker's 0");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("no changes"), "the summary says no changes: {err}");
        assert!(err.contains("zone withheld whole") && err.contains("more than 4294967296 bytes"), "the summary says the zone was withheld and why: {err}");
        assert!(!p.out("result.md").exists() && !p.out("huge.img").exists(), "something was published");
        // The same with --json: status withheld, its reason, nothing counted as published.
        let out = p.run(backend, script);
        assert_eq!(out.status.code(), Some(3));
        let s = summary(&out);
        assert_eq!((s["status"].as_str(), s["published"].as_bool()), (Some("withheld"), Some(false)), "{s}");
        assert!(s["withheld"].as_str().unwrap_or_default().contains("more than 4294967296 bytes"), "{s}");
        assert_eq!(p.left_behind(), Vec::<String>::new());
    }

    pub fn a_zone_over_the_entry_limit_is_refused_before_start(backend: &str) {
        let p = Proj::new("");
        std::fs::create_dir(p.out("many")).unwrap();
        for i in 0..100_000 {
            std::fs::File::create(p.out("many").join(i.to_string())).expect("create");
        }
        let out = p.run(backend, "echo STARTED");
        assert_eq!(out.status.code(), Some(2), "a zone over the bounds is a plan that cannot run");
        assert!(!stdout(&out).contains("STARTED"), "the worker started");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("zone out holds more than 100000 entries"), "{err}");
        assert!(err.contains("Point the zone's path at a smaller directory"), "{err}");
        assert_eq!(p.left_behind(), Vec::<String>::new());
    }

    /// The copy would need more than the temporary directory's file system has: `TMPDIR` on a
    /// 1 MiB tmpfs, in a mount namespace of the run's own (`unshare -m`).
    pub fn too_little_free_space_refuses_the_copy(backend: &str) {
        let p = Proj::new("");
        std::fs::write(p.out("data.md"), vec![b'x'; 4 << 20]).unwrap();
        let mut c = Command::new("unshare");
        c.args(["-m", "sh", "-c", "mount -t tmpfs -o size=1m workcell-test \"$TMPDIR\" && exec \"$@\"", "sh"])
            .arg(assert_cmd::cargo::cargo_bin("workcell"))
            .args(["run", "--backend", backend, "--", "sh", "-c", "echo STARTED"])
            .current_dir(&p.dir)
            .env("TMPDIR", &p.tmpdir)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        let out = report(c.output().expect("unshare runs"));
        assert_eq!(out.status.code(), Some(125));
        assert!(!stdout(&out).contains("STARTED"));
        let err = String::from_utf8_lossy(&out.stderr);
        let dir = p.tmpdir.display().to_string();
        assert!(err.contains("zone out needs ") && err.contains(&format!("are free in {dir}")) && err.contains("set TMPDIR"), "{err}");
    }
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [
        a_sparse_document_over_max_file_bytes_is_not_copied,
        a_sparse_file_within_the_bounds_is_copied_sparse,
        a_sparse_file_the_worker_leaves_is_published_sparse,
        a_deep_chain_in_the_copy_leaves_nothing_behind,
        a_zone_withheld_whole_ends_the_run_with_3,
        a_zone_over_the_entry_limit_is_refused_before_start,
        too_little_free_space_refuses_the_copy
    ]
);
support::backend_suite!(
    docker,
    "docker",
    [
        a_sparse_document_over_max_file_bytes_is_not_copied,
        a_sparse_file_within_the_bounds_is_copied_sparse,
        a_sparse_file_the_worker_leaves_is_published_sparse,
        a_deep_chain_in_the_copy_leaves_nothing_behind,
        a_zone_withheld_whole_ends_the_run_with_3,
        a_zone_over_the_entry_limit_is_refused_before_start
    ]
);
