//! bwrap's side channels of one run, and the cgroup v2 handshake (written once: the
//! supervision loop drives it for every run).
//!
//! `--json-status-fd`: bwrap writes a JSON object with the sandbox's init pid once the
//! sandbox is set up, and one with the command's exit code when it ran. `--block-fd`: with a
//! cgroup v2 the sandbox waits before starting the command until a byte arrives, while
//! workcell moves bwrap and the init into the run's cgroup ([`RunCgroup::attach`]); only then
//! is it released, so every process of the worker starts inside. A sandbox that could not be
//! moved in stays blocked until it is killed: nothing of the worker ever runs unlimited.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::BwrapError;
use crate::backend::cgroup::{CgroupError, RunCgroup};

/// How long to wait for the sandbox's processes to disappear after killing it, and for the
/// rest of bwrap's status once it exited.
pub(super) const KILL_WAIT: Duration = Duration::from_secs(5);

/// Why a sandbox could not be moved into the run's cgroup.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
}

/// The parent's ends of bwrap's side channels.
pub(super) struct Channels {
    /// Kept open until the run is over: bwrap reports the exit code there at the end, and a
    /// closed pipe would kill it with SIGPIPE.
    pub(super) status: StatusPipe,
    /// The write end of `--block-fd` while the sandbox waits for it (cgroup v2 only).
    block: Option<OwnedFd>,
    /// The block pipe of a sandbox that could not be moved into its cgroup: closing it would
    /// release the sandbox, so it stays open until the channels are dropped.
    held_shut: Option<OwnedFd>,
}

impl Channels {
    /// Creates the pipes and names them on `argv` (after argv\[0\]): the status pipe, and the
    /// block pipe when `cgroup` takes its processes only after the spawn (v2). Returns the
    /// channels and bwrap's ends of the pipes, for the spawn to pass on.
    pub(super) fn open(argv: &mut Vec<OsString>, cgroup: Option<&RunCgroup>) -> Result<(Channels, Vec<OwnedFd>), BwrapError> {
        let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(BwrapError::Pipe);
        let (status_r, status_w) = pipe()?;
        let mut args = vec![OsString::from("--json-status-fd"), status_w.as_raw_fd().to_string().into()];
        let mut theirs = vec![status_w];
        let block = if cgroup.is_some_and(RunCgroup::needs_attach) {
            let (block_r, block_w) = pipe()?;
            args.extend([OsString::from("--block-fd"), block_r.as_raw_fd().to_string().into()]);
            theirs.push(block_r);
            Some(block_w)
        } else {
            None
        };
        argv.splice(1..1, args);
        Ok((Channels { status: StatusPipe::new(status_r), block, held_shut: None }, theirs))
    }

    /// bwrap reported its sandbox's init: with a sandbox waiting on the block pipe, moves bwrap
    /// and the init into `cgroup` and releases the sandbox. On failure the sandbox stays
    /// blocked, and the caller must kill it.
    pub(super) fn started(&mut self, cgroup: Option<&RunCgroup>, bwrap_pid: i32, init_pid: i32) -> Result<(), CgroupError> {
        let (Some(cg), Some(w)) = (cgroup, self.block.take()) else { return Ok(()) };
        match cg.attach(bwrap_pid).and_then(|()| cg.attach(init_pid)) {
            Ok(()) => {
                let _ = rustix::io::write(&w, b"1");
                Ok(())
            }
            Err(e) => {
                self.held_shut = Some(w);
                Err(e)
            }
        }
    }
}

/// bwrap's `--json-status-fd` stream: a JSON object with the sandbox's init pid once it is
/// set up, and one with the command's exit code when it ran.
pub(super) struct StatusPipe {
    /// `None` once the pipe reached end of file.
    fd: Option<OwnedFd>,
    buf: Vec<u8>,
    exit_code: Option<i32>,
}

impl StatusPipe {
    fn new(fd: OwnedFd) -> StatusPipe {
        let fd = rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK).is_ok().then_some(fd);
        StatusPipe { fd, buf: Vec::new(), exit_code: None }
    }

    pub(super) fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }

    pub(super) fn exit_code(&self) -> Option<i32> {
        self.exit_code
    }

    /// Reads what the pipe holds now; returns the init pid and pid namespace when bwrap
    /// reported them in this read.
    pub(super) fn read_available(&mut self) -> Option<(i32, Option<u64>)> {
        let Some(fd) = &self.fd else { return None };
        let mut chunk = [0u8; 1024];
        loop {
            match rustix::io::read(fd, &mut chunk) {
                Ok(0) => {
                    self.fd = None;
                    break;
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(rustix::io::Errno::INTR) => {}
                // WouldBlock, or a broken pipe: nothing more for now.
                Err(rustix::io::Errno::AGAIN) => break,
                Err(_) => {
                    self.fd = None;
                    break;
                }
            }
        }
        self.parse()
    }

    /// Reads until end of file (bwrap has exited, so the write end is closed), for at
    /// most [`KILL_WAIT`] in case a sandbox process kept it open.
    pub(super) fn read_to_end(&mut self) {
        let until = Instant::now() + KILL_WAIT;
        while let Some(fd) = &self.fd {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
            let timeout = rustix::event::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
            self.read_available();
        }
    }

    /// Consumes every complete JSON document in the buffer.
    fn parse(&mut self) -> Option<(i32, Option<u64>)> {
        let mut started = None;
        let mut stream = serde_json::Deserializer::from_slice(&self.buf).into_iter::<serde_json::Value>();
        let mut consumed = 0;
        while let Some(Ok(doc)) = stream.next() {
            consumed = stream.byte_offset();
            if let Some(pid) = doc.get("child-pid").and_then(serde_json::Value::as_i64) {
                started = Some((pid as i32, doc.get("pid-namespace").and_then(serde_json::Value::as_u64)));
            }
            if let Some(code) = doc.get("exit-code").and_then(serde_json::Value::as_i64) {
                self.exit_code = Some(code as i32);
            }
        }
        self.buf.drain(..consumed);
        started
    }
}
