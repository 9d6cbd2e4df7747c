//! The agent's side, inside the sandbox: connect, say hello, then run one command per
//! request until the connection closes. Each command is a process group of its own with its
//! own timeout and bounded output; when it ends, every process it left in the sandbox is
//! killed too, so nothing a call starts outlives it.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rustix::process::{Pid, Signal};

use super::{read_frame, write_frame, FrameError, Hello, Request, Response};
use crate::backend::capture::{Bounded, OUTPUT_CAP};

/// How long the agent keeps killing what a command left behind (each round a fresh look at
/// /proc; a process that forks as fast as it is killed is bounded by the process limit and
/// loses: a killed process forks no more).
const KILL_FOR: Duration = Duration::from_secs(5);

/// `workcell __agent [--wake FIFO] SOCKET`: serves until workcell closes the connection.
/// Exit status 0 then; 125 when it could not connect or the connection broke. With `wake`
/// (a pooled sandbox, [`crate::pool`]) it first waits, for as long as it takes, until
/// workcell opens that FIFO: only then is there a socket to connect to.
pub fn main(socket: &Path, wake: Option<&Path>) -> i32 {
    // Not dumpable: the worker's commands run as the same uid, and could otherwise open the
    // agent's connection through /proc/PID/fd or trace it.
    if let Err(e) = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable) {
        eprintln!("workcell agent: cannot make itself undumpable: {e}");
        return 125;
    }
    if let Some(fifo) = wake {
        // Blocks until a writer opens it; the descriptor is not needed after that.
        if let Err(e) = std::fs::File::open(fifo) {
            eprintln!("workcell agent: cannot wait on {}: {e}", fifo.display());
            return 125;
        }
    }
    let mut stream = match UnixStream::connect(socket) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("workcell agent: cannot connect to {}: {e}", socket.display());
            return 125;
        }
    };
    let keep = ancestors();
    if let Err(e) = write_frame(&mut stream, &Hello { agent: env!("CARGO_PKG_VERSION").into(), pid: std::process::id() }) {
        eprintln!("workcell agent: {e}");
        return 125;
    }
    loop {
        let request: Request = match read_frame(&mut stream) {
            Ok(r) => r,
            Err(FrameError::Closed) => return 0,
            Err(e) => {
                eprintln!("workcell agent: {e}");
                return 125;
            }
        };
        if request.stdio {
            return run_stdio(request, &stream, &keep);
        }
        let response = run(request, &keep);
        if write_frame(&mut stream, &response).is_err() {
            return 0;
        }
    }
}

/// The agent and the processes above it (the sandbox's init): never killed.
fn ancestors() -> HashSet<u32> {
    let mut keep = HashSet::from([std::process::id(), 1]);
    let mut pid = std::process::id();
    for _ in 0..64 {
        match parent_of(pid) {
            Some(p) if p > 1 && keep.insert(p) => pid = p,
            _ => break,
        }
    }
    keep
}

