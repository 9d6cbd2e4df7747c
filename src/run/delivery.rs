//! The run's side of `delivery: copy`: private copies bound in place of the zones before the
//! backend starts, and after a normal exit the worker's trees checked, shown, approved when
//! the zone or `--review` says so, published and recorded.

use std::os::fd::AsFd;

use serde_json::json;

use crate::delivery::{baseline, collect::Staging, publish, walk, DeliveryError, Policy, Summary};
use crate::plan::{Held, LaunchPlan};
use crate::sandbox::{CopiedArea, Sandbox};
use crate::tools::approval::{Action, ApprovalMode, ApprovalRequest, Choice, Prompter, TerminalPrompter};
use crate::tools::audit::AuditLog;

use super::RunError;

/// One copy-delivered mount of a run.
#[derive(Debug)]
pub(super) struct Delivery {
    zone: String,
    target: String,
    copy: baseline::Copy,
    /// The zone's own handle, taken before the plan's mount was pointed at the copy.
    host: Held,
    policy: Policy,
    writable: bool,
    /// The zone's writes or deletes are not pre-approved: a person says yes first.
    ask: bool,
    /// The files the host runs in this zone: never published (`crate::hostrun`).
    protection: crate::hostrun::Protection,
}

/// How the results are shown and approved.
#[derive(Debug, Clone, Copy, Default)]
pub struct Review {
    /// Show the summary and ask a person before publishing, whatever the zone says.
    pub review: bool,
    /// Print each summary as one JSON line instead of text.
    pub json: bool,
}

/// Copies every copy-delivered zone of `plan` and points its mount at the copy.
pub(super) fn prepare(plan: &mut LaunchPlan, sandbox: &Sandbox) -> Result<Vec<Delivery>, RunError> {
    let mut out = Vec::new();
    for c in plan.copies.clone() {
        let Some(mount) = plan.mounts.iter_mut().find(|m| m.target == c.target) else { continue };
        let zone = sandbox.mounts().iter().find(|m| m.name == c.zone).ok_or_else(|| RunError::Plan(crate::plan::PlanError::CopyDelivery(c.zone.clone())))?;
        let host = mount.held.clone().ok_or_else(|| RunError::Plan(crate::plan::PlanError::CopyDelivery(c.zone.clone())))?;
        let policy = Policy { suffixes: zone.suffixes.clone(), max_file_bytes: zone.max_file_bytes, ..Policy::default() };
        // The zone's bounds apply while the copy is taken: a zone over them is refused here,
        // before the worker starts, as a plan that cannot be run (exit 2).
        let copy = baseline::copy_in(&*host.0, &c.zone, plan.user, &policy).map_err(|e| match e {
            e @ (DeliveryError::ZoneTooManyEntries { .. } | DeliveryError::ZoneTooManyBytes { .. }) => RunError::CopyRefused(e),
            e => RunError::Delivery(e),
        })?;
        // Said before the run, read-only zones included: the worker will not find these.
        let note = Summary { not_copied: copy.baseline.not_copied_names(), too_large: copy.baseline.too_large_names(), ..Summary::default() };
        if let Some(line) = note.not_copied_line() {
            eprintln!("workcell: zone {}: {line} (uid {})", crate::term::escape(&c.zone), plan.user.uid);
        }
        if let Some(line) = note.too_large_line() {
            eprintln!("workcell: zone {}: {line}", crate::term::escape(&c.zone));
        }
        mount.held = Some(Held::dup(copy.root()).map_err(|e| crate::delivery::DeliveryError::io("hold the private copy", &c.zone)(e))?);
        mount.source = copy.path().to_path_buf();
        out.push(Delivery {
            zone: c.zone,
            target: c.target,
            copy,
            host,
            policy,
            writable: c.writable,
            ask: !zone.approval.writes_preapproved(),
            protection: zone.protection.clone(),
        });
    }
    Ok(out)
}

