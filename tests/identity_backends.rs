//! One identity per worker on the real backends, through the real binary: over MCP (the
//! official Python SDK) a file `write_file` made is one the next `shell` command may change,
//! and owned by the worker; a root-only file is refused to `read_file` and to the broker as to
//! the worker's own `cat`; a root-owned directory in a writable zone refuses `write_file`;
//! copy delivery does not copy what the worker cannot read, says so, and leaves it alone on
//! publish. The same bodies run on bwrap and docker, as root (CI); the MCP and copy-in bodies
//! also run with workcell itself started as an unprivileged user (bwrap).

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};
use support::{give_to_worker, worker_uid, write_project, TEST_WORKER_UID};

const PRE: &str = "approval: {write: preApproved, delete: preApproved}";
const CURL: &str = r#"curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json'"#;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A root-owned file with mode `m` (only as root).
fn root_file(path: &Path, text: &str, m: u32) {
    std::fs::write(path, text).expect("write");
    std::os::unix::fs::chown(path, Some(0), Some(0)).expect("chown");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(m)).expect("chmod");
}

/// `tmp/proj` with the zone `out/` (`zone_opts` added), the worker's; as root it also holds
/// root's `secret.txt` (0600) and `rootdir/` (0755).
fn project(zone_opts: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
    std::fs::create_dir_all(dir.join("out/rootdir")).expect("mkdir");
    write_project(&dir, &format!("sandbox:\n  zones:\n    out: {{path: ./out, mode: rw, {PRE}{zone_opts}}}\n"), &[]);
    give_to_worker(&dir);
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    if is_root() {
        std::os::unix::fs::chown(dir.join("out/rootdir"), Some(0), Some(0)).expect("chown");
        root_file(&dir.join("out/secret.txt"), "ROOT-ONLY-SECRET", 0o600);
    }
    (tmp, dir)
}

/// The MCP calls `calls` against `workcell mcp` in `dir`, started through `launch` (the
/// binary, or `setpriv … binary`): one `{error, text}` per call.
fn mcp(launch: &[String], dir: &Path, backend: &str, calls: Value) -> Vec<Value> {
    assert!(support::python_ready(&["mcp"]), "the mcp Python package is required");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_calls.py");
    let out = Command::new(support::python())
        .arg(script)
        .arg(json!(launch).to_string())
        .arg(dir)
        .arg(backend)
        .arg(calls.to_string())
        .output()
        .expect("python client");
    assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("JSON")
}

fn text(r: &Value) -> &str {
    r["text"].as_str().unwrap_or("")
}

mod body {
    use super::*;

    /// `write_file`, then `shell` truncates and edits that very file; the file is the
    /// worker's. With `launch` workcell may run as root or as the worker itself.
    pub fn mcp_write_then_shell(backend: &str, launch: &[String], uid: u32) {
        let (_tmp, dir) = project("");
        let r = mcp(
            launch,
            &dir,
            backend,
            json!([
                ["write_file", {"path": "/out/notes.txt", "content": "one two\n"}],
                ["shell", {"command": "truncate -s 3 /out/notes.txt"}],
                ["shell", {"command": "sed -i s/one/ONE/ /out/notes.txt"}],
                ["read_file", {"path": "/out/notes.txt"}],
                ["shell", {"command": "stat -c %u:%g /out/notes.txt"}]
            ]),
        );
        assert_eq!(r[0]["error"], false, "{}", text(&r[0]));
        for i in [1, 2] {
            assert!(text(&r[i]).contains("\"exit_code\": 0"), "the shell may change what write_file made: {}", text(&r[i]));
        }
        assert!(text(&r[3]).contains("\"content\": \"ONE\""), "{}", text(&r[3]));
        let m = std::fs::metadata(dir.join("out/notes.txt")).expect("written");
        assert_eq!((m.uid(), m.gid()), (uid, uid), "write_file's file is the worker's");
        assert!(text(&r[4]).contains(&format!("{uid}:{uid}")), "{}", text(&r[4]));
    }

