//! More attacks on the walks that list only the directories that changed (issue 38,
//! `hostrun::looked`), beyond tests/sweep_incremental.rs: ways a worker could try to change a
//! directory's names while its (device, inode, ctime) stays what a record says, or to reach the
//! records themselves. Each runs as separate `workcell run`s and as calls of one `workcell mcp`
//! session, on bwrap and on docker (`image: host`), against a tree left alone for [`SETTLE`]
//! and then looked at once, so that the attack meets records that are trusted.
//!
//! - `renameat2(RENAME_EXCHANGE)`: a directory holding `run.sh` (protected by nothing where it
//!   lies) swapped with a recorded `tools/` (where `protect: [tools/run.sh]` protects it): both
//!   are the same objects as before, at each other's paths;
//! - `O_TMPFILE` + `linkat`: a file made with no name at all, then given the name `.envrc` in a
//!   recorded leaf (no `creat` in that directory ever);
//! - inode reuse: a recorded, empty directory removed, and a new one made at the same path with
//!   the same inode number (files are made until one gets the old number, which is then freed
//!   for the directory): a walk that keyed records by path and inode alone would trust it;
//! - the clock: the worker cannot set it (`date -s`), so it cannot give a change an old ctime;
//! - the records: a worker whose zone is the project directory can neither write, replace nor
//!   move `.workcell/looked/` (nor `.workcell/`), and the file workcell keeps there is its own.
//!
//! Every plant's file and directories get their times set back to [`OLD`] afterwards, as a
//! worker covering its tracks would; each must be moved aside before workcell returns.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The time the worker sets its plants and their directories back to (2017-07-14).
const OLD: u64 = 1_500_000_000;
/// How long the tree is left unchanged before the run or call that records it: a record is
/// trusted only when the directory's ctime was older than the walk that made it by 2 s.
const SETTLE: Duration = Duration::from_millis(2_500);

/// A project directory `proj/` whose zone `out` is `proj/out` (or, `whole`, the project
/// directory itself, at `/w`).
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Scratch {
    fn new(protect: &[&str], whole: bool) -> Scratch {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(root.join("proj/out")).expect("mkdir");
        let protect = if protect.is_empty() { String::new() } else { format!("  protect: [{}]\n", protect.join(", ")) };
        let zone = if whole { "w: {path: ., mode: rw" } else { "out: {path: ./out, mode: rw" };
        let config = format!("sandbox:\n{protect}  zones:\n    {zone}, approval: {{write: preApproved, delete: preApproved}}}}\ndefaults:\n  image: host\n");
        std::fs::write(root.join("proj/workcell.yaml"), config).expect("workcell.yaml");
        Scratch { _dir: dir, root }
    }

    fn proj(&self) -> PathBuf {
        self.root.join("proj")
    }

    fn out(&self) -> PathBuf {
        self.proj().join("out")
    }

    /// `d0`..`d3` / `d0`..`d3`, a `README.md` in each, `reuse/x` empty, `tools/readme.txt`
    /// (the protected `tools/run.sh` missing) and `stage/run.sh` (a script nothing protects
    /// where it is); the worker's, times set back, then left alone for [`SETTLE`].
    fn tree(&self) {
        let out = self.out();
        for a in 0..4 {
            for b in 0..4 {
                let leaf = out.join(format!("d{a}/d{b}"));
                std::fs::create_dir_all(&leaf).expect("mkdir");
                std::fs::write(leaf.join("README.md"), format!("leaf {a} {b}\n")).expect("write");
            }
        }
        std::fs::create_dir_all(out.join("reuse/x")).expect("mkdir");
        std::fs::create_dir_all(out.join("tools")).expect("mkdir");
        std::fs::write(out.join("tools/readme.txt"), "tools\n").expect("write");
        std::fs::create_dir_all(out.join("stage")).expect("mkdir");
        std::fs::write(out.join("stage/run.sh"), "#!/bin/sh\necho exchanged-run-sh\n").expect("write");
        support::give_to_worker(&self.root);
        let st = Command::new("find").arg(&out).args(["-exec", "touch", "-h", "-d", &format!("@{OLD}"), "{}", "+"]).status().expect("find");
        assert!(st.success(), "touch the tree");
        std::thread::sleep(SETTLE);
    }

    fn in_place(&self, rel: &str) -> bool {
        self.out().join(rel).symlink_metadata().is_ok()
    }

    /// The regular files in the zone's quarantine whose content holds `marker`.
    fn quarantined_holding(&self, marker: &str) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut dirs = vec![self.out().join(".workcell/quarantine")];
        while let Some(d) = dirs.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                let Ok(md) = e.path().symlink_metadata() else { continue };
                if md.is_dir() {
                    dirs.push(e.path());
                } else if md.is_file() && std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains(marker)) {
                    found.push(e.path());
                }
            }
        }
        found
    }

    fn assert_moved_aside(&self, rel: &str, marker: &str, step: &Step) {
        assert!(!self.in_place(rel), "{rel} stayed in place after the sweep: {step}");
        assert!(!self.quarantined_holding(marker).is_empty(), "{rel} (holding {marker}) is not in .workcell/quarantine: {step}");
        assert!(step.notes.contains(&format!("moved aside {rel}")), "what was moved aside is told: {step}");
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Runs,
    Session,
}

