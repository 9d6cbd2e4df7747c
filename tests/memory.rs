//! Workcell's own memory while a hostile worker tries to make it hold too much, measured as
//! the peak resident set (`VmHWM` in `/proc/<pid>/status`) of the `workcell run` process
//! itself. The worker does its damage through the broker, then signals `/out/.ready` and waits
//! for `/out/.go`: the test reads the peak while workcell is still alive, then lets it end.
//!
//! The bound, [`PEAK_BOUND_KB`] (64 MiB), is about three times what a run needs here (≈ 20 MB
//! in a debug build); before the fix a 3-second `yes` took workcell past 1 GB.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

/// Highest peak RSS of workcell that any test here accepts, in kB.
const PEAK_BOUND_KB: u64 = 64 * 1024;

const CURL: &str = r#"curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json'"#;
const PAUSE: &str = "touch /out/.ready; while [ ! -e /out/.go ]; do sleep 0.1; done";

fn worker(front: &str, script: &str) -> String {
    let command = serde_json::to_string(&["sh", "-c", script]).expect("json");
    format!("---\n{front}command: {command}\n---\nInstructions.\n")
}

/// A project with `data` (ro) and `out` (rw, pre-approved) zones and the given workers.
fn project(workers: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    for d in ["data", "out"] {
        std::fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
    }
    let config =
        "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n";
    support::write_project(tmp.path(), config, workers);
    tmp
}

fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Runs `worker` and returns workcell's peak RSS (kB) read while the worker paused, the exit
/// status, and what `during` returned (called at the pause, e.g. to look at /dev/shm).
fn run_paused<T>(dir: &Path, backend: &str, worker: &str, during: impl FnOnce() -> T) -> (u64, i32, String, T) {
    support::give_to_worker(dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .args(["run", "--approve-all", "--backend", backend, worker])
        .current_dir(dir)
        // Broker directories go to /dev/shm, where the attachment tests look for them.
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("TMPDIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("workcell runs");
    let ready = dir.join("out/.ready");
    // Not a timing assertion: a guard so a broken worker fails the test instead of hanging it.
    let give_up = Instant::now() + Duration::from_secs(600);
    while !ready.exists() {
        if child.try_wait().expect("try_wait").is_some() || Instant::now() > give_up {
            let out = child.wait_with_output().expect("output");
            panic!("the worker never paused: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen = during();
    let peak = vm_hwm_kb(child.id()).expect("VmHWM of the running workcell");
    std::fs::File::create(dir.join("out/.go")).and_then(|mut f| f.write_all(b"go")).expect("go");
    let out = child.wait_with_output().expect("workcell ends");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (peak, out.status.code().unwrap_or(-1), text, seen)
}

fn json_file(path: PathBuf) -> Value {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text:.300}", path.display()))
}

/// `yes` for 3 s through the shell tool: the answer holds 50 000 bytes and says how much
/// more there was; workcell's peak stays under the bound.
fn shell_flood(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let flood = format!(r#"{CURL} --data-binary '{{"command":"yes","timeout":3}}' http://workcell/v1/tools/shell > /out/shell.json; {PAUSE}"#);
    let w = worker("shell_default: {allowed: true, approval_required: false}\nsandbox:\n  zones:\n    - {name: out, mode: rw}\n", &flood);
    let tmp = project(&[("flooder", &w)]);
    let (peak, code, text, ()) = run_paused(tmp.path(), backend, "flooder", || ());
    assert_eq!(code, 0, "{text}");
    let r = json_file(tmp.path().join("out/shell.json"));
    assert_eq!(r["ok"], true, "{r:.300}");
    let res = &r["result"];
    assert_eq!(res["timed_out"], true);
    let cut = res["stdout_truncated_bytes"].as_u64().expect("stdout_truncated_bytes");
    assert!(cut > 0, "yes for 3 s prints more than the cap: {res:.300}");
    let stdout = res["stdout"].as_str().expect("stdout");
    assert!(
        stdout.starts_with("y\ny\n") && stdout.ends_with(&format!("[workcell: output truncated, {cut} more bytes]")),
        "{:.200}",
        &stdout[stdout.len() - 100..]
    );
    assert!(stdout.len() < 50_100, "{} bytes returned", stdout.len());
    assert!(peak < PEAK_BOUND_KB, "workcell peaked at {peak} kB (bound {PEAK_BOUND_KB} kB) while {cut} bytes of output were drained");
}

/// A child worker that prints without end for 3 s: its output returns to the parent capped,
/// with the count of what was cut (docker and bwrap capture a whole run here, not an exec).
fn child_flood(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let parent = worker(
        "workers: [yeller]\nsandbox:\n  zones:\n    - {name: out, mode: rw}\n",
        &format!(r#"{CURL} --data-binary '{{"name":"yeller"}}' http://workcell/v1/tools/call_worker > /out/call.json; {PAUSE}"#),
    );
    let yeller = "---\nlimits: {timeout: 3s}\ncommand: [yes]\n---\nShout.\n";
    let tmp = project(&[("parent", &parent), ("yeller", yeller)]);
    let (peak, code, text, ()) = run_paused(tmp.path(), backend, "parent", || ());
    assert_eq!(code, 0, "{text}");
    let r = json_file(tmp.path().join("out/call.json"));
    let res = &r["result"];
    assert_eq!(res["timed_out"], true, "{r:.300}");
    let cut = res["output_truncated_bytes"].as_u64().expect("output_truncated_bytes");
    assert!(cut > 0, "{res:.300}");
    assert!(res["output"].as_str().expect("output").len() < 50_100);
    assert!(peak < PEAK_BOUND_KB, "workcell peaked at {peak} kB (bound {PEAK_BOUND_KB} kB) with a child printing {cut} bytes beyond the cap");
}

/// A 3 GiB sparse file and a 100 MiB text file in a zone without `max_file_bytes`: windows are
/// read without loading the files, the sparse one is refused as binary, and edit_file refuses
/// both, naming its 16 MiB bound.
#[test]
fn file_tools_on_huge_files_stay_small() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let call = |tool: &str, args: &str, out: &str| format!(r#"{CURL} --data-binary '{args}' http://workcell/v1/tools/{tool} > /out/{out}.json"#);
    let script = [
        call("read_file", r#"{"path":"/data/sparse.txt","max_chars":5}"#, "sparse"),
        call("edit_file", r#"{"path":"/out/sparse.txt","old_text":"a","new_text":"b"}"#, "edit_sparse"),
        call("read_file", r#"{"path":"/data/big.txt","max_chars":10}"#, "head"),
        call("read_file", r#"{"path":"/data/big.txt","offset":100000000,"max_chars":10}"#, "deep"),
        call("edit_file", r#"{"path":"/out/big.txt","old_text":"0123456789","new_text":"x"}"#, "edit_big"),
        PAUSE.to_string(),
    ]
    .join("; ");
    let w = worker("sandbox:\n  zones:\n    - {name: data, mode: ro}\n    - {name: out, mode: rw}\n", &script);
    let tmp = project(&[("reader", &w)]);
    for f in ["data/sparse.txt", "out/sparse.txt"] {
        std::fs::File::create(tmp.path().join(f)).and_then(|h| h.set_len(3 << 30)).expect("sparse 3 GiB");
    }
    // 100 MiB of text whose characters are all one byte: character offset = byte offset.
    let line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwxyz\n";
    let mut big = std::io::BufWriter::new(std::fs::File::create(tmp.path().join("data/big.txt")).expect("create"));
    for _ in 0..(100 << 20) / line.len() {
        big.write_all(line.as_bytes()).expect("write");
    }
    drop(big);
    std::fs::copy(tmp.path().join("data/big.txt"), tmp.path().join("out/big.txt")).expect("copy");
    let (peak, code, text, ()) = run_paused(tmp.path(), "bwrap", "reader", || ());
    assert_eq!(code, 0, "{text}");
    let out = |n: &str| json_file(tmp.path().join(format!("out/{n}.json")));
    let sparse = out("sparse");
    assert_eq!(sparse["error"]["kind"], "not_text", "{sparse}");
    for n in ["edit_sparse", "edit_big"] {
        let e = out(n);
        assert_eq!(e["error"]["kind"], "too_large", "{e}");
        let msg = e["error"]["message"].as_str().unwrap_or("");
        assert!(msg.contains("16777216 bytes") && msg.contains("shell"), "{msg}");
    }
    let head = &out("head")["result"];
    assert_eq!((head["content"].as_str(), head["truncated"].as_bool(), head["next_offset"].as_u64()), (Some("0123456789"), Some(true), Some(10)), "{head}");
    assert!(head.get("total_chars").is_none(), "a 100 MiB file is not read to count it: {head}");
    let deep = &out("deep")["result"];
    let expected: String = line.chars().cycle().skip(100_000_000 % line.len()).take(10).collect();
    assert_eq!(deep["content"].as_str(), Some(expected.as_str()), "{deep}");
    assert_eq!(std::fs::metadata(tmp.path().join("out/big.txt")).expect("stat").len(), std::fs::metadata(tmp.path().join("data/big.txt")).expect("stat").len());
    assert!(peak < PEAK_BOUND_KB, "workcell peaked at {peak} kB (bound {PEAK_BOUND_KB} kB)");
}

/// Broker directories (anywhere workcell may put them) holding an attachment of this name.
fn staged_dirs(name: &str) -> Vec<PathBuf> {
    let bases = ["/dev/shm".into(), std::env::temp_dir()].into_iter().chain(std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from));
    bases
        .flat_map(|b| std::fs::read_dir(b).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("workcell-broker-")) && p.join("attachments").join(name).exists())
        .collect()
}

/// Too many attachments, and too many bytes of them, are refused before anything is copied;
/// 60 MiB in six files are streamed to the child (workcell does not hold them), and the
/// broker directory in /dev/shm is gone when the child has failed.
#[test]
fn attachments_are_bounded_streamed_and_cleaned_up() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let tag = std::process::id();
    let many: Vec<String> = (0..100).map(|i| format!("/data/m{i}.txt")).collect();
    let huge: Vec<String> = (0..3).map(|i| format!("/data/huge-{tag}-{i}.bin")).collect();
    let fine: Vec<String> = (0..6).map(|i| format!("/data/fine-{tag}-{i}.bin")).collect();
    let call = |atts: &[String], out: &str| {
        let body = serde_json::json!({"name": "child", "input": "x", "attachments": atts}).to_string();
        format!(r#"{CURL} --data-binary '{body}' http://workcell/v1/tools/call_worker > /out/{out}.json"#)
    };
    let parent = worker(
        "workers: [child]\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n    - {name: out, mode: rw}\n",
        &[call(&many, "many"), call(&huge, "huge"), call(&fine, "fine")].join("; "),
    );
    // The child reports what it got, pauses (so the test sees its broker directory), then fails.
    let child = worker(
        "sandbox:\n  zones:\n    - {name: data, mode: ro}\n    - {name: out, mode: rw}\n",
        &format!(r#"cat "$WORKCELL_ATTACHMENTS"/* | wc -c > /out/child-bytes; {PAUSE}; exit 3"#),
    );
    let tmp = project(&[("parent", &parent), ("child", &child)]);
    for i in 0..100 {
        std::fs::write(tmp.path().join(format!("data/m{i}.txt")), "m").expect("write");
    }
    for (files, size) in [(&huge, 30u64 << 20), (&fine, 10 << 20)] {
        for f in files.iter() {
            std::fs::File::create(tmp.path().join(f.trim_start_matches('/'))).and_then(|h| h.set_len(size)).expect("sparse file");
        }
    }
    let name = format!("fine-{tag}-0.bin");
    let (peak, code, text, during) = run_paused(tmp.path(), "bwrap", "parent", || staged_dirs(&name));
    assert_eq!(code, 0, "{text}");
    let out = |n: &str| json_file(tmp.path().join(format!("out/{n}.json")));
    let many = out("many");
    assert!(many["error"]["message"].as_str().unwrap_or("").contains("at most 64 attachments"), "{many}");
    let huge = out("huge");
    assert!(huge["error"]["message"].as_str().unwrap_or("").contains("exceed 67108864 bytes"), "{huge}");
    assert!(staged_dirs(&format!("huge-{tag}-0.bin")).is_empty(), "a refused attachment was staged");
    let fine = out("fine");
    assert_eq!(fine["result"]["exit_code"], 3, "{fine}");
    assert_eq!(std::fs::read_to_string(tmp.path().join("out/child-bytes")).expect("child ran").trim(), (60u64 << 20).to_string());
    assert_eq!(during.len(), 1, "the child's attachments were staged in one broker directory: {during:?}");
    assert!(during[0].starts_with("/dev/shm"), "{during:?}");
    assert!(!during[0].exists(), "the broker directory {} outlived the child", during[0].display());
    assert!(peak < PEAK_BOUND_KB, "workcell peaked at {peak} kB (bound {PEAK_BOUND_KB} kB) handing over 60 MiB of attachments");
}

macro_rules! suite {
    ($($backend:ident),*) => {$(
        mod $backend {
            #[test]
            fn shell_flood_is_capped_while_read() { super::shell_flood(stringify!($backend)) }
            #[test]
            fn child_worker_flood_is_capped_while_read() { super::child_flood(stringify!($backend)) }
        }
    )*};
}

suite!(docker, bwrap);
