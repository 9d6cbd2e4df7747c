//! bwrap's side channels of one run, and the cgroup v2 handshake (written once: the
//! supervision loop drives it for every run).
//!
//! `--json-status-fd`: bwrap writes a JSON object with the sandbox's init pid once the
//! sandbox is set up, and one with the command's exit code when it ran. `--block-fd`: the
//! sandbox waits before starting the command until a byte arrives. Meanwhile workcell moves
//! bwrap and the init into the run's cgroup (v2, [`RunCgroup::attach`]) and, for a proxied
//! network, opens the egress proxy's port inside the sandbox ([`super::netns`]) and starts
//! serving it; only then is the sandbox released, so every process of the worker starts
//! inside its limits and finds the proxy listening. A sandbox that could not be prepared
//! stays blocked until it is killed: nothing of the worker ever runs unlimited or without
//! its proxy.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use super::netns::{listen_inside, NetnsError};
use super::BwrapError;
use crate::backend::cgroup::{CgroupError, RunCgroup};
use crate::backend::egress::{EgressProxy, Peers, PROXY_PORT};
use crate::backend::ServiceError;

/// How long to wait for the sandbox's processes to disappear after killing it, and for the
/// rest of bwrap's status once it exited.
pub(super) const KILL_WAIT: Duration = Duration::from_secs(5);

/// Why a sandbox could not be prepared while it waited.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("cannot enforce the run's limits: {0}")]
    Cgroup(#[from] CgroupError),
    #[error("cannot give the worker its egress proxy: {0}")]
    Egress(#[from] NetnsError),
    #[error("the egress proxy could not start: {0}")]
    Serve(#[source] ServiceError),
}

/// What bwrap reported about its sandbox once it was set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reported {
    /// The sandbox's init, as a host pid.
    pub(super) pid: i32,
    pub(super) pid_ns: Option<u64>,
    pub(super) net_ns: Option<u64>,
}

/// The parent's ends of bwrap's side channels.
pub(super) struct Channels<'a> {
    /// Kept open until the run is over: bwrap reports the exit code there at the end, and a
    /// closed pipe would kill it with SIGPIPE.
    pub(super) status: StatusPipe,
    /// The write end of `--block-fd` while the sandbox waits for it (cgroup v2, egress).
    block: Option<OwnedFd>,
    /// The block pipe of a sandbox that could not be prepared: closing it would release the
    /// sandbox, so it stays open until the channels are dropped.
    held_shut: Option<OwnedFd>,
    /// The proxy to serve on the sandbox's loopback before it is released.
    egress: Option<&'a dyn EgressProxy>,
}

impl<'a> Channels<'a> {
    /// Creates the pipes and names them on `argv` (after argv\[0\]): the status pipe, and the
    /// block pipe when `cgroup` takes its processes only after the spawn (v2) or `egress` must
    /// listen inside first. Returns the channels and bwrap's ends of the pipes, for the spawn
    /// to pass on.
    pub(super) fn open(
        argv: &mut Vec<OsString>,
        cgroup: Option<&RunCgroup>,
        egress: Option<&'a dyn EgressProxy>,
    ) -> Result<(Channels<'a>, Vec<OwnedFd>), BwrapError> {
        let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(BwrapError::Pipe);
        let (status_r, status_w) = pipe()?;
        let mut args = vec![OsString::from("--json-status-fd"), status_w.as_raw_fd().to_string().into()];
        let mut theirs = vec![status_w];
        let block = if cgroup.is_some_and(RunCgroup::needs_attach) || egress.is_some() {
            let (block_r, block_w) = pipe()?;
            args.extend([OsString::from("--block-fd"), block_r.as_raw_fd().to_string().into()]);
            theirs.push(block_r);
            Some(block_w)
        } else {
            None
        };
        argv.splice(1..1, args);
        Ok((Channels { status: StatusPipe::new(status_r), block, held_shut: None, egress }, theirs))
    }

    /// bwrap reported its sandbox: with a sandbox waiting on the block pipe, moves bwrap and
    /// the init into `cgroup`, opens and serves the egress proxy's port inside, and releases
    /// the sandbox. On failure the sandbox stays blocked, and the caller must kill it.
    pub(super) fn started(&mut self, cgroup: Option<&RunCgroup>, bwrap_pid: i32, sandbox: Reported) -> Result<(), AttachError> {
        let Some(w) = self.block.take() else { return Ok(()) };
        let prepared = (|| -> Result<(), AttachError> {
            if let Some(cg) = cgroup.filter(|cg| cg.needs_attach()) {
                cg.attach(bwrap_pid)?;
                cg.attach(sandbox.pid)?;
            }
            if let Some(proxy) = self.egress {
                let listener = listen_inside(sandbox.pid, sandbox.net_ns, PROXY_PORT)?;
                // Any peer: the socket exists only in the worker's own network namespace.
                proxy.serve(listener, Peers::Any).map_err(AttachError::Serve)?;
            }
            Ok(())
        })();
        match prepared {
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

    /// Reads what the pipe holds now; returns what bwrap reported about its sandbox when
    /// that came in this read.
    pub(super) fn read_available(&mut self) -> Option<Reported> {
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
    fn parse(&mut self) -> Option<Reported> {
        let mut started = None;
        let mut stream = serde_json::Deserializer::from_slice(&self.buf).into_iter::<serde_json::Value>();
        let mut consumed = 0;
        while let Some(Ok(doc)) = stream.next() {
            consumed = stream.byte_offset();
            if let Some(pid) = doc.get("child-pid").and_then(serde_json::Value::as_i64) {
                let ns = |k: &str| doc.get(k).and_then(serde_json::Value::as_u64);
                started = Some(Reported { pid: pid as i32, pid_ns: ns("pid-namespace"), net_ns: ns("net-namespace") });
            }
            if let Some(code) = doc.get("exit-code").and_then(serde_json::Value::as_i64) {
                self.exit_code = Some(code as i32);
            }
        }
        self.buf.drain(..consumed);
        started
    }
}
