//! Where a sandbox's zones appear inside a worker: one bind mount per area (read-write only
//! where writes are pre-approved or copy-delivered), the root form's mount point, the mounts
//! `delivery: copy` replaces by a private copy, and the working directory of a run that names
//! none.

use super::{pin, CopyMount, PlanError, PlanMount, ROOT_FORM_MOUNT_POINT};
use crate::sandbox::{Addressing, Sandbox};

/// Where the mounts of `sandbox` appear inside a worker: zones at their mount points; the
/// root form at [`ROOT_FORM_MOUNT_POINT`]. An area is mounted read-write only when it is
/// writable *and* its mount's writes and deletes are pre-approved; otherwise writes must go
/// through the tool service, which asks.
pub fn mounts_for(sandbox: &Sandbox) -> Vec<PlanMount> {
    zone_mounts(sandbox).into_iter().map(|(m, _)| m).collect()
}

/// [`mounts_for`], each with the name of the sandbox mount it belongs to.
pub fn zone_mounts(sandbox: &Sandbox) -> Vec<(PlanMount, String)> {
    zone_mounts_as(sandbox, false)
}

/// [`zone_mounts`], with every zone copy-delivered when `all_copied` (a plan shipped to a
/// remote engine, [`super::ship`]).
pub(crate) fn zone_mounts_as(sandbox: &Sandbox, all_copied: bool) -> Vec<(PlanMount, String)> {
    let target_of = |sandbox_path: &str| mount_target(sandbox.addressing(), sandbox_path);
    // A copy-delivered zone is writable in its private copy: its approval is asked before
    // the result is published instead.
    let preapproved = |mount: &str| {
        sandbox.mounts().iter().any(|m| m.name == mount && (all_copied || m.approval.writes_preapproved() || m.delivery == crate::sandbox::Delivery::Copy))
    };
    let writable: Vec<_> = sandbox.writable_held().into_iter().filter(|(a, _)| preapproved(&a.mount)).collect();
    let mut out: Vec<(PlanMount, String)> = Vec::new();
    for (a, held) in sandbox.readable_held() {
        let rw = writable.iter().any(|(w, _)| w.sandbox_path == a.sandbox_path);
        out.push((PlanMount { source: a.host_path, target: target_of(&a.sandbox_path), read_only: !rw, held: Some(held) }, a.mount));
    }
    // Writable areas nested inside a read-only area get their own read-write mount.
    for (w, held) in writable {
        if !out.iter().any(|(m, _)| m.target == target_of(&w.sandbox_path)) {
            out.push((PlanMount { source: w.host_path, target: target_of(&w.sandbox_path), read_only: false, held: Some(held) }, w.mount));
        }
    }
    out.sort_by(|(a, _), (b, _)| a.target.matches('/').count().cmp(&b.target.matches('/').count()).then(a.target.cmp(&b.target)));
    out
}

/// Where the area at `sandbox_path` is mounted in the worker (a root-form sandbox's `/` is
/// [`ROOT_FORM_MOUNT_POINT`]).
pub fn mount_target(addressing: Addressing, sandbox_path: &str) -> String {
    match addressing {
        Addressing::Zones => sandbox_path.to_string(),
        Addressing::Root => {
            let rest = sandbox_path.trim_start_matches('/');
            if rest.is_empty() {
                ROOT_FORM_MOUNT_POINT.to_string()
            } else {
                format!("{ROOT_FORM_MOUNT_POINT}/{rest}")
            }
        }
    }
}

/// The zone mounts that `delivery: copy` replaces by a private copy. A zone that already is
/// the private copy of the run that starts this one (a shell command's, a child worker's) is
/// bound as it is: its changes are that run's, published after that run's review. A zone
/// holding control files is refused: they are bound live over the zone and would be
/// published from the copy.
pub(super) fn copy_mounts(sandbox: &Sandbox, zones: &[(PlanMount, String)], control: &[pin::Pinned]) -> Result<Vec<CopyMount>, PlanError> {
    let mut out = Vec::new();
    for (m, name) in zones {
        let Some(zone) = sandbox.mounts().iter().find(|x| &x.name == name && x.delivery == crate::sandbox::Delivery::Copy) else { continue };
        if sandbox.is_copied(&zone.name) {
            continue;
        }
        if control.iter().any(|c| c.bind.source.starts_with(&m.source)) {
            return Err(PlanError::CopyDelivery(zone.name.clone()));
        }
        out.push(CopyMount { target: m.target.clone(), zone: zone.name.clone(), writable: !m.read_only, withhold: Vec::new() });
    }
    Ok(out)
}

/// The working directory of a run that names none: the first writable mount, else the first
/// mount, else `/tmp`.
pub fn default_workdir(mounts: &[PlanMount]) -> String {
    mounts.iter().find(|m| !m.read_only).or(mounts.first()).map(|m| m.target.clone()).unwrap_or_else(|| "/tmp".into())
}
