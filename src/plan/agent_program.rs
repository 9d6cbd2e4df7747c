//! The exec agent's program for a session sandbox: this binary, where the worker can reach it.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// This binary as a file the worker can reach. bwrap, running as the worker, opens each bound
/// handle's path again, so a workcell installed where the worker may not search (root's
/// `cargo install` in `/root/.cargo/bin`, under a 0700 home) is copied into the agent's
/// directory `dir` (workcell's own, shared with the worker) and bound from there.
pub(super) fn reachable(dir: &Path, user: super::UserSpec) -> std::io::Result<PathBuf> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    // The mode bits decide (as root, with no ACL asked): a copy where they say no costs a
    // session's start a few milliseconds, a refusal costs the session.
    let searchable = |m: &std::fs::Metadata| {
        let bits = if m.uid() == user.uid {
            0o100
        } else if m.gid() == user.gid {
            0o010
        } else {
            0o001
        };
        m.mode() & bits != 0
    };
    if user.uid == 0 || exe.ancestors().skip(1).all(|d| std::fs::metadata(d).is_ok_and(|m| searchable(&m))) {
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
