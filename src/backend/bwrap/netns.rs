//! The egress proxy's port inside a bwrap sandbox. The worker keeps a network namespace of
//! its own with only loopback (as with `network: false`); the proxy must listen on
//! `127.0.0.1:PROXY_PORT` there, yet run on the host.
//!
//! While the sandbox waits on bwrap's block pipe (the worker has not started), workcell forks
//! a helper that enters the sandbox's user and network namespaces, opens the listening socket
//! there and hands it back over a socket pair (`SCM_RIGHTS`), then exits. The parent serves
//! the socket from the host, so the port listens before the worker starts and nothing of
//! workcell runs inside the sandbox. A socket keeps the namespace it was made in: accepted
//! connections come from the worker's loopback, the proxy's own connections leave from the
//! host's network.
//!
//! The helper makes raw system calls only (rustix's, without libc), never allocates, and
//! leaves with `_exit`: after a fork of a threaded process, nothing else is safe.

use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};
use rustix::thread::LinkNameSpaceType;

/// Why the proxy's port could not be opened inside the sandbox. The sandbox is then killed
/// before the worker starts.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("cannot open the sandbox's network namespace ({path}): {source}")]
    Open {
        path: String,
        #[source]
        source: Errno,
    },
    #[error("the network namespace of pid {pid} is not the sandbox's that bwrap reported (the process is gone)")]
    Replaced { pid: i32 },
    #[error("cannot find the user namespace that owns the sandbox's network namespace: {0}")]
    Owner(#[source] std::io::Error),
    #[error("cannot create a socket pair for the helper: {0}")]
    Pair(#[source] Errno),
    #[error("cannot fork the helper: {0}")]
    Fork(#[source] std::io::Error),
    #[error("cannot open 127.0.0.1:{port} inside the sandbox: {step} failed: {source}")]
    Inside {
        port: u16,
        step: &'static str,
        #[source]
        source: Errno,
    },
    #[error("the helper that opens the proxy's port inside the sandbox ended without handing it over")]
    NoSocket,
}

/// What the helper did, in its one message: a step number (0 = done, the socket is attached)
/// and an errno.
const STEPS: [&str; 6] = ["", "entering the user namespace", "entering the network namespace", "socket", "bind", "listen"];

/// Opens a socket listening on `127.0.0.1:port` inside the network namespace of `init_pid`
/// (the sandbox's init, reported by bwrap and still blocked). `net_ns` is the namespace's
/// inode as bwrap reported it, checked against the one opened so that a recycled pid is
/// never entered.
pub(super) fn listen_inside(init_pid: i32, net_ns: Option<u64>, port: u16) -> Result<TcpListener, NetnsError> {
    let path = format!("/proc/{init_pid}/ns/net");
    let net = rustix::fs::open(path.as_str(), rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty())
        .map_err(|source| NetnsError::Open { path: path.clone(), source })?;
    if let Some(want) = net_ns {
        let st = rustix::fs::fstat(&net).map_err(|source| NetnsError::Open { path, source })?;
        if st.st_ino != want {
            return Err(NetnsError::Replaced { pid: init_pid });
        }
    }
    // The user namespace that owns the network one, asked of the kernel: bwrap may have made
    // a nested user namespace for the worker (`--disable-userns`), whose capabilities would
    // not reach the network namespace.
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor or -1.
    let owner = unsafe { libc::ioctl(net.as_raw_fd(), libc::NS_GET_USERNS) };
    if owner < 0 {
        return Err(NetnsError::Owner(std::io::Error::last_os_error()));
    }
    // SAFETY: the ioctl returned a fresh descriptor that nothing else owns.
    let user = unsafe { OwnedFd::from_raw_fd(owner) };
    rustix::io::fcntl_setfd(&user, rustix::io::FdFlags::CLOEXEC).map_err(|e| NetnsError::Owner(e.into()))?;

    let (ours, theirs) = rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None).map_err(NetnsError::Pair)?;
    let addr = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    // Under the spawn lock, like every process workcell starts: the helper must not take
    // along descriptors another run made inheritable for its bwrap.
    // SAFETY: the child runs `helper`, which makes raw system calls only and never returns.
    let pid = crate::backend::spawn_exclusive(|| unsafe { libc::fork() });
    if pid < 0 {
        return Err(NetnsError::Fork(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        helper(user.as_fd(), net.as_fd(), theirs.as_fd(), addr);
    }
    drop(theirs);
    let received = receive(&ours);
    // The helper exits right after sending (or failing): reap it.
    while matches!(rustix::process::waitpid(rustix::process::Pid::from_raw(pid), rustix::process::WaitOptions::empty()), Err(Errno::INTR)) {}
    match received? {
        Ok(fd) => Ok(TcpListener::from(fd)),
        Err((step, errno)) => Err(NetnsError::Inside { port, step: STEPS.get(step).copied().unwrap_or("a step"), source: Errno::from_raw_os_error(errno) }),
    }
}

/// The helper's one message: the listening socket, or which step failed and why.
fn receive(sock: &OwnedFd) -> Result<Result<OwnedFd, (usize, i32)>, NetnsError> {
    let mut data = [0u8; 8];
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(sock, &mut [std::io::IoSliceMut::new(&mut data)], &mut cmsg, RecvFlags::CMSG_CLOEXEC) {
            Err(Errno::INTR) => continue,
            Err(_) => return Err(NetnsError::NoSocket),
            Ok(r) => break r.bytes,
        }
    };
    let mut fd = None;
    for msg in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = msg {
            for f in fds {
                fd.get_or_insert(f);
            }
        }
    }
    if got != data.len() {
        return Err(NetnsError::NoSocket);
    }
    let step = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as usize;
    let errno = i32::from_ne_bytes([data[4], data[5], data[6], data[7]]);
    match (step, fd) {
        (0, Some(fd)) => Ok(Ok(fd)),
        (0, None) => Err(NetnsError::NoSocket),
        (step, _) => Ok(Err((step, errno))),
    }
}

/// The forked helper: enters the namespaces, listens, sends the socket (or the failed step)
/// and exits. Everything it needs was prepared before the fork; it allocates nothing.
fn helper(user: BorrowedFd<'_>, net: BorrowedFd<'_>, sock: BorrowedFd<'_>, addr: SocketAddrV4) -> ! {
    let report = |step: u32, errno: i32, fd: Option<BorrowedFd<'_>>| {
        let mut data = [0u8; 8];
        data[..4].copy_from_slice(&step.to_ne_bytes());
        data[4..].copy_from_slice(&errno.to_ne_bytes());
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut cmsg = SendAncillaryBuffer::new(&mut space);
        let fds;
        if let Some(fd) = fd {
            fds = [fd];
            cmsg.push(SendAncillaryMessage::ScmRights(&fds));
        }
        let _ = rustix::net::sendmsg(sock, &[IoSlice::new(&data)], &mut cmsg, SendFlags::empty());
    };
    let result = (|| -> Result<OwnedFd, (u32, Errno)> {
        // The user namespace first: it grants the capabilities that entering the network
        // namespace needs (as a normal user, workcell owns bwrap's user namespace; as root it
        // has every capability in it already, and entering is allowed the same way).
        rustix::thread::move_into_link_name_space(user, Some(LinkNameSpaceType::User)).map_err(|e| (1, e))?;
        rustix::thread::move_into_link_name_space(net, Some(LinkNameSpaceType::Network)).map_err(|e| (2, e))?;
        let s = rustix::net::socket_with(AddressFamily::INET, SocketType::STREAM, SocketFlags::CLOEXEC, None).map_err(|e| (3, e))?;
        rustix::net::bind(&s, &addr).map_err(|e| (4, e))?;
        rustix::net::listen(&s, 128).map_err(|e| (5, e))?;
        Ok(s)
    })();
    let code = match result {
        Ok(s) => {
            report(0, 0, Some(s.as_fd()));
            0
        }
        Err((step, e)) => {
            report(step, e.raw_os_error(), None);
            1
        }
    };
    // SAFETY: ends the forked child without running the parent's exit handlers.
    unsafe { libc::_exit(code) }
}
