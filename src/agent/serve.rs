//! The agent's side, inside the sandbox: connect, say hello, then run one command per
//! request until the connection closes. Each command is a process group of its own with its
//! own timeout and bounded output; when it ends (or its time is up), every process in the
//! sandbox but the agent and its ancestors is killed ([`super::sweep`]), so nothing a call
//! starts outlives it, and every wait after that is bounded: the agent always answers.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::sweep::{self, Keep};
use super::{read_frame, write_frame, FrameError, Hello, Request, Response};
use crate::backend::capture::{Bounded, OUTPUT_CAP};

/// How long the agent keeps reading a command's output once the command and everything
/// else in the sandbox was killed. Only a writer the kernel could not end at once (or a pipe
/// end in flight in a socket) keeps a pipe open that long; the answer then goes without the
/// rest, and says so.
const DRAIN_FOR: Duration = Duration::from_secs(2);

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
    let keep = Keep::read();
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

fn spawn_failed(program: &str, e: &std::io::Error) -> Response {
    let (code, what) = match e.kind() {
        std::io::ErrorKind::NotFound => (crate::backend::EXIT_NOT_FOUND, "not found"),
        std::io::ErrorKind::PermissionDenied => (crate::backend::EXIT_NOT_EXECUTABLE, "permission denied"),
        _ => (crate::backend::EXIT_NOT_EXECUTABLE, "cannot be executed"),
    };
    Response { exit_code: code, stderr: format!("workcell: {}: {what} ({e})\n", crate::term::escape(program)).into_bytes(), ..Response::default() }
}

/// Reads a stream to its end, keeping [`OUTPUT_CAP`] bytes (the rest is read and counted,
/// so the command never blocks on a full pipe), or until the time set in `until` (once the
/// command was ended; a writer that outlives that must not hold the answer back).
fn drain<S: Read + AsFd + Send + 'static>(stream: Option<S>, until: Arc<OnceLock<Instant>>) -> std::thread::JoinHandle<(Bounded, bool)> {
    std::thread::spawn(move || {
        let mut kept = Bounded::new(OUTPUT_CAP);
        let Some(mut s) = stream else { return (kept, true) };
        let mut buf = [0u8; 16384];
        loop {
            // Until the deadline is set, wake now and then to look for it.
            let wait = until.get().map_or(Duration::from_millis(100), |t| t.saturating_duration_since(Instant::now()).min(Duration::from_millis(100)));
            if until.get().is_some() && wait.is_zero() {
                return (kept, false);
            }
            let mut fds = [rustix::event::PollFd::new(&s, rustix::event::PollFlags::IN)];
            let timeout = rustix::event::Timespec { tv_sec: wait.as_secs() as i64, tv_nsec: i64::from(wait.subsec_nanos()) };
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {}
                Err(_) => return (kept, true),
            }
            // Readable or hung up: a read does not block.
            match s.read(&mut buf) {
                Ok(0) => return (kept, true),
                Ok(n) => kept.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return (kept, true),
            }
        }
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

/// Waits for `child` within `timeout_ms`; when the time is up (or at a hangup, when
/// `hangup` is given) kills its group and everything else in the sandbox but `keep` (a
/// process that left the group, or never was in it, goes too). Returns its status and
/// whether the timeout ended it.
fn wait(child: std::process::Child, timeout_ms: u64, hangup: Option<UnixStream>, keep: &Keep) -> (std::io::Result<std::process::ExitStatus>, bool) {
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
        sweep::kill_now(keep);
    };
    // After a SIGKILL the command is gone at once unless the kernel holds it (uninterruptible
    // sleep): the answer then goes without its status rather than never.
    let exited = |rx: &mpsc::Receiver<Event>| {
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(Event::Exited(s)) => break s,
                Ok(Event::Hangup) => continue,
                Err(_) => break Err(std::io::ErrorKind::TimedOut.into()),
            }
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
fn run_stdio(request: Request, stream: &UnixStream, keep: &Keep) -> i32 {
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
                let (status, timed_out) = wait(child, request.timeout_ms, stream.try_clone().ok(), keep);
                let leftovers_killed = sweep::sweep(keep);
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

fn run(request: Request, keep: &Keep) -> Response {
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
    let until = Arc::new(OnceLock::new());
    let (out, err) = (drain(child.stdout.take(), until.clone()), drain(child.stderr.take(), until.clone()));
    let (status, timed_out) = wait(child, request.timeout_ms, None, keep);
    // Whatever it started, in its group or not, goes with it: only then do the pipes end.
    let leftovers_killed = sweep::sweep(keep);
    let _ = until.set(Instant::now() + DRAIN_FOR);
    let ((out, out_closed), (mut err, err_closed)) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    if !(out_closed && err_closed) {
        err.push(format!("\nworkcell: the command's output was still open {} s after it ended; the rest was not read\n", DRAIN_FOR.as_secs()).as_bytes());
    }
    // Done by now unless something still holds the input open without reading it: it is
    // left behind then (its thread ends at that writer's end), never waited for.
    if writer.is_finished() {
        let _ = writer.join();
    }
    let exit_code = exit_code(status, timed_out);
    Response { exit_code, timed_out, stdout: out.kept, stderr: err.kept, stdout_cut: out.cut, stderr_cut: err.cut, leftovers_killed }
}
