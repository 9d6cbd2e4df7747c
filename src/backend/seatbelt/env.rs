//! The worker's environment under Seatbelt (pure). Seatbelt cannot remap paths, so what the
//! plan says in container terms is rewritten to the host paths the worker really sees:
//! `HOME` and `TMPDIR` inside the run's private temp dir (the only writable place that is not
//! a zone), `WORKCELL_ZONES` with the zones' host paths, `WORKCELL_BROKER` at the broker's
//! socket in its directory, resolved into `/private` as the profile names it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::render::private_path;
use super::{private_tmp, SeatbeltError};
use crate::plan::{LaunchPlan, BROKER_MOUNT_POINT};

/// `HOME` under the run's private temp dir.
pub fn home_dir(plan: &LaunchPlan) -> PathBuf {
    private_tmp(plan).join("home")
}

/// `TMPDIR` under the run's private temp dir.
pub fn tmp_dir(plan: &LaunchPlan) -> PathBuf {
    private_tmp(plan).join("tmp")
}

/// The environment `sandbox-exec` starts the worker with.
pub fn worker_env(plan: &LaunchPlan) -> Result<BTreeMap<String, String>, SeatbeltError> {
    let mut env = plan.env.clone();
    env.insert("HOME".into(), home_dir(plan).to_string_lossy().into_owned());
    env.insert("TMPDIR".into(), tmp_dir(plan).to_string_lossy().into_owned());
    if let Some(list) = plan.env.get("WORKCELL_ZONES") {
        let mut out = Vec::new();
        for entry in list.split(',').filter(|e| !e.is_empty()) {
            let Some((target, mode)) = entry.rsplit_once(':') else { continue };
            let Some(m) = plan.mounts.iter().find(|m| m.target == target) else { continue };
            let host = private_path(&m.source).to_string_lossy().into_owned();
            // The same rule the plan applies to mount points: `,` and `:` separate entries.
            if host.contains([',', ':']) || crate::config::forbidden_char(&host).is_some() {
                return Err(SeatbeltError::AmbiguousZonePath(host.escape_debug().to_string()));
            }
            out.push(format!("{host}:{mode}"));
        }
        env.insert("WORKCELL_ZONES".into(), out.join(","));
    }
    if let Some(m) = plan.mounts.iter().find(|m| m.target == BROKER_MOUNT_POINT) {
        env.insert("WORKCELL_BROKER".into(), private_path(&m.source).join("broker.sock").to_string_lossy().into_owned());
    }
    Ok(env)
}
