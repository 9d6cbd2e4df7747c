//! One identity per worker: what workcell does on a worker's behalf on the host (the tool
//! service's file reads and writes, attachments, the copy of a `delivery: copy` zone, granted
//! directories created at launch) is done with the worker's uid and gid, so the kernel
//! checks it exactly as it checks the worker's own commands, and what it creates belongs to
//! the worker.
//!
//! A workcell that runs as a normal user already is the worker's user: [`Identity::Own`],
//! nothing changes and nothing is spawned. A root workcell runs each operation on a thread
//! of its own that first takes the worker's ids: on Linux credentials are per thread at the
//! kernel, and the raw `setresgid`/`setgroups`/`setresuid` system calls (rustix, never
//! glibc's wrappers, which change every thread of the process) change only that thread. The
//! effective uid becoming non-zero clears every effective capability of the thread
//! (`CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`…), and the filesystem uid follows
//! the effective one. The thread ends with the operation, so no other code ever runs with
//! the worker's ids and no thread is left holding them. A check that must see beyond the
//! worker's reach and only looks (the control files' walk up from a directory,
//! `sandbox::protect`) steps back to workcell's rights for its duration
//! ([`with_own_rights`]): the real and saved uid stayed 0, so the effective one may return.
//!
//! Handles opened earlier with root's rights (the zones' directories) stay usable as
//! starting points: every `openat` beneath them checks search permission on each directory
//! it walks, and read or write permission on what it opens, with the calling thread's ids.

use std::cell::Cell;
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::Serialize;

/// The user the worker runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UserSpec {
    pub uid: u32,
    pub gid: u32,
}

/// The host user workers run as when workcell runs as root and the project's owner is root
/// too (`nobody:nogroup` on Debian and most distributions).
pub const FALLBACK_USER: UserSpec = UserSpec { uid: 65534, gid: 65534 };

/// The host user a worker runs as; never uid or gid 0. As a normal user: that user. As root:
/// `defaults.user` when set, else the owner of the project directory when it is not root,
/// else [`FALLBACK_USER`]. (A worker holding host uid 0, even without capabilities, owns
/// every root-owned file and could leave set-uid-root programs in its zones.)
pub fn worker_user(project_dir: &Path, configured: Option<UserSpec>) -> UserSpec {
    let me = UserSpec { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() };
    if me.uid != 0 {
        return me;
    }
    if let Some(u) = configured {
        return u;
    }
    match std::fs::metadata(project_dir) {
        Ok(m) if m.uid() != 0 => UserSpec { uid: m.uid(), gid: if m.gid() != 0 { m.gid() } else { FALLBACK_USER.gid } },
        _ => FALLBACK_USER,
    }
}

