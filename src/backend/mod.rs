//! Backends carry out a [`LaunchPlan`](crate::plan::LaunchPlan): Docker (Engine API through
//! bollard), bubblewrap, Seatbelt, or none. Each renders the plan with a pure function
//! (snapshot-tested) and runs the rendering; only the runners touch the OS.

/// Exit status when the plan's timeout killed the worker.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit status of workcell's own failure.
pub const EXIT_INTERNAL: i32 = 125;
/// Exit status when the command exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: i32 = 126;
/// Exit status when the command does not exist.
pub const EXIT_NOT_FOUND: i32 = 127;

/// Why a backend could not run a plan. Messages say what is missing and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend cannot work on this machine.
    #[error("the {backend} backend is unavailable: {reason}. {fix}")]
    Unavailable { backend: &'static str, reason: String, fix: String },
    /// Anything else that stopped workcell itself (exit 125).
    #[error("{0}")]
    Failed(String),
}
