//! Finding bwrap and what it can do here: the binary (`$WORKCELL_BWRAP`, the default
//! place, `PATH`), its optional features (read from the binary, without starting it), and
//! [`probe`], which starts one throwaway sandbox to learn whether namespaces work at all.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use super::render::contains;
use super::{BwrapFeatures, BWRAP_ENV, DEFAULT_BWRAP};
use crate::backend::BackendError;

/// A bwrap binary and what it supports.
#[derive(Debug, Clone)]
pub struct Located {
    /// Absolute path of the binary.
    pub path: PathBuf,
    /// Its optional features.
    pub features: BwrapFeatures,
}

/// Why bwrap is unavailable, kept as strings so the per-process cache can hand out copies.
#[derive(Debug, Clone)]
struct Unavailable {
    reason: String,
    fix: String,
}

impl Unavailable {
    fn into_error(self) -> BackendError {
        BackendError::Unavailable { backend: "bwrap", reason: self.reason, fix: self.fix }
    }
}

const INSTALL_FIX: &str = "Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; Arch: pacman -S bubblewrap), or set WORKCELL_BWRAP=/path/to/bwrap.";

/// Finds the bwrap binary without starting a sandbox: `$WORKCELL_BWRAP`, else
/// [`DEFAULT_BWRAP`], else the first `bwrap` in an absolute `PATH` entry, and reads its
/// optional features. Cached per process.
///
/// This function is not given the zones, so it cannot skip a `bwrap` that sits inside a
/// zone; [`run`](super::run) refuses a binary inside any of the plan's zone directories instead (a
/// worker could have planted it there). Relative `PATH` entries are always ignored.
pub fn locate() -> Result<&'static Located, BackendError> {
    located().map_err(|u| u.clone().into_error())
}

/// [`locate`]'s per-process cache.
fn located() -> Result<&'static Located, &'static Unavailable> {
    static LOCATED: OnceLock<Result<Located, Unavailable>> = OnceLock::new();
    LOCATED.get_or_init(locate_uncached).as_ref()
}

fn locate_uncached() -> Result<Located, Unavailable> {
    let path = match std::env::var_os(BWRAP_ENV) {
        Some(p) if !p.is_empty() => {
            let p = PathBuf::from(p);
            if !is_executable(&p) {
                return Err(Unavailable {
                    reason: format!("{BWRAP_ENV}={} is not an executable file", p.display()),
                    fix: format!("Point {BWRAP_ENV} at a bwrap binary, or unset it to use {DEFAULT_BWRAP}."),
                });
            }
            p
        }
        _ => find_on_path().ok_or_else(|| Unavailable { reason: format!("no bwrap binary at {DEFAULT_BWRAP} or on PATH"), fix: INSTALL_FIX.into() })?,
    };
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let features = detect_features(&path).map_err(|e| Unavailable { reason: format!("cannot run {}: {e}", path.display()), fix: INSTALL_FIX.into() })?;
    Ok(Located { path, features })
}

/// The optional options `bwrap` supports. bwrap's usage text, which names every option, is
/// a literal in the binary, so searching the file (tens of kilobytes) answers without
/// starting a process — that one spawn of `bwrap --help` was a fifth of a launch's cost.
/// Falls back to `bwrap --help` when the file cannot be read.
fn detect_features(path: &Path) -> std::io::Result<BwrapFeatures> {
    const MAX_SCAN: u64 = 16 << 20;
    let found = match std::fs::metadata(path) {
        Ok(m) if m.len() <= MAX_SCAN => file_contains(path, &[b"--unshare-all", b"--size", b"--disable-userns", b"--perms"]).ok(),
        _ => None,
    };
    if let Some(&[true, tmpfs_size, disable_userns, perms]) = found.as_deref() {
        return Ok(BwrapFeatures { tmpfs_size, disable_userns, perms });
    }
    let help = Command::new(path).arg("--help").stdin(Stdio::null()).stderr(Stdio::null()).output()?.stdout;
    Ok(BwrapFeatures::from_usage(&help))
}

