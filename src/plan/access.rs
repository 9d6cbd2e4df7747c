//! Whether the worker's identity can use its zones, asked before anything starts, so that a
//! run as root does not end in the worker's own `Permission denied` (`out/` is root's, the
//! worker is 65534).
//!
//! The kernel answers, not a reading of mode bits: the question is asked with the worker's
//! ids (`crate::identity`, a thread of its own without supplementary groups: both backends
//! give the worker only its gid) as `faccessat2(AT_EACCESS)` of the held handle, so owner,
//! mode, POSIX ACLs and read-only mounts count exactly as they will for the worker.

#[cfg(target_os = "linux")]
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::{Held, UserSpec};
#[cfg(target_os = "linux")]
use crate::identity::access_fd;
use crate::sandbox::{Delivery, Sandbox};
use crate::term::escape;

/// What the worker must be able to do with a zone's directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// List and open (`r-x`).
    Read,
    /// List, open, create and delete (`rwx`).
    Write,
}

/// One area to check: a zone's directory (or a granted one), as the sandbox holds it.
#[derive(Debug, Clone)]
pub struct Check {
    pub zone: String,
    pub path: PathBuf,
    pub held: Held,
    pub need: Need,
    /// Whether each directory above must be searchable (bwrap resolves the bound handle's
    /// path as the worker; Docker binds the handle through a staging mount made as root).
    pub ancestors: bool,
    /// A `delivery: copy` zone: the worker gets a private copy, so only reading counts.
    pub copy: bool,
}

/// Owner, group and permission bits of a directory, for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "owner {}:{}, mode {:04o}", self.uid, self.gid, self.mode & 0o7777)
    }
}

/// Why the worker could not use one zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocked {
    /// The directory itself refuses the worker (mode, owner, ACL, read-only file system).
    Zone { owner: Option<Owner> },
    /// A directory above it cannot be searched by the worker (bwrap).
    Above { dir: PathBuf, owner: Option<Owner> },
}

/// A zone the worker's identity cannot use, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub zone: String,
    pub path: PathBuf,
    pub need: Need,
    pub user: UserSpec,
    pub blocked: Blocked,
}

/// The zones a worker could not use: refused before the run (exit status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.refusals.iter().map(Refusal::to_string).collect::<Vec<_>>().join("\n"))]
pub struct AccessError {
    pub refusals: Vec<Refusal>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (u, g) = (self.user.uid, self.user.gid);
        let path = escape(&self.path.to_string_lossy()).into_owned();
        let verb = if self.need == Need::Write { "write" } else { "read" };
        let zone = escape(&self.zone).into_owned();
        let mut fixes: Vec<(String, String)> = Vec::new();
        match &self.blocked {
            Blocked::Zone { owner } => {
                let owner = owner.map(|o| format!(" ({o})")).unwrap_or_default();
                write!(f, "the worker cannot {verb} zone '{zone}': it runs as {u}:{g}, and {path}{owner} does not let it.")?;
                if self.need == Need::Write {
                    fixes.push((format!("chown -R {u}:{g} {path}"), "give the directory to the worker".into()));
                } else {
                    fixes.push((format!("chmod -R a+rX {path}"), format!("let every user read it (or chown -R {u}:{g} {path})")));
                }
            }
            Blocked::Above { dir, owner } => {
                let dir = escape(&dir.to_string_lossy()).into_owned();
                let owner = owner.map(|o| format!(" ({o})")).unwrap_or_default();
                write!(f, "the worker cannot reach zone '{zone}' ({path}) on bwrap: it runs as {u}:{g}, and {dir}{owner} above it is not searchable by it.")?;
                fixes.push((format!("chmod o+x {dir}"), "let other users pass through it (they still cannot list it)".into()));
                fixes.push(("--backend docker".into(), "Docker binds the directory without walking its path as the worker".into()));
            }
        }
        fixes.push(("defaults.user: \"UID:GID\"".into(), format!("in workcell.yaml: workers run as a user who may {verb} it (when workcell runs as root)")));
        fixes.push(("workcell run --user UID[:GID]".into(), "the same, for one run".into()));
        if self.need == Need::Write && matches!(self.blocked, Blocked::Zone { .. }) {
            fixes.push((
                "delivery: copy".into(),
                format!("on zone '{zone}' in workcell.yaml: the worker writes a private copy, workcell publishes the checked result"),
            ));
        }
        write!(f, "\n  Fix one of these ways:")?;
        let width = fixes.iter().map(|(c, _)| c.chars().count()).max().unwrap_or(0);
        for (cmd, why) in fixes {
            write!(f, "\n    {cmd:<width$}   {why}")?;
        }
        Ok(())
    }
}

