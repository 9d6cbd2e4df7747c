//! Captured output that cannot grow without bound: a worker controls how much its commands
//! print, so every stream is read as it comes, kept up to [`OUTPUT_CAP`] bytes, and the rest
//! is read and thrown away (the writer never blocks on a full pipe) and only counted.

use std::io::Read;

use super::{BackendError, Captured, EXIT_TIMEOUT};

/// Bytes kept per captured stream (stdout and stderr each): what the shell tool returns, and
/// what a child worker's output may be. Anything beyond is counted in `*_cut`, not kept.
pub const OUTPUT_CAP: usize = 50_000;

/// A buffer that keeps the first `cap` bytes pushed into it and counts the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bounded {
    pub kept: Vec<u8>,
    pub cut: u64,
    cap: usize,
}

impl Bounded {
    pub fn new(cap: usize) -> Bounded {
        Bounded { kept: Vec::new(), cut: 0, cap }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len());
        let take = room.min(bytes.len());
        self.kept.extend_from_slice(&bytes[..take]);
        self.cut += (bytes.len() - take) as u64;
    }

    /// Reads `r` to its end in pieces, keeping what fits.
    pub fn drain(mut self, mut r: impl Read) -> Bounded {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => self.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        self
    }
}

/// Both streams of a run, bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streams {
    pub stdout: Bounded,
    pub stderr: Bounded,
}

impl Default for Streams {
    fn default() -> Self {
        Streams { stdout: Bounded::new(OUTPUT_CAP), stderr: Bounded::new(OUTPUT_CAP) }
    }
}

impl Streams {
    pub fn into_captured(self, exit_code: i32, timed_out: bool) -> Captured {
        Captured { exit_code, stdout: self.stdout.kept, stderr: self.stderr.kept, stdout_cut: self.stdout.cut, stderr_cut: self.stderr.cut, timed_out }
    }
}

/// Runs `cmd` in its own process group with output captured (bounded); after `timeout`
/// the whole group is killed and `timed_out` is set (exit 124).
pub(crate) fn capture(cmd: std::process::Command, timeout: Option<std::time::Duration>) -> Result<Captured, BackendError> {
    capture_with(cmd, timeout, |cmd| {
        super::spawn_exclusive(|| cmd.spawn()).map_err(|source| BackendError::Io { what: format!("cannot start {:?}", cmd.get_program()), source })
    })
}

/// [`capture`] with the process started by `spawn` (which may put it into a cgroup first).
pub(crate) fn capture_with(
    mut cmd: std::process::Command,
    timeout: Option<std::time::Duration>,
    spawn: impl FnOnce(&mut std::process::Command) -> Result<std::process::Child, BackendError>,
) -> Result<Captured, BackendError> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = spawn(&mut cmd)?;
    let pid = child.id();
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Both pipes are drained at once (a child blocked on a full stderr would never close
        // stdout), each into its own bounded buffer.
        let err_reader = std::thread::spawn(move || err.map(|e| Bounded::new(OUTPUT_CAP).drain(e)).unwrap_or_else(|| Bounded::new(OUTPUT_CAP)));
        let stdout = out.map(|o| Bounded::new(OUTPUT_CAP).drain(o)).unwrap_or_else(|| Bounded::new(OUTPUT_CAP));
        let stderr = err_reader.join().unwrap_or_else(|_| Bounded::new(OUTPUT_CAP));
        let _ = tx.send(child.wait().map(|status| (status, Streams { stdout, stderr })));
    });
    let waited = match timeout {
        Some(t) => rx.recv_timeout(t).ok(),
        None => rx.recv().ok(),
    };
    let (result, timed_out) = match waited {
        Some(r) => (r, false),
        None => {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
            }
            (rx.recv().map_err(|e| BackendError::Failed(e.to_string()))?, true)
        }
    };
    let (status, streams) = result.map_err(|source| BackendError::Io { what: "waiting for the command failed".into(), source })?;
    Ok(streams.into_captured(if timed_out { EXIT_TIMEOUT } else { super::none::exit_code_of(status) }, timed_out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_cap_and_counts_the_rest() {
        let mut b = Bounded::new(10);
        b.push(b"12345");
        b.push(b"67890abc");
        b.push(b"def");
        assert_eq!(b.kept, b"1234567890");
        assert_eq!(b.cut, 6);
        let d = Bounded::new(4).drain(std::io::repeat(b'y').take(1 << 20));
        assert_eq!((d.kept.len(), d.cut), (4, (1 << 20) - 4));
    }
}
