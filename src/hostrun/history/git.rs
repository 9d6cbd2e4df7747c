//! The host's `git`, run on a repository a worker could write, in a way that runs nothing of
//! the worker's and cannot be held up by it.
//!
//! - The repository is named by a held handle: the child changes into it (`fchdir`) and
//!   git gets `GIT_DIR=.`, so a directory swapped in after the launch is never used by name.
//! - It runs as the owner of that git directory (when workcell is root): refs and the index
//!   it writes stay the person's, and a hostile repository gets no more than its owner's rights.
//! - No configuration but the repository's own, which is bound read-only for the worker (with
//!   the files it includes): no system or global file, no `$HOME`. On the command line, the
//!   settings that could run a program or read the work tree are turned off, and replace refs
//!   (`refs/replace/`, writable by the worker, could make one commit read as another) are not
//!   honoured.
//! - Its output is bounded ([`MAX_OUTPUT`]), and it is killed past [`TIME_LIMIT`] (objects the
//!   worker wrote could be made slow to read): either ends in an error, never in a guess.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most output one git command may give (a list of changed paths, an index's entries).
pub const MAX_OUTPUT: usize = 16 << 20;
/// The longest one git command may take.
pub const TIME_LIMIT: Duration = Duration::from_secs(60);

/// Why a git command did not give its answer.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("no `git` program on this host's PATH")]
    Missing,
    #[error("cannot start `git {what}`")]
    Start {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`git {what}` failed ({status}): {stderr}")]
    Failed { what: String, status: String, stderr: String },
    #[error("`git {what}` gave more than {MAX_OUTPUT} bytes")]
    TooLong { what: String },
    #[error("`git {what}` took longer than {}s and was killed", TIME_LIMIT.as_secs())]
    TooSlow { what: String },
}

/// One repository's git directory, held.
#[derive(Debug, Clone)]
pub struct Repo {
    dir: Arc<OwnedFd>,
    /// Who git runs as: the git directory's owner (`None`: as workcell itself).
    owner: Option<(u32, u32)>,
}

impl Repo {
    /// `dir`, a git directory's handle; git will run as its owner when workcell is root.
    pub fn new(dir: Arc<OwnedFd>) -> Repo {
        let owner = rustix::process::geteuid().is_root().then(|| rustix::fs::fstat(&*dir).ok()).flatten().map(|st| (st.st_uid, st.st_gid));
        Repo { dir, owner }
    }

    /// The directory's handle.
    pub fn dir(&self) -> &OwnedFd {
        &self.dir
    }

    /// Runs `git ARGS` (with `input` on its stdin) and returns its stdout; an exit status other
    /// than 0 is an error, unless `quiet_miss` and it is 1 (`rev-parse -q --verify` of
    /// nothing), which gives `None`.
    pub fn run(&self, args: &[&str], input: &[u8], quiet_miss: bool) -> Result<Option<Vec<u8>>, GitError> {
        let what = args.first().copied().unwrap_or_default().to_string();
        let program = program().ok_or(GitError::Missing)?;
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("GIT_DIR", ".")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", "/nonexistent")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_LITERAL_PATHSPECS", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_PAGER", "cat")
            .env("LC_ALL", "C")
            .args([
                "--no-pager",
                "--no-optional-locks",
                "-c",
                "core.fsmonitor=false",
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.untrackedCache=false",
                "-c",
                "core.splitIndex=false",
                "-c",
                "diff.external=",
                "-c",
                "safe.directory=*",
                "-c",
                "gc.auto=0",
                "-c",
                "maintenance.auto=false",
            ])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some((uid, gid)) = self.owner {
            // std drops the supplementary groups as well when it changes the uid as root.
            cmd.uid(uid).gid(gid);
        }
        let fd = self.dir.as_raw_fd();
        // SAFETY: fchdir is async-signal-safe and touches nothing of the parent's.
        unsafe {
            cmd.pre_exec(move || if libc::fchdir(fd) == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) });
        }
        let mut child = cmd.spawn().map_err(|source| GitError::Start { what: what.clone(), source })?;
        let mut stdin = child.stdin.take();
        let input = input.to_vec();
        let feeder = std::thread::spawn(move || {
            if let Some(s) = stdin.as_mut() {
                let _ = s.write_all(&input);
            }
        });
        let out = child.stdout.take().map(|s| std::thread::spawn(move || bounded(s, MAX_OUTPUT + 1)));
        let err = child.stderr.take().map(|s| std::thread::spawn(move || bounded(s, 4096)));
        let until = Instant::now() + TIME_LIMIT;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(2)),
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        let _ = feeder.join();
        let stdout = out.and_then(|t| t.join().ok()).unwrap_or_default();
        let stderr = err.and_then(|t| t.join().ok()).unwrap_or_default();
        let Some(status) = status else { return Err(GitError::TooSlow { what }) };
        if stdout.len() > MAX_OUTPUT {
            return Err(GitError::TooLong { what });
        }
        match status.code() {
            Some(0) => Ok(Some(stdout)),
            Some(1) if quiet_miss => Ok(None),
            _ => Err(GitError::Failed { what, status: status.to_string(), stderr: crate::term::escape(String::from_utf8_lossy(&stderr).trim()).into_owned() }),
        }
    }
}

/// At most `max` bytes of `r`; the rest is read and dropped (so the writer never blocks).
fn bounded(mut r: impl Read, max: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while let Ok(n) = r.read(&mut buf) {
        if n == 0 {
            break;
        }
        let room = max.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    kept
}

/// The `git` of workcell's own PATH (the person's), found once.
fn program() -> Option<&'static PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
            std::env::split_paths(&path).map(|d| d.join("git")).find(|p| p.is_absolute() && p.is_file())
        })
        .as_ref()
}
