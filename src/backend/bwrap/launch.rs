//! What both run paths (supervised and captured) do before and at the spawn: check the
//! binary and the zones against the plan, create the run's cgroup, render the argv with the
//! descriptors bwrap binds, and start bwrap with exactly those descriptors passed on.

use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{locate, render_argv_passed, unenforced_limits_with, BwrapError, Located, Passed};
use crate::backend::cgroup::{RunCgroup, Support};
use crate::plan::LaunchPlan;

/// Spawns `cmd` with `inherit` passed on (their `FD_CLOEXEC` cleared only for the spawn,
/// under the process-wide spawn lock) and, with a cgroup, born inside its v1 directories.
/// The descriptors are closed here: the parent keeps only the other pipe ends.
pub(super) fn spawn_bwrap(cmd: &mut Command, inherit: Vec<OwnedFd>, cgroup: Option<&RunCgroup>, located: &Located) -> Result<std::process::Child, BwrapError> {
    crate::backend::spawn_exclusive(|| {
        for fd in &inherit {
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(BwrapError::PassPipes)?;
        }
        let spawned = match cgroup {
            Some(cg) => cg.spawn_inside(|| cmd.spawn()).map_err(BwrapError::Limits)?,
            None => cmd.spawn(),
        };
        drop(inherit);
        spawned.map_err(|source| BwrapError::Spawn { path: located.path.clone(), source })
    })
}

/// The bwrap argv for `plan` with the descriptors it names: a duplicate of every mount's
/// held handle (bwrap binds the handle, never the path again). The duplicates are
/// close-on-exec until [`spawn_bwrap`] passes them on.
pub(super) fn argv_and_fds(plan: &LaunchPlan, located: &Located) -> Result<(Vec<OsString>, Vec<OwnedFd>), BwrapError> {
    let mut owned = Vec::new();
    let mut passed = Passed::default();
    for m in &plan.mounts {
        let fd = match &m.held {
            Some(h) => {
                let fd = h.0.as_fd().try_clone_to_owned().map_err(|source| BwrapError::PassZone { zone: m.target.clone(), source })?;
                let raw = fd.as_raw_fd();
                owned.push(fd);
                Some(raw)
            }
            None => None,
        };
        passed.mounts.push(fd);
    }
    let mut accounts = [0; 2];
    let texts = [("/etc/passwd", crate::plan::accounts::passwd_text(plan.user)), ("/etc/group", crate::plan::accounts::group_text(plan.user))];
    for (slot, (path, text)) in accounts.iter_mut().zip(texts) {
        let fd = data_fd(&text).map_err(|source| BwrapError::PassData { path, source })?;
        *slot = fd.as_raw_fd();
        owned.push(fd);
    }
    passed.accounts = Some(accounts);
    let mut names = [0; 2];
    let texts = [("/etc/hosts", hosts_for(plan)), ("/etc/nsswitch.conf", crate::plan::accounts::NSSWITCH_TEXT.to_string())];
    for (slot, (path, text)) in names.iter_mut().zip(texts) {
        let fd = data_fd(&text).map_err(|source| BwrapError::PassData { path, source })?;
        *slot = fd.as_raw_fd();
        owned.push(fd);
    }
    passed.names = Some(names);
    match crate::backend::seccomp::filter_fd() {
        Ok(fd) => {
            passed.seccomp = Some(fd.as_raw_fd());
            owned.push(fd);
        }
        // No syscall table for this architecture: say so on every run, never silently.
        Err(e @ crate::backend::seccomp::SeccompError::UnsupportedArch(_)) => eprintln!("{} {e}", crate::style::warning_prefix()),
        Err(e) => return Err(BwrapError::Seccomp(e)),
    }
    Ok((render_argv_passed(plan, &located.path, located.features, &passed), owned))
}