/// Which of `needles` occur in the file, read in 16 KB pieces that overlap by the longest
/// needle, so that the binary is never copied whole into memory (that cost 17 page faults).
fn file_contains(path: &Path, needles: &[&[u8]]) -> std::io::Result<Vec<bool>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let keep = needles.iter().map(|n| n.len()).max().unwrap_or(1).saturating_sub(1);
    let mut buf = vec![0u8; (16 << 10) + keep];
    let mut found = vec![false; needles.len()];
    let mut filled = 0;
    loop {
        let n = match file.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 || found.iter().all(|hit| *hit) {
            return Ok(found);
        }
        filled += n;
        for (hit, needle) in found.iter_mut().zip(needles) {
            *hit = *hit || contains(&buf[..filled], needle);
        }
        let tail = filled.min(keep);
        buf.copy_within(filled - tail..filled, 0);
        filled = tail;
    }
}

fn find_on_path() -> Option<PathBuf> {
    if is_executable(Path::new(DEFAULT_BWRAP)) {
        return Some(PathBuf::from(DEFAULT_BWRAP));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).filter(|d| d.is_absolute()).map(|d| d.join("bwrap")).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}

/// The bwrap binary to use, after checking that it can create a sandbox here (user
/// namespaces can be disabled by sysctl, AppArmor or a container's seccomp profile).
/// Starts one throwaway sandbox; the result is cached per process.
pub fn probe() -> Result<PathBuf, BackendError> {
    static PROBED: OnceLock<Result<PathBuf, Unavailable>> = OnceLock::new();
    PROBED.get_or_init(probe_uncached).clone().map_err(Unavailable::into_error)
}

fn probe_uncached() -> Result<PathBuf, Unavailable> {
    let located = located().map_err(Unavailable::clone)?;
    let out = probe_command(located)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Unavailable { reason: format!("cannot run {}: {e}", located.path.display()), fix: INSTALL_FIX.into() })?;
    if out.status.success() {
        return Ok(located.path.clone());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    Err(Unavailable { reason: format!("{} cannot create a sandbox here: {}", located.path.display(), stderr.trim()), fix: userns_fix() })
}

/// The throwaway sandbox of [`probe`]: the same namespace and privilege options as a real
/// run, around the host's own root.
fn probe_command(located: &Located) -> Command {
    // As the user a worker would run as: root's namespaces work where an unprivileged
    // user's may not (user namespaces can be restricted to root).
    let user = crate::plan::worker_user(Path::new("/"), None);
    let (uid, gid) = (user.uid.to_string(), user.gid.to_string());
    let mut cmd = Command::new(&located.path);
    if rustix::process::geteuid().as_raw() != user.uid {
        std::os::unix::process::CommandExt::uid(&mut cmd, user.uid);
        std::os::unix::process::CommandExt::gid(&mut cmd, user.gid);
    }
    cmd.args(["--unshare-all", "--unshare-user", "--uid", &uid, "--gid", &gid]);
    if located.features.disable_userns {
        cmd.arg("--disable-userns");
    }
    cmd.args(["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]);
    if located.features.tmpfs_size {
        cmd.args(["--size", "1048576"]);
    }
    cmd.args(["--tmpfs", "/tmp", "--"]).arg(&located.path).arg("--version");
    cmd
}

/// What to do when bwrap cannot create namespaces, from the sysctls that usually cause it.
fn userns_fix() -> String {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    let mut fixes = Vec::new();
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        fixes.push("unprivileged user namespaces are disabled: sudo sysctl -w kernel.unprivileged_userns_clone=1".to_string());
    }
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        fixes.push("user namespaces are limited to 0: sudo sysctl -w user.max_user_namespaces=15000".to_string());
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        fixes.push("AppArmor restricts unprivileged user namespaces (Ubuntu 24.04+): install the bwrap profile (apt-get install apparmor-profiles; see /usr/share/apparmor/extra-profiles/bwrap-userns-restrict) or sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0".to_string());
    }
    if fixes.is_empty() {
        fixes.push("check that user namespaces are allowed (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0, on Ubuntu 24.04 kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap); inside a container, the container's seccomp profile must allow unshare/clone of namespaces".to_string());
    }
    format!("To fix: {}. Or use the docker backend.", fixes.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_search_finds_needles_across_piece_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("bin");
        // One needle straddles the first 16 KB boundary, one sits at the very end.
        let mut bytes = vec![b'x'; (16 << 10) - 5];
        bytes.extend_from_slice(b"--disable-userns");
        bytes.extend(std::iter::repeat_n(b'y', 40 << 10));
        bytes.extend_from_slice(b"--size");
        std::fs::write(&file, &bytes).unwrap();
        let found = file_contains(&file, &[b"--disable-userns", b"--size", b"--unshare-all"]).unwrap();
        assert_eq!(found, [true, true, false]);
    }
}