/// Fields of /proc/PID/stat after the command name: (state, ppid).
fn stat_of(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name is in parentheses and may hold anything: read after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn parent_of(pid: u32) -> Option<u32> {
    stat_of(pid).map(|(_, p)| p)
}

fn spawn_failed(program: &str, e: &std::io::Error) -> Response {
    let (code, what) = match e.kind() {
        std::io::ErrorKind::NotFound => (crate::backend::EXIT_NOT_FOUND, "not found"),
        std::io::ErrorKind::PermissionDenied => (crate::backend::EXIT_NOT_EXECUTABLE, "permission denied"),
        _ => (crate::backend::EXIT_NOT_EXECUTABLE, "cannot be executed"),
    };
    Response { exit_code: code, stderr: format!("workcell: {}: {what} ({e})\n", crate::term::escape(program)).into_bytes(), ..Response::default() }
}

/// Reads a stream to its end, keeping [`OUTPUT_CAP`] bytes (the rest is read and counted,
/// so the command never blocks on a full pipe).
fn drain(stream: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Bounded> {
    std::thread::spawn(move || {
        let mut kept = Bounded::new(OUTPUT_CAP);
        if let Some(mut s) = stream {
            let mut buf = [0u8; 16384];
            while let Ok(n @ 1..) = s.read(&mut buf) {
                kept.push(&buf[..n]);
            }
        }
        kept
    })
}

/// The command of `request`, in a process group of its own; `Err` holds the answer when it
/// cannot be started.
fn command(request: &Request) -> Result<Command, Response> {
    let Some((program, args)) = request.argv.split_first() else {
        return Err(spawn_failed("", &std::io::ErrorKind::NotFound.into()));
    };
    if !Path::new(&request.cwd).is_dir() {
        let text = format!("workcell: the working directory {} does not exist in the sandbox\n", crate::term::escape(&request.cwd));
        return Err(Response { exit_code: crate::backend::EXIT_NOT_EXECUTABLE, stderr: text.into_bytes(), ..Response::default() });
    }
    let mut cmd = Command::new(program);
    for name in &request.env_remove {
        cmd.env_remove(name);
    }
    cmd.args(args).envs(request.env.iter().map(|(k, v)| (k, v))).current_dir(&request.cwd).process_group(0);
    Ok(cmd)
}

/// What ended the wait for a command.
enum Event {
    Exited(std::io::Result<std::process::ExitStatus>),
    /// workcell's end of the connection closed (a warm run's workcell was killed).
    Hangup,
}

/// Waits for `child` within `timeout_ms`; kills its group when the time is up (or at a
/// hangup, when `hangup` is given). Returns its status and whether the timeout ended it.
fn wait(child: std::process::Child, timeout_ms: u64, hangup: Option<UnixStream>) -> (std::io::Result<std::process::ExitStatus>, bool) {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let exited = tx.clone();
    std::thread::spawn(move || {
        let _ = exited.send(Event::Exited(wait_reaping(child)));
    });
    if let Some(mut s) = hangup {
        std::thread::spawn(move || {
            // Nothing more is sent on a warm run's connection: any read that returns means
            // workcell is gone (or broke the protocol), and the command goes.
            let _ = s.read(&mut [0u8; 1]);
            let _ = tx.send(Event::Hangup);
        });
    }
    let first = match timeout_ms {
        super::NO_TIMEOUT => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        ms => rx.recv_timeout(Duration::from_millis(ms.max(1))),
    };
    let kill = || {
        if let Some(p) = Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process_group(p, Signal::KILL);
        }
    };
    let exited = |rx: &mpsc::Receiver<Event>| loop {
        match rx.recv() {
            Ok(Event::Exited(s)) => break s,
            Ok(Event::Hangup) => continue,
            Err(_) => break Err(std::io::ErrorKind::Other.into()),
        }
    };
    match first {
        Ok(Event::Exited(s)) => (s, false),
        Ok(Event::Hangup) => {
            kill();
            (exited(&rx), false)
        }
        Err(_) => {
            kill();
            (exited(&rx), true)
        }
    }
}

/// Waits for `child`, reaping every other child that ends meanwhile: as a pooled sandbox's
/// first process the agent inherits the command's orphans, and a zombie holds its place in
/// the process limit until it is reaped (in a cold run the container's init reaps it).
fn wait_reaping(child: std::process::Child) -> std::io::Result<std::process::ExitStatus> {
    let pid = child.id() as i32;
    // Dropping a `Child` leaves its process alone; it is reaped here.
    drop(child);
    loop {
        // Any child (`waitpid(-1)`): the command and its orphans are in process groups of
        // their own.
        match rustix::process::wait(rustix::process::WaitOptions::empty()) {
            Ok(Some((p, status))) if p.as_raw_nonzero().get() == pid => return Ok(std::process::ExitStatus::from_raw(status.as_raw())),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

fn exit_code(status: std::io::Result<std::process::ExitStatus>, timed_out: bool) -> i32 {
    match status {
        _ if timed_out => crate::backend::EXIT_TIMEOUT,
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
        Err(_) => crate::backend::EXIT_INTERNAL,
    }
}

/// A warm run's one command: its output straight to workcell's pipes, its end answered,
/// then the agent exits and its sandbox with it.
fn run_stdio(request: Request, stream: &UnixStream, keep: &HashSet<u32>) -> i32 {
    let (out, err) = match super::recv_stdio(stream) {
        Ok(fds) => fds,
        Err(e) => {
            eprintln!("workcell agent: {e}");
            return 125;
        }
    };
    let response = match command(&request) {
        Err(r) => r,
        Ok(mut cmd) => match cmd.stdin(Stdio::null()).stdout(Stdio::from(out)).stderr(Stdio::from(err)).spawn() {
            Err(e) => spawn_failed(&request.argv[0], &e),
            Ok(child) => {
                // Our copies of the pipes went into the spawn and are closed with `cmd`.
                drop(cmd);
                let (status, timed_out) = wait(child, request.timeout_ms, stream.try_clone().ok());
                let leftovers_killed = kill_leftovers(keep);
                Response { exit_code: exit_code(status, timed_out), timed_out, leftovers_killed, ..Response::default() }
            }
        },
    };
    if write_frame(&mut &*stream, &response).is_ok() {
        // The sandbox stays until workcell has looked at it (an OOM kill is told by the
        // daemon only while the container exists) and closes the connection.
        let _ = (&*stream).read(&mut [0u8; 1]);
    }
    0
}

fn run(request: Request, keep: &HashSet<u32>) -> Response {
    let mut cmd = match command(&request) {
        Ok(c) => c,
        Err(r) => return r,
    };
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return spawn_failed(&request.argv[0], &e),
    };
    let stdin = child.stdin.take();
    let input = request.stdin;
    // A command that does not read its input gets EPIPE once it is gone, never a hang.
    let writer = std::thread::spawn(move || {
        if let Some(mut s) = stdin {
            let _ = s.write_all(&input);
        }
    });
    let (out, err) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let (status, timed_out) = wait(child, request.timeout_ms, None);
    // Whatever it started, in its group or not, goes with it: only then do the pipes end.
    let leftovers_killed = kill_leftovers(keep);
    let (out, err) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    let _ = writer.join();
    let exit_code = exit_code(status, timed_out);
    Response { exit_code, timed_out, stdout: out.kept, stderr: err.kept, stdout_cut: out.cut, stderr_cut: err.cut, leftovers_killed }
}

/// Kills every process in the sandbox but the agent and its ancestors, until none is left;
/// returns how many distinct processes were killed. Reaps what is the agent's to reap
/// (it is the orphans' parent when it runs as pid 1).
fn kill_leftovers(keep: &HashSet<u32>) -> u32 {
    let mut killed = HashSet::new();
    let until = std::time::Instant::now() + KILL_FOR;
    while std::time::Instant::now() < until {
        reap();
        let mut alive = false;
        let Ok(dir) = std::fs::read_dir("/proc") else { break };
        for pid in dir.flatten().filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()) {
            if keep.contains(&pid) || matches!(stat_of(pid), Some(('Z' | 'X', _)) | None) {
                continue;
            }
            if let Some(p) = Pid::from_raw(pid as i32) {
                if rustix::process::kill_process(p, Signal::KILL).is_ok() {
                    alive = true;
                    killed.insert(pid);
                }
            }
        }
        if !alive {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    reap();
    killed.len() as u32
}

/// Collects exited children without waiting (any child: `waitpid(None)` would look only in
/// the agent's own process group, and each command has a group of its own).
fn reap() {
    while let Ok(Some(_)) = rustix::process::wait(rustix::process::WaitOptions::NOHANG) {}
}
