//! The run's side of history and the index (`crate::hostrun::history`): the repositories of
//! the plan are noted before the worker starts and checked after it is gone; what was set
//! back is told as the planted files are (`run::planted`): on stderr (or after a captured
//! run's stderr), as a JSON line with `--json`, and in one `history` audit record. A run
//! whose check set something back (or could not finish) exits 3 when the worker exited 0.

use crate::audit::AuditLog;
use crate::backend::{Finished, Output};
use crate::hostrun::history::{Report, KEPT};

/// Tells what `reports` found (see the module's doc).
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
    let text: Vec<String> = reports.iter().flat_map(|r| lines(r, output == Output::Inherit)).collect();
    super::tell_found(&text, ("history", "repositories", "history check"), &reports, run_id, output, json, result, audit);
    // The run looks successful only if nothing of the worker's was set back.
    if let Ok(finished) = result.as_mut() {
        if finished.exit_code == 0 && reports.iter().any(Report::acted) {
            finished.exit_code = super::EXIT_HELD_BACK;
        }
    }
}

/// The lines that tell one repository's report; the zone named by its host path (when
/// known) if `host`, else by its path in the sandbox.
pub fn lines(r: &Report, host: bool) -> Vec<String> {
    let zone = crate::term::escape(if host { r.host.as_deref().unwrap_or(&r.target) } else { &r.target });
    let repo =
        if r.repository == "." { format!("the repository in {zone}") } else { format!("the repository {} in {zone}", crate::term::escape(&r.repository)) };
    let short = |id: &str| id.chars().take(12).collect::<String>();
    let mut out = Vec::new();
    for m in &r.moved {
        let paths = m.paths.iter().map(|p| crate::term::escape(p).into_owned()).collect::<Vec<_>>().join(", ");
        let more = if m.total > KEPT { format!(" and {} more", m.total - KEPT) } else { String::new() };
        let from = m.from.as_deref().map_or("no commit (an unborn branch)".to_string(), short);
        let what = crate::term::escape(&m.what);
        let how = match (&m.error, &m.kept) {
            (Some(e), _) => format!(
                "WARNING: {what} could NOT be set back ({}): do not check it out, reset or stash; set it back with `git update-ref {what} {from}`",
                crate::term::escape(e)
            ),
            (None, _) => format!("{what} set back to {from}"),
        };
        let kept = match &m.kept {
            Some(k) => format!("the worker's commits are kept as {k}: look with `git log -p {k}`"),
            None => "the worker's commits could not be kept under refs/workcell/quarantine".to_string(),
        };
        out.push(format!(
            "workcell: in {repo}, the worker's commits changed files the host runs ({paths}{more}; see docs/security.md, \"History and the index\"): {how} (the worker had left it at {}); {kept}",
            short(&m.to)
        ));
    }
    if r.index_total > 0 {
        let base = r.index_base.as_deref().map_or("an empty tree (no commit yet)".to_string(), short);
        let staged = r
            .index
            .iter()
            .map(|s| {
                if s.was.is_empty() {
                    crate::term::escape(&s.path).into_owned()
                } else {
                    format!("{} (was {})", crate::term::escape(&s.path), crate::term::escape(&s.was))
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let more = if r.index_total > KEPT { format!(" and {} more", r.index_total - KEPT) } else { String::new() };
        out.push(format!(
            "workcell: in {repo}, the index's entries for files the host runs were set back to those of {base}: {staged}{more}; if you had staged one of them yourself before the run, stage it again (`git update-index --cacheinfo MODE,ID,PATH`)"
        ));
    }
    if !r.moved.is_empty() || r.index_total > 0 {
        out.push(format!(
            "workcell: in {repo}, other branches are not checked: review a branch the worker made before you check it out (`git branch --sort=-committerdate`)"
        ));
    }
    if let Some(p) = &r.problem {
        out.push(format!(
            "workcell: WARNING: {repo} could not be checked for commits or staged files the worker left: {}; before `git reset`, `git checkout` or `git stash` there, look at `git log -p` and `git diff --cached`",
            crate::term::escape(p)
        ));
    }
    out
}