#[cfg(target_os = "linux")]
/// `faccessat2(fd, "", mode, AT_EACCESS | AT_EMPTY_PATH)`: the held object itself.
pub(crate) fn access_fd(fd: BorrowedFd<'_>, mode: i32) -> std::io::Result<()> {
    // SAFETY: a valid descriptor and a NUL-terminated empty path; the call reads nothing else.
    let r = unsafe { libc::syscall(libc::SYS_faccessat2, fd.as_raw_fd(), c"".as_ptr(), mode, libc::AT_EACCESS | libc::AT_EMPTY_PATH) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whose rights a worker's host-side operations use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Identity {
    /// workcell's own: it already is the worker's user, or the caller acts for nobody
    /// (tests, `plan`).
    #[default]
    Own,
    /// Another user's (workcell runs as root): each operation runs on a thread of its own
    /// holding these ids and no supplementary groups, as the worker's processes do.
    Worker(UserSpec),
}

/// The worker's ids could not be taken: nothing was done.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot act as the worker's user {uid}:{gid}: {reason}")]
pub struct SwitchError {
    pub uid: u32,
    pub gid: u32,
    pub reason: String,
}

thread_local! {
    /// The worker this thread already acts as (inside [`Identity::run`]): a nested call runs
    /// in place instead of spawning again.
    static ACTING: Cell<Option<UserSpec>> = const { Cell::new(None) };
}

impl Identity {
    /// The identity for a worker running as `user`: [`Identity::Own`] when workcell already
    /// has exactly those effective ids.
    pub fn of(user: UserSpec) -> Identity {
        if rustix::process::geteuid().as_raw() == user.uid && rustix::process::getegid().as_raw() == user.gid {
            Identity::Own
        } else {
            Identity::Worker(user)
        }
    }

    /// The worker's user, when it is not workcell's own.
    pub fn user(self) -> Option<UserSpec> {
        match self {
            Identity::Own => None,
            Identity::Worker(u) => Some(u),
        }
    }

    /// Runs `f` with this identity's rights and returns its result. `Own` calls `f` right
    /// here; `Worker` runs it on a new thread that holds the worker's ids for its whole life,
    /// or refuses (nothing run) when they cannot be taken.
    pub fn run<R: Send>(self, f: impl FnOnce() -> R + Send) -> Result<R, SwitchError> {
        let Identity::Worker(user) = self else { return Ok(f()) };
        if ACTING.with(Cell::get) == Some(user) {
            return Ok(f());
        }
        std::thread::scope(|s| {
            let spawned = std::thread::Builder::new().name("workcell-as-worker".into()).spawn_scoped(s, move || {
                become_worker(user)?;
                ACTING.with(|a| a.set(Some(user)));
                Ok(f())
            });
            match spawned {
                Ok(handle) => handle.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(e) => Err(SwitchError { uid: user.uid, gid: user.gid, reason: format!("no thread could be started ({e})") }),
            }
        })
    }
}

impl Identity {
    /// Runs `f` with [`Acting`] hands that do single operations with this identity's rights,
    /// one at a time, for as long as `f` runs: a series of operations (a publish, thousands of
    /// files) costs one thread, not one per operation. `Own` hands run each in place; an
    /// error when the worker's ids cannot be taken (nothing was run).
    pub fn acting<'env, R>(self, f: impl FnOnce(&Acting<'env>) -> R) -> Result<R, SwitchError> {
        let Identity::Worker(user) = self else { return Ok(f(&Acting { jobs: None, user: None })) };
        if ACTING.with(Cell::get) == Some(user) {
            return Ok(f(&Acting { jobs: None, user: None }));
        }
        let failed = |reason: String| SwitchError { uid: user.uid, gid: user.gid, reason };
        std::thread::scope(|s| {
            let (jobs, queue) = std::sync::mpsc::channel::<Job<'env>>();
            let (ready, started) = std::sync::mpsc::sync_channel(1);
            let spawned = std::thread::Builder::new().name("workcell-as-worker".into()).spawn_scoped(s, move || {
                if let Err(e) = become_worker(user) {
                    let _ = ready.send(Err(e));
                    return;
                }
                ACTING.with(|a| a.set(Some(user)));
                let _ = ready.send(Ok(()));
                for job in queue {
                    job();
                }
            });
            if let Err(e) = spawned {
                return Err(failed(format!("no thread could be started ({e})")));
            }
            started.recv().map_err(|_| failed("its thread ended before it started".into()))??;
            // Dropped when `f` returns: the queue closes and the thread ends before the scope.
            let hands = Acting { jobs: Some(jobs), user: Some(user) };
            Ok(f(&hands))
        })
    }
}

type Job<'env> = Box<dyn FnOnce() + Send + 'env>;

/// Hands holding an identity's rights (see [`Identity::acting`]).
pub struct Acting<'env> {
    /// `None`: workcell's own rights, or a thread that already acts as the worker.
    jobs: Option<std::sync::mpsc::Sender<Job<'env>>>,
    user: Option<UserSpec>,
}

impl<'env> Acting<'env> {
    /// Runs `f` with these hands' rights and returns its result. `f` owns or borrows only
    /// what outlives the hands: it runs on their thread while the caller waits.
    pub fn run<R: Send + 'env>(&self, f: impl FnOnce() -> R + Send + 'env) -> Result<R, SwitchError> {
        let (Some(jobs), Some(user)) = (&self.jobs, self.user) else { return Ok(f()) };
        let gone = || SwitchError { uid: user.uid, gid: user.gid, reason: "its thread has ended".into() };
        let (done, result) = std::sync::mpsc::sync_channel(1);
        jobs.send(Box::new(move || {
            let _ = done.send(f());
        }))
        .map_err(|_| gone())?;
        result.recv().map_err(|_| gone())
    }
}

/// Runs `f` with workcell's own rights. On a thread acting as a worker (inside
/// [`Identity::run`]) its effective uid returns to 0 for `f` (which restores its effective
/// capabilities) and to the worker's right after, even when `f` panics; elsewhere `f` runs
/// as it is. Only for checks that look (metadata, never contents) where the worker's rights
/// would make a protection weaker.
pub(crate) fn with_own_rights<R>(f: impl FnOnce() -> R) -> R {
    let Some(user) = ACTING.with(Cell::get) else { return f() };
    let _back = step_back(user);
    f()
}

/// While alive, the thread has workcell's effective uid; dropped, the worker's again.
struct SteppedBack(UserSpec);

#[cfg(target_os = "linux")]
fn step_back(user: UserSpec) -> SteppedBack {
    if let Err(e) = rustix::thread::set_thread_res_uid(None, Some(rustix::process::Uid::ROOT), None) {
        // Still the worker: the check runs with less, never more.
        tracing::debug!("cannot return to workcell's rights for a check: {e}");
    }
    SteppedBack(user)
}

#[cfg(not(target_os = "linux"))]
fn step_back(user: UserSpec) -> SteppedBack {
    SteppedBack(user)
}

