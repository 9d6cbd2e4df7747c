//! `workcell plan` with neither worker nor command: the project's sandbox, as every run of
//! it starts from (zones, modes, approvals, network, limits), instead of an error.

use serde_json::json;

use super::super::out::outln;
use super::{heading, image_text, limits_text, network_text, print_protected, CliError};
use crate::config::Project;
use crate::plan::{LaunchPlan, Overrides};
use crate::sandbox::{Approval, Delivery, Mount, ZoneMode};
use crate::term::escape;

/// The plan is made for a stand-in command, so that every check a run makes (access,
/// protected files, network rules) is made here too; the command itself is never shown.
const STAND_IN: &str = "true";

/// Prints the project's sandbox; the exit status is that of `plan` (a zone the worker's
/// user cannot use is refused after it is shown).
pub fn print(project: &Project, json: bool, runtime: Option<String>, backend: crate::config::BackendChoice) -> Result<i32, CliError> {
    let sandbox = &project.sandbox;
    let ov = Overrides { command: Some(vec![STAND_IN.into()]), runtime, ..Overrides::default() };
    let plan = LaunchPlan::build(project, None, sandbox, &ov).map_err(|e| CliError::Usage(e.to_string()))?;
    let runs_on = super::RunsOn::of(&plan, backend, project.require_os_sandbox);
    let access = match backend {
        crate::config::BackendChoice::Seatbelt | crate::config::BackendChoice::None => Ok(()),
        _ => crate::plan::access::check_sandbox(sandbox, plan.user, runs_on.selected == Some(crate::backend::Selected::Bwrap))
            .map_err(|e| CliError::Usage(e.to_string())),
    };
    let file = project.file.as_ref().map(|f| f.display().to_string());
    let workers: Vec<&String> = project.workers.keys().collect();
    if json {
        let v = json!({
            "project": file,
            "backend": project.defaults.backend,
            "runs_on": runs_on.json(),
            "image": plan.image,
            "zones": sandbox.mounts(),
            "network": plan.network,
            "egress": plan.egress,
            "limits": plan.limits,
            "user": plan.user,
            "workdir": plan.workdir,
            "protected": plan.protected,
            "workers": workers,
        });
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        outln!("{}", heading("The project's sandbox (`workcell plan WORKER` or `workcell plan -- COMMAND` plans a run):"));
        outln!("{}  {}", heading("project:"), escape(file.as_deref().unwrap_or("(no workcell.yaml)")));
        let named = serde_json::to_value(backend).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        outln!("{}  {named}: runs on {}", heading("backend:"), escape(&runs_on.text()));
        outln!("{}    {}", heading("image:"), image_text(&plan.image));
        outln!("{}", heading("zones:"));
        if sandbox.mounts().is_empty() {
            outln!("  (none)");
        }
        let width = sandbox.mounts().iter().map(|m| escape(&m.mount_point).chars().count()).max().unwrap_or(0);
        for m in sandbox.mounts() {
            outln!("  {:<width$}  {}", escape(&m.mount_point), zone_text(m));
        }
        outln!("{}  {}", heading("network:"), network_text(&plan));
        outln!("{}   {}", heading("limits:"), limits_text(&plan.limits));
        outln!("{}     {}:{}", heading("user:"), plan.user.uid, plan.user.gid);
        outln!("{}  {}", heading("workdir:"), escape(&plan.workdir));
        print_protected(&plan);
        let names: Vec<String> = workers.iter().map(|w| escape(w).into_owned()).collect();
        outln!("{}  {}", heading("workers:"), if names.is_empty() { "none".to_string() } else { names.join(", ") });
    }
    access.map(|()| 0)
}

/// `ro <- /host/dir, delivery: copy, writes ask, deletes ask`.
fn zone_text(m: &Mount) -> String {
    let mode = if m.mode == ZoneMode::Rw { "rw" } else { "ro" };
    let mut parts = vec![format!("{mode} <- {}", escape(&m.host_path.to_string_lossy()))];
    if m.delivery == Delivery::Copy {
        parts.push("delivery: copy".into());
    }
    let word = |a: Approval| match a {
        Approval::PreApproved => "pre-approved",
        Approval::Ask => "ask",
        Approval::Blocked => "blocked",
    };
    let mut approvals = vec![("reads", m.approval.read)];
    if m.mode == ZoneMode::Rw {
        approvals.extend([("writes", m.approval.write), ("deletes", m.approval.delete)]);
    }
    parts.push(approvals.iter().map(|(what, a)| format!("{what} {}", word(*a))).collect::<Vec<_>>().join(", "));
    if let Some(s) = &m.suffixes {
        parts.push(format!("only {}", escape(&s.join(" "))));
    }
    if let Some(max) = m.max_file_bytes {
        parts.push(format!("files up to {}", super::bytes_text(max)));
    }
    parts.join(", ")
}
