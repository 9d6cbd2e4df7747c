//! A Docker socket this user may not connect to (`EACCES`): the most common Docker set-up of
//! all, a local root daemon whose socket is `root:docker 0660`, reached by a person not (yet)
//! in that group. The daemon is there; "start it" would send them the wrong way. What is said
//! is what gives access: the socket's group (named from its owner, not assumed to be
//! `docker`), an engine of their own (rootless Docker, Podman), or the bwrap backend.
//!
//! Whether the daemon is running is read from `/proc/net/unix` (world-readable): a listening
//! socket bound at this path. Without that, only that the socket exists is said.

use std::path::{Path, PathBuf};

/// The socket at `socket` refused this user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub socket: PathBuf,
    /// The socket's group: its name, else `gid N`; `None` when it could not be read.
    pub group: Option<String>,
    /// The socket's mode bits (`0660`).
    pub mode: Option<u32>,
    /// A process listens on it (the daemon is running).
    pub listening: bool,
}

impl Denied {
    /// The facts about `socket`, as this user can read them.
    pub fn of(socket: &Path) -> Denied {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(socket).ok();
        let group = meta.as_ref().map(|m| group_name(m.gid()).unwrap_or_else(|| format!("gid {}", m.gid())));
        let listening = std::fs::read_to_string("/proc/net/unix").map(|t| listens_at(&t, socket)).unwrap_or(false);
        Denied { socket: socket.to_path_buf(), group, mode: meta.map(|m| m.mode() & 0o7777), listening }
    }

    /// What happened, for the person who must act.
    pub fn reason(&self) -> String {
        let socket = self.socket.display();
        let how = match (&self.group, self.mode) {
            (Some(g), Some(m)) => format!(" (group {g}, mode {m:04o})"),
            _ => String::new(),
        };
        if self.listening {
            format!("the Docker daemon is running, but this user may not use its socket {socket}{how}")
        } else {
            format!("this user may not use the Docker socket {socket}{how}")
        }
    }

    /// The ways to get access, or to do without it.
    pub fn fix(&self) -> String {
        let join = match &self.group {
            Some(g) if !g.starts_with("gid ") => {
                format!("add yourself to its group (`sudo usermod -aG {g} $USER`, then log in again, or run `newgrp {g}` in this shell)")
            }
            _ => "add yourself to the socket's group (then log in again)".to_string(),
        };
        format!(
            "To use it, {join}; or use an engine of your own with DOCKER_HOST pointing at it (rootless Docker: unix://$XDG_RUNTIME_DIR/docker.sock; Podman: `systemctl --user start podman.socket`, unix://$XDG_RUNTIME_DIR/podman/podman.sock); or run without Docker: --backend bwrap"
        )
    }
}

/// Whether `/proc/net/unix` (its text) shows a listening socket bound at `socket`. Paths
/// are compared after resolving links (`/var/run` is `/run` on most systems, and dockerd
/// and systemd's `docker.socket` bind different spellings of the same name).
fn listens_at(proc_net_unix: &str, socket: &Path) -> bool {
    /// `__SO_ACCEPTCON` in the Flags column: the socket listens.
    const ACCEPTING: u32 = 0x0001_0000;
    let wanted = std::fs::canonicalize(socket).unwrap_or_else(|_| socket.to_path_buf());
    proc_net_unix.lines().skip(1).any(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (Some(flags), Some(path)) = (cols.get(3), cols.get(7)) else { return false };
        let listening = u32::from_str_radix(flags, 16).is_ok_and(|f| f & ACCEPTING != 0);
        listening && (Path::new(path) == socket || std::fs::canonicalize(path).is_ok_and(|p| p == wanted))
    })
}

/// The name of group `gid` in `/etc/group`, if it has one there.
fn group_name(gid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    group_in(&text, gid)
}

/// The name of group `gid` in a `/etc/group` text (`name:x:gid:members`).
fn group_in(etc_group: &str, gid: u32) -> Option<String> {
    etc_group.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let id: u32 = f.nth(1)?.parse().ok()?;
        (id == gid && !name.is_empty()).then(|| name.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_group_from_etc_group() {
        let text = "root:x:0:\ndocker:x:105:alice\n+::::\n";
        assert_eq!(group_in(text, 105).as_deref(), Some("docker"));
        assert_eq!(group_in(text, 7), None);
    }

    #[test]
    fn a_listening_socket_is_found_by_its_path() {
        let text = "Num       RefCount Protocol Flags    Type St Inode Path\n\
                    00000000d4a3bb73: 00000002 00000000 00010000 0001 01  3559 /nonexistent/docker.sock\n\
                    000000007a50707a: 00000003 00000000 00000000 0001 03  2933 /nonexistent/other.sock\n";
        assert!(listens_at(text, Path::new("/nonexistent/docker.sock")));
        // Connected, not listening.
        assert!(!listens_at(text, Path::new("/nonexistent/other.sock")));
        assert!(!listens_at(text, Path::new("/nonexistent/podman.sock")));
    }

    #[test]
    fn says_the_daemon_runs_and_how_to_get_access_never_to_start_it() {
        let d = Denied { socket: "/var/run/docker.sock".into(), group: Some("docker".into()), mode: Some(0o660), listening: true };
        let said = format!("{}. {}", d.reason(), d.fix());
        assert!(
            said.starts_with("the Docker daemon is running, but this user may not use its socket /var/run/docker.sock (group docker, mode 0660)"),
            "{said}"
        );
        for part in ["sudo usermod -aG docker $USER", "newgrp docker", "rootless Docker", "Podman", "DOCKER_HOST", "--backend bwrap"] {
            assert!(said.contains(part), "{part}: {said}");
        }
        assert!(!said.to_lowercase().contains("start it"), "{said}");
        let quiet = Denied { listening: false, group: Some("gid 4242".into()), ..d };
        assert!(quiet.reason().starts_with("this user may not use the Docker socket"), "{}", quiet.reason());
        assert!(!quiet.fix().contains("usermod"), "{}", quiet.fix());
    }
}
