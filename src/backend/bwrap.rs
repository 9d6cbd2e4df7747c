//! bubblewrap backend: the plan rendered as a `bwrap` argv and run under workcell's
//! supervision.
//!
//! The worker sees the same filesystem as under Docker (SPEC §5): an empty tmpfs root, the
//! host system directories read-only, the zones at their mount points, a private `/tmp`,
//! fresh `/proc` and `/dev` — and nothing else of the host. Every namespace is unshared
//! (the network one is kept only when the plan allows network), all capabilities are
//! dropped, the environment is exactly the plan's, and the sandbox dies with workcell.
//!
//! [`render_argv`] is pure (snapshot-tested); [`run`] is the only part that touches the OS.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
#[cfg(target_os = "linux")]
use std::time::Duration;

use super::BackendError;
use crate::plan::{LaunchPlan, SystemEntry, DEFAULT_MEMORY, DEFAULT_PIDS};

/// Where bwrap is looked for first; distribution packages install it here.
pub const DEFAULT_BWRAP: &str = "/usr/bin/bwrap";

/// Environment variable naming the bwrap binary to use instead of [`DEFAULT_BWRAP`] and
/// `PATH`. A path that does not exist makes the backend unavailable (tests use
/// `WORKCELL_BWRAP=/nonexistent` to simulate a machine without bubblewrap).
pub const BWRAP_ENV: &str = "WORKCELL_BWRAP";

/// Hostname inside every bwrap sandbox.
pub const SANDBOX_HOSTNAME: &str = "workcell";

/// How long a worker gets to exit after a forwarded SIGINT/SIGTERM before the sandbox is
/// killed.
#[cfg(target_os = "linux")]
const SIGNAL_GRACE: Duration = Duration::from_secs(10);
/// How long to wait for the sandbox's processes to disappear after killing it.
#[cfg(target_os = "linux")]
const KILL_WAIT: Duration = Duration::from_secs(5);

/// Optional bwrap options, which older releases lack. Detected from `bwrap --help`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwrapFeatures {
    /// `--size BYTES` before `--tmpfs` (caps the private `/tmp`).
    pub tmpfs_size: bool,
    /// `--disable-userns` (no nested user namespaces inside the sandbox; bubblewrap ≥ 0.8).
    pub disable_userns: bool,
}

impl Default for BwrapFeatures {
    /// What current bubblewrap releases support.
    fn default() -> Self {
        BwrapFeatures { tmpfs_size: true, disable_userns: true }
    }
}

impl BwrapFeatures {
    /// Features named in bwrap's usage text (`bwrap --help`, or the binary containing it).
    pub fn from_usage(usage: &[u8]) -> BwrapFeatures {
        BwrapFeatures { tmpfs_size: contains(usage, b"--size"), disable_userns: contains(usage, b"--disable-userns") }
    }
}

/// Environment variables that must not appear on bwrap's command line: the broker token.
fn is_secret(key: &str) -> bool {
    key == "WORKCELL_TOKEN"
}

/// The secret variables of `plan`, handed to bwrap through its own environment (readable
/// only by its user), from where the worker inherits them.
fn secret_env(plan: &LaunchPlan) -> impl Iterator<Item = (&String, &String)> {
    plan.env.iter().filter(|(k, _)| is_secret(k))
}

/// The bwrap argv for `plan` (argv\[0\] is `bwrap`), assuming a current bubblewrap.
/// Pure: the same plan always renders the same argv.
pub fn render_argv(plan: &LaunchPlan, bwrap: &Path) -> Vec<OsString> {
    render_argv_with(plan, bwrap, BwrapFeatures::default())
}

/// [`render_argv`] for a bwrap with the given optional features.
pub fn render_argv_with(plan: &LaunchPlan, bwrap: &Path, features: BwrapFeatures) -> Vec<OsString> {
    render_argv_passed(plan, bwrap, features, &Passed::default())
}

/// Descriptors a run hands to bwrap: the held handle of each plan mount that has one (bound
/// with `--bind-fd`/`--ro-bind-fd`, so the object checked is the object bound) and the
/// seccomp filter. Without them (`workcell plan`, snapshots) mounts render as paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Passed {
    /// One entry per `plan.mounts` entry: the descriptor number bwrap inherits, if any.
    pub mounts: Vec<Option<i32>>,
    /// The compiled seccomp filter (`--seccomp FD`).
    pub seccomp: Option<i32>,
}

