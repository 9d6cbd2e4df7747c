//! Seatbelt backend (macOS `sandbox-exec`). (Being written.)

use super::BackendError;
use crate::plan::LaunchPlan;

/// Whether `sandbox-exec` is usable here.
pub fn probe() -> Result<(), BackendError> {
    Err(BackendError::Unavailable {
        backend: "seatbelt",
        reason: "Seatbelt exists only on macOS".into(),
        fix: "On Linux use docker or bwrap.".into(),
    })
}

/// Runs the plan under `sandbox-exec`; returns the worker's exit status.
pub fn run(_plan: &LaunchPlan) -> Result<i32, BackendError> {
    probe().map(|_| 0)
}