    /// The root-only file: `read_file` refuses it as the worker's own `cat` does; a
    /// root-owned directory of the writable zone refuses `write_file`.
    pub fn mcp_refuses_like_the_worker(backend: &str) {
        if !is_root() {
            return eprintln!("skipped: needs root");
        }
        let (_tmp, dir) = project("");
        let bin = vec![env!("CARGO_BIN_EXE_workcell").to_string()];
        let r = mcp(
            &bin,
            &dir,
            backend,
            json!([
                ["read_file", {"path": "/out/secret.txt"}],
                ["shell", {"command": "cat /out/secret.txt"}],
                ["write_file", {"path": "/out/rootdir/x.txt", "content": "x"}],
                ["shell", {"command": "touch /out/rootdir/y.txt"}]
            ]),
        );
        assert_eq!(r[0]["error"], true);
        assert!(text(&r[0]).starts_with("[permission_denied]") && !text(&r[0]).contains("ROOT-ONLY"), "{}", text(&r[0]));
        assert!(text(&r[1]).contains("Permission denied") && !text(&r[1]).contains("\"exit_code\": 0"), "{}", text(&r[1]));
        assert!(!text(&r[1]).contains("ROOT-ONLY-SECRET"));
        assert!(r[2]["error"] == true && text(&r[2]).starts_with("[permission_denied]"), "{}", text(&r[2]));
        assert!(text(&r[3]).contains("Permission denied"), "{}", text(&r[3]));
        assert_eq!(std::fs::read_dir(dir.join("out/rootdir")).expect("ls").count(), 0, "nothing was written as root");
    }

