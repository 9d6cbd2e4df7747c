//! Whether the engine sees this host's files: a bind mount names a host path, and an engine
//! on another host (or in another mount namespace) would bind whatever that path is there,
//! or nothing. Decided, never guessed. An engine is local only when the process listening
//! on its unix socket is shown, with facts any user may read, to be
//!
//! 1. **in workcell's own mount namespace, with the same root**: its `/proc/PID/mountinfo`
//!    (world-readable, unlike `/proc/PID/ns/mnt`) is the same text as ours. Mount IDs are
//!    unique across the whole system while a mount lives, and a namespace's copy of a mount
//!    gets a new one, so two processes list the same IDs only when they share the namespace;
//!    the paths are relative to each process's root, so a chrooted listener differs too.
//! 2. **the engine itself, not a process that merely calls itself `dockerd`** (any process
//!    can set its own `comm`): only what root alone can arrange counts.
//!    - `dockerd`: the listener runs as root and is the pid that the daemon's pid file
//!      (`/run/docker.pid`, root's, writable by root alone) names.
//!    - `podman`: the listener runs as root and its executable (`/proc/PID/exe`, readable
//!      only by root for a root process) is named `podman`. A normal user cannot prove it
//!      (rootful Podman's socket is root's alone by default).
//!    - socket activation (`docker.socket`): the listener is init (pid 1, root), which hands
//!      the socket to the service root configured; it counts as the engine when the docker
//!      pid file names a root `dockerd` that passes 1. too.
//!
//! Everything else is remote: a network address (`tcp://`, `http(s)://`, `ssh://`), a
//! forwarder (`ssh -L`, socat, whatever it names itself: it is not the pid file's process,
//! and a non-root one is never an engine of this host's namespace, since rootless engines run
//! in namespaces of their own), a socket from another namespace, rootless Docker and rootless
//! Podman, or a listener that cannot be inspected. A remote engine gets zones shipped
//! (`plan::ship`, [`super::ship`]), which is correct wherever the engine is, only slower.
//!
//! (Earlier versions read `/proc/PID/ns/mnt`, which only root may read, so every normal user's
//! local daemon counted as remote; and they took the listener's `comm` at its word, so a
//! forwarder named `dockerd` passed. Before that, engines were asked to read back a token
//! in a fresh temporary directory: an engine that shared only that directory's file system
//! passed, and then bound the zones by path on its own side.)

use std::fmt;

/// Where the engine at an address is, as far as workcell can prove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Proven to resolve paths exactly as workcell does: zones are bound.
    Local,
    /// Not proven local, and why (for messages): zones are shipped.
    Remote(Remote),
}

/// Why an engine is not taken as local.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Remote {
    /// A network address.
    Network { address: String },
    /// Nothing answered on the socket, or its listener could not be inspected.
    Unknown { address: String },
    /// The listener lives in another mount namespace or under another root.
    OtherMounts { address: String, listener: Listener },
    /// The listener is in this namespace but is not shown to be the engine itself.
    NotTheEngine { address: String, listener: Listener },
}

/// The process listening on a unix socket, as its peer credentials and `/proc` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub pid: u32,
    pub uid: u32,
    /// `/proc/PID/comm`: what the process calls itself (anyone can choose it).
    pub comm: String,
}

impl fmt::Display for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} `{}`, uid {}", self.pid, crate::term::escape(&self.comm), self.uid)
    }
}

impl fmt::Display for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Remote::Network { address } => write!(f, "the engine at {address} is reached over the network"),
            Remote::Unknown { address } => write!(f, "the engine at {address} is not proven to share this host's files (its socket's listener cannot be inspected)"),
            Remote::OtherMounts { address, listener } => write!(
                f,
                "the engine at {address} is not proven to share this host's files (its socket's listener, {listener}, sees other mounts: another mount namespace, as rootless Docker and Podman have, or another root)"
            ),
            Remote::NotTheEngine { address, listener } => write!(
                f,
                "the engine at {address} is not proven to share this host's files (its socket's listener, {listener}, is not shown to be the engine itself: a forwarder proves nothing about where the engine is)"
            ),
        }
    }
}

