//! Docker backend: the Engine API through bollard. (Being written.)

use super::BackendError;
use crate::plan::LaunchPlan;

/// Whether the Docker daemon answers; `Err` says why not and how to fix it.
pub fn probe() -> Result<String, BackendError> {
    Err(BackendError::Unavailable { backend: "docker", reason: "not implemented yet".into(), fix: String::new() })
}

/// Runs the plan in a container; returns the worker's exit status.
pub fn run(_plan: &LaunchPlan) -> Result<i32, BackendError> {
    probe().map(|_| 0)
}

/// Runs the plan in a container with output captured. (Being written.)
pub fn run_captured(_plan: &LaunchPlan) -> Result<super::Captured, BackendError> {
    probe().map(|_| super::Captured::default())
}
