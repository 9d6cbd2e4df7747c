//! The run's side of `delivery: copy`: private copies bound in place of the zones before the
//! backend starts, and after a normal exit the worker's trees checked, shown, approved when
//! the zone or `--review` says so, published and recorded.

use std::os::fd::AsFd;

use serde_json::json;

use crate::audit::AuditLog;
use crate::backend::docker::ship::{Checked, Returns};
use crate::delivery::publish::Changes;
use crate::delivery::{baseline, collect::Staging, publish, walk, DeliveryError, Policy, Status, Summary};
use crate::plan::{Held, LaunchPlan};
use crate::sandbox::{CopiedArea, Sandbox};
use crate::tools::approval::{ApprovalMode, Tty};

use super::review::{self, Withheld};
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
    /// Paths (relative to the zone) never published: control files a shipped zone carries.
    control: Vec<Vec<String>>,
    /// The copy went to a remote engine: its result comes back as an archive (`Returns`).
    shipped: bool,
    /// The worker's user: publishing makes only the changes it could make on the host.
    user: crate::plan::UserSpec,
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
            control: c.withhold.iter().map(|p| p.split('/').map(str::to_string).collect()).collect(),
            shipped: plan.shipped.is_some(),
            user: plan.user,
        });
    }
    Ok(out)
}