/// The bwrap binary for `plan` and the run's cgroup, with the limits it cannot enforce.
///
/// Memory, cpu and process limits: a cgroup of the run's own, tried directly (no probe).
/// bwrap is born inside it (cgroup v1), or the sandbox waits on `--block-fd` until bwrap
/// and its init have been moved in (v2); either way every process of the worker starts
/// inside. A limit whose cgroup cannot be created here is named as not enforced; one that
/// cannot be written or entered stops the run.
pub(super) fn prepare(plan: &LaunchPlan) -> Result<(&'static Located, Option<RunCgroup>, Support), crate::backend::BackendError> {
    let located = locate()?;
    if let Some(m) = plan.mounts.iter().find(|m| located.path.starts_with(&m.source)) {
        return Err(BwrapError::InsideZone { bwrap: located.path.clone(), zone_dir: m.source.clone(), zone: m.target.clone() }.into());
    }
    let sources: Vec<&Path> = plan.mounts.iter().map(|m| m.source.as_path()).collect();
    for (m, blocked) in plan.mounts.iter().zip(unreachable_each(&sources, plan.user)) {
        if let Some((dir, mode, owner)) = blocked {
            return Err(BwrapError::ZoneUnreachable { uid: plan.user.uid, zone: m.target.clone(), zone_dir: m.source.clone(), dir, mode, owner }.into());
        }
    }
    let (cgroup, support) = RunCgroup::create(&plan.run_id, &plan.limits, &Support::located()).map_err(BwrapError::Limits)?;
    for w in unenforced_limits_with(plan, &support) {
        tracing::debug!("bwrap does not enforce: {w}");
    }
    Ok((located, cgroup, support))
}

/// The first directory above `path` that `user` may not search (bwrap, running as the
/// worker, resolves the path of each bound handle and checks the mount against it), with
/// its mode and owner. The kernel answers, as the worker (ACLs count: a 0700 directory whose
/// ACL lets the worker search it is no obstacle); where it cannot be asked, the mode bits
/// decide. Supplementary groups are ignored: the worker has none.
fn unreachable_each(paths: &[&Path], user: crate::plan::UserSpec) -> Vec<Option<(PathBuf, u32, u32)>> {
    if user.uid == 0 {
        return paths.iter().map(|_| None).collect();
    }
    let asked = crate::plan::access::unsearchable_above_each(paths, user);
    paths.iter().zip(asked).map(|(p, answer)| unreachable_for(p, user, answer)).collect()
}

/// The kernel's `answer` for `path` (see above), or where it could not be asked the mode
/// bits' reading.
fn unreachable_for(path: &Path, user: crate::plan::UserSpec, answer: std::io::Result<Option<PathBuf>>) -> Option<(PathBuf, u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(blocked) = answer {
        return blocked.map(|dir| {
            let (mode, owner) = std::fs::metadata(&dir).map(|m| (m.mode() & 0o7777, m.uid())).unwrap_or((0, 0));
            (dir, mode, owner)
        });
    }
    path.ancestors().skip(1).find_map(|dir| {
        let m = std::fs::metadata(dir).ok()?;
        let bit = if m.uid() == user.uid {
            0o100
        } else if m.gid() == user.gid {
            0o010
        } else {
            0o001
        };
        (m.mode() & bit == 0).then(|| (dir.to_path_buf(), m.mode() & 0o7777, m.uid()))
    })
}

/// The worker's `/etc/hosts`: its own lines, then, with the host's network, the host's file
/// (its first 16 KiB: a pipe's capacity is not exceeded, so writing it cannot block).
fn hosts_for(plan: &LaunchPlan) -> String {
    let mut text = crate::plan::accounts::hosts_text();
    if plan.network.is_open() {
        use std::io::Read;
        let mut host = Vec::new();
        if let Ok(f) = std::fs::File::open("/etc/hosts") {
            let _ = f.take(16 << 10).read_to_end(&mut host);
        }
        text.push_str(&String::from_utf8_lossy(&host));
    }
    text
}

/// A pipe's read end holding `text` (close-on-exec until passed on), for `--file`:
/// bwrap reads it to the end at setup. The text is a few hundred bytes, far below a pipe's
/// capacity, so writing it all before bwrap starts cannot block.
fn data_fd(text: &str) -> std::io::Result<OwnedFd> {
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    std::io::Write::write_all(&mut std::fs::File::from(w), text.as_bytes())?;
    Ok(r)
}
