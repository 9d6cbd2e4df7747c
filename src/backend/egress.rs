//! The seam between a backend and the egress proxy, defined below the backends in
//! [`crate::egress::seam`] (the proxy implements it) and re-exported here for them.

pub use crate::egress::seam::{proxy_env, EgressProxy, Peers, NO_PROXY, PROXY_PORT};
