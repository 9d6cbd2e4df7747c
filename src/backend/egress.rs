//! The seam between a backend and the egress proxy (`network: {allow: [...]}`): the backend
//! makes a listening socket that the worker can reach and that nothing else can, and hands
//! it to the proxy, which serves it from the host. The worker's only way out is that socket.

use std::net::{IpAddr, TcpListener};

/// The port the worker's proxy variables name on its side.
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

/// The egress proxy as a backend sees it (implemented by the run session).
pub trait EgressProxy: Send + Sync {
    /// Starts serving connections accepted on `listener` in the background and returns at
    /// once; serving stops when the run's session ends.
    fn serve(&self, listener: TcpListener, peers: Peers) -> Result<(), super::ServiceError>;
}
