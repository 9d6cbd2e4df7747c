//! The run's side of files the host runs (`crate::hostrun`): after the worker is gone,
//! whatever the way it ended, every protected area of the plan is swept
//! ([`quarantine::sweep`]) and what was moved aside is told: on stderr (or, for a captured
//! run, after the worker's stderr, where the agent that called it reads), as a JSON line
//! with `--json`, and in one `quarantine` audit record.

use std::borrow::Cow;

use crate::audit::AuditLog;
use crate::backend::{Finished, Output};
use std::os::fd::AsFd;

use crate::hostrun::looked;
use crate::hostrun::quarantine::{self, Outcome, Report, Why, DIR, MAX_DEPTH};
use crate::plan::LaunchPlan;

/// How many items are told one per line (per area); the rest are counted.
pub const LISTED: usize = 20;

/// Sweeps every protected area of `plan`; returns the reports that say something.
/// What the walks saw is kept for the next run's (`hostrun::looked`), when it changed.
/// `id` names the quarantine: the run's id (a session's later calls: `RUN_ID.N`).
pub(super) fn sweep(plan: &LaunchPlan, id: &str) -> Vec<Report> {
    let reports = plan.protected.iter().map(|a| quarantine::sweep(a, id)).collect::<Vec<_>>();
    for a in &plan.protected {
        if let (Some(held), Some(looks)) = (&a.held, a.looked.to_keep()) {
            looked::store::save(&plan.project_dir, held.0.as_fd(), &looks);
        }
    }
    reports.into_iter().filter(|r| !r.is_empty()).collect()
}

/// Tells what `reports` found: into a captured run's stderr (after the worker's, past its
/// cap), else on workcell's stderr (one JSON line with `json`); and in the audit log.
pub(super) fn tell(
    reports: &[Report],
    run_id: &str,
    output: Output,
    json: bool,
    result: &mut Result<Finished, crate::backend::BackendError>,
    audit: &AuditLog,
) {
    if reports.is_empty() {
        return;
    }
    // An agent reads a captured run's notes: it is told the paths it knows, never the host's.
    let text: Vec<String> = reports.iter().flat_map(|r| lines(r, run_id, output == Output::Inherit)).collect();
    super::tell_found(&text, ("quarantine", "areas", "quarantine"), &reports, run_id, output, json, result, audit);
}

/// The lines that tell one area's report (at most [`LISTED`] items, then a count); the
/// area named by its host path (when known) if `host`, else by its path in the sandbox.
pub fn lines(r: &Report, run_id: &str, host: bool) -> Vec<String> {
    let target = crate::term::escape(if host { r.host.as_deref().unwrap_or(&r.target) } else { &r.target });
    let mut out = Vec::new();
    for item in r.items.iter().take(LISTED) {
        let path = crate::term::escape(&item.path);
        let why: Cow<'_, str> = match &item.why {
            Why::Protected { entry } => {
                format!("a file the host runs, protected as '{}'; see docs/security.md, \"Files the host runs\"", crate::term::escape(entry)).into()
            }
            Why::TooDeep => format!("deeper than {MAX_DEPTH} directories, so not checked").into(),
            Why::Unreadable { error } => format!("a directory that could not be read ({}), so not checked", crate::term::escape(error)).into(),
            Why::Crowded { entries } => format!("a directory holding more than {entries} names, so not checked").into(),
        };
        out.push(match &item.outcome {
            Outcome::Quarantined { to } => format!("workcell: moved aside {path} in {target} ({why}): now {}", crate::term::escape(to)),
            Outcome::Removed { error } => format!("workcell: removed {path} in {target} ({why}): it could not be moved aside: {}", crate::term::escape(error)),
            Outcome::Left { error } => {
                format!("workcell: WARNING: {path} in {target} is still there ({why}): {}; remove it before you use the folder", crate::term::escape(error))
            }
        });
    }
    let told = r.items.len().min(LISTED) as u64;
    if r.total > told {
        out.push(format!("workcell: and {} more in {target}, in {DIR}/{run_id} (the audit log lists the first {})", r.total - told, quarantine::KEPT));
    }
    // An area not fully checked is not told here: the run fails with it (`run::unverified`).
    out
}