/// What the run brings back from a remote engine: each shipped writable zone, with the
/// policy its tree is checked against as it downloads.
pub(super) fn returns_for(deliveries: &[Delivery]) -> Returns {
    let returns = Returns::default();
    for d in deliveries.iter().filter(|d| d.shipped && d.writable) {
        returns.expect(&d.target, d.policy.clone());
    }
    returns
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
/// nothing may be published (a timeout, an interruption, a failed start). Each zone's result
/// is printed once: the full summary, or, after a review that showed the same changes, one
/// result line; with `--json`, one delivery line per zone.
pub(super) fn finish(
    deliveries: Vec<Delivery>,
    withheld: Option<&str>,
    returns: &Returns,
    review: Review,
    mode: ApprovalMode,
    audit: &AuditLog,
) -> Vec<Summary> {
    let mut summaries = Vec::new();
    for d in deliveries.into_iter().filter(|d| d.writable) {
        let (summary, shown) = match withheld {
            Some(why) => (Summary::withheld(&d.zone, why.to_string()), None),
            None => deliver(&d, returns, review, mode),
        };
        // The review was on the terminal; stderr going elsewhere (a log) gets it all.
        let shown = shown.filter(|_| crate::term::stderr_is_terminal());
        if review.json {
            eprintln!("{}", delivery_line(&summary));
        } else {
            // Said after the worker wrote to the same terminal: nothing it left set may
            // frame or hide the summary (a review said this already on its terminal).
            if shown.is_none() && crate::term::stderr_is_terminal() {
                eprint!("{}", crate::term::reset_and_separate("delivery"));
            }
            eprintln!("{}", result_text(&summary, shown.as_ref()));
        }
        if let Err(e) = audit.record("delivery", json!({"target": d.target, "summary": &summary})) {
            eprintln!("workcell: cannot record the delivery in the audit log: {e}");
        }
        summaries.push(summary);
    }
    summaries
}

/// The `--json` line of a summary: names are escaped already, and a terminal still gets no
/// DEL, C1 or layout character from any other string in it.
pub(super) fn delivery_line(summary: &Summary) -> String {
    crate::term::json_for_terminal(&serde_json::to_string(&json!({"delivery": summary})).unwrap_or_default())
}

/// What to print about `summary` after a review showed `shown`: one line with the result
/// when the changes are the ones shown, else the whole summary.
pub(super) fn result_text(summary: &Summary, shown: Option<&Summary>) -> String {
    let Some(shown) = shown else { return summary.text() };
    let mut same = summary.clone();
    same.status = shown.status;
    same.withheld.clone_from(&shown.withheld);
    if same != *shown {
        return summary.text();
    }
    let result = match summary.status {
        Status::Published => "published as shown".to_string(),
        Status::Withheld => format!("nothing published: {}", crate::term::escape_lines(summary.withheld.as_deref().unwrap_or(""))),
        // Not reached (a partial publish names what failed, so it differs); said plainly anyway.
        Status::Partial => "published in part".to_string(),
        Status::Pending | Status::NoChanges => "nothing to publish".to_string(),
    };
    format!("workcell: delivery of zone {}: {result}", crate::term::escape(&summary.zone))
}

/// Checks, reviews and publishes one zone; also the pending summary when a person was shown it.
fn deliver(d: &Delivery, returns: &Returns, review: Review, mode: ApprovalMode) -> (Summary, Option<Summary>) {
    let failed = |why: String| (Summary::withheld(&d.zone, why), None);
    // A shipped zone was checked as it came back from the engine (`ship::bring_back`).
    let checked = if d.shipped {
        returns.take(&d.target).unwrap_or_else(|| Err(DeliveryError::Download(std::io::Error::other("the engine returned nothing for this zone"))))
    } else {
        Staging::new().map_err(DeliveryError::io("create the staging directory", &d.zone)).and_then(|mut staging| {
            let collected = walk::collect_dir(d.copy.root(), &d.policy, &mut staging)?;
            Ok(Checked { collected, staging })
        })
    };
    let Checked { collected, staging } = match checked {
        Ok(c) => c,
        Err(e) => return failed(e.to_string()),
    };
    let mut changes = publish::diff(&d.zone, &*d.host.0, &d.copy.baseline, &collected);
    changes.withhold_hostrun(&collected, &d.protection);
    changes.withhold_control(&d.control);
    if changes.is_empty() {
        return (changes.summary(), None);
    }
    let pending = changes.summary();
    let asked = approve(d, &mut changes, &staging, &pending, review, mode);
    let shown = asked.shown.then_some(pending);
    if let Err(why) = asked.verdict {
        let mut s = changes.summary();
        s.status = Status::Withheld;
        s.withheld = Some(why.to_string());
        return (s, shown);
    }
    (changes.publish(&*d.host.0, &staging, crate::identity::Identity::of(d.user)), shown)
}

/// What [`approve`] decided, and whether a person was shown the pending summary.
struct Asked {
    verdict: Result<(), Withheld>,
    shown: bool,
}

/// Asks for a yes when the zone or `--review` wants one.
fn approve(d: &Delivery, changes: &mut Changes, staging: &Staging, pending: &Summary, review: Review, mode: ApprovalMode) -> Asked {
    let decided = |verdict| Asked { verdict, shown: false };
    if !review.review && !d.ask {
        return decided(Ok(()));
    }
    if !review.review {
        match mode {
            ApprovalMode::ApproveAll => return decided(Ok(())),
            ApprovalMode::Strict => return decided(Err(Withheld::Strict)),
            ApprovalMode::Interactive => {}
        }
    }
    let mut tty = match Tty::open() {
        Ok(t) => t,
        Err(e) => return decided(Err(Withheld::NobodyToAsk(e))),
    };
    tty.settle();
    let rows = tty.rows();
    let verdict = review::review(&mut tty, rows, changes, staging, pending);
    // A terminal that failed before the summary was written showed nothing.
    let shown = !matches!(verdict, Err(Withheld::NobodyToAsk(_)));
    Asked { verdict, shown }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_line_has_no_raw_format_or_control_character() {
        let mut s = Summary::withheld("out", "cannot read a\u{202e}txt.md\u{85}: gone".into());
        s.refused.refuse("b\u{202e}c", crate::delivery::Reason::Symlink);
        let line = delivery_line(&s);
        assert!(!line.chars().any(|c| c.is_control() || c == '\u{202e}'), "{line}");
        let back: serde_json::Value = serde_json::from_str(&line).expect("still JSON");
        assert_eq!(back["delivery"]["withheld"], "cannot read a\u{202e}txt.md\u{85}: gone");
    }

    #[test]
    fn after_a_review_the_result_is_one_line_unless_it_differs() {
        let mut pending = Summary::new("out");
        pending.added.file("a.md", 2, false);
        pending.status = Status::Pending;
        let mut published = pending.clone();
        published.status = Status::Published;
        assert_eq!(result_text(&published, Some(&pending)), "workcell: delivery of zone out: published as shown");
        let mut said_no = pending.clone();
        said_no.status = Status::Withheld;
        said_no.withheld = Some("the reviewer said no".into());
        assert_eq!(result_text(&said_no, Some(&pending)), "workcell: delivery of zone out: nothing published: the reviewer said no");
        let mut partial = published.clone();
        partial.status = Status::Partial;
        partial.failed.fail("b.md", "no space".into());
        assert!(result_text(&partial, Some(&pending)).contains("failed    b.md: no space"));
        assert_eq!(result_text(&published, None), published.text());
    }

    #[test]
    fn a_deletion_only_question_says_delete() {
        let mut s = Summary::new("out");
        s.deleted.name("old.md");
        let q = review::question(&s);
        assert!(q.starts_with("workcell: delete 1 file(s) from zone out, as the worker did?"), "{q}");
        assert!(!q.contains("write") && !q.contains("[s]ession"), "{q}");
        s.added.file("n.md", 1, false);
        assert!(review::question(&s).starts_with("workcell: publish these changes (1 added, 0 changed, 1 deleted) into zone out?"));
    }
}