/// `None` when the engine workcell would use sees this host's files; else why not, for
/// messages ("the engine at tcp://10.0.0.2:2375 is reached over the network").
pub fn remote() -> Result<Option<Remote>, super::DockerError> {
    let (address, _) = super::client()?;
    Ok(match placement(&address) {
        Placement::Local => None,
        Placement::Remote(why) => Some(why),
    })
}

/// What `doctor` and `plan` say about how zones reach the engine at `address`.
pub fn describe(address: &str) -> Option<String> {
    match placement(address) {
        Placement::Local => None,
        Placement::Remote(why) => Some(format!(
            "{why}: zones are shipped to it (copied in; writable ones brought back, checked and published as with `delivery: copy`); `image: host` and network rules are refused there"
        )),
    }
}

/// Decides where the engine at `address` is.
pub fn placement(address: &str) -> Placement {
    let scheme = address.split("://").next().unwrap_or_default();
    if matches!(scheme, "tcp" | "http" | "https" | "ssh") {
        return Placement::Remote(Remote::Network { address: address.to_string() });
    }
    let unknown = || Placement::Remote(Remote::Unknown { address: address.to_string() });
    let Some(path) = address.strip_prefix("unix://") else { return unknown() };
    let Some(facts) = Facts::gather(path) else { return unknown() };
    match judge(&facts) {
        Ok(()) => Placement::Local,
        Err(Unproven::OtherMounts) => Placement::Remote(Remote::OtherMounts { address: address.to_string(), listener: facts.listener }),
        Err(Unproven::NotTheEngine) => Placement::Remote(Remote::NotTheEngine { address: address.to_string(), listener: facts.listener }),
    }
}

/// What a normal user can learn about a socket's listener and this host's engines.
#[derive(Debug, Clone)]
struct Facts {
    listener: Listener,
    /// The listener's mount table is ours (same namespace, same root).
    shares_mounts: bool,
    /// The file name of the listener's executable, where `/proc/PID/exe` is readable.
    exe_name: Option<String>,
    /// The pid that docker's pid file names, when the file is root's and only root's to write.
    docker_pid: Option<u32>,
    /// That pid is a root `dockerd` sharing our mounts (for a socket-activated listener).
    docker_pid_shares_mounts: bool,
}

/// Why a listener in reach is not taken as the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unproven {
    OtherMounts,
    NotTheEngine,
}

/// The rule of the module's head, on facts already gathered.
fn judge(f: &Facts) -> Result<(), Unproven> {
    if !f.shares_mounts {
        return Err(Unproven::OtherMounts);
    }
    let l = &f.listener;
    let proven = l.uid == 0
        && match l.comm.as_str() {
            "dockerd" => f.docker_pid == Some(l.pid),
            "podman" => f.exe_name.as_deref() == Some("podman"),
            _ if l.pid == 1 => f.docker_pid.is_some() && f.docker_pid_shares_mounts,
            _ => false,
        };
    if proven {
        Ok(())
    } else {
        Err(Unproven::NotTheEngine)
    }
}

impl Facts {
    fn gather(socket: &str) -> Option<Facts> {
        let stream = std::os::unix::net::UnixStream::connect(socket).ok()?;
        let cred = rustix::net::sockopt::socket_peercred(&stream).ok()?;
        let pid = cred.pid.as_raw_nonzero().get().unsigned_abs();
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim_end().to_string();
        let listener = Listener { pid, uid: cred.uid.as_raw(), comm };
        let exe_name = std::fs::read_link(format!("/proc/{pid}/exe")).ok().and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let docker_pid = docker_pid_file();
        let listener_shares = shares_mounts(pid);
        // The pid file usually names the listener itself: its mount table is read once.
        let docker_pid_shares_mounts = docker_pid.is_some_and(|d| is_root_dockerd(d) && if d == pid { listener_shares } else { shares_mounts(d) });
        Some(Facts { shares_mounts: listener_shares, listener, exe_name, docker_pid, docker_pid_shares_mounts })
    }
}

/// Whether process `pid` has our mount table. Read a few times: a mount made or removed
/// between the two reads (a container starting) would differ once, a namespace always.
fn shares_mounts(pid: u32) -> bool {
    (0..3).any(|_| match (std::fs::read(format!("/proc/{pid}/mountinfo")), std::fs::read("/proc/self/mountinfo")) {
        (Ok(theirs), Ok(ours)) => !ours.is_empty() && theirs == ours,
        _ => false,
    })
}

