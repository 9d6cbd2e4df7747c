//! The seam between a backend and the egress proxy (`network: {allow: [...]}`): the backend
//! makes a listening socket that the worker can reach and that nothing else can, and hands
//! it to the proxy, which serves it from the host. The worker's only way out is that socket.
//! It lives here, below the backends, so that the proxy implements it without looking up to
//! them; `crate::backend::egress` re-exports it for the backends.

use std::net::{IpAddr, SocketAddr, TcpListener};

/// The port the worker's proxy variables name on its side under bwrap (its own loopback).
/// Docker's listener sits on the run network's gateway, on a free port the backend chooses
/// (a fixed one could clash with a host service listening on every address).
pub const PROXY_PORT: u16 = 3128;

/// Whose connections a proxy listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peers {
    /// Every peer: the socket exists only where the worker is (bwrap: inside the worker's
    /// own network namespace).
    Any,
    /// Only peers inside one network (docker: the run's own network; the listener sits on
    /// its gateway, which other containers could also try to reach).
    Within { network: IpAddr, prefix: u8 },
}

/// Why a service a backend starts for the worker (the egress proxy, the tool broker) could not
/// start or serve: the service's own error, whatever its type.
pub type ServiceError = Box<dyn std::error::Error + Send + Sync>;

/// The egress proxy as a backend sees it (implemented by the run session).
pub trait EgressProxy: Send + Sync {
    /// Starts serving connections accepted on `listener` in the background and returns at
    /// once; serving stops when the run's session ends.
    fn serve(&self, listener: TcpListener, peers: Peers) -> Result<(), ServiceError>;
}

/// Addresses the worker reaches itself on, never through the proxy.
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The proxy variables a proxied worker gets, pointing at `addr`, its side of the listener:
/// `HTTP_PROXY`/`HTTPS_PROXY` (HTTP forward and `CONNECT`), `ALL_PROXY` as `socks5h://` (the
/// same port speaks SOCKS5, and the `h` makes clients send names for the proxy to resolve:
/// the worker has no DNS), each in upper and lower case, and `NO_PROXY` for its loopback.
pub fn proxy_env(addr: SocketAddr) -> Vec<(String, String)> {
    let http = format!("http://{addr}");
    let socks = format!("socks5h://{addr}");
    let mut out = Vec::with_capacity(8);
    for (k, v) in [("HTTP_PROXY", &http), ("HTTPS_PROXY", &http), ("ALL_PROXY", &socks), ("NO_PROXY", &NO_PROXY.to_string())] {
        out.push((k.to_string(), v.clone()));
        out.push((k.to_ascii_lowercase(), v.clone()));
    }
    out
}