/// [`render_argv_with`] binding the descriptors in `passed`.
pub fn render_argv_passed(plan: &LaunchPlan, bwrap: &Path, features: BwrapFeatures, passed: &Passed) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![bwrap.into()];
    let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));

    // Namespaces: everything, then the network back only when allowed.
    push(&["--unshare-all"]);
    if plan.network {
        push(&["--share-net"]);
    }
    // An explicit user namespace with the invoking ids: inside == outside, so files written
    // to rw zones belong to the invoking user, and it works the same as root and as a
    // normal user (as root without it bwrap would keep real root's privileges for setup
    // but `--uid/--gid` need a user namespace).
    let (uid, gid) = (plan.user.uid.to_string(), plan.user.gid.to_string());
    push(&["--unshare-user", "--uid", &uid, "--gid", &gid]);
    if features.disable_userns {
        push(&["--disable-userns"]);
    }
    push(&["--hostname", SANDBOX_HOSTNAME, "--die-with-parent"]);
    // A new session stops the worker from pushing input into workcell's terminal
    // (TIOCSTI); with a TTY the worker needs the terminal as its controlling one.
    if !plan.tty {
        push(&["--new-session"]);
    }
    // The worker's environment is bwrap's own (set by the launcher to exactly the secret
    // variables, see `secret_env`) plus these: no `--clearenv`, which would drop the secrets,
    // and no secret on this command line, which any local user can read in /proc/PID/cmdline.
    push(&["--cap-drop", "ALL"]);
    for (k, v) in plan.env.iter().filter(|(k, _)| !is_secret(k)) {
        push(&["--setenv", k, v]);
    }

    // Filesystem, on bwrap's empty tmpfs root. System entries come from the host layout;
    // `-try` because the layout is best effort (an entry may vanish between planning and
    // running, and a missing system path must not stop the run).
    for entry in &plan.system {
        match entry {
            SystemEntry::Bind { path } => push(&["--ro-bind-try", path, path]),
            SystemEntry::Symlink { path, target } => push(&["--symlink", target, path]),
        }
    }
    if plan.network {
        // Name resolution needs these once the network is on (Docker provides its own).
        for f in ["/etc/resolv.conf", "/etc/hosts"] {
            push(&["--ro-bind-try", f, f]);
        }
    }
    push(&["--proc", "/proc", "--dev", "/dev"]);
    for t in &plan.tmpfs {
        if features.tmpfs_size {
            let size = t.size_bytes.to_string();
            push(&["--size", &size]);
        }
        push(&["--tmpfs", &t.target]);
    }
    // Zones last, in plan order (outer before nested), so they are not hidden by anything
    // above; their sources must exist, hence no `-try`.
    for (i, m) in plan.mounts.iter().enumerate() {
        match passed.mounts.get(i).copied().flatten() {
            Some(fd) => {
                a.push(if m.read_only { "--ro-bind-fd" } else { "--bind-fd" }.into());
                a.push(fd.to_string().into());
            }
            None => {
                a.push(if m.read_only { "--ro-bind" } else { "--bind" }.into());
                a.push(m.source.clone().into_os_string());
            }
        }
        a.push(m.target.clone().into());
    }
    // Last, so that bwrap's own setup is not filtered, only the worker.
    if let Some(fd) = passed.seccomp {
        a.push("--seccomp".into());
        a.push(fd.to_string().into());
    }
    a.push("--chdir".into());
    a.push(plan.workdir.clone().into());
    a.push("--".into());
    a.extend(plan.command.iter().map(OsString::from));
    a
}

/// `argv` as one shell-quoted line, for `workcell plan` and for copying into a terminal.
pub fn shell_line(argv: &[OsString]) -> String {
    let words: Vec<String> = argv.iter().map(|w| w.to_string_lossy().into_owned()).collect();
    shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
}

/// The printable bwrap rendering of `plan` for `workcell plan --backend bwrap`.
pub fn plan_text(plan: &LaunchPlan) -> String {
    let (bwrap, features) = match locate() {
        Ok(l) => (l.path.clone(), l.features),
        Err(_) => (PathBuf::from("bwrap"), BwrapFeatures::default()),
    };
    let mut out = format!("# bwrap command line (run id {})\n{}\n", plan.run_id, shell_line(&render_argv_with(plan, &bwrap, features)));
    out.push_str(&format!("# limits: {}\n", super::cgroup::Support::detect().summary()));
    for w in unenforced_limits(plan) {
        out.push_str(&format!("# not enforced by bwrap: {w}\n"));
    }
    out
}

/// Limits in `plan` that bwrap cannot enforce here, one human-readable line each.
/// The timeout is always enforced (by workcell); memory, cpus and pids need a cgroup of the
/// run's own (see [`cgroup`](super::cgroup)).
pub fn unenforced_limits(plan: &LaunchPlan) -> Vec<String> {
    unenforced_limits_with(plan, super::cgroup::Support::detect())
}

