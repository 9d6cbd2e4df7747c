//! What a remote engine's writable zone costs this host when it comes back (issue 37,
//! findings 10 and 11): the archive is checked as it downloads, one zone at a time, and only
//! what passes is kept, bounded by the zone's limits and by the free space of `TMPDIR`; a
//! zone withheld whole ends the run with exit 3 and says why; a sparse file within the bounds
//! is staged and published with its holes.
//!
//! Each run has its `TMPDIR` on a 64 MiB tmpfs in a mount namespace of its own (`unshare
//! -m`), so "the host never held it" is exact: a spool of the whole archive, as before,
//! could not fit there. The engine is `.ci/remote-engine` (see tests/remote_engine.rs).
//!
//! Gate: `support::backend_ready("remote")` (skips, or fails under
//! `WORKCELL_REQUIRE_REMOTE=1`).

mod support;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use support::remote::RemoteEngine;
use support::{backend_ready, give_to_worker, write_project};

/// Exit status of a run whose delivery held something back (docs/commands.md, "Exit statuses").
const HELD_BACK: i32 = 3;
const PRE: &str = "approval: {write: preApproved, delete: preApproved}";

struct Rig {
    engine: RemoteEngine,
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    tmpdir: PathBuf,
}

/// A project whose zone `out` is `out: {path: ./out, mode: rw, ZONE_EXTRA, PRE}`, and an engine.
fn rig(zone_extra: &str) -> Option<Rig> {
    if !backend_ready("remote") {
        return None;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    let (dir, tmpdir) = (root.join("proj"), root.join("tmpdir"));
    std::fs::create_dir_all(dir.join("out")).expect("mkdir out");
    std::fs::create_dir_all(&tmpdir).expect("mkdir tmpdir");
    write_project(&dir, &format!("sandbox:\n  zones:\n    out: {{path: ./out, mode: rw{zone_extra}, {PRE}}}\n"), &[]);
    Some(Rig { engine: RemoteEngine::start(), _tmp: tmp, dir, tmpdir })
}

impl Rig {
    /// `workcell run --backend docker --image BUSYBOX --json -- /bin/sh -c SCRIPT` against the
    /// engine, `TMPDIR` a 64 MiB tmpfs, without a terminal; then nothing may be left on the engine.
    fn run(&self, script: &str) -> Output {
        give_to_worker(&self.dir);
        let image = self.engine.busybox().to_string();
        let mut c = assert_cmd::Command::new("unshare");
        c.args(["-m", "sh", "-c", "mount -t tmpfs -o size=64m workcell-spool \"$TMPDIR\" && exec setsid -w \"$@\"", "sh"])
            .arg(assert_cmd::cargo::cargo_bin("workcell"))
            .args(["run", "--backend", "docker", "--image", &image, "--json", "--", "/bin/sh", "-c", script])
            .current_dir(&self.dir)
            .env("TMPDIR", &self.tmpdir)
            .env("DOCKER_HOST", self.engine.docker_host())
            .env_remove("DOCKER_TLS_VERIFY")
            .env_remove("DOCKER_CERT_PATH")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .timeout(Duration::from_secs(300));
        let out = c.output().expect("unshare runs workcell");
        eprintln!("exit {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        self.engine.assert_nothing_left();
        out
    }

    /// The names in the host's zone directory, sorted.
    fn names(&self) -> Vec<String> {
        let mut n: Vec<String> =
            std::fs::read_dir(self.dir.join("out")).expect("list out").map(|e| e.expect("entry").file_name().to_string_lossy().into_owned()).collect();
        n.sort();
        n
    }
}

/// The delivery summary printed with `--json`.
fn summary(out: &Output) -> serde_json::Value {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).unwrap_or_else(|| panic!("no delivery summary in: {err}"));
    serde_json::from_str::<serde_json::Value>(line).expect("summary JSON")["delivery"].clone()
}

/// Finding 10: a 700 MiB sparse file (free for the worker) in a zone with `max_file_bytes:
/// 1m` is refused from its header; the rest of the zone is published. Before, the whole
/// archive was spooled into `TMPDIR` first: it cannot fit in 64 MiB, and nothing came back.
#[test]
fn a_sparse_file_over_max_file_bytes_is_refused_without_being_spooled() {
    let Some(r) = rig(", max_file_bytes: 1m") else { return };
    let out = r.run("cd /out && echo ok > ok.md && truncate -s 700M big.img && echo DONE");
    assert!(String::from_utf8_lossy(&out.stdout).contains("DONE"), "the worker ran");
    assert_eq!(out.status.code(), Some(HELD_BACK), "the refusal ends the run with the held-back status");
    let s = summary(&out);
    assert_eq!(s["published"], true, "the rest of the zone came back: {s}");
    let refused = s["refused"].as_array().expect("refused");
    assert!(refused.iter().any(|e| e["path"] == "big.img" && e["reason"] == "too_large" && e["size"] == 700u64 << 20), "{s}");
    assert_eq!(r.names(), ["ok.md"], "the host holds what passed, and nothing else");
}

/// Finding 10: accepted files that do not fit in `TMPDIR` (less a margin) withhold the zone
/// whole, with the directory named (finding 11: exit 3, never "no changes"). Before, the
/// spool failed on a full file system and the run ended 0.
#[test]
fn files_over_the_spools_room_withhold_the_zone_whole() {
    let Some(r) = rig("") else { return };
    let out = r.run("cd /out && echo ok > ok.md && head -c 80000000 /dev/urandom > data.bin && echo DONE");
    assert!(String::from_utf8_lossy(&out.stdout).contains("DONE"), "the worker ran");
    assert_eq!(out.status.code(), Some(HELD_BACK), "a zone withheld whole ended the run with its worker's 0");
    let s = summary(&out);
    assert_eq!((s["status"].as_str(), s["published"].as_bool()), (Some("withheld"), Some(false)), "{s}");
    let why = s["withheld"].as_str().unwrap_or_default();
    assert!(why.contains("do not fit in the free space of") && why.contains(&*r.tmpdir.to_string_lossy()) && why.contains("TMPDIR"), "{s}");
    assert_eq!(r.names(), Vec::<String>::new(), "something was published");
}

/// Finding 11: more than the zone's 4 GiB (a sparse file) gets nothing delivered: exit 3 and
/// the reason, and the download stops at the entry's header. Before: exit 0, "no changes".
#[test]
fn a_zone_over_the_byte_bound_is_withheld_whole_with_exit_3() {
    let Some(r) = rig("") else { return };
    let out = r.run("cd /out && echo ok > ok.md && truncate -s 5G huge.img && echo DONE");
    assert!(String::from_utf8_lossy(&out.stdout).contains("DONE"), "the worker ran");
    assert_eq!(out.status.code(), Some(HELD_BACK), "a zone withheld whole ended the run with its worker's 0");
    let s = summary(&out);
    assert_eq!((s["status"].as_str(), s["published"].as_bool()), (Some("withheld"), Some(false)), "{s}");
    assert!(s["withheld"].as_str().unwrap_or_default().contains("more than 4294967296 bytes"), "{s}");
    assert_eq!(r.names(), Vec::<String>::new(), "something was published");
}

/// A sparse file within the zone's bounds (1 GiB, 5 bytes of data) is staged with its holes
/// (the 64 MiB `TMPDIR` holds it) and published with them: this host's disk gets its data.
#[test]
fn a_sparse_file_within_the_bounds_stays_sparse_on_this_host() {
    use std::os::unix::fs::MetadataExt;
    let Some(r) = rig("") else { return };
    let out = r.run("cd /out && truncate -s 1G big.img && echo tail >> big.img");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(summary(&out)["added"], serde_json::json!(["big.img"]));
    let meta = std::fs::metadata(r.dir.join("out/big.img")).expect("published");
    assert_eq!(meta.len(), (1 << 30) + 5);
    assert!(meta.blocks() * 512 < 1 << 20, "the host's copy is dense: {} bytes allocated", meta.blocks() * 512);
}
