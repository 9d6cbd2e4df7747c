//! `workcell gc` for cgroups: finds the per-run cgroups of runs that were killed before they
//! could remove their own, wherever they were created.
//!
//! A run creates `workcell-RUN_ID` beside the cgroup of the process that started it, and
//! that differs per controller and per starting process (a login session, a CI job, a
//! container). So the whole of every cgroup hierarchy is searched, not only the places the
//! collecting process would use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::detect::Mount;

/// How deep below a hierarchy's mount point leftovers are looked for: far deeper than any
/// real cgroup tree (systemd nests about five levels).
const MAX_DEPTH: usize = 32;

/// Cgroups younger than this are left alone: a run that is starting has an empty cgroup for
/// a moment.
const MIN_AGE: Duration = Duration::from_secs(60);

/// Removes the empty `workcell-*` cgroups older than a minute in every mounted hierarchy
/// (rmdir refuses a cgroup that still has processes, so a live run's cgroup stays). Returns
/// the removed directories.
pub fn remove_leftovers() -> Vec<PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = mountinfo.lines().filter_map(Mount::parse).map(|m| m.point).collect();
    points.sort();
    points.dedup();
    let mut removed = Vec::new();
    for point in points {
        sweep(&point, 0, &mut removed);
    }
    removed
}

/// Whether `name` is one of ours: a run's cgroup (`workcell-` and a 16-digit hex run id) or a
/// support probe (`workcell-probe-PID`).
fn is_ours(name: &str) -> bool {
    name.strip_prefix("workcell-").is_some_and(|rest| {
        (rest.len() == 16 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
            || rest.strip_prefix("probe-").is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    })
}

fn sweep(dir: &Path, depth: usize, removed: &mut Vec<PathBuf>) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        // Directories only, never through a symlink (cgroupfs has none, but a bind mount
        // of something else might).
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = e.path();
        if is_ours(&e.file_name().to_string_lossy()) {
            let old = e.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok()).is_some_and(|age| age > MIN_AGE);
            if old && std::fs::remove_dir(&path).is_ok() {
                removed.push(path);
            }
            continue;
        }
        sweep(&path, depth + 1, removed);
    }
}

#[cfg(test)]
mod tests {
    use super::is_ours;

    #[test]
    fn only_run_and_probe_cgroups_are_ours() {
        assert!(is_ours("workcell-0123456789abcdef"));
        assert!(is_ours("workcell-probe-4242"));
        assert!(!is_ours("workcell-"));
        assert!(!is_ours("workcell-probe-"));
        assert!(!is_ours("workcell-0123"));
        assert!(!is_ours("workcellar"));
        assert!(!is_ours("docker"));
    }
}