struct Step {
    code: Option<i64>,
    stdout: String,
    /// The run's stderr, or the call's whole text.
    notes: String,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {:?}\n--- stdout\n{}\n--- notes\n{}", self.code, self.stdout, self.notes)
    }
}

/// The session's client: one `shell` call per JSON line read, its result as one line.
const CLIENT: &str = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    bin_, project, backend = sys.argv[1:4]
    params = StdioServerParameters(command=bin_, args=["mcp", "--backend", backend, "--approve-all"], cwd=project)
    loop = asyncio.get_running_loop()
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as session:
            await session.initialize()
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                if not line:
                    break
                command = json.loads(line)["command"]
                try:
                    res = await asyncio.wait_for(session.call_tool("shell", {"command": command, "timeout": 60}), 120)
                    s = res.structured_content or {}
                    out = {"error": bool(res.is_error), "text": "".join(getattr(c, "text", "") for c in res.content),
                           "exit_code": s.get("exit_code"), "stdout": s.get("stdout", "")}
                except asyncio.TimeoutError:
                    out = {"error": True, "text": "no answer within 120 s", "exit_code": None, "stdout": ""}
                print(json.dumps(out), flush=True)

asyncio.run(main())
"#;

struct Worker {
    backend: &'static str,
    proj: PathBuf,
    session: Option<(Child, Option<ChildStdin>, BufReader<ChildStdout>)>,
}

impl Worker {
    fn start(s: &Scratch, backend: &'static str, way: Way) -> Option<Worker> {
        let session = match way {
            Way::Runs => None,
            Way::Session => {
                if !support::python_ready(&["mcp"]) {
                    return None;
                }
                let mut child = Command::new(support::python())
                    .arg("-c")
                    .arg(CLIENT)
                    .arg(env!("CARGO_BIN_EXE_workcell"))
                    .arg(s.proj())
                    .arg(backend)
                    .env_remove("RUST_LOG")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .expect("start the MCP client");
                let stdin = child.stdin.take();
                let stdout = BufReader::new(child.stdout.take().expect("stdout"));
                Some((child, stdin, stdout))
            }
        };
        Some(Worker { backend, proj: s.proj(), session })
    }

    fn step(&mut self, script: &str) -> Step {
        let step = match &mut self.session {
            None => {
                let o = support::workcell_sh(&self.proj, self.backend, &[], script).output().expect("start workcell");
                Step {
                    code: o.status.code().map(i64::from),
                    stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                    notes: String::from_utf8_lossy(&o.stderr).into_owned(),
                }
            }
            Some((_, stdin, stdout)) => {
                // The shell tool refuses a command line naming a protected path: a worker
                // writes its script to a file and runs that.
                let command = format!("cat > /tmp/step.sh <<'END-OF-STEP'\n{script}\nEND-OF-STEP\nsh /tmp/step.sh");
                let stdin = stdin.as_mut().expect("the session is open");
                writeln!(stdin, "{}", serde_json::json!({ "command": command })).and_then(|()| stdin.flush()).expect("send");
                let mut answer = String::new();
                stdout.read_line(&mut answer).expect("read the answer");
                let v: Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("the client said {answer:?} ({e})"));
                assert_eq!(v["error"], false, "the call failed: {v}");
                Step {
                    code: v["exit_code"].as_i64(),
                    stdout: v["stdout"].as_str().unwrap_or("").to_string(),
                    notes: v["text"].as_str().unwrap_or("").to_string(),
                }
            }
        };
        eprintln!("--- step ({}):\n{script}\n{step}\n", self.backend);
        step
    }

    fn end(&mut self) {
        let Some((mut child, stdin, _)) = self.session.take() else { return };
        drop(stdin);
        let start = Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the MCP client did not end within 60 s of its stdin closing");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some((child, _, _)) = &mut self.session {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A command that changes nothing in the zone: the run or call whose walks record the tree.
const HARMLESS: &str = "cd /out && ls -R >/dev/null && echo looked";

/// The attack, in one command: the three plants (python3 is the host's, `image: host`), the
/// clock tried, every time set back.
fn attack() -> String {
    let python = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
# RENAME_EXCHANGE (2): stage/ and tools/ swap places, each the same object as before.
r = libc.renameat2(-100, b"stage", -100, b"tools", 2)
print("EXCHANGED" if r == 0 else "EXCHANGE-FAILED %d" % ctypes.get_errno())
# O_TMPFILE, then linkat(AT_SYMLINK_FOLLOW) through /proc: a name given to a file made nameless.
d = os.open("d2/d1", os.O_RDONLY | os.O_DIRECTORY)
fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o755, dir_fd=d)
os.write(fd, b"echo tmpfile-envrc\n")
os.link("/proc/self/fd/%d" % fd, ".envrc", dst_dir_fd=d, follow_symlinks=True)
print("LINKED")
# The same inode number for a new directory at a recorded path: files are made until one
# gets the old number, which is freed just before the directory is made.
old = os.stat("reuse/x").st_ino
same = False
for attempt in range(20):
    os.rmdir("reuse/x")
    made = []
    for i in range(256):
        n = "reuse/f%d-%d" % (attempt, i)
        open(n, "w").close()
        if os.stat(n).st_ino == old:
            os.unlink(n)
            break
        made.append(n)
    os.mkdir("reuse/x")
    for n in made:
        os.unlink(n)
    if os.stat("reuse/x").st_ino == old:
        same = True
        break
print("REUSED" if same else "NOT-REUSED")
with open("reuse/x/.envrc", "w") as f:
    f.write("echo reused-envrc\n")
"#;
    format!(
        "set -e\ncd /out\npython3 - <<'PY'\n{python}\nPY\n\
         if date -s @{OLD} >/dev/null 2>&1; then echo CLOCK-SET; else echo CLOCK-REFUSED; fi\n\
         for p in tools/run.sh tools stage d2/d1/.envrc d2/d1 d2 reuse/x/.envrc reuse/x reuse .; do touch -h -d @{OLD} \"$p\"; done\n\
         for p in tools/run.sh d2/d1/.envrc reuse/x/.envrc; do [ -e \"$p\" ] && echo \"PLANTED $p\"; done; true"
    )
}

