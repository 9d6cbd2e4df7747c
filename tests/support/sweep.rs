//! The scaffolding of the tests that attack the sweep after each run or `shell` call
//! (tests/sweep_incremental.rs, tests/sweep_incremental_attack.rs): a project whose zone is a
//! tree left alone long enough for its records to be trusted ([`Scratch`]), the worker that
//! plants in it as separate `workcell run`s or as calls of one `workcell mcp` session
//! ([`Worker`], [`Way`]), and what the sweep moved aside into the zone's quarantine.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The time the worker sets its plants and their directories back to (2017-07-14).
pub const OLD: u64 = 1_500_000_000;

/// How long a directory is left unchanged before the run or call that records it. A walk
/// trusts a record of a directory only when the directory's ctime was older than that walk
/// by a margin (`hostrun::looked::MARGIN_NS`: a change in the same clock tick as a listing
/// may not move the ctime); without this wait every directory the test just made would be
/// listed again anyway, and the attacks would not meet a record at all.
pub const SETTLE: Duration = Duration::from_nanos(workcell::hostrun::looked::MARGIN_NS as u64 + 500_000_000);

/// A project directory (`proj/`, the runs' cwd) whose zone is `out`, `proj/out` (or, made
/// with [`Scratch::whole`], `w`, the project directory itself, at `/w`).
pub struct Scratch {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    whole: bool,
}

impl Scratch {
    /// `protect`: the project's `sandbox.protect` entries.
    pub fn new(protect: &[&str]) -> Scratch {
        Scratch::made(protect, false)
    }

    /// The zone `w` is the whole project directory.
    pub fn whole(protect: &[&str]) -> Scratch {
        Scratch::made(protect, true)
    }

    fn made(protect: &[&str], whole: bool) -> Scratch {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir_all(root.join("proj/out")).expect("mkdir");
        let s = Scratch { _dir: dir, root, whole };
        s.configure(protect);
        s
    }

    pub fn proj(&self) -> PathBuf {
        self.root.join("proj")
    }

    pub fn out(&self) -> PathBuf {
        self.proj().join("out")
    }

    /// `workcell.yaml`: the zone (writes and deletes pre-approved for the MCP session),
    /// `image: host`, and `protect` when not empty.
    pub fn configure(&self, protect: &[&str]) {
        let protect = if protect.is_empty() { String::new() } else { format!("  protect: [{}]\n", protect.join(", ")) };
        let zone = if self.whole { "w: {path: ., mode: rw" } else { "out: {path: ./out, mode: rw" };
        let config = format!("sandbox:\n{protect}  zones:\n    {zone}, approval: {{write: preApproved, delete: preApproved}}}}\ndefaults:\n  image: host\n");
        std::fs::write(self.proj().join("workcell.yaml"), config).expect("workcell.yaml");
    }

    /// A tree of `levels` levels of `d0`..`d{fanout - 1}` in the zone `out`, a `README.md` in
    /// each leaf (`leaf A B …`).
    pub fn leaves(&self, levels: u32, fanout: usize) {
        let out = self.out();
        for n in 0..fanout.pow(levels) {
            let digits: Vec<usize> = (0..levels).rev().map(|l| n / fanout.pow(l) % fanout).collect();
            let leaf = digits.iter().fold(out.clone(), |p, d| p.join(format!("d{d}")));
            std::fs::create_dir_all(&leaf).expect("mkdir");
            let names: Vec<String> = digits.iter().map(ToString::to_string).collect();
            std::fs::write(leaf.join("README.md"), format!("leaf {}\n", names.join(" "))).expect("write");
        }
    }

    /// What was made becomes the worker's, every time in the zone `out` is set back to
    /// [`OLD`], and the tree is left alone for [`SETTLE`].
    pub fn settle_tree(&self) {
        super::give_to_worker(&self.root);
        let st = Command::new("find").arg(self.out()).args(["-exec", "touch", "-h", "-d", &format!("@{OLD}"), "{}", "+"]).status().expect("find");
        assert!(st.success(), "touch the tree");
        std::thread::sleep(SETTLE);
    }

    /// Whether `rel` is in place in the zone `out` (as anything, a dangling link too).
    pub fn in_place(&self, rel: &str) -> bool {
        self.out().join(rel).symlink_metadata().is_ok()
    }

