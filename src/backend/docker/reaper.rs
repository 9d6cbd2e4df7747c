//! A watchdog for one docker run. Signals reach workcell's own handlers, which remove the
//! container; a SIGKILL (or the OOM killer) does not, and the container would run on until
//! `workcell gc`. So before creating a container, a run starts this binary again as
//! `workcell __reap NAME` in a session of its own, with the read end of a pipe as its stdin.
//! workcell keeps the write end: when the run has removed its container it writes `d` and the
//! watchdog exits at once; if workcell dies first, the pipe reaches end of file and the
//! watchdog force-removes the container, then the run's network and firewall rules (what was
//! never created, or is already gone, is fine).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Allows runs to start watchdogs: only the workcell binary itself knows `__reap` (a program
/// that uses workcell as a library does not).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// The byte that tells the watchdog the run cleaned up after itself.
const DONE: &[u8] = b"d";

/// The running watchdog of one container; dropping it without [`Reaper::disarm`] (a panic
/// unwinding the run) lets it remove the container.
pub struct Reaper {
    pipe: std::fs::File,
    child: std::process::Child,
}

impl Reaper {
    /// Starts the watchdog for `container`. `None` (with a warning) when it cannot start: the
    /// run goes on, as it did before watchdogs, and `workcell gc` remains the fallback.
    pub fn start(container: &str) -> Option<Reaper> {
        if !ENABLED.load(Ordering::Relaxed) {
            return None;
        }
        let started = (|| -> std::io::Result<Reaper> {
            let exe = std::env::current_exe()?;
            let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
            let mut cmd = Command::new(exe);
            cmd.arg("__reap").arg(container).stdin(Stdio::from(read)).stdout(Stdio::null()).stderr(Stdio::null());
            // A session of its own: neither a terminal's Ctrl-C or hangup nor a kill of
            // workcell's process group reaches it.
            use std::os::unix::process::CommandExt;
            // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| rustix::process::setsid().map(drop).map_err(std::io::Error::from));
            }
            let child = crate::backend::spawn_exclusive(|| cmd.spawn())?;
            Ok(Reaper { pipe: std::fs::File::from(write), child })
        })();
        match started {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!("cannot start the container watchdog: {e}; if workcell is killed, run `workcell gc`");
                None
            }
        }
    }

    /// The run removed its container: the watchdog exits without doing anything, and is
    /// reaped here (a long-lived `workcell mcp` would otherwise collect zombies).
    pub fn disarm(mut self) {
        let _ = self.pipe.write_all(DONE);
        drop(self.pipe);
        let _ = self.child.wait();
    }
}

/// `workcell __reap NAME`: waits until the run says it is done or goes away; in the second
/// case removes the container. Returns the exit status.
pub fn watch(container: &str) -> i32 {
    // Only workcell's own containers (`workcell-RUN_ID`).
    if !container.starts_with("workcell-") {
        return 2;
    }
    let mut byte = [0u8; 1];
    let n = loop {
        match std::io::stdin().read(&mut byte) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r.unwrap_or(0),
        }
    };
    if n == 1 && byte[..] == *DONE {
        return 0;
    }
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return 1 };
    rt.block_on(async {
        match super::connect().await {
            Ok(docker) => {
                super::container::remove(&docker, container).await;
                // A proxied run's network and firewall rules (none is fine).
                super::network::close(&docker, container).await;
                // A shipped run's carrier and volumes (none is fine).
                if let Some(run_id) = container.strip_prefix("workcell-") {
                    super::ship::remove(&docker, run_id).await;
                }
                0
            }
            Err(_) => 1,
        }
    })
}
