//! The worker's session and terminal (platform-neutral; used by the Seatbelt backend).
//!
//! The worker starts in a session of its own, so the user's terminal is never its
//! controlling terminal: it cannot push input into it (`TIOCSTI`) or take its foreground.
//! A `-t` run gets a new pty instead, whose slave is the worker's stdio and controlling
//! terminal, and workcell relays bytes between the master and the user's terminal.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use rustix::fs::{Mode, OFlags};
use rustix::termios::{OptionalActions, Termios};

/// The master side of a worker's pty.
#[derive(Debug)]
pub struct Pty {
    master: OwnedFd,
}

/// Puts the command's process in a new session; with `tty`, gives it a new pty as stdin,
/// stdout, stderr and controlling terminal. Drop `cmd` once it has been spawned: it holds
/// the slave, and the relay ends only when every holder of the slave has closed it.
pub fn prepare(cmd: &mut Command, tty: bool) -> io::Result<Option<Pty>> {
    let pty = if tty {
        let master = rustix::pty::openpt(rustix::pty::OpenptFlags::RDWR | rustix::pty::OpenptFlags::NOCTTY)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        let name = rustix::pty::ptsname(&master, Vec::new())?;
        let slave = rustix::fs::open(name.as_c_str(), OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC, Mode::empty())?;
        let (a, b) = (slave.try_clone()?, slave.try_clone()?);
        cmd.stdin(Stdio::from(slave)).stdout(Stdio::from(a)).stderr(Stdio::from(b));
        rustix::io::fcntl_setfd(&master, rustix::io::FdFlags::CLOEXEC)?;
        Some(Pty { master })
    } else {
        None
    };
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::setsid()?;
            if tty {
                // stdin is the slave by now: make it the new session's terminal.
                rustix::process::ioctl_tiocsctty(BorrowedFd::borrow_raw(0))?;
            }
            Ok(())
        });
    }
    Ok(pty)
}

impl Pty {
    /// Gives the pty the window size of `terminal`, if it is one.
    pub fn copy_size_from(&self, terminal: impl AsFd) {
        if let Ok(size) = rustix::termios::tcgetwinsize(terminal) {
            let _ = rustix::termios::tcsetwinsize(&self.master, size);
        }
    }

    /// Copies `input` to the worker (on a thread of its own) and the worker's output to
    /// `output` until the worker's side is closed (every process holding the slave has
    /// exited). End of `input` is passed on as end-of-file (`^D`) once. Blocking reads, not
    /// poll(2), which macOS does not support on terminal devices.
    pub fn relay(&self, input: OwnedFd, output: impl AsFd) -> io::Result<()> {
        let to_worker = self.master.try_clone()?;
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match rustix::io::read(&input, &mut buf) {
                    Ok(0) => {
                        let _ = write_all(&to_worker, &[0x04]);
                        return;
                    }
                    Ok(n) => {
                        if write_all(&to_worker, &buf[..n]).is_err() {
                            return;
                        }
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    Err(_) => return,
                }
            }
        });
        let mut buf = [0u8; 8192];
        loop {
            match rustix::io::read(&self.master, &mut buf) {
                // EIO: the slave side is closed (Linux); 0: the same (macOS).
                Ok(0) | Err(rustix::io::Errno::IO) => return Ok(()),
                Ok(n) => write_all(&output, &buf[..n])?,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn write_all(fd: impl AsFd, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match rustix::io::write(&fd, data) {
            Ok(n) => data = &data[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// The user's terminal in raw mode while the worker's pty does the line discipline;
/// restored when dropped.
pub struct RawMode<Fd: AsFd> {
    fd: Fd,
    saved: Termios,
}

impl<Fd: AsFd> RawMode<Fd> {
    /// Raw mode on `fd`; `None` when it is not a terminal.
    pub fn enter(fd: Fd) -> Option<RawMode<Fd>> {
        let saved = rustix::termios::tcgetattr(&fd).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&fd, OptionalActions::Now, &raw).ok()?;
        Some(RawMode { fd, saved })
    }
}

impl<Fd: AsFd> Drop for RawMode<Fd> {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(&self.fd, OptionalActions::Now, &self.saved);
    }
}

#[cfg(all(test, target_os = "linux"))]
#[path = "pty_tests.rs"]
mod tests;
