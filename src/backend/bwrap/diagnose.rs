//! Why bwrap did not run the command: bwrap exits without an exit code of the worker when it
//! could not set up the sandbox or exec the program. The program is looked up here as bwrap's
//! `execvp` would, on the host through the plan's layout, to tell "not found" (127) and "not
//! executable" (126) from a sandbox that could not be made (125).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use super::probe;
use crate::backend::outcome::Explained;
use crate::backend::supervise::Notes;
use crate::backend::EXIT_INTERNAL;
use crate::plan::{LaunchPlan, SystemEntry};

/// bwrap exited without running the command to its end (it reports no exit code): map the
/// usual causes to the shell's exit statuses and say what happened.
pub(super) fn explain_bwrap_failure(plan: &LaunchPlan, code: i32, notes: &mut Notes) -> i32 {
    let Some(prog) = plan.command.first() else {
        return EXIT_INTERNAL;
    };
    let shown = crate::term::escape(prog);
    match resolve_command(plan, prog) {
        CommandLookup::NotFound => notes.explain(&Explained::NotFound(prog.clone())),
        CommandLookup::NotExecutable(_) => notes.explain(&Explained::NotExecutable(prog.clone())),
        CommandLookup::Found | CommandLookup::Unknown => {
            let hint = match probe() {
                Ok(_) => "see bwrap's message above".to_string(),
                Err(e) => e.to_string(),
            };
            notes.say(&format!("workcell: bwrap could not set up the sandbox or start {shown} (bwrap exit status {code}): {hint}"));
            EXIT_INTERNAL
        }
    }
}

/// Outcome of looking a command up in the sandbox's view of the filesystem.
#[derive(Debug, PartialEq, Eq)]
enum CommandLookup {
    Found,
    NotExecutable(String),
    NotFound,
    /// In a place only the sandbox has (`/tmp`, `/proc`, `/dev`): cannot tell from outside.
    Unknown,
}

/// Looks `prog` up as bwrap's `execvp` would, but on the host, translating sandbox paths
/// through the plan (zones → their sources, system binds → themselves, system symlinks).
fn resolve_command(plan: &LaunchPlan, prog: &str) -> CommandLookup {
    let candidates: Vec<String> = if prog.contains('/') {
        if prog.starts_with('/') {
            vec![prog.to_string()]
        } else {
            vec![format!("{}/{prog}", plan.workdir.trim_end_matches('/'))]
        }
    } else {
        let path = plan.env.get("PATH").map(String::as_str).unwrap_or(crate::plan::WORKER_PATH);
        path.split(':').filter(|d| d.starts_with('/')).map(|d| format!("{}/{prog}", d.trim_end_matches('/'))).collect()
    };
    let mut not_exec = None;
    for c in &candidates {
        match host_path_in_view(plan, c, 0) {
            View::Host(h) => match std::fs::metadata(&h) {
                Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return CommandLookup::Found,
                Ok(_) => not_exec = not_exec.or(Some(c.clone())),
                Err(_) => {}
            },
            View::SandboxOnly => return CommandLookup::Unknown,
            View::Absent => {}
        }
    }
    not_exec.map(CommandLookup::NotExecutable).unwrap_or(CommandLookup::NotFound)
}

enum View {
    Host(PathBuf),
    SandboxOnly,
    Absent,
}

fn under<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix.trim_end_matches('/'))?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// The host path behind sandbox path `p`, following the plan's layout.
fn host_path_in_view(plan: &LaunchPlan, p: &str, depth: u8) -> View {
    if depth > 8 {
        return View::Absent;
    }
    // Zones win over everything (they are mounted last); the deepest one wins.
    if let Some((m, rest)) = plan.mounts.iter().rev().filter_map(|m| under(p, &m.target).map(|r| (m, r))).max_by_key(|(m, _)| m.target.len()) {
        return View::Host(m.source.join(rest.trim_start_matches('/')));
    }
    if plan.tmpfs.iter().any(|t| under(p, &t.target).is_some()) || under(p, "/proc").is_some() || under(p, "/dev").is_some() {
        return View::SandboxOnly;
    }
    for e in &plan.system {
        match e {
            SystemEntry::Bind { path } if under(p, path).is_some() => return View::Host(PathBuf::from(p)),
            SystemEntry::Symlink { path, target } => {
                if let Some(rest) = under(p, path) {
                    let base = if target.starts_with('/') { target.clone() } else { format!("/{target}") };
                    return host_path_in_view(plan, &format!("{}{rest}", base.trim_end_matches('/')), depth + 1);
                }
            }
            _ => {}
        }
    }
    View::Absent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_matches_whole_components() {
        assert_eq!(under("/usr/bin/sh", "/usr"), Some("/bin/sh"));
        assert_eq!(under("/usr", "/usr"), Some(""));
        assert_eq!(under("/usrx/sh", "/usr"), None);
    }
}