/// The areas of `sandbox` and what the worker needs of each: its writable areas are written
/// (read, for a `delivery: copy` zone), the others read. `ancestors`: the backend is bwrap.
pub fn checks_for(sandbox: &Sandbox, ancestors: bool) -> Vec<Check> {
    let copy = |zone: &str| sandbox.mounts().iter().any(|m| m.name == zone && m.delivery == Delivery::Copy);
    let writable = sandbox.writable_held();
    let mut out: Vec<Check> = Vec::new();
    for (a, held) in writable.iter().cloned().chain(sandbox.readable_held()) {
        if out.iter().any(|c| c.path == a.host_path) {
            continue;
        }
        let is_copy = copy(&a.mount);
        let writes = writable.iter().any(|(w, _)| w.sandbox_path == a.sandbox_path);
        let need = if writes && !is_copy { Need::Write } else { Need::Read };
        out.push(Check { zone: a.mount, path: a.host_path, held, need, ancestors: ancestors && !is_copy, copy: is_copy });
    }
    out
}

/// Refuses the areas `user` cannot use. Where the worker's identity cannot be taken (not
/// root, and `user` is not us), or the kernel cannot answer (no `faccessat2`), nothing is
/// refused: the check is a courtesy before the run, the kernel still decides in the worker.
pub fn check(checks: &[Check], user: UserSpec) -> Result<(), AccessError> {
    // Elsewhere (macOS) the worker is the user who started workcell: nothing to take on.
    #[cfg(not(target_os = "linux"))]
    let refusals: Vec<Refusal> = {
        let _ = (checks, user);
        Vec::new()
    };
    #[cfg(target_os = "linux")]
    let refusals = as_worker(user, || checks.iter().filter_map(|c| refusal(c, user)).collect::<Vec<_>>()).unwrap_or_else(|e| {
        tracing::debug!("cannot check the zones as the worker: {e}");
        Vec::new()
    });
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(AccessError { refusals })
    }
}

/// [`check`] for a sandbox.
pub fn check_sandbox(sandbox: &Sandbox, user: UserSpec, ancestors: bool) -> Result<(), AccessError> {
    check(&checks_for(sandbox, ancestors), user)
}

#[cfg(target_os = "linux")]
/// Runs on the worker's thread: what refuses `c`, if anything.
fn refusal(c: &Check, user: UserSpec) -> Option<Refusal> {
    let refused = |blocked| Some(Refusal { zone: c.zone.clone(), path: c.path.clone(), need: c.need, user, blocked });
    if c.ancestors {
        // From `/` down: the first the kernel would stop at (already on the worker's thread:
        // asked in place).
        match unsearchable_above(&c.path, user) {
            Ok(Some(dir)) => return refused(Blocked::Above { owner: owner_of(&dir), dir }),
            Ok(None) => {}
            Err(_) => return None,
        }
    }
    let mode = match c.need {
        Need::Read => libc::R_OK | libc::X_OK,
        Need::Write => libc::R_OK | libc::W_OK | libc::X_OK,
    };
    let fd = c.held.0.as_ref();
    match access_fd(std::os::fd::AsFd::as_fd(fd), mode) {
        Ok(()) => None,
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => None,
        Err(_) => refused(Blocked::Zone { owner: rustix::fs::fstat(fd).ok().map(|st| Owner { uid: st.st_uid, gid: st.st_gid, mode: st.st_mode }) }),
    }
}

