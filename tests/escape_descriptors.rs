//! No descriptor workcell inherits reaches a worker. The caller of workcell has a host secret
//! open on descriptor 9 and a host directory (outside every zone) on descriptor 10; the
//! worker tries to read the secret through 9, to read and write the host through
//! `/proc/self/fd/10/...`, and lists its own descriptors. The same for the shell tool of
//! `workcell mcp`, whose MCP client has descriptor 9 open.
//!
//! Gate: `WORKCELL_REQUIRE_BWRAP=1` / `WORKCELL_REQUIRE_DOCKER=1` turn a missing backend into
//! a failure; without them the backend's tests are skipped with a note on stderr.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

/// `root/proj` (the project, zone `data`) and `root/outside` (never a zone) holding
/// `secret.txt`, whose text is unique to this test.
struct Setup {
    _tmp: tempfile::TempDir,
    proj: PathBuf,
    outside: PathBuf,
    secret: String,
}

impl Setup {
    fn new() -> Setup {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let proj = root.join("proj");
        let outside = root.join("outside");
        std::fs::create_dir_all(proj.join("data")).expect("mkdir");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::fs::write(proj.join("data/doc.txt"), "zone file\n").expect("write");
        std::fs::write(proj.join("workcell.yaml"), "sandbox:\n  zones:\n    data: {path: ./data, mode: rw}\n").expect("write");
        // As root the worker is nobody: its rw zone is its, or the run is refused.
        if rustix::process::geteuid().is_root() {
            let nobody = (Some(rustix::fs::Uid::from_raw(65534)), Some(rustix::fs::Gid::from_raw(65534)));
            rustix::fs::chown(proj.join("data"), nobody.0, nobody.1).expect("chown");
        }
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let secret = format!("HOST-SECRET-{}-{nanos}", std::process::id());
        std::fs::write(outside.join("secret.txt"), format!("{secret}\n")).expect("write");
        // Readable by the worker's uid too (docker runs it unprivileged): only the boundary
        // may stop it.
        use std::os::unix::fs::PermissionsExt;
        for p in [&root, &outside] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        }
        std::fs::set_permissions(outside.join("secret.txt"), std::fs::Permissions::from_mode(0o666)).expect("chmod");
        Setup { _tmp: tmp, proj, outside, secret }
    }

    /// `cmd` with descriptor 9 open on the secret file and 10 on the outside directory,
    /// both inheritable, as a caller's `exec 9<secret 10<dir` leaves them.
    fn with_inherited_fds(&self, cmd: &mut Command) {
        let file = std::fs::File::open(self.outside.join("secret.txt")).expect("open secret");
        let dir = std::fs::File::open(&self.outside).expect("open outside dir");
        // SAFETY: dup2 is async-signal-safe; the descriptors stay open in the parent until
        // `cmd` is dropped (they are moved into the closure).
        unsafe {
            cmd.pre_exec(move || {
                for (from, to) in [(file.as_raw_fd(), 9), (dir.as_raw_fd(), 10)] {
                    if libc::dup2(from, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    fn assert_nothing_leaked(&self, output: &str) {
        assert!(!output.contains(&self.secret), "the worker read the host secret through an inherited descriptor:\n{output}");
        assert!(!self.outside.join("x").exists(), "the worker created a host file through an inherited directory descriptor");
        let names: Vec<_> = std::fs::read_dir(&self.outside).expect("outside").flatten().map(|e| e.file_name()).collect();
        assert_eq!(names.len(), 1, "the outside directory changed: {names:?}");
    }
}

/// The text between two markers.
fn between<'a>(output: &'a str, start: &str, end: &str) -> &'a str {
    let from = output.find(start).unwrap_or_else(|| panic!("no {start} in:\n{output}")) + start.len();
    let to = output[from..].find(end).unwrap_or_else(|| panic!("no {end} in:\n{output}")) + from;
    &output[from..to]
}

/// The descriptor numbers `ls /proc/self/fd` printed.
fn listed_fds(output: &str) -> Vec<u32> {
    let mut fds: Vec<u32> = output.split_whitespace().map(|w| w.parse().unwrap_or_else(|_| panic!("not a descriptor: {w:?} in:\n{output}"))).collect();
    fds.sort();
    fds
}

/// Only stdin, stdout, stderr and the one descriptor `ls` opened to read the directory.
fn assert_only_standard_fds(fds: &[u32], output: &str) {
    let extra: Vec<_> = fds.iter().filter(|fd| **fd > 2).collect();
    assert!(
        fds.starts_with(&[0, 1, 2]) && extra.len() <= 1 && !fds.contains(&9) && !fds.contains(&10),
        "the worker has descriptors beyond 0-2 and ls's own: {fds:?}\n{output}"
    );
}

const SCRIPT: &str = "echo FD9-START; cat <&9; echo FD9-END; \
    echo LS-START; ls /proc/self/fd; echo LS-END; \
    cat /proc/self/fd/10/secret.txt; \
    echo written > /proc/self/fd/10/x; \
    echo DONE";

fn run_escapes(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let s = Setup::new();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_workcell"));
    cmd.current_dir(&s.proj).args(["run", "--backend", backend, "--no-broker", "--", "sh", "-c", SCRIPT]).env_remove("RUST_LOG");
    s.with_inherited_fds(&mut cmd);
    let out = cmd.output().expect("start workcell");
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    eprintln!("workcell -> {:?}\n{text}", out.status.code());
    assert!(String::from_utf8_lossy(&out.stdout).contains("DONE"), "the worker did not run to the end:\n{text}");
    s.assert_nothing_leaked(&text);
    let fds = listed_fds(between(&String::from_utf8_lossy(&out.stdout), "LS-START", "LS-END"));
    assert_only_standard_fds(&fds, &text);
}

#[test]
fn bwrap_worker_inherits_no_descriptor() {
    run_escapes("bwrap");
}

#[test]
fn docker_worker_inherits_no_descriptor() {
    run_escapes("docker");
}

/// A minimal MCP client on `workcell mcp`'s stdio (newline-delimited JSON-RPC).
struct Mcp {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl Mcp {
    fn start(project: &Path, backend: &str, prepare: impl FnOnce(&mut Command)) -> Mcp {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_workcell"));
        cmd.current_dir(project).args(["mcp", "--backend", backend, "--approve-all"]).env_remove("RUST_LOG");
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        prepare(&mut cmd);
        let mut child = cmd.spawn().expect("start workcell mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut mcp = Mcp { child, stdin, stdout, next_id: 1 };
        let init =
            mcp.request("initialize", json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "escape-test", "version": "0"}}));
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, msg: Value) {
        writeln!(self.stdin, "{msg}").expect("write to workcell mcp");
        self.stdin.flush().expect("flush");
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read from workcell mcp");
            assert!(n > 0, "workcell mcp closed its output");
            let msg: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if msg["id"] == json!(id) {
                return msg;
            }
        }
    }

    /// Calls the shell tool; returns the tool's text (its JSON result or error).
    fn shell(&mut self, command: &str) -> String {
        let r = self.request("tools/call", json!({"name": "shell", "arguments": {"command": command}}));
        let content = r["result"]["content"].as_array().unwrap_or_else(|| panic!("no result: {r}"));
        content.iter().filter_map(|c| c["text"].as_str()).collect()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn mcp_shell_escapes(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let s = Setup::new();
    let mut mcp = Mcp::start(&s.proj, backend, |cmd| s.with_inherited_fds(cmd));
    let ls = mcp.shell("ls /proc/self/fd");
    let via9 = mcp.shell("cat /proc/self/fd/9");
    let via10 = mcp.shell("cat /proc/self/fd/10/secret.txt");
    let write10 = mcp.shell("touch /proc/self/fd/10/x");
    let all = format!("{ls}\n{via9}\n{via10}\n{write10}");
    eprintln!("{all}");
    s.assert_nothing_leaked(&all);
    let ls: Value = serde_json::from_str(&ls).unwrap_or_else(|e| panic!("the shell tool's result is not JSON ({e}): {ls}"));
    assert_eq!(ls["exit_code"], 0, "{ls}");
    let fds = listed_fds(ls["stdout"].as_str().expect("stdout"));
    assert_only_standard_fds(&fds, &all);
    let via9: Value = serde_json::from_str(&via9).unwrap_or_else(|e| panic!("not JSON ({e}): {via9}"));
    assert_ne!(via9["exit_code"], 0, "cat /proc/self/fd/9 succeeded: {via9}");
}

#[test]
fn bwrap_mcp_shell_inherits_no_descriptor() {
    mcp_shell_escapes("bwrap");
}

#[test]
fn docker_mcp_shell_inherits_no_descriptor() {
    mcp_shell_escapes("docker");
}