    /// A worker asks the broker for the file its own `cat` may not read: refused alike.
    pub fn broker_refuses_like_the_worker(backend: &str) {
        if !is_root() {
            return eprintln!("skipped: needs root");
        }
        let (_tmp, dir) = project("");
        let script = format!(r#"cat /out/secret.txt; {CURL} --data-binary '{{"path":"/out/secret.txt"}}' http://workcell/v1/tools/read_file; echo"#);
        let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
            .current_dir(&dir)
            .args(["run", "--backend", backend, "--", "sh", "-c", &script])
            .output()
            .expect("run");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(stderr.contains("Permission denied"), "{stderr}");
        assert!(stdout.contains(r#""kind":"permission_denied""#) && !stdout.contains("ROOT-ONLY-SECRET"), "{stdout}");
    }

    /// Copy delivery: what the worker cannot read is not copied, the summary says so, and
    /// whatever the worker leaves in its place never reaches the host.
    pub fn copy_in_skips_what_the_worker_cannot_read(backend: &str) {
        copy_in_skips(backend, &[env!("CARGO_BIN_EXE_workcell").to_string()]);
    }

    /// [`copy_in_skips_what_the_worker_cannot_read`] with workcell started through `launch`.
    pub fn copy_in_skips(backend: &str, launch: &[String]) {
        if !is_root() {
            return eprintln!("skipped: needs root");
        }
        let (_tmp, dir) = project(", delivery: copy");
        let out_dir = dir.join("out");
        std::fs::create_dir(out_dir.join("private")).expect("mkdir");
        root_file(&out_dir.join("private/inner.txt"), "root's inner", 0o644);
        std::fs::set_permissions(out_dir.join("private"), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        std::fs::write(out_dir.join("mine.txt"), "mine").expect("write");
        give_to_worker(&out_dir.join("mine.txt"));
        let script = "cat /out/secret.txt; ls -a /out; echo WORKER > /out/secret.txt && mkdir -p /out/private && echo W > /out/private/inner.txt \
                      && echo new > /out/new.txt && rm /out/mine.txt";
        let out = Command::new("setsid")
            .arg("-w")
            .args(launch)
            .current_dir(&dir)
            .args(["run", "--backend", backend, "--json", "--", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        // Refused (not copied) names: the held-back status, 3.
        assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
        assert!(!stdout.contains("ROOT-ONLY-SECRET") && !stdout.contains("secret.txt") && !stdout.contains("private"), "not in the copy: {stdout}");
        assert!(stderr.contains("not copied: 2 files or directories the worker cannot read: private/, secret.txt"), "{stderr}");
        let sum = summary(&out);
        assert_eq!(sum["not_copied"], json!(["private/", "secret.txt"]), "{sum}");
        assert_eq!(sum["counts"]["not_copied"], 2);
        let refused: Vec<(&str, &str)> =
            sum["refused"].as_array().expect("refused").iter().map(|r| (r["path"].as_str().unwrap(), r["reason"].as_str().unwrap())).collect();
        for p in ["secret.txt", "private/inner.txt"] {
            assert!(refused.contains(&(p, "not_copied")), "{p}: {sum}");
        }
        assert_eq!(sum["added"], json!(["new.txt"]), "{sum}");
        assert_eq!(sum["deleted"], json!(["mine.txt"]), "{sum}");
        // The host's files are as they were: content, owner and mode.
        let secret = std::fs::metadata(out_dir.join("secret.txt")).expect("still there");
        assert_eq!((secret.uid(), secret.mode() & 0o7777), (0, 0o600));
        assert_eq!(std::fs::read_to_string(out_dir.join("secret.txt")).expect("read"), "ROOT-ONLY-SECRET");
        assert_eq!(std::fs::read_to_string(out_dir.join("private/inner.txt")).expect("read"), "root's inner");
        assert_eq!(std::fs::read_to_string(out_dir.join("new.txt")).expect("published"), "new\n");
    }

    fn summary(out: &Output) -> Value {
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).unwrap_or_else(|| panic!("no delivery summary in: {err}"));
        serde_json::from_str::<Value>(line).expect("json")["delivery"].clone()
    }

    pub fn mcp_write_then_shell_as_root(backend: &str) {
        mcp_write_then_shell(backend, &[env!("CARGO_BIN_EXE_workcell").to_string()], worker_uid());
    }
}

macro_rules! backend_suite {
    ($module:ident, $backend:literal) => {
        mod $module {
            use super::*;
            #[test]
            fn mcp_write_then_shell_changes_it() {
                if support::backend_ready($backend) {
                    body::mcp_write_then_shell_as_root($backend);
                }
            }
            #[test]
            fn mcp_refuses_like_the_worker() {
                if support::backend_ready($backend) {
                    body::mcp_refuses_like_the_worker($backend);
                }
            }
            #[test]
            fn broker_refuses_like_the_worker() {
                if support::backend_ready($backend) {
                    body::broker_refuses_like_the_worker($backend);
                }
            }
            #[test]
            fn copy_in_skips_what_the_worker_cannot_read() {
                if support::backend_ready($backend) {
                    body::copy_in_skips_what_the_worker_cannot_read($backend);
                }
            }
        }
    };
}

backend_suite!(bwrap, "bwrap");
backend_suite!(docker, "docker");

/// workcell itself started as the unprivileged test worker (it then is the worker: nothing
/// is switched): the same write-then-shell flow on bwrap.
#[test]
fn mcp_write_then_shell_as_an_unprivileged_workcell() {
    if !is_root() || !support::backend_ready("bwrap") {
        return eprintln!("skipped: needs root (to drop to the test user) and bwrap");
    }
    let ids = TEST_WORKER_UID.to_string();
    let launch: Vec<String> = ["setpriv", "--reuid", &ids, "--regid", &ids, "--clear-groups", env!("CARGO_BIN_EXE_workcell")].map(String::from).to_vec();
    body::mcp_write_then_shell("bwrap", &launch, TEST_WORKER_UID);
}

/// The same copy-in as an unprivileged workcell on bwrap: it is the worker, and what it may
/// not read is left out and named the same way (it used to stop the whole copy).
#[test]
fn copy_in_as_an_unprivileged_workcell() {
    if !is_root() || !support::backend_ready("bwrap") {
        return eprintln!("skipped: needs root (to drop to the test user) and bwrap");
    }
    let ids = TEST_WORKER_UID.to_string();
    let launch: Vec<String> = ["setpriv", "--reuid", &ids, "--regid", &ids, "--clear-groups", env!("CARGO_BIN_EXE_workcell")].map(String::from).to_vec();
    body::copy_in_skips("bwrap", &launch);
}
