//! bubblewrap backend. (Being written.)

use std::path::PathBuf;

use super::BackendError;
use crate::plan::LaunchPlan;

/// The bwrap binary to use, after checking that it can create a sandbox here.
pub fn probe() -> Result<PathBuf, BackendError> {
    Err(BackendError::Unavailable { backend: "bwrap", reason: "not implemented yet".into(), fix: String::new() })
}

/// Runs the plan under bwrap; returns the worker's exit status.
pub fn run(_plan: &LaunchPlan) -> Result<i32, BackendError> {
    probe().map(|_| 0)
}

/// Runs the plan under bwrap with output captured. (Being written.)
pub fn run_captured(_plan: &LaunchPlan) -> Result<super::Captured, BackendError> {
    probe().map(|_| super::Captured::default())
}