impl Drop for SteppedBack {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        let back = rustix::thread::set_thread_res_uid(None, Some(rustix::process::Uid::from_raw(self.0.uid)), None).is_ok();
        #[cfg(not(target_os = "linux"))]
        let back = true;
        if !back || rustix::process::geteuid().as_raw() != self.0.uid {
            // Never go on acting for a worker with root's rights.
            std::process::abort();
        }
    }
}

/// Gives the calling thread (only it) the worker's ids: no supplementary groups, the
/// worker's gid, then its uid (last: after it, the thread may change no ids). The real and
/// saved ids stay; nothing this thread runs is anybody's but ours.
#[cfg(target_os = "linux")]
fn become_worker(user: UserSpec) -> Result<(), SwitchError> {
    use rustix::process::{Gid, Uid};
    let failed = |what: &str, e: rustix::io::Errno| SwitchError { uid: user.uid, gid: user.gid, reason: format!("{what} ({})", std::io::Error::from(e)) };
    rustix::thread::set_thread_groups(&[]).map_err(|e| failed("its supplementary groups cannot be dropped", e))?;
    rustix::thread::set_thread_res_gid(None, Some(Gid::from_raw(user.gid)), None).map_err(|e| failed("its group cannot be taken", e))?;
    rustix::thread::set_thread_res_uid(None, Some(Uid::from_raw(user.uid)), None).map_err(|e| failed("its uid cannot be taken", e))?;
    // Checked, not assumed: an operation must never run with root's rights by mistake.
    if rustix::process::geteuid().as_raw() != user.uid || rustix::process::getegid().as_raw() != user.gid {
        return Err(SwitchError { uid: user.uid, gid: user.gid, reason: "the thread's ids did not change".into() });
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn become_worker(user: UserSpec) -> Result<(), SwitchError> {
    Err(SwitchError { uid: user.uid, gid: user.gid, reason: "acting as another user is supported on Linux only; run workcell as the worker's user".into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_runs_in_place() {
        let here = std::thread::current().id();
        assert_eq!(Identity::Own.run(|| std::thread::current().id()).unwrap(), here);
        let me = UserSpec { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() };
        assert_eq!(Identity::of(me), Identity::Own);
    }

    /// Only as root: the thread holds the worker's ids and no effective capability; the
    /// caller's thread keeps its own; a nested call runs in place.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_worker_thread_has_the_workers_ids_and_no_capabilities() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let user = UserSpec { uid: 4242, gid: 4343 };
        let (ids, cap_eff, groups, nested) = Identity::of(user)
            .run(|| {
                let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
                let field = |k: &str| status.lines().find(|l| l.starts_with(k)).map(|l| l[k.len()..].trim().to_string()).unwrap_or_default();
                let here = std::thread::current().id();
                let nested = Identity::of(user).run(|| std::thread::current().id() == here).unwrap();
                ((rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw()), field("CapEff:"), field("Groups:"), nested)
            })
            .unwrap();
        assert_eq!(ids, (4242, 4343));
        assert_eq!(cap_eff, "0000000000000000");
        assert_eq!(groups, "");
        assert!(nested, "a nested call must run on the same thread");
        let (inside, after) = Identity::of(user)
            .run(|| {
                let cap = || {
                    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
                    status.lines().find(|l| l.starts_with("CapEff:")).map(|l| l[7..].trim().to_string()).unwrap_or_default()
                };
                let inside = with_own_rights(|| (rustix::process::geteuid().as_raw(), cap()));
                (inside, (rustix::process::geteuid().as_raw(), cap()))
            })
            .unwrap();
        assert_eq!(inside.0, 0);
        assert_ne!(inside.1, "0000000000000000", "stepped back: workcell's capabilities");
        assert_eq!(after, (4242, "0000000000000000".to_string()), "and the worker's ids again after");
        assert!(rustix::process::geteuid().is_root(), "the caller's thread keeps its ids");
    }

    /// Only as root: acting hands run every job on one thread holding the worker's ids, and
    /// the caller's thread keeps its own; own hands run in place.
    #[cfg(target_os = "linux")]
    #[test]
    fn acting_hands_are_one_thread_with_the_workers_ids() {
        let here = std::thread::current().id();
        let in_place = Identity::Own.acting(|hands| hands.run(|| std::thread::current().id()).unwrap()).unwrap();
        assert_eq!(in_place, here);
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let user = UserSpec { uid: 4242, gid: 4343 };
        let (a, b) = Identity::of(user)
            .acting(|hands| {
                let job = || (std::thread::current().id(), rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
                let a = hands.run(job).unwrap();
                assert!(rustix::process::geteuid().is_root(), "the caller's thread keeps its ids between jobs");
                (a, hands.run(job).unwrap())
            })
            .unwrap();
        assert_eq!(a, b, "both jobs on the same thread");
        assert_ne!(a.0, here);
        assert_eq!((a.1, a.2), (4242, 4343));
    }
}
