//! The agent's one connection, on workcell's side: the socket it connects to once, and the
//! checks of who connected (the worker's uid, a process inside the sandbox) that make it the
//! agent. Used by an MCP session's sandbox (`run::resident`) and a claimed pool entry
//! (`pool::warm`), each with its own errors around [`SocketError`].

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Instant;

use std::time::Duration;

use super::{FrameError, Hello};
use crate::agent;

/// How long an agent may take to connect and say hello.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the agent's connection could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("cannot set up the session sandbox's agent socket: {0}")]
    Socket(#[source] std::io::Error),
    #[error("the session sandbox's agent did not start within {} s", START_TIMEOUT.as_secs())]
    StartTimeout,
    #[error("the session sandbox's agent did not answer: {0}")]
    Agent(#[source] FrameError),
    #[error("a process outside the session sandbox (uid {uid}, pid {pid}) connected to its agent socket first; the session sandbox was not used")]
    Impostor { uid: u32, pid: u32 },
}

/// A pidfd of the agent at the other end of `stream`, checked again after it was opened to
/// be the process inside the sandbox (under `anchor`) that connected (a pid reused meanwhile
/// would not be).
pub fn agent_pidfd(stream: &UnixStream, anchor: Option<u32>) -> Option<std::os::fd::OwnedFd> {
    let pid = rustix::net::sockopt::socket_peercred(stream).ok()?.pid;
    let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
    (anchor.is_some_and(|a| descends_from(pid.as_raw_nonzero().get() as u32, a))).then_some(fd)
}

/// Whether `anchor` is `pid` or one of its ancestors (host pids).
fn descends_from(pid: u32, anchor: u32) -> bool {
    let mut p = pid;
    for _ in 0..64 {
        if p == anchor {
            return true;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { return false };
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
        match rest.split_whitespace().nth(1).and_then(|f| f.parse::<u32>().ok()) {
            Some(parent) if parent > 0 => p = parent,
            _ => return false,
        }
    }
    false
}
/// The listening socket the agent connects to, once: in a private directory of its own
/// (a session sandbox) or in a pooled sandbox's agent directory (`crate::pool`).
pub struct AgentSocket {
    dir: Option<tempfile::TempDir>,
    pub path: PathBuf,
    listener: UnixListener,
}

impl AgentSocket {
    /// The directory (0700, or 0750 shared with `user`'s group when workcell is root) and
    /// its socket.
    pub fn new(user: crate::plan::UserSpec) -> Result<AgentSocket, SocketError> {
        let dir = crate::tools::broker::private_dir().map_err(|e| SocketError::Socket(std::io::Error::other(e.to_string())))?;
        share(dir.path(), user, 0o750)?;
        let mut socket = AgentSocket::bind_in(dir.path(), user)?;
        socket.dir = Some(dir);
        Ok(socket)
    }

    /// A socket in `dir`, a directory only workcell (and, when workcell is root, the
    /// worker's group) may enter.
    pub fn bind_in(dir: &std::path::Path, user: crate::plan::UserSpec) -> Result<AgentSocket, SocketError> {
        let path = dir.join(agent::SOCKET_NAME);
        let listener = UnixListener::bind(&path).map_err(SocketError::Socket)?;
        listener.set_nonblocking(true).map_err(SocketError::Socket)?;
        share(&path, user, 0o660)?;
        Ok(AgentSocket { dir: None, path, listener })
    }

    /// Accepts the agent's connection (the first and only one: the listener and its file go
    /// right after) within [`START_TIMEOUT`]; `gone` says why to stop waiting early.
    pub fn accept<E: From<SocketError>>(self, gone: &mut dyn FnMut() -> Option<E>) -> Result<UnixStream, E> {
        let until = Instant::now() + START_TIMEOUT;
        let stream = loop {
            match self.listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(SocketError::Socket(e).into()),
            }
            if let Some(why) = gone() {
                return Err(why);
            }
            if Instant::now() > until {
                return Err(SocketError::StartTimeout.into());
            }
            let mut fds = [rustix::event::PollFd::new(&self.listener, rustix::event::PollFlags::IN)];
            let _ = rustix::event::poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 20_000_000 }));
        };
        drop(self.listener);
        let _ = std::fs::remove_file(&self.path);
        drop(self.dir);
        stream.set_nonblocking(false).map_err(SocketError::Socket)?;
        Ok(stream)
    }
}

/// Gives `path` to `user`'s group with `mode` when workcell is root (its workers run as
/// another uid); nothing otherwise.
fn share(path: &std::path::Path, user: crate::plan::UserSpec, mode: u32) -> Result<(), SocketError> {
    use std::os::unix::fs::PermissionsExt;
    if rustix::process::geteuid().as_raw() == 0 {
        rustix::fs::chown(path, None, Some(rustix::process::Gid::from_raw(user.gid))).map_err(|e| SocketError::Socket(e.into()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(SocketError::Socket)?;
    }
    Ok(())
}

/// Checks who connected and reads its hello. The socket's directory is open to the worker's
/// group, which a host process of that user shares: the peer must be the worker's `uid`
/// *and* inside the sandbox (a descendant of `anchor`: the bwrap workcell started, or the
/// container's first process).
pub fn verify_agent(stream: &UnixStream, uid: u32, anchor: Option<u32>) -> Result<Hello, SocketError> {
    let creds = rustix::net::sockopt::socket_peercred(stream).map_err(|e| SocketError::Socket(e.into()))?;
    let (peer_uid, pid) = (creds.uid.as_raw(), creds.pid.as_raw_nonzero().get() as u32);
    if peer_uid != uid || !anchor.is_some_and(|a| descends_from(pid, a)) {
        return Err(SocketError::Impostor { uid: peer_uid, pid });
    }
    stream.set_read_timeout(Some(START_TIMEOUT)).map_err(SocketError::Socket)?;
    let hello = agent::read_frame(&mut &*stream).map_err(SocketError::Agent)?;
    stream.set_read_timeout(None).map_err(SocketError::Socket)?;
    Ok(hello)
}
