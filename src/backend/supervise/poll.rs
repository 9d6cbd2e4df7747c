//! The descriptors one supervision loop sleeps on, and the signal self-pipe.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use super::SuperviseError;

pub(super) type Signals = signal_hook::iterator::backend::SignalDelivery<std::os::unix::net::UnixStream, signal_hook::iterator::exfiltrator::SignalOnly>;

/// SIGINT, SIGTERM and SIGHUP delivered through a self-pipe (signal-hook's), to be polled
/// with the other descriptors.
pub(super) fn signal_pipe() -> Result<Signals, std::io::Error> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let (read, write) = std::os::unix::net::UnixStream::pair()?;
    read.set_nonblocking(true)?;
    write.set_nonblocking(true)?;
    Signals::with_pipe(read, write, signal_hook::iterator::exfiltrator::SignalOnly, [SIGINT, SIGTERM, SIGHUP])
}

/// What to wait for; each descriptor that is there is watched for input.
#[derive(Default)]
pub(super) struct Watch<'a> {
    /// The child's pidfd: readable once it exited.
    pub child: Option<BorrowedFd<'a>>,
    pub signals: Option<BorrowedFd<'a>>,
    pub sandbox: Option<BorrowedFd<'a>>,
    pub wake: Option<BorrowedFd<'a>>,
    pub stdout: Option<BorrowedFd<'a>>,
    pub stderr: Option<BorrowedFd<'a>>,
}

/// Which of the watched descriptors have something to say.
#[derive(Debug, Default)]
pub(super) struct Ready {
    pub signal: bool,
    pub sandbox: bool,
    pub wake: bool,
    pub stdout: bool,
    pub stderr: bool,
}

impl Watch<'_> {
    /// Sleeps until one of the descriptors turns readable (or hung up), or `wait` passes.
    pub(super) fn wait(self, wait: Option<Duration>) -> Result<Ready, SuperviseError> {
        use rustix::event::{PollFd, PollFlags};
        let slots = [self.child, self.signals, self.sandbox, self.wake, self.stdout, self.stderr];
        let mut fds = Vec::with_capacity(slots.len());
        let mut at = [None; 6];
        for (i, fd) in slots.iter().enumerate() {
            if let Some(fd) = fd {
                at[i] = Some(fds.len());
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
        }
        let timeout = wait.map(|w| rustix::event::Timespec { tv_sec: w.as_secs() as i64, tv_nsec: i64::from(w.subsec_nanos()) });
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(SuperviseError::Poll(e)),
        }
        let has = |i: usize| at[i].is_some_and(|j| !fds[j].revents().is_empty());
        Ok(Ready { signal: has(1), sandbox: has(2), wake: has(3), stdout: has(4), stderr: has(5) })
    }
}
