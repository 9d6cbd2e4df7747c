//! The exec agent of a session sandbox: a small server, this very binary started as the
//! sandbox's first process (`workcell __agent SOCKET`), that runs one command per request
//! inside the sandbox, so a call pays for a fork and an exec, not for a container or a set
//! of namespaces.
//!
//! Reaching it: workcell listens on a Unix socket in a private directory mounted into the
//! sandbox; the agent connects to it when it starts, before any command of the worker
//! exists, and workcell then closes the listener and removes the socket file
//! (`run::resident`). The one connection is the only way to the agent: nothing in the
//! sandbox can connect again, and the agent is not dumpable, so the worker's commands
//! (the same uid) cannot open its descriptors through `/proc` or trace it.
//!
//! Frames both ways: a 4-byte big-endian length, then that many bytes of JSON.

pub mod host;
pub mod serve;
pub mod sweep;

use std::io::{Read, Write};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// Where the agent's directory, its socket and its program appear inside the sandbox: set by
/// the plan that binds them (`LaunchPlan::attach_agent`), so the plan need not look up here.
pub use crate::plan::{AGENT_PROGRAM as PROGRAM, AGENT_SOCKET_DIR as SOCKET_DIR, AGENT_SOCKET_NAME as SOCKET_NAME};
/// Largest frame either side reads: a request holds at most 1 MiB of stdin (base64) and
/// its words; a response two capped streams (base64).
pub const MAX_FRAME: usize = 4 << 20;

/// The agent's first frame: who it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub agent: String,
    /// Its pid inside the sandbox.
    pub pid: u32,
}

/// One command to run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub argv: Vec<String>,
    /// Added to the agent's own environment (the plan's) for this command.
    pub env: Vec<(String, String)>,
    pub cwd: String,
    /// Given on the command's standard input, then closed (base64).
    #[serde(with = "b64")]
    pub stdin: Vec<u8>,
    /// The command's time; [`NO_TIMEOUT`] for none.
    pub timeout_ms: u64,
    /// Names taken out of the agent's own environment first: a pooled sandbox's agent
    /// carries the environment of the plan it was started for, the command gets its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_remove: Vec<String>,
    /// The command's standard output and error are the two descriptors sent right after this
    /// frame ([`send_stdio`]), its input `/dev/null`, and nothing is captured: a warm
    /// `workcell run` ([`crate::pool`]). The agent serves no other request after it, and a
    /// closed connection kills the command (workcell was killed).
    #[serde(default)]
    pub stdio: bool,
}

/// [`Request::timeout_ms`] of a command without a timeout.
pub const NO_TIMEOUT: u64 = u64::MAX;

/// The agent's tasks while a warm run's command runs ([`Request::stdio`]): its own thread,
/// the one waiting for the command, the one watching workcell's connection. They count
/// against the sandbox's process limit (set in `plan`, which the docker backend reads).
pub use crate::plan::AGENT_STDIO_TASKS as STDIO_TASKS;

/// Sends `out` and `err` over `stream` (one byte carrying them), after a [`Request`] with
/// `stdio` set.
pub fn send_stdio(stream: &std::os::unix::net::UnixStream, out: std::os::fd::BorrowedFd<'_>, err: std::os::fd::BorrowedFd<'_>) -> std::io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let fds = [out, err];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    ancillary.push(SendAncillaryMessage::ScmRights(&fds));
    rustix::net::sendmsg(stream, &[std::io::IoSlice::new(b"F")], &mut ancillary, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Receives the two descriptors of [`send_stdio`].
pub fn recv_stdio(stream: &std::os::unix::net::UnixStream) -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut ancillary = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    rustix::net::recvmsg(stream, &mut [std::io::IoSliceMut::new(&mut byte)], &mut ancillary, RecvFlags::CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for message in ancillary.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = message {
            fds.extend(received);
        }
    }
    let mut fds = fds.into_iter();
    match (fds.next(), fds.next(), fds.next()) {
        (Some(out), Some(err), None) => Ok((out, err)),
        _ => Err(std::io::Error::other("expected the command's two output descriptors")),
    }
}

/// How a command ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    pub exit_code: i32,
    pub timed_out: bool,
    #[serde(with = "b64")]
    pub stdout: Vec<u8>,
    #[serde(with = "b64")]
    pub stderr: Vec<u8>,
    pub stdout_cut: u64,
    pub stderr_cut: u64,
    /// Processes the command left behind that were killed at its end.
    pub leftovers_killed: u32,
}

mod b64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The other side closed the connection between frames.
    #[error("the connection was closed")]
    Closed,
    #[error("a frame of {0} bytes is over the limit of {MAX_FRAME}")]
    TooLarge(usize),
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("a frame is not valid JSON of the expected kind: {0}")]
    Json(#[from] serde_json::Error),
}

/// Writes `value` as one frame.
pub fn write_frame<T: Serialize>(w: &mut impl Write, value: &T) -> Result<(), FrameError> {
    let body = serde_json::to_vec(value)?;
    if body.len() > MAX_FRAME {
        return Err(FrameError::TooLarge(body.len()));
    }
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame; [`FrameError::Closed`] at a clean end between frames.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(serde_json::from_slice(&body)?)
}

/// Base64 of `bytes` (for tests and messages).
pub fn encode(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_refuse_oversize() {
        let req = Request {
            argv: vec!["true".into()],
            env: vec![("A".into(), "1".into())],
            cwd: "/tmp".into(),
            stdin: b"\x00\xff".to_vec(),
            timeout_ms: 5,
            env_remove: vec![],
            stdio: false,
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &req).unwrap();
        assert_eq!(read_frame::<Request>(&mut buf.as_slice()).unwrap(), req);
        assert!(matches!(read_frame::<Request>(&mut &b""[..]), Err(FrameError::Closed)));
        let huge = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(matches!(read_frame::<Request>(&mut &huge[..]), Err(FrameError::TooLarge(_))));
    }
}
