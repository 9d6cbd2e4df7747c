//! Host directories no zone may be, checked on the directory handle a sandbox holds (the one
//! every backend binds), so that a symlink (`./data -> /`, as a pull request can make it)
//! is judged by where it leads, not by how it is spelled.
//!
//! Refused for every zone, read-only too: `/` itself; `/proc`, `/sys`, `/dev`, `/run` and
//! `/var/run` and anything inside them (kernel and process state, devices, daemons'
//! sockets: a read-only bind still lets a worker connect to a socket); and any directory
//! that holds a container engine's socket (docker, containerd, podman, CRI-O) directly or
//! on the way to one of the sockets' usual places, since that socket is root on the host.
//!
//! Refused for writable zones, in addition: `/boot`, `/etc`, `/usr`, `/bin`, `/sbin`,
//! `/lib`, `/lib32`, `/lib64`, `/libx32` and anything inside them (what the host boots and
//! runs), and `/root`, `/home` and `/var` themselves (every user's files, the host's state).
//!
//! Directories are compared by identity (device and inode), the zone and each directory
//! above it, so another name for one of them (a bind mount, `/var/run` for `/run`) is
//! caught too. A kernel file system (a procfs, sysfs or cgroup hierarchy mounted anywhere)
//! is refused as a zone by its type, and the mounts inside a zone (bound with it, since
//! every backend binds recursively) are judged like the zone itself (`mounted`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{Mode, OFlags};

use super::{mounted, ZoneMode};

const SOCKETS: &str = "it holds daemons' sockets (Docker's among them), and a read-only mount does not stop a worker from connecting to a socket";
const KERNEL: &str = "it exposes the kernel's and every process's state (/proc/1/root is the host's whole file system)";
const HOST: &str = "a worker could change what the host boots, runs or keeps";

/// A directory no zone may be: itself only (`inside: false`) or with everything inside.
struct Rule {
    path: &'static str,
    inside: bool,
    why: &'static str,
}

const fn rule(path: &'static str, inside: bool, why: &'static str) -> Rule {
    Rule { path, inside, why }
}

/// Refused for any zone.
const NEVER: &[Rule] = &[
    rule("/", false, "it is the host's whole file system"),
    rule("/proc", true, KERNEL),
    rule("/sys", true, KERNEL),
    rule("/dev", true, "it holds the host's devices"),
    rule("/run", true, SOCKETS),
    rule("/var/run", true, SOCKETS),
];
/// Refused for writable zones, in addition to [`NEVER`].
const NEVER_WRITABLE: &[Rule] = &[
    rule("/boot", true, HOST),
    rule("/etc", true, HOST),
    rule("/usr", true, HOST),
    rule("/bin", true, HOST),
    rule("/sbin", true, HOST),
    rule("/lib", true, HOST),
    rule("/lib32", true, HOST),
    rule("/lib64", true, HOST),
    rule("/libx32", true, HOST),
    rule("/root", false, "it is root's home (its shell startup files, its ssh keys)"),
    rule("/home", false, "it holds every user's files"),
    rule("/var", false, "it holds the host's state (/var/lib, cron's spool, and on some systems /var/run)"),
];
/// File names of container engine sockets.
const SOCKET_NAMES: &[&str] = &["docker.sock", "containerd.sock", "podman.sock", "crio.sock", "dockershim.sock", "buildkitd.sock"];
/// Where engines usually put their sockets (besides [`SOCKET_NAMES`] in the zone itself).
const SOCKET_PATHS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
    "/var/lib/docker/docker.sock",
];