/// The run's sandbox with each private copy in place of the area it stands for: what the
/// run's tool service reads and writes, and what its shell commands and child workers get
/// (so whatever they change is in the copy, and reviewed with the worker's own changes).
pub(super) fn on_copies(sandbox: &Sandbox, deliveries: &[Delivery]) -> Result<Sandbox, RunError> {
    if deliveries.is_empty() {
        return Ok(sandbox.clone());
    }
    let paths: Vec<String> = sandbox.readable_roots().into_iter().chain(sandbox.writable_roots()).collect();
    let mut copies = Vec::new();
    for d in deliveries {
        // Every copy stands for an area of the sandbox; one that does not is refused rather
        // than leave the tool service on the host's directory.
        let Some(p) = paths.iter().find(|p| crate::plan::mount_target(sandbox.addressing(), p) == d.target) else {
            return Err(RunError::Copies { target: d.target.clone(), source: None });
        };
        copies.push(CopiedArea { sandbox_path: p.clone(), root: d.copy.root().as_fd() });
    }
    let targets = deliveries.iter().map(|d| d.target.as_str()).collect::<Vec<_>>().join(", ");
    sandbox.on_copies(&copies).map_err(|e| RunError::Copies { target: targets, source: Some(Box::new(e)) })
}

/// Collects, checks and (when allowed) publishes every writable copy. `withheld` says why
/// nothing may be published (a timeout, an interruption, a failed start).
pub(super) fn finish(deliveries: Vec<Delivery>, withheld: Option<&str>, review: Review, mode: ApprovalMode, audit: &AuditLog) -> Vec<Summary> {
    let mut summaries = Vec::new();
    for d in deliveries.into_iter().filter(|d| d.writable) {
        let summary = match withheld {
            Some(why) => Summary::withheld(&d.zone, why.to_string()),
            None => deliver(&d, review, mode),
        };
        if review.json {
            eprintln!("{}", serde_json::to_string(&json!({"delivery": &summary})).unwrap_or_default());
        } else {
            eprintln!("{}", summary.text());
        }
        if let Err(e) = audit.record("delivery", json!({"target": d.target, "summary": &summary})) {
            eprintln!("workcell: cannot record the delivery in the audit log: {e}");
        }
        summaries.push(summary);
    }
    summaries
}

fn deliver(d: &Delivery, review: Review, mode: ApprovalMode) -> Summary {
    let failed = |why: String| Summary::withheld(&d.zone, why);
    let mut staging = match Staging::new() {
        Ok(s) => s,
        Err(e) => return failed(format!("cannot create the staging directory: {e}")),
    };
    let collected = match walk::collect_dir(d.copy.root(), &d.policy, &mut staging) {
        Ok(c) => c,
        Err(e) => return failed(e.to_string()),
    };
    let mut changes = publish::diff(&d.zone, &*d.host.0, &d.copy.baseline, &collected);
    changes.withhold_hostrun(&collected, &d.protection);
    if changes.is_empty() {
        return changes.summary();
    }
    if let Err(why) = approve(d, &changes.summary(), review, mode) {
        let mut s = changes.summary();
        s.status = crate::delivery::Status::Withheld;
        s.withheld = Some(why.to_string());
        return s;
    }
    changes.publish(&*d.host.0, &staging)
}

/// Why a delivery's changes were not published (the summary's `withheld`).
#[derive(Debug, thiserror::Error)]
enum Withheld {
    #[error("the zone's writes need approval and --strict denies every approval")]
    Strict,
    #[error("the reviewer said no")]
    SaidNo,
    #[error("nobody could be asked: {0}")]
    NobodyToAsk(#[source] crate::tools::approval::PromptError),
}

/// Asks for a yes when the zone or `--review` wants one; `Err` says why not.
fn approve(d: &Delivery, summary: &Summary, review: Review, mode: ApprovalMode) -> Result<(), Withheld> {
    if !review.review && !d.ask {
        return Ok(());
    }
    if !review.review {
        match mode {
            ApprovalMode::ApproveAll => return Ok(()),
            ApprovalMode::Strict => return Err(Withheld::Strict),
            ApprovalMode::Interactive => {}
        }
    }
    eprintln!("{}", summary.text());
    let req = ApprovalRequest::new(Action::Write, format!("the changes above into zone {}", d.zone), d.zone.clone());
    match TerminalPrompter.ask(&req) {
        Ok(Choice::Once | Choice::Session) => Ok(()),
        Ok(_) => Err(Withheld::SaidNo),
        Err(e) => Err(Withheld::NobodyToAsk(e)),
    }
}