/// The pid in dockerd's default pid file, trusted only when root alone can have written it:
/// the file and each directory above it are root's and writable by no one else.
fn docker_pid_file() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    const PID_FILE: &str = "/run/docker.pid";
    let root_only = |m: &std::fs::Metadata| m.uid() == 0 && m.mode() & 0o022 == 0;
    let file = std::fs::symlink_metadata(PID_FILE).ok()?;
    if !file.is_file() || !root_only(&file) || !["/run", "/"].iter().all(|d| std::fs::symlink_metadata(d).is_ok_and(|m| root_only(&m))) {
        return None;
    }
    std::fs::read_to_string(PID_FILE).ok()?.trim().parse().ok()
}

/// Whether `pid` is a root process that calls itself `dockerd` (its status shows both).
fn is_root_dockerd(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return false };
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    field("Name:") == Some("dockerd") && field("Uid:").is_some_and(|u| u.split_whitespace().all(|id| id == "0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(pid: u32, uid: u32, comm: &str) -> Facts {
        Facts {
            listener: Listener { pid, uid, comm: comm.into() },
            shares_mounts: true,
            exe_name: None,
            docker_pid: Some(1442),
            docker_pid_shares_mounts: true,
        }
    }

    #[test]
    fn network_addresses_are_remote_without_asking() {
        for a in ["tcp://10.0.0.2:2375", "https://engine:2376", "ssh://user@engine", "http://127.0.0.1:2375"] {
            assert!(matches!(placement(a), Placement::Remote(Remote::Network { .. })), "{a}");
        }
        // A socket nobody listens on proves nothing.
        assert!(matches!(placement("unix:///nonexistent/workcell.sock"), Placement::Remote(Remote::Unknown { .. })));
    }

    #[test]
    fn the_pid_files_dockerd_in_our_mounts_is_local() {
        assert_eq!(judge(&facts(1442, 0, "dockerd")), Ok(()));
    }

    #[test]
    fn a_forwarder_named_dockerd_is_not_the_engine() {
        // Root's socat renamed: not the pid file's process.
        assert_eq!(judge(&facts(2001, 0, "dockerd")), Err(Unproven::NotTheEngine));
        // A user's forwarder, even with the pid file's number (a reused pid): not root.
        assert_eq!(judge(&facts(1442, 1000, "dockerd")), Err(Unproven::NotTheEngine));
        // No pid file root alone could have written.
        assert_eq!(judge(&Facts { docker_pid: None, ..facts(1442, 0, "dockerd") }), Err(Unproven::NotTheEngine));
        assert_eq!(judge(&facts(2001, 0, "socat")), Err(Unproven::NotTheEngine));
    }

    #[test]
    fn podman_is_proven_by_its_executable() {
        let podman = facts(3000, 0, "podman");
        assert_eq!(judge(&Facts { exe_name: Some("podman".into()), ..podman.clone() }), Ok(()));
        // A normal user cannot read a root process's executable: not proven.
        assert_eq!(judge(&podman), Err(Unproven::NotTheEngine));
        assert_eq!(judge(&Facts { exe_name: Some("socat".into()), ..podman }), Err(Unproven::NotTheEngine));
    }

    #[test]
    fn other_mounts_are_remote_whoever_listens() {
        assert_eq!(judge(&Facts { shares_mounts: false, ..facts(1442, 0, "dockerd") }), Err(Unproven::OtherMounts));
        // Rootless Podman: its own user and mount namespace.
        assert_eq!(judge(&Facts { shares_mounts: false, exe_name: Some("podman".into()), ..facts(5000, 1000, "podman") }), Err(Unproven::OtherMounts));
    }

    #[test]
    fn socket_activation_counts_only_with_a_local_dockerd() {
        assert_eq!(judge(&facts(1, 0, "systemd")), Ok(()));
        assert_eq!(judge(&Facts { docker_pid_shares_mounts: false, ..facts(1, 0, "systemd") }), Err(Unproven::NotTheEngine));
        assert_eq!(judge(&Facts { docker_pid: None, ..facts(1, 0, "systemd") }), Err(Unproven::NotTheEngine));
    }

    #[test]
    fn this_process_shares_its_own_mounts() {
        assert!(shares_mounts(std::process::id()));
    }
}