/// What the checks compare against, read from the host: the identities of the rules'
/// directories, where engine sockets are (with the directories above each), and the mounts.
struct HostFacts {
    rules: Vec<(&'static Rule, bool, Id)>,
    sockets: Vec<(PathBuf, Vec<Id>)>,
    mounts: Vec<mounted::MountEntry>,
}

/// How long one reading of the host's facts serves: a run checks every zone two or three
/// times within milliseconds (config, sandbox, plan), and reading `/proc/self/mountinfo` and
/// `/proc/net/unix` each time was most of what the checks cost (≈ 0.6 ms of a bwrap launch);
/// a long session (`workcell mcp`) still sees mounts and sockets that appear later.
const FACTS_FRESH: Duration = Duration::from_secs(1);

fn facts() -> Arc<HostFacts> {
    static CACHE: Mutex<Option<(Instant, Arc<HostFacts>)>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, f)) = cache.as_ref() {
        if at.elapsed() < FACTS_FRESH {
            return f.clone();
        }
    }
    let rules = NEVER
        .iter()
        .map(|r| (r, false))
        .chain(NEVER_WRITABLE.iter().map(|r| (r, true)))
        .filter_map(|(r, writable_only)| identity_of(Path::new(r.path)).map(|id| (r, writable_only, id)))
        .collect();
    let from_env = std::env::var("DOCKER_HOST").ok().and_then(|h| h.strip_prefix("unix://").map(PathBuf::from));
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(|d| [Path::new(&d).join("docker.sock"), Path::new(&d).join("podman/podman.sock")]);
    let home = std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker/run/docker.sock"));
    let places = SOCKET_PATHS.iter().map(PathBuf::from).chain(from_env).chain(runtime.into_iter().flatten()).chain(home).chain(listening_engine_sockets());
    // The socket's directory and each one above it.
    let sockets = places.filter_map(|s| std::fs::canonicalize(&s).ok().map(|real| (s, real.ancestors().skip(1).filter_map(identity_of).collect()))).collect();
    let f = Arc::new(HostFacts { rules, sockets, mounts: mounted::mounts() });
    *cache = Some((Instant::now(), f.clone()));
    f
}

/// Why a directory may not be a zone. Messages are for the person who configures (they name
/// host paths); `zone` is the zone's name as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnsafeZone {
    #[error("zone '{zone}': {}{place} may not be a{mode_note} zone: {why}; use a directory of its own{advice}", path.display())]
    System { zone: String, path: PathBuf, place: String, mode_note: &'static str, why: &'static str, advice: &'static str },
    #[error(
        "zone '{zone}': {} holds the container engine socket {}, which gives whoever can connect to it root on the host (a read-only mount does not stop that); use a directory without it",
        path.display(),
        socket.display()
    )]
    EngineSocket { zone: String, path: PathBuf, socket: PathBuf },
    #[error("zone '{zone}': {} has {} mounted inside it ({what}), and a zone is bound with every mount inside it; unmount it, or use a directory without it", path.display(), mount.display())]
    Mounted { zone: String, path: PathBuf, mount: PathBuf, what: String },
    #[error("zone '{zone}': the directory changed while workcell opened it ({} was checked, {} was opened); someone is moving directories or links in the project", checked.display(), opened.display())]
    Changed { zone: String, checked: PathBuf, opened: PathBuf },
}

/// Checks the directory `dir` (a zone's handle, `mode` as configured); `shown` is its path
/// for messages when the handle has no name.
pub fn check(zone: &str, dir: BorrowedFd<'_>, mode: ZoneMode, shown: &Path) -> Result<(), UnsafeZone> {
    let path = current_path(dir).unwrap_or_else(|| shown.to_path_buf());
    let facts = facts();
    judge(&facts, zone, dir, mode, &path)?;
    for m in mounted::inside(&path, &facts.mounts) {
        let refuse = |what: String| UnsafeZone::Mounted { zone: zone.into(), path: path.clone(), mount: m.entry.mount_point.clone(), what };
        if mounted::is_kernel_fs(&m.entry.fstype) {
            return Err(refuse(format!("a {} file system, kernel state", m.entry.fstype)));
        }
        // What the mount shows, where it lives on the host: a directory is judged as a
        // zone would be; a single file by its directory (a bound `/run/docker.sock` by /run).
        for source in &m.sources {
            let Ok(fd) = rustix::fs::open(source, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) else { continue };
            let is_dir = rustix::fs::fstat(&fd).is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir());
            let fd = if is_dir { fd } else { parent_of(source).unwrap_or(fd) };
            if let Err(e) = judge(&facts, zone, fd.as_fd(), mode, source) {
                let prefix = format!("zone '{zone}': ");
                let text = e.to_string();
                return Err(refuse(format!("it shows {}: {}", source.display(), text.strip_prefix(&prefix).unwrap_or(&text))));
            }
        }
    }
    Ok(())
}

