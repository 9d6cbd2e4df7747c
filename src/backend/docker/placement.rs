//! Whether the engine sees this host's files: a bind mount names a host path, and an engine
//! on another host (or in another mount namespace) would bind whatever that path is there,
//! or nothing. Decided, never guessed: an engine is local only when the process listening
//! on its unix socket is the engine itself (`dockerd`, `podman`) in workcell's own mount
//! namespace, which therefore resolves every path as workcell does. Anything else is
//! remote: a network address (`tcp://`, `http(s)://`, `ssh://`), a forwarded socket
//! (`ssh -L`, socat), a socket from another namespace, a rootless engine in a namespace of
//! its own, or a listener workcell may not inspect. A remote engine gets zones shipped
//! (`plan::ship`, [`super::ship`]), which is correct wherever the engine is, only slower.
//!
//! (An earlier version asked such engines whether they could read a token in a fresh
//! temporary directory; an engine that shares only that directory's file system passed,
//! and then bound the zones by path on its own side.)

/// `None` when the engine workcell would use sees this host's files; else what it is, for
/// messages ("the engine at tcp://10.0.0.2:2375 is reached over the network").
pub fn remote() -> Result<Option<String>, super::DockerError> {
    let (address, _) = super::client()?;
    Ok(match by_address(&address) {
        Some(answer) => answer,
        None => Some(format!(
            "the engine at {address} is not proven to share this host's files (its socket is not served by dockerd or podman in workcell's own mount namespace)"
        )),
    })
}

/// What `doctor` says about how zones reach the engine at `address`.
pub fn describe(address: &str) -> Option<String> {
    match by_address(address) {
        Some(Some(why)) => Some(format!(
            "{why}: zones are shipped to it (copied in; writable ones brought back, checked and published as with `delivery: copy`); `image: host` and network rules are refused there"
        )),
        Some(None) => None,
        None => Some(format!("the engine at {address} is not proven to share this host's files (its socket is not served by dockerd or podman in workcell's own mount namespace): zones are shipped to it, as to a remote engine")),
    }
}

/// What the address alone proves: `Some(Some(_))` remote, `Some(None)` local, `None` unknown.
fn by_address(address: &str) -> Option<Option<String>> {
    let scheme = address.split("://").next().unwrap_or_default();
    if matches!(scheme, "tcp" | "http" | "https" | "ssh") {
        return Some(Some(format!("the engine at {address} is reached over the network")));
    }
    let path = address.strip_prefix("unix://")?;
    let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
    let pid = rustix::net::sockopt::socket_peercred(&stream).ok()?.pid.as_raw_nonzero().get();
    // The listener must be the engine itself: a forwarder in this namespace (`ssh -L` of a
    // remote socket, socat) proves nothing about where the engine is.
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    if !ENGINES.contains(&comm.trim_end()) {
        return None;
    }
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()?;
    let ours = std::fs::read_link("/proc/self/ns/mnt").ok()?;
    (theirs == ours).then_some(None)
}

/// The names (`/proc/PID/comm`) of engines that serve the API themselves.
const ENGINES: &[&str] = &["dockerd", "podman"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_addresses_are_remote_without_asking() {
        for a in ["tcp://10.0.0.2:2375", "https://engine:2376", "ssh://user@engine", "http://127.0.0.1:2375"] {
            assert!(matches!(by_address(a), Some(Some(_))), "{a}");
        }
        // A socket nobody listens on proves nothing.
        assert_eq!(by_address("unix:///nonexistent/workcell.sock"), None);
    }
}