fn attacks(backend: &'static str, way: Way) {
    let s = Scratch::new(&["tools/run.sh"], false);
    s.tree();
    let Some(mut w) = Worker::start(&s, backend, way) else { return };
    let looked = w.step(HARMLESS);
    assert_eq!(looked.code, Some(0), "{looked}");
    assert!(!looked.notes.contains("moved aside"), "the tree as made holds nothing to move: {looked}");
    assert!(s.in_place("stage/run.sh"), "nothing protects stage/run.sh: {looked}");
    let step = w.step(&attack());
    assert_eq!(step.code, Some(0), "{step}");
    for line in ["EXCHANGED", "LINKED", "CLOCK-REFUSED", "PLANTED tools/run.sh", "PLANTED d2/d1/.envrc", "PLANTED reuse/x/.envrc"] {
        assert!(step.stdout.lines().any(|l| l == line), "{line} missing: {step}");
    }
    if !step.stdout.contains("REUSED") || step.stdout.contains("NOT-REUSED") {
        eprintln!("note: the file system gave the new directory another inode number; the case ran as a plain re-made directory");
    }
    s.assert_moved_aside("tools/run.sh", "exchanged-run-sh", &step);
    s.assert_moved_aside("d2/d1/.envrc", "tmpfile-envrc", &step);
    s.assert_moved_aside("reuse/x/.envrc", "reused-envrc", &step);
    w.end();
}

/// The records are out of the worker's reach even when its zone is the project directory.
fn records_out_of_reach(backend: &'static str) {
    let s = Scratch::new(&[], true);
    std::fs::create_dir_all(s.proj().join("d/e")).expect("mkdir");
    support::give_to_worker(&s.root);
    std::thread::sleep(SETTLE);
    let first = support::workcell_sh(&s.proj(), backend, &[], "true").output().expect("run");
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let dir = s.proj().join(".workcell/looked");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir).expect("records kept").flatten().map(|e| e.path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    let script = format!(
        "cd /w; for t in \\\n\
         'printf {{}} > .workcell/looked/{name}' \\\n\
         'rm -f .workcell/looked/{name}' \\\n\
         'mkdir -p .workcell/looked2' \\\n\
         'mv .workcell/looked .workcell/l2' \\\n\
         'mv .workcell .wc2' \\\n\
         'ln -s /tmp .workcell/x'; do if sh -c \"$t\" 2>/dev/null; then echo \"DID $t\"; fi; done; echo tried"
    );
    let o = support::workcell_sh(&s.proj(), backend, &[], &script).output().expect("run");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("tried") && !stdout.contains("DID"), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    let after = std::fs::read(&files[0]).expect("still there");
    let v: Value = serde_json::from_slice(&after).expect("workcell's own records");
    assert!(v["looks"].as_array().is_some_and(|l| !l.is_empty()), "{v}");
}

macro_rules! cases {
    ($module:ident, $backend:literal) => {
        mod $module {
            use super::*;

            #[test]
            fn exchange_tmpfile_inode_reuse_across_runs() {
                if support::backend_ready($backend) {
                    attacks($backend, Way::Runs);
                }
            }

            #[test]
            fn exchange_tmpfile_inode_reuse_in_a_session() {
                if support::backend_ready($backend) {
                    attacks($backend, Way::Session);
                }
            }

            #[test]
            fn records_are_out_of_the_workers_reach() {
                if support::backend_ready($backend) {
                    records_out_of_reach($backend);
                }
            }
        }
    };
}

cases!(bwrap, "bwrap");
cases!(docker, "docker");