/// The directory holding the file `p`, opened by path (mount sources are host paths).
fn parent_of(p: &Path) -> Option<OwnedFd> {
    rustix::fs::open(p.parent()?, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok()
}

/// The rules for one directory, by identity (the zone's own, or a mount's inside it).
fn judge(facts: &HostFacts, zone: &str, dir: BorrowedFd<'_>, mode: ZoneMode, path: &Path) -> Result<(), UnsafeZone> {
    let path = path.to_path_buf();
    let chain = ancestors(dir);
    for &(rule, writable_only, id) in &facts.rules {
        if writable_only && mode == ZoneMode::Ro {
            continue;
        }
        let hit = if rule.inside { chain.iter().position(|c| *c == id) } else { (chain.first() == Some(&id)).then_some(0) };
        let Some(depth) = hit else { continue };
        let place = match depth {
            0 if path == Path::new(rule.path) => String::new(),
            0 => format!(" (which is {})", rule.path),
            _ => format!(" (inside {})", rule.path),
        };
        let (mode_note, advice) = if writable_only { (" read-write", ", or make it read-only (mode: ro)") } else { ("", "") };
        return Err(UnsafeZone::System { zone: zone.into(), path, place, mode_note, why: rule.why, advice });
    }
    // After the rules, which name the usual places (`/proc`) better.
    if let Some(fs) = mounted::kernel_fs_of(dir) {
        let place = format!(" (a {fs} file system)");
        return Err(UnsafeZone::System { zone: zone.into(), path, place, mode_note: "", why: KERNEL, advice: "" });
    }
    if let Some(socket) = engine_socket(facts, dir, &chain) {
        return Err(UnsafeZone::EngineSocket { zone: zone.into(), path, socket });
    }
    Ok(())
}

/// Like [`check`], and the handle must be the directory `checked` names now (the path every
/// earlier check of the zone was made on).
pub fn check_opened(zone: &str, dir: BorrowedFd<'_>, mode: ZoneMode, checked: &Path) -> Result<(), UnsafeZone> {
    check(zone, dir, mode, checked)?;
    if let Some(opened) = current_path(dir) {
        if opened != checked {
            return Err(UnsafeZone::Changed { zone: zone.into(), checked: checked.to_path_buf(), opened });
        }
    }
    Ok(())
}

/// A relative zone path that a symlink leads out of `base` (the project directory, or the
/// current directory for `--zone`): `written` as in the config, `resolved` canonical. An
/// absolute path, or a relative one that stays where it says, is fine.
pub fn leaves_through_symlink(base: &Path, written: &str, resolved: &Path) -> Option<String> {
    if Path::new(written).is_absolute() {
        return None;
    }
    let lexical = super::inside(Path::new("/"), &base.join(written)).map(|r| Path::new("/").join(r)).unwrap_or_else(|| PathBuf::from("/"));
    if lexical == resolved || resolved.starts_with(base) {
        return None;
    }
    Some(format!(
        "{written} resolves to {} through a symlink, outside {}; write the absolute path if you mean it",
        resolved.display(),
        if lexical.starts_with(base) { "the project" } else { "the directory it names" }
    ))
}

/// The handle's current host path (`None` when the kernel has no name for it).
fn current_path(dir: BorrowedFd<'_>) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let link = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd())).ok()?;
    (link.is_absolute() && !link.to_string_lossy().ends_with(" (deleted)")).then_some(link)
}

type Id = (u64, u64);

fn identity(fd: BorrowedFd<'_>) -> Option<Id> {
    rustix::fs::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
}

fn identity_of(p: &Path) -> Option<Id> {
    rustix::fs::stat(p).ok().map(|st| (st.st_dev, st.st_ino))
}

/// The identities of `dir` and each directory above it, up to the root, walking `..` from the
/// handle (never by name).
fn ancestors(dir: BorrowedFd<'_>) -> Vec<Id> {
    let mut out = Vec::new();
    let Some(first) = identity(dir) else { return out };
    out.push(first);
    let mut cur: Option<OwnedFd> = None;
    for _ in 0..4096 {
        let at = cur.as_ref().map(|f| f.as_fd()).unwrap_or(dir);
        let Ok(parent) = rustix::fs::openat(at, "..", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()) else { break };
        let Some(id) = identity(parent.as_fd()) else { break };
        if out.last() == Some(&id) {
            break;
        }
        out.push(id);
        cur = Some(parent);
    }
    out
}

/// An engine socket the directory holds: one of [`SOCKET_NAMES`] in it, or one of the usual
/// socket places (and `DOCKER_HOST`'s, and any listening one) beneath it.
fn engine_socket(facts: &HostFacts, dir: BorrowedFd<'_>, chain: &[Id]) -> Option<PathBuf> {
    use rustix::fs::{AtFlags, FileType};
    for name in SOCKET_NAMES {
        if let Ok(st) = rustix::fs::statat(dir, *name, AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(st.st_mode) == FileType::Socket {
                return Some(current_path(dir).unwrap_or_default().join(name));
            }
        }
    }
    let zone = chain.first()?;
    // The cached identities only pick candidates: a directory removed since they were read
    // can have its inode number reused by the zone, so a match is confirmed on the host now.
    let holds = |socket: &Path| std::fs::canonicalize(socket).is_ok_and(|real| real.ancestors().skip(1).filter_map(identity_of).any(|id| id == *zone));
    facts.sockets.iter().find(|(socket, above)| above.contains(zone) && holds(socket)).map(|(socket, _)| socket.clone())
}

/// Engine sockets that a process of this network namespace has bound, wherever they are
/// (`dockerd -H unix:///srv/ci/docker.sock`): a zone holding one, at any depth, is refused.
fn listening_engine_sockets() -> Vec<PathBuf> {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(7))
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.file_name().is_some_and(|n| SOCKET_NAMES.iter().any(|s| n == *s)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(p: &str) -> OwnedFd {
        rustix::fs::open(p, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).unwrap()
    }

    #[test]
    fn system_directories() {
        for (p, mode) in [
            ("/", ZoneMode::Ro),
            ("/proc", ZoneMode::Ro),
            ("/proc/self", ZoneMode::Ro),
            ("/dev", ZoneMode::Ro),
            ("/etc", ZoneMode::Rw),
            ("/usr/bin", ZoneMode::Rw),
        ] {
            let fd = open(p);
            assert!(check("z", fd.as_fd(), mode, Path::new(p)).is_err(), "{p} {mode}");
        }
        for (p, mode) in [("/etc", ZoneMode::Ro), ("/usr/share", ZoneMode::Ro), ("/tmp", ZoneMode::Rw)] {
            let fd = open(p);
            assert_eq!(check("z", fd.as_fd(), mode, Path::new(p)), Ok(()), "{p} {mode}");
        }
    }

    #[test]
    fn symlink_out_of_the_project() {
        let base = Path::new("/p");
        assert!(leaves_through_symlink(base, "./data", Path::new("/")).unwrap().contains("./data resolves to / through a symlink, outside the project"));
        assert_eq!(leaves_through_symlink(base, "./data", Path::new("/p/data")), None);
        assert_eq!(leaves_through_symlink(base, "./data", Path::new("/p/other")), None);
        assert_eq!(leaves_through_symlink(base, "../shared", Path::new("/shared")), None);
        assert!(leaves_through_symlink(base, "../shared", Path::new("/etc")).is_some());
        assert_eq!(leaves_through_symlink(base, "/etc", Path::new("/etc")), None);
    }
}
