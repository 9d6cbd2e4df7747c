//! The exec agent's program for a session sandbox: this binary, where the worker can reach it.

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// This binary as a file the worker can reach. bwrap, running as the worker, opens each bound
/// handle's path again, so a workcell installed where the worker may not search (root's
/// `cargo install` in `/root/.cargo/bin`, under a 0700 home) is copied into the agent's
/// directory `dir` (workcell's own, shared with the worker) and bound from there.
pub(super) fn reachable(dir: &Path, user: super::UserSpec) -> std::io::Result<PathBuf> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    // The kernel answers, as the worker (ACLs count); where it cannot be asked, a copy costs a
    // session's start a few milliseconds where a refusal would cost the session.
    #[cfg(target_os = "linux")]
    let reachable = user.uid == 0 || matches!(super::access::unsearchable_above_each(&[exe.as_path()], user).pop(), Some(Ok(None)));
    // Elsewhere no backend reopens the path as the worker.
    #[cfg(not(target_os = "linux"))]
    let reachable = true;
    if reachable {
        return Ok(exe);
    }
    let copy = dir.join("workcell-agent");
    let mut from = std::fs::File::open(&exe)?;
    let mut to = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o755).open(&copy)?;
    std::io::copy(&mut from, &mut to)?;
    // The mode asked for passed through the umask.
    to.set_permissions(std::fs::Permissions::from_mode(0o755))?;
    Ok(copy)
}
