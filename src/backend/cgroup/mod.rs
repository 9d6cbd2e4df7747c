//! Memory, cpu and process limits for the bwrap backend: a cgroup of its own for every run,
//! where this process may create one.
//!
//! bwrap has no resource limits of its own. A cgroup can be created by root on a cgroup v1
//! host (one hierarchy per controller), or under cgroup v2 in a subtree whose controllers are
//! delegated to this user. Elsewhere (a desktop session's systemd scope, a container without
//! a writable cgroupfs) [`Support`] says why, and the limits are named as not enforced.
//!
//! Three jobs, one file each: [`detect`] finds where each controller lives and whether a
//! child cgroup can be made there (`/proc/self/cgroup` and `/proc/self/mountinfo`; the
//! parsing is pure and unit-tested); [`run`] is one run's cgroup from creation to removal,
//! including how the sandbox gets in; `leftovers` is `workcell gc`'s sweep of the cgroups of
//! runs that were killed before they could remove their own.

mod detect;
mod leftovers;
mod run;

use std::path::PathBuf;

pub use detect::{unenforceable, Place, Support};
pub use leftovers::remove_leftovers;
pub use run::RunCgroup;

/// A cgroup controller workcell sets limits with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }
}

impl std::fmt::Display for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The file that sets `c`'s limit (its presence shows the controller is enabled).
fn limit_file(c: Controller, v2: bool) -> &'static str {
    match (c, v2) {
        (Controller::Memory, false) => "memory.limit_in_bytes",
        (Controller::Memory, true) => "memory.max",
        (Controller::Pids, _) => "pids.max",
        (Controller::Cpu, false) => "cpu.cfs_quota_us",
        (Controller::Cpu, true) => "cpu.max",
    }
}

/// Why a limit cannot be enforced here. Not a failure: the run goes on and the limit is named
/// as not enforced (`plan`, `doctor`, a warning on the run), with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    #[error("the cgroup v1 {0} hierarchy is not mounted")]
    V1NotMounted(Controller),
    #[error("the cgroup v2 hierarchy is not mounted")]
    V2NotMounted,
    #[error("this process is in no {0} cgroup")]
    NoCgroup(Controller),
    /// mkdir was refused (no permission, read-only cgroupfs, no such parent).
    #[error("cannot create a cgroup under {}: {source} (needs root on cgroup v1, or a delegated cgroup v2 subtree)", parent.display())]
    CannotCreate {
        parent: PathBuf,
        #[source]
        source: rustix::io::Errno,
        /// Under the unified (v2) hierarchy.
        v2: bool,
    },
    #[error("the {controller} controller is not enabled for cgroups under {} (cgroup v2: it is not delegated here)", parent.display())]
    NotEnabled { controller: Controller, parent: PathBuf },
    /// A reason given by the caller ([`Support::none`]).
    #[error("{0}")]
    Other(String),
}

impl Unsupported {
    /// The reason in a few words, for the warning a run prints every time (the whole
    /// reason, with its path and errno, is `plan`'s and `doctor`'s).
    pub fn short(&self) -> String {
        use rustix::io::Errno;
        match self {
            Unsupported::V1NotMounted(_) | Unsupported::V2NotMounted | Unsupported::NoCgroup(_) => "no cgroup hierarchy for it here".into(),
            Unsupported::CannotCreate { source: Errno::ROFS, .. } => "the cgroup file system is read-only".into(),
            Unsupported::CannotCreate { source: Errno::ACCESS | Errno::PERM, v2: false, .. } => "cgroup v1 gives cgroups to root only".into(),
            Unsupported::CannotCreate { source: Errno::ACCESS | Errno::PERM, v2: true, .. } => "no cgroup v2 subtree is delegated to this user".into(),
            Unsupported::CannotCreate { source, .. } => format!("no cgroup can be created here ({source})"),
            Unsupported::NotEnabled { .. } => "its controller is not delegated here".into(),
            Unsupported::Other(reason) => reason.clone(),
        }
    }
}

/// Why a run's cgroup could not be set up or entered: the run stops rather than going on
/// without the limits it asked for.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("the cgroup {} already exists", .0.display())]
    Exists(PathBuf),
    /// Anything but "not allowed here" (too many cgroups, no memory).
    #[error("cannot create the cgroup {}: {source}", dir.display())]
    Create {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot set {file} in {}: {source}", dir.display())]
    SetLimit {
        file: &'static str,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot move workcell's thread into the cgroup {}: {source}", dir.display())]
    EnterThread {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot move process {pid} into the cgroup {}: {source}", dir.display())]
    Attach {
        pid: i32,
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