    /// Every regular file in the zone's quarantine (any run's), with its metadata.
    pub fn quarantine(&self) -> Vec<(PathBuf, std::fs::Metadata)> {
        let mut files = Vec::new();
        let mut dirs = vec![self.out().join(".workcell/quarantine")];
        while let Some(d) = dirs.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else { continue };
            for e in rd.flatten() {
                let Ok(md) = e.path().symlink_metadata() else { continue };
                if md.is_dir() {
                    dirs.push(e.path());
                } else if md.is_file() {
                    files.push((e.path(), md));
                }
            }
        }
        files
    }

    /// The files in the quarantine whose content holds `marker`.
    pub fn quarantined_holding(&self, marker: &str) -> Vec<PathBuf> {
        self.quarantine().into_iter().filter(|(p, _)| std::fs::read_to_string(p).is_ok_and(|t| t.contains(marker))).map(|(p, _)| p).collect()
    }

    /// `rel` (planted with content `marker`) is no longer in place, and is in the quarantine.
    pub fn assert_moved_aside(&self, rel: &str, marker: &str, step: &Step) {
        assert!(!self.in_place(rel), "{rel} stayed in place after the sweep: {step}");
        let held = self.quarantined_holding(marker);
        assert!(!held.is_empty(), "{rel} (holding {marker}) is not in .workcell/quarantine: {:?}; {step}", self.quarantine());
        assert!(held.iter().all(|p| p.starts_with(self.out().join(".workcell/quarantine"))));
        assert!(step.notes.contains("moved aside"), "what was moved aside is told: {step}");
    }

    /// `rel` is in place and holds `marker` (a control, or what no entry protects).
    pub fn assert_kept(&self, rel: &str, marker: &str, step: &Step) {
        let text = std::fs::read_to_string(self.out().join(rel)).unwrap_or_else(|e| panic!("{rel} is not in place ({e}): {step}"));
        assert!(text.contains(marker), "{rel} holds {text:?}, not {marker}: {step}");
    }
}

/// How the worker's commands come: one `workcell run` each, or one `shell` call each of one
/// `workcell mcp` session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Runs,
    Session,
}

/// What one run or call gave back.
pub struct Step {
    pub code: Option<i64>,
    pub stdout: String,
    /// The run's stderr, or the call's whole text (where what was moved aside is said).
    pub notes: String,
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {:?}\n--- stdout\n{}\n--- notes\n{}", self.code, self.stdout, self.notes)
    }
}

/// The worker, as [`Way`] says.
pub struct Worker {
    backend: &'static str,
    proj: PathBuf,
    session: Option<Session>,
}

/// A client of `workcell mcp` (the MCP SDK) reading commands as JSON lines on its stdin and
/// answering each with one JSON line.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// The session's client: one `shell` call per line read, its result as one line.
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

impl Worker {
    /// The worker in `s`'s project; `None` when the session's client is missing here (a skip
    /// with a note; under `CI` a failure, see `support::python_ready`).
    pub fn start(s: &Scratch, backend: &'static str, way: Way) -> Option<Worker> {
        let session = match way {
            Way::Runs => None,
            Way::Session => {
                if !super::python_ready(&["mcp"]) {
                    return None;
                }
                let mut child = Command::new(super::python())
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
                Some(Session { child, stdin, stdout })
            }
        };
        Some(Worker { backend, proj: s.proj(), session })
    }

    /// Runs `script` (sh, in the zone) as the worker: a run of its own, or the session's next
    /// `shell` call.
    pub fn step(&mut self, script: &str) -> Step {
        let step = match &mut self.session {
            None => {
                let o = super::workcell_sh(&self.proj, self.backend, &[], script).output().expect("start workcell");
                Step {
                    code: o.status.code().map(i64::from),
                    stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                    notes: String::from_utf8_lossy(&o.stderr).into_owned(),
                }
            }
            Some(s) => {
                // The shell tool refuses a command line that names a protected path itself
                // (a redirection, `mv`, `ln`, `touch`): a worker writes its script to a file
                // and runs that, which no rule reads. So does this one.
                let command = format!("cat > /tmp/step.sh <<'END-OF-STEP'\n{script}\nEND-OF-STEP\nsh /tmp/step.sh");
                let line = serde_json::json!({ "command": command }).to_string();
                let stdin = s.stdin.as_mut().expect("the session is open");
                writeln!(stdin, "{line}").and_then(|()| stdin.flush()).expect("send the command");
                let mut answer = String::new();
                s.stdout.read_line(&mut answer).expect("read the answer");
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

    /// Ends the session (the client closes it and exits); nothing for runs.
    pub fn end(&mut self) {
        let Some(mut s) = self.session.take() else { return };
        drop(s.stdin.take());
        let start = Instant::now();
        while s.child.try_wait().expect("wait").is_none() {
            if start.elapsed() > Duration::from_secs(60) {
                let _ = s.child.kill();
                let _ = s.child.wait();
                panic!("the MCP client did not end within 60 s of its stdin closing");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(s) = &mut self.session {
            let _ = s.child.kill();
            let _ = s.child.wait();
        }
    }
}

/// One test per `NAME: BODY(ARGS);` line on each backend of `[MODULE = "BACKEND", …]`, in a
/// module of that name, each running `BODY(BACKEND, ARGS)` when the backend is ready (and
/// failing instead of skipping when CI requires it, see `support::backend_ready`).
#[allow(unused_macros)]
macro_rules! sweep_cases {
    ([$($module:ident = $backend:literal),* $(,)?] $tests:tt) => {
        $( $crate::support::sweep::sweep_cases!(@one $module, $backend, $tests); )*
    };
    (@one $module:ident, $backend:literal, { $($test:ident: $($body:ident)::+ ($($arg:expr),* $(,)?);)* }) => {
        mod $module {
            use super::*;
            $(
                #[test]
                fn $test() {
                    if $crate::support::backend_ready($backend) {
                        $($body)::+($backend, $($arg),*);
                    }
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use sweep_cases;