/// [`unenforced_limits`] for a given cgroup support (pure).
pub fn unenforced_limits_with(plan: &LaunchPlan, support: &super::cgroup::Support) -> Vec<String> {
    use super::cgroup::Controller;
    let l = &plan.limits;
    super::cgroup::unenforceable(l, support)
        .into_iter()
        .map(|(c, why)| match c {
            Controller::Memory => format!("memory limit ({} bytes): {why}; use the docker backend to enforce it", l.memory_bytes.unwrap_or_default()),
            Controller::Cpu => format!("cpu limit ({} cpus): {why}; use the docker backend to enforce it", l.cpus.unwrap_or_default()),
            // RLIMIT_NPROC counts every process of the uid on the whole host and is ignored
            // for root, so it is no substitute.
            Controller::Pids => format!(
                "process limit ({}): {why} (RLIMIT_NPROC is per host user, so it is not used); the pid namespace still ends every process with the run; use the docker backend to enforce it",
                l.pids.unwrap_or_default()
            ),
        })
        .collect()
}

/// Limits the user asked for explicitly (not workcell's defaults) that bwrap cannot
/// enforce. Defaults are only logged, so that every run does not print the same warning.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn explicit_unenforced(plan: &LaunchPlan, support: &super::cgroup::Support) -> Vec<String> {
    let mut quiet = plan.clone();
    if quiet.limits.memory_bytes == Some(DEFAULT_MEMORY) {
        quiet.limits.memory_bytes = None;
    }
    if quiet.limits.pids == Some(DEFAULT_PIDS) {
        quiet.limits.pids = None;
    }
    unenforced_limits_with(&quiet, support)
}

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
/// zone; [`run`] refuses a binary inside any of the plan's zone directories instead (a
/// worker could have planted it there). Relative `PATH` entries are always ignored.
pub fn locate() -> Result<&'static Located, BackendError> {
    static LOCATED: OnceLock<Result<Located, Unavailable>> = OnceLock::new();
    LOCATED.get_or_init(locate_uncached).as_ref().map_err(|u| u.clone().into_error())
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
        Ok(m) if m.len() <= MAX_SCAN => file_contains(path, &[b"--unshare-all", b"--size", b"--disable-userns"]).ok(),
        _ => None,
    };
    if let Some(&[true, tmpfs_size, disable_userns]) = found.as_deref() {
        return Ok(BwrapFeatures { tmpfs_size, disable_userns });
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

/// Substring search; memchr's SIMD search keeps scanning the binary to tens of µs (a
/// byte-window scan cost a fifth of a millisecond on every run).
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
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
    let located = locate().map_err(|e| match e {
        BackendError::Unavailable { reason, fix, .. } => Unavailable { reason, fix },
        BackendError::Failed(m) => Unavailable { reason: m, fix: INSTALL_FIX.into() },
    })?;
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

/// Runs the plan under bwrap; returns the worker's exit status (124 on timeout, 126/127
/// when the command cannot be executed / is not found, 125 when bwrap itself fails).
pub fn run(plan: &LaunchPlan, service: Option<&dyn super::OnDemand>) -> Result<i32, BackendError> {
    #[cfg(target_os = "linux")]
    {
        runner::run(plan, service)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (plan, service);
        Err(BackendError::Unavailable {
            backend: "bwrap",
            reason: "bubblewrap runs only on Linux".into(),
            fix: "On macOS use the docker or seatbelt backend.".into(),
        })
    }
}

// The runner uses Linux-only interfaces (pidfds, pipe2, /proc), so it is compiled only
// there; the renderer above stays portable for `workcell plan` and the snapshot tests.
#[cfg(target_os = "linux")]
mod runner {
    use std::os::fd::{AsFd, AsRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::time::Instant;

    use crate::backend::outcome::Explained;

    use super::*;
    use crate::backend::cgroup::{RunCgroup, Support};
    use crate::backend::{OnDemand, EXIT_INTERNAL};

    /// Spawns `cmd` with `inherit` passed on (their `FD_CLOEXEC` cleared only for the spawn,
    /// under the process-wide spawn lock) and, with a cgroup, born inside its v1 directories.
    /// The descriptors are closed here: the parent keeps only the other pipe ends.
    fn spawn_bwrap(cmd: &mut Command, inherit: Vec<OwnedFd>, cgroup: Option<&RunCgroup>, located: &Located) -> Result<std::process::Child, BackendError> {
        crate::backend::spawn_exclusive(|| {
            for fd in &inherit {
                rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(|e| BackendError::Failed(format!("cannot set up bwrap's pipes: {e}")))?;
            }
            let spawned = match cgroup {
                Some(cg) => cg.spawn_inside(|| cmd.spawn()).map_err(|e| BackendError::Failed(format!("cannot enforce the run's limits: {e}")))?,
                None => cmd.spawn(),
            };
            drop(inherit);
            spawned.map_err(|e| BackendError::Failed(format!("cannot start {}: {e}", located.path.display())))
        })
    }

    /// The bwrap argv for `plan` with the descriptors it names: a duplicate of every mount's
    /// held handle (bwrap binds the handle, never the path again). The duplicates are
    /// close-on-exec until [`spawn_bwrap`] passes them on.
    fn argv_and_fds(plan: &LaunchPlan, located: &Located) -> Result<(Vec<OsString>, Vec<OwnedFd>), BackendError> {
        let mut owned = Vec::new();
        let mut passed = Passed::default();
        for m in &plan.mounts {
            let fd = match &m.held {
                Some(h) => {
                    let fd = h.0.as_fd().try_clone_to_owned().map_err(|e| BackendError::Failed(format!("cannot pass the zone {} to bwrap: {e}", m.target)))?;
                    let raw = fd.as_raw_fd();
                    owned.push(fd);
                    Some(raw)
                }
                None => None,
            };
            passed.mounts.push(fd);
        }
        match crate::backend::seccomp::filter_fd() {
            Ok(fd) => {
                passed.seccomp = Some(fd.as_raw_fd());
                owned.push(fd);
            }
            // No syscall table for this architecture: say so on every run, never silently.
            Err(e @ crate::backend::seccomp::SeccompError::UnsupportedArch(_)) => eprintln!("workcell: warning: {e}"),
            Err(e) => return Err(BackendError::Failed(e.to_string())),
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
    fn prepare(plan: &LaunchPlan) -> Result<(&'static Located, Option<RunCgroup>, Support), BackendError> {
        let located = locate()?;
        if let Some(m) = plan.mounts.iter().find(|m| located.path.starts_with(&m.source)) {
            return Err(BackendError::Failed(format!(
                "refusing to run {}: it lies inside the zone directory {} ({}), where a worker could have replaced it; install bwrap outside your zones or set {BWRAP_ENV}",
                located.path.display(),
                m.source.display(),
                m.target
            )));
        }
        for m in &plan.mounts {
            unreachable_for(&m.source, plan.user).map_or(Ok(()), |(dir, mode, owner)| {
                Err(BackendError::Failed(format!(
                    "the worker runs as uid {}, which cannot reach the zone {} ({}): {} is mode {mode:o}, owner uid {owner}. bwrap opens zones as the worker's user; let it through (chmod o+x {}), set defaults.user to a user that can, or use the docker backend",
                    plan.user.uid,
                    m.target,
                    m.source.display(),
                    dir.display(),
                    dir.display()
                )))
            })?;
        }
        let (cgroup, support) = RunCgroup::create(&plan.run_id, &plan.limits, &Support::located())
            .map_err(|e| BackendError::Failed(format!("cannot enforce the run's limits: {e}")))?;
        for w in unenforced_limits_with(plan, &support) {
            tracing::debug!("bwrap does not enforce: {w}");
        }
        Ok((located, cgroup, support))
    }

    /// The first directory above `path` that `user` may not search (bwrap, running as the
    /// worker, resolves the path of each bound handle and checks the mount against it), with
    /// its mode and owner. Supplementary groups are ignored: the worker has none.
    fn unreachable_for(path: &Path, user: crate::plan::UserSpec) -> Option<(PathBuf, u32, u32)> {
        use std::os::unix::fs::MetadataExt;
        if user.uid == 0 {
            return None;
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

    /// Runs the plan under bwrap with its output captured (the shell tool, child workers):
    /// the same sandbox, limits and timeout as [`run`], without a terminal or signal
    /// forwarding.
    pub(super) fn run_captured(plan: &LaunchPlan) -> Result<crate::backend::Captured, BackendError> {
        let (located, cgroup, support) = prepare(plan)?;
        let (mut argv, held) = argv_and_fds(plan, located)?;
        // cgroup v2: bwrap reports its init pid on the status pipe and waits on the block pipe
        // until both are in the cgroup.
        let handshake = match &cgroup {
            Some(cg) if cg.needs_attach() => {
                let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| BackendError::Failed(format!("cannot create a pipe: {e}")));
                let ((status_r, status_w), (block_r, block_w)) = (pipe()?, pipe()?);
                let args = ["--json-status-fd".to_string(), status_w.as_raw_fd().to_string(), "--block-fd".to_string(), block_r.as_raw_fd().to_string()];
                argv.splice(1..1, args.map(OsString::from));
                Some((status_r, status_w, block_r, block_w))
            }
            _ => None,
        };
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).env_clear().envs(secret_env(plan));
        crate::backend::as_worker(&mut cmd, plan);
        // bwrap's status pipe stays open until the run is over: bwrap reports the exit code
        // there at the end, and a closed pipe would kill it with SIGPIPE.
        let mut report: Option<StatusPipe> = None;
        let spawn = |cmd: &mut Command| -> Result<std::process::Child, BackendError> {
            let Some((status_r, status_w, block_r, block_w)) = handshake else {
                return spawn_bwrap(cmd, held, cgroup.as_ref(), located);
            };
            let mut child = spawn_bwrap(cmd, held.into_iter().chain([status_w, block_r]).collect(), cgroup.as_ref(), located)?;
            let cg = cgroup.as_ref().expect("a handshake only with a cgroup");
            let pipe = report.insert(StatusPipe::new(status_r));
            let until = Instant::now() + KILL_WAIT;
            let mut init = None;
            // Released only once attached; bwrap that ends before reporting its init never
            // made a sandbox, and one that does not report in time is stopped.
            let attached = loop {
                if let Some((init_pid, _)) = pipe.read_available() {
                    init = Some(init_pid);
                    break cg.attach(child.id() as i32).and_then(|()| cg.attach(init_pid)).map(|()| true);
                }
                if pipe.fd().is_none() && child.try_wait().is_ok_and(|s| s.is_some()) {
                    break Ok(false);
                }
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break Err("bwrap did not report its sandbox in time".to_string());
                }
                let wait = left.min(Duration::from_millis(10));
                match pipe.fd() {
                    Some(fd) => {
                        let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                        let timeout = rustix::event::Timespec { tv_sec: wait.as_secs() as i64, tv_nsec: i64::from(wait.subsec_nanos()) };
                        let _ = rustix::event::poll(&mut fds, Some(&timeout));
                    }
                    None => std::thread::sleep(wait),
                }
            };
            match attached {
                Ok(release) => {
                    if release {
                        let _ = rustix::io::write(&block_w, b"1");
                    }
                    Ok(child)
                }
                Err(e) => {
                    // The sandbox is still blocked: nothing of the worker ran. Its init goes
                    // first (bwrap, its parent, is alive, so the pid cannot have been reused),
                    // then bwrap; only then may the block pipe close.
                    if let Some(p) = init.and_then(rustix::process::Pid::from_raw) {
                        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                    }
                    let _ = child.kill();
                    let _ = child.wait();
                    drop(block_w);
                    Err(BackendError::Failed(format!("cannot enforce the run's limits, so the command was stopped before it started: {e}")))
                }
            }
        };
        let out = crate::backend::capture_with(cmd, plan.limits.timeout, spawn);
        drop(report);
        let mut out = out?;
        for w in explicit_unenforced(plan, &support) {
            out.stderr.extend_from_slice(format!("workcell: warning: not enforced by the bwrap backend: {w}\n").as_bytes());
        }
        if out.exit_code == 128 + 9 && cgroup.as_ref().is_some_and(RunCgroup::oom_killed) {
            let limit = plan.limits.memory_bytes.unwrap_or_default();
            out.stderr.extend_from_slice(Explained::OutOfMemory(Some(limit)).message().as_bytes());
        }
        Ok(out)
    }

    /// Runs the plan under bwrap; returns the worker's exit status (124 on timeout, 126/127
    /// when the command cannot be executed / is not found, 125 when bwrap itself fails).
    pub(super) fn run(plan: &LaunchPlan, service: Option<&dyn OnDemand>) -> Result<i32, BackendError> {
        let (located, cgroup, support) = prepare(plan)?;
        for w in explicit_unenforced(plan, &support) {
            eprintln!("workcell: warning: not enforced by the bwrap backend: {w}");
        }

        // bwrap reports the sandbox's init pid and, when the command ran, its exit code on this
        // pipe; no exit code means bwrap itself failed (setup or exec).
        let (status_r, status_w) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| BackendError::Failed(format!("cannot create a pipe: {e}")))?;
        let (mut argv, held) = argv_and_fds(plan, located)?;
        let fd_arg = status_w.as_raw_fd().to_string();
        argv.splice(1..1, [OsString::from("--json-status-fd"), OsString::from(fd_arg)]);

        let block = match &cgroup {
            Some(cg) if cg.needs_attach() => {
                let (r, w) =
                    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| BackendError::Failed(format!("cannot create a pipe: {e}")))?;
                argv.splice(1..1, [OsString::from("--block-fd"), OsString::from(r.as_raw_fd().to_string())]);
                Some((r, w))
            }
            _ => None,
        };
        let (block_r, mut block_w) = match block {
            Some((r, w)) => (Some(r), Some(w)),
            None => (None, None),
        };

        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).env_clear().envs(secret_env(plan));
        crate::backend::as_worker(&mut cmd, plan);
        let stdin_is_tty = std::io::IsTerminal::is_terminal(&std::io::stdin());
        if !(plan.interactive || plan.tty) {
            cmd.stdin(Stdio::null());
        }
        // Its own process group, so a terminal's Ctrl-C reaches only workcell, which forwards it
        // into the sandbox; with a terminal the worker must stay in the foreground group.
        let own_group = !(plan.tty || (plan.interactive && stdin_is_tty));
        if own_group {
            cmd.process_group(0);
        }
        // Signals are registered before the spawn so that none is lost in between; they arrive
        // on a self-pipe that the supervision loop polls with everything else.
        let mut signals = signal_pipe()?;
        let mut child = spawn_bwrap(&mut cmd, held.into_iter().chain(std::iter::once(status_w)).chain(block_r).collect(), cgroup.as_ref(), located)?;
        let bwrap_pid = child.id() as i32;
        let bwrap_pidfd = rustix::process::Pid::from_raw(bwrap_pid).and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
        let mut report = StatusPipe::new(status_r);

        // One thread supervises: it sleeps in poll(2) on bwrap's pidfd, the status pipe and
        // the signal pipe, until bwrap exits or the deadline passes.
        let mut sup = Supervisor { bwrap_pid, bwrap_pidfd, init: None, own_group };
        let mut deadline = plan.timeout().map(|t| Instant::now() + t);
        let mut timed_out = false;
        let mut signalled: Option<i32> = None;
        let mut service_started = false;
        let mut limit_failure: Option<String> = None;
        let status = loop {
            if let Some(s) = child.try_wait().map_err(|e| BackendError::Failed(format!("cannot wait for bwrap: {e}")))? {
                break s;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                if signalled.is_none() {
                    timed_out = true;
                }
                // The deadline, or a worker that ignored a forwarded signal for the whole
                // grace period: stop everything.
                sup.kill_all();
                deadline = None;
                continue;
            }
            // Without a pidfd (Linux < 5.3) bwrap's exit is noticed by polling every 10 ms.
            let mut wait = deadline.map(|d| d - now);
            if sup.bwrap_pidfd.is_none() {
                wait = Some(wait.map_or(NO_PIDFD_POLL, |w| w.min(NO_PIDFD_POLL)));
            }
            let wake = service.filter(|_| !service_started).map(|s| s.wake_fd());
            let ready = wait_readable(sup.bwrap_pidfd.as_ref(), report.fd(), signals.get_read(), wake, wait)?;
            if ready.wake {
                if let Some(s) = service {
                    // The worker connected: serve it. If the service cannot start, the worker's
                    // request fails (its connection is closed with the socket at the end).
                    if let Err(e) = s.start() {
                        eprintln!("workcell: the tool broker could not start: {e}");
                    }
                    service_started = true;
                }
            }
            if ready.status {
                if let Some((init_pid, pid_ns)) = report.read_available() {
                    sup.started(init_pid, pid_ns);
                    if let (Some(cg), Some(w)) = (&cgroup, block_w.take()) {
                        match cg.attach(bwrap_pid).and_then(|_| cg.attach(init_pid)) {
                            // Release the sandbox.
                            Ok(()) => drop(rustix::io::write(&w, b"1")),
                            Err(e) => {
                                sup.kill_all();
                                // Keep the sandbox blocked until it is gone: closing the pipe
                                // would release it.
                                block_w = Some(w);
                                limit_failure = Some(e);
                            }
                        }
                    }
                }
            }
            if ready.signal {
                for sig in signals.pending() {
                    if signalled.is_some() || !sup.forward(sig) {
                        // A second signal, or nothing to forward to yet: stop now.
                        sup.kill_all();
                        deadline = None;
                    } else if deadline.is_none_or(|d| d > Instant::now() + SIGNAL_GRACE) {
                        deadline = Some(Instant::now() + SIGNAL_GRACE);
                    }
                    signalled = Some(sig);
                }
            }
        };
        drop(signals);
        // bwrap has exited, so the pipe's write end is closed: read what is left.
        report.read_to_end();
        // bwrap exiting normally implies its init (and so the pid namespace) is gone; after a
        // kill, make sure before reporting, so that "nothing left running" holds on return.
        sup.wait_init_gone();

        if let Some(e) = limit_failure {
            return Err(BackendError::Failed(format!("cannot enforce the run's limits, so the worker was stopped before it started: {e}")));
        }
        if timed_out {
            return Ok(Explained::TimedOut(plan.timeout()).report());
        }
        if let Some(code) = report.exit_code() {
            if code == 128 + 9 && cgroup.as_ref().is_some_and(|cg| cg.oom_killed()) {
                Explained::OutOfMemory(plan.limits.memory_bytes).report();
            }
            return Ok(code);
        }
        if let Some(sig) = signalled {
            return Ok(128 + sig);
        }
        let code = crate::backend::none::exit_code_of(status);
        Ok(explain_bwrap_failure(plan, code))
    }

    /// bwrap exited without running the command to its end (it reports no exit code): map the
    /// usual causes to the shell's exit statuses and say what happened.
    fn explain_bwrap_failure(plan: &LaunchPlan, code: i32) -> i32 {
        let Some(prog) = plan.command.first() else {
            return EXIT_INTERNAL;
        };
        let shown = crate::term::escape(prog);
        match resolve_command(plan, prog) {
            CommandLookup::NotFound => Explained::NotFound(prog.clone()).report(),
            CommandLookup::NotExecutable(_) => Explained::NotExecutable(prog.clone()).report(),
            CommandLookup::Found | CommandLookup::Unknown => {
                let hint = match probe() {
                    Ok(_) => "see bwrap's message above".to_string(),
                    Err(e) => e.to_string(),
                };
                eprintln!("workcell: bwrap could not set up the sandbox or start {shown} (bwrap exit status {code}): {hint}");
                EXIT_INTERNAL
            }
        }
    }

    /// How often bwrap's exit is checked when the kernel has no pidfds.
    const NO_PIDFD_POLL: Duration = Duration::from_millis(10);

    type Signals = signal_hook::iterator::backend::SignalDelivery<std::os::unix::net::UnixStream, signal_hook::iterator::exfiltrator::SignalOnly>;

    /// SIGINT, SIGTERM and SIGHUP delivered through a self-pipe (signal-hook's), to be
    /// polled with the other descriptors.
    fn signal_pipe() -> Result<Signals, BackendError> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let fail = |e: std::io::Error| BackendError::Failed(format!("cannot install signal handlers: {e}"));
        let (read, write) = std::os::unix::net::UnixStream::pair().map_err(fail)?;
        read.set_nonblocking(true).map_err(fail)?;
        write.set_nonblocking(true).map_err(fail)?;
        Signals::with_pipe(read, write, signal_hook::iterator::exfiltrator::SignalOnly, [SIGINT, SIGTERM, SIGHUP]).map_err(fail)
    }

    /// Which of the supervised descriptors have something to say.
    struct Ready {
        status: bool,
        signal: bool,
        wake: bool,
    }

    /// Sleeps until bwrap exits (its pidfd turns readable), the status pipe, the signal pipe
    /// or the on-demand service's descriptor has data, or `wait` passes.
    fn wait_readable(
        pidfd: Option<&OwnedFd>,
        status: Option<&OwnedFd>,
        signals: &std::os::unix::net::UnixStream,
        wake: Option<std::os::fd::BorrowedFd<'_>>,
        wait: Option<Duration>,
    ) -> Result<Ready, BackendError> {
        use rustix::event::{PollFd, PollFlags};
        let mut fds = Vec::with_capacity(4);
        fds.push(PollFd::new(signals, PollFlags::IN));
        let status_at = status.map(|s| {
            fds.push(PollFd::new(s, PollFlags::IN));
            fds.len() - 1
        });
        let wake_at = wake.as_ref().map(|w| {
            fds.push(PollFd::new(w, PollFlags::IN));
            fds.len() - 1
        });
        if let Some(p) = pidfd {
            fds.push(PollFd::new(p, PollFlags::IN));
        }
        let timeout = wait.map(|w| rustix::event::Timespec { tv_sec: w.as_secs() as i64, tv_nsec: i64::from(w.subsec_nanos()) });
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(BackendError::Failed(format!("cannot wait for the sandbox: {e}"))),
        }
        let has = |i: Option<usize>| i.is_some_and(|i| !fds[i].revents().is_empty());
        Ok(Ready { signal: !fds[0].revents().is_empty(), status: has(status_at), wake: has(wake_at) })
    }

    /// bwrap's `--json-status-fd` stream: a JSON object with the sandbox's init pid once it is
    /// set up, and one with the command's exit code when it ran.
    struct StatusPipe {
        /// `None` once the pipe reached end of file.
        fd: Option<OwnedFd>,
        buf: Vec<u8>,
        exit_code: Option<i32>,
    }

    impl StatusPipe {
        fn new(fd: OwnedFd) -> StatusPipe {
            let fd = rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK).is_ok().then_some(fd);
            StatusPipe { fd, buf: Vec::new(), exit_code: None }
        }

        fn fd(&self) -> Option<&OwnedFd> {
            self.fd.as_ref()
        }

        fn exit_code(&self) -> Option<i32> {
            self.exit_code
        }

        /// Reads what the pipe holds now; returns the init pid and pid namespace when bwrap
        /// reported them in this read.
        fn read_available(&mut self) -> Option<(i32, Option<u64>)> {
            let Some(fd) = &self.fd else { return None };
            let mut chunk = [0u8; 1024];
            loop {
                match rustix::io::read(fd, &mut chunk) {
                    Ok(0) => {
                        self.fd = None;
                        break;
                    }
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                    Err(rustix::io::Errno::INTR) => {}
                    // WouldBlock, or a broken pipe: nothing more for now.
                    Err(rustix::io::Errno::AGAIN) => break,
                    Err(_) => {
                        self.fd = None;
                        break;
                    }
                }
            }
            self.parse()
        }

        /// Reads until end of file (bwrap has exited, so the write end is closed), for at
        /// most [`KILL_WAIT`] in case a sandbox process kept it open.
        fn read_to_end(&mut self) {
            let until = Instant::now() + KILL_WAIT;
            while let Some(fd) = &self.fd {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                let timeout = rustix::event::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
                let _ = rustix::event::poll(&mut fds, Some(&timeout));
                self.read_available();
            }
        }

        /// Consumes every complete JSON document in the buffer.
        fn parse(&mut self) -> Option<(i32, Option<u64>)> {
            let mut started = None;
            let mut stream = serde_json::Deserializer::from_slice(&self.buf).into_iter::<serde_json::Value>();
            let mut consumed = 0;
            while let Some(Ok(doc)) = stream.next() {
                consumed = stream.byte_offset();
                if let Some(pid) = doc.get("child-pid").and_then(serde_json::Value::as_i64) {
                    started = Some((pid as i32, doc.get("pid-namespace").and_then(serde_json::Value::as_u64)));
                }
                if let Some(code) = doc.get("exit-code").and_then(serde_json::Value::as_i64) {
                    self.exit_code = Some(code as i32);
                }
            }
            self.buf.drain(..consumed);
            started
        }
    }

    /// Handles on the running sandbox, for forwarding signals and killing it.
    struct Supervisor {
        bwrap_pid: i32,
        /// A pidfd pins the process, so a signal can never hit a recycled pid.
        bwrap_pidfd: Option<OwnedFd>,
        init: Option<Init>,
        own_group: bool,
    }

    struct Init {
        pid: i32,
        pidfd: Option<OwnedFd>,
        pid_ns: Option<u64>,
    }

    impl Supervisor {
        fn started(&mut self, pid: i32, pid_ns: Option<u64>) {
            let pidfd = rustix::process::Pid::from_raw(pid).and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
            self.init = Some(Init { pid, pidfd, pid_ns });
        }

        /// Sends `sig` to every process of the sandbox except its init (which, as a pid
        /// namespace's init, would ignore it). Returns false when there is nothing to send to.
        fn forward(&self, sig: i32) -> bool {
            let Some(Init { pid, pid_ns: Some(ns), .. }) = &self.init else { return false };
            let Some(signal) = rustix::process::Signal::from_named_raw(sig) else { return false };
            let mut sent = false;
            for p in pids_in_namespace(*ns) {
                if p != *pid {
                    if let Some(p) = rustix::process::Pid::from_raw(p) {
                        sent |= rustix::process::kill_process(p, signal).is_ok();
                    }
                }
            }
            sent
        }

        /// Kills the whole sandbox: its init (the kernel then kills every process of the pid
        /// namespace) and bwrap itself (`--die-with-parent` covers a sandbox not started yet).
        fn kill_all(&self) {
            if let Some(init) = &self.init {
                send_kill(init.pidfd.as_ref(), init.pid);
            }
            send_kill(self.bwrap_pidfd.as_ref(), self.bwrap_pid);
            if self.own_group {
                // Anything bwrap forked outside the namespaces (nothing, normally).
                if let Some(p) = rustix::process::Pid::from_raw(self.bwrap_pid) {
                    let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
                }
            }
        }

        /// Waits (bounded) until the sandbox's init has exited, which the kernel allows only
        /// once every other process of its pid namespace is gone.
        fn wait_init_gone(&self) {
            let Some(init) = &self.init else { return };
            let start = Instant::now();
            match &init.pidfd {
                Some(fd) => {
                    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                    let timeout = rustix::event::Timespec { tv_sec: KILL_WAIT.as_secs() as i64, tv_nsec: 0 };
                    let _ = rustix::event::poll(&mut fds, Some(&timeout));
                }
                None => {
                    while Path::new(&format!("/proc/{}", init.pid)).exists() && start.elapsed() < KILL_WAIT {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            }
        }
    }

    fn send_kill(pidfd: Option<&OwnedFd>, pid: i32) {
        match pidfd {
            Some(fd) => {
                let _ = rustix::process::pidfd_send_signal(fd.as_fd(), rustix::process::Signal::KILL);
            }
            None => {
                if let Some(p) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
                }
            }
        }
    }

    /// Host pids of the processes in pid namespace `ns` (by the inode of `/proc/PID/ns/pid`).
    fn pids_in_namespace(ns: u64) -> Vec<i32> {
        let want = format!("pid:[{ns}]");
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
            .filter(|pid| std::fs::read_link(format!("/proc/{pid}/ns/pid")).is_ok_and(|l| l.as_os_str() == want.as_str()))
            .collect()
    }
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
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
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
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

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
enum View {
    Host(PathBuf),
    SandboxOnly,
    Absent,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn under<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix.trim_end_matches('/'))?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// The host path behind sandbox path `p`, following the plan's layout.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
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

/// Runs the plan under bwrap with output captured (the shell tool, child workers), with the
/// same per-run cgroup limits as [`run`]. The timeout kills bwrap's whole process group;
/// `--die-with-parent` and the pid namespace take every process of the sandbox with it.
pub fn run_captured(plan: &LaunchPlan) -> Result<super::Captured, BackendError> {
    #[cfg(target_os = "linux")]
    {
        runner::run_captured(plan)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = plan;
        Err(BackendError::Unavailable {
            backend: "bwrap",
            reason: "bubblewrap runs only on Linux".into(),
            fix: "On macOS use the docker or seatbelt backend.".into(),
        })
    }
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

    #[test]
    fn features_from_help() {
        assert_eq!(BwrapFeatures::from_usage(b"--size BYTES\n--tmpfs"), BwrapFeatures { tmpfs_size: true, disable_userns: false });
    }

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
