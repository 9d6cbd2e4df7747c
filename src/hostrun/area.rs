//! A writable mount's protected paths as a run carries them from the launch walk
//! (`plan::protected`) to the sweep after it ([`super::quarantine`]) and the history check
//! ([`super::history`]): here, below both, so that neither imports the plan.

use serde::Serialize;

use super::looked::Records;
use super::Protection;
use crate::held::Held;

/// One writable mount's protected paths (`crate::hostrun`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProtectedArea {
    /// The mount's target (as in `LaunchPlan::mounts`).
    pub target: String,
    /// Why the zone is treated as a home directory (`crate::hostrun::home`), its home
    /// entries then among `entries`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// The mount's own handle (the zone's directory, as bound).
    #[serde(skip)]
    pub held: Option<Held>,
    /// The entries in force here (defaults, added, less the zone's `unprotect`).
    pub entries: Vec<String>,
    /// Default entries the zone turned off (`unprotect:`), shown by `plan`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unprotected: Vec<String>,
    /// The entries a protected manifest brought in (`Makefile` → `GNUmakefile`), and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub by_family: Vec<super::tools::FamilyEntry>,
    /// Protected paths that existed at launch, bound read-only: their path relative to the
    /// mount, and the identity (device, inode) they had.
    pub bound: Vec<BoundPath>,
    #[serde(skip)]
    pub protection: Protection,
    /// What the walks saw of each directory, for the next walk (`hostrun::looked`).
    #[serde(skip)]
    pub looked: Records,
}

/// A protected path that existed at launch and is bound read-only over itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BoundPath {
    pub path: String,
    pub entry: String,
    #[serde(skip)]
    pub identity: (u64, u64),
}

impl ProtectedArea {
    /// The area of the directory `held` (mounted at `target`) with `protection`, before its
    /// walk (no bound paths, no records): for the sweep's own tests and benchmarks.
    pub fn of(target: &str, held: Held, protection: Protection) -> ProtectedArea {
        ProtectedArea {
            target: target.to_string(),
            home: None,
            held: Some(held),
            entries: protection.entries().to_vec(),
            unprotected: vec![],
            by_family: vec![],
            bound: vec![],
            protection,
            looked: Records::default(),
        }
    }
}