/// The first directory above `path`, from `/` down, that `user` may not search, as the
/// kernel answers for the worker's ids (POSIX ACLs count, as they will for bwrap walking the
/// path as the worker): `Ok(None)` when every one may be searched. An error when the kernel
/// cannot be asked (no `faccessat2`, or the worker's identity cannot be taken): the caller
/// falls back to its own reading.
#[cfg(target_os = "linux")]
pub fn unsearchable_above(path: &std::path::Path, user: UserSpec) -> std::io::Result<Option<PathBuf>> {
    let mut above: Vec<&std::path::Path> = path.ancestors().skip(1).collect();
    above.reverse();
    as_worker(user, || {
        for dir in above {
            if let Err(e) = access_path(dir, libc::X_OK) {
                if e.raw_os_error() == Some(libc::ENOSYS) {
                    return Err(e);
                }
                return Ok(Some(dir.to_path_buf()));
            }
        }
        Ok(None)
    })?
}

/// [`unsearchable_above`] for each of `paths`, on one thread holding the worker's ids (a
/// thread per path cost a bwrap launch a thread start per mount).
#[cfg(target_os = "linux")]
pub fn unsearchable_above_each(paths: &[&std::path::Path], user: UserSpec) -> Vec<std::io::Result<Option<PathBuf>>> {
    match as_worker(user, || paths.iter().map(|p| unsearchable_above(p, user)).collect::<Vec<_>>()) {
        Ok(each) => each,
        Err(e) => paths.iter().map(|_| Err(std::io::Error::new(e.kind(), e.to_string()))).collect(),
    }
}

#[cfg(target_os = "linux")]
fn owner_of(dir: &std::path::Path) -> Option<Owner> {
    std::fs::metadata(dir).ok().map(|m| Owner { uid: m.uid(), gid: m.gid(), mode: m.mode() })
}

#[cfg(target_os = "linux")]
/// `faccessat2(AT_FDCWD, path, mode, AT_EACCESS)`: a directory above a zone, by the path
/// bwrap will walk.
fn access_path(path: &std::path::Path, mode: i32) -> std::io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: a NUL-terminated path that outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_faccessat2, libc::AT_FDCWD, c.as_ptr(), mode, libc::AT_EACCESS) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(target_os = "linux")]
/// Runs `f` with the worker's identity (`crate::identity`: a thread of its own holding the
/// worker's ids when workcell is root; as a normal user the worker is us).
fn as_worker<T: Send>(user: UserSpec, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    crate::identity::Identity::of(user).run(f).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As root, the kernel answers for the worker: a root-owned 0755 directory is readable
    /// but not writable by nobody, and a 0700 one not even readable.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_kernel_answers_as_the_worker() {
        use std::os::unix::fs::PermissionsExt;
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let held = Held::dup(std::fs::File::open(tmp.path()).expect("open")).expect("dup");
        let nobody = UserSpec { uid: 65534, gid: 65534 };
        let check = |need| Check { zone: "z".into(), path: tmp.path().into(), held: held.clone(), need, ancestors: false, copy: false };
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        assert!(super::check(&[check(Need::Read)], nobody).is_ok());
        let refused = super::check(&[check(Need::Write)], nobody).expect_err("nobody cannot write a root 0755 directory");
        assert_eq!(
            refused.refusals[0].blocked,
            Blocked::Zone { owner: Some(Owner { uid: 0, gid: 0, mode: rustix::fs::fstat(&*held.0).expect("stat").st_mode }) }
        );
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        assert!(super::check(&[check(Need::Read)], nobody).is_err());
        // workcell's own threads keep root's rights: only the checking thread changed.
        assert!(std::fs::read_dir(tmp.path()).is_ok());
        std::fs::write(tmp.path().join("still-root"), "x").expect("this thread is still root");
    }

    #[test]
    fn refusal_names_zone_path_owner_user_and_fixes() {
        let r = Refusal {
            zone: "out".into(),
            path: "/p/out".into(),
            need: Need::Write,
            user: UserSpec { uid: 65534, gid: 65534 },
            blocked: Blocked::Zone { owner: Some(Owner { uid: 0, gid: 0, mode: 0o40755 }) },
        };
        let text = r.to_string();
        for part in ["zone 'out'", "/p/out", "owner 0:0, mode 0755", "65534:65534", "chown -R 65534:65534 /p/out", "defaults.user", "--user", "delivery: copy"]
        {
            assert!(text.contains(part), "{part} missing from {text}");
        }
    }
}
