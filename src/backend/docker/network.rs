//! The network of a proxied docker run: an internal bridge network of the run's own (no route
//! out), named and labelled like the container, with the egress proxy listening on a free
//! port of its gateway and the host's firewall closing every other port of the host to it
//! ([`super::firewall`]). The container is attached to this network only, and its DNS server
//! is its own loopback, where nothing answers: Docker's embedded server (127.0.0.11, still in
//! its resolv.conf) answers the run network's own names and passes anything else there, so
//! other names resolve only through the proxy.
//!
//! [`open`] makes all of it before the container exists; [`close`] removes the rules and the
//! network after the container is gone, as the run's watchdog and `workcell gc` do for a
//! run that could not.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};

use bollard::models::NetworkCreateRequest;
use bollard::Docker;

use super::{api_message, firewall, DockerError};
use crate::backend::egress::{EgressProxy, Peers};

/// Where a proxied container's DNS points: its own loopback, where nothing listens.
pub const NOWHERE_DNS: &str = "127.0.0.1";

/// The bridge interface of run network `name` (`workcell-RUNID`): named by workcell, so that
/// the firewall rules can name it before any container exists (at most 15 characters).
pub fn bridge_name(name: &str) -> String {
    let id = name.strip_prefix("workcell-").unwrap_or(name);
    format!("wc-{}", id.get(..12).unwrap_or(id))
}

/// A run's network, as made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunNetwork {
    pub name: String,
    pub bridge: String,
    /// The host's address on the network, where the proxy listens.
    pub gateway: Ipv4Addr,
    pub subnet: Ipv4Addr,
    pub prefix: u8,
    /// The proxy's port on the gateway: a free one, chosen when the listener was bound (a
    /// fixed port would clash with any host service listening on it on every address).
    pub port: u16,
}

impl RunNetwork {
    /// The proxy's address as the worker sees it.
    pub fn proxy(&self) -> SocketAddr {
        SocketAddr::from((self.gateway, self.port))
    }
}

/// Points the worker's proxy variables (in `KEY=VALUE` form) at `proxy`, in place of any
/// the plan had.
pub fn set_proxy_env(env: &mut Vec<String>, proxy: SocketAddr) {
    let vars = crate::backend::egress::proxy_env(proxy);
    env.retain(|kv| !vars.iter().any(|(k, _)| kv.split_once('=').is_some_and(|(key, _)| key == k)));
    env.extend(vars.into_iter().map(|(k, v)| format!("{k}={v}")));
}

/// Makes the network `name` with `labels`, the proxy's listener on its gateway (served by
/// `proxy` for peers inside the network only) and the firewall rules that leave the worker
/// that port alone. On failure whatever was made is removed again.
pub(super) async fn open(docker: &Docker, name: &str, labels: HashMap<String, String>, proxy: &dyn EgressProxy) -> Result<RunNetwork, DockerError> {
    firewall::check()?;
    let mut net = create(docker, name, labels).await?;
    let served = (|| -> Result<(), DockerError> {
        let listener =
            listen_on(net.gateway).map_err(|source| DockerError::Io { what: format!("cannot listen on {} for the egress proxy", net.gateway), source })?;
        net.port = listener.local_addr().map_err(|source| DockerError::Io { what: "cannot read the egress proxy's port".into(), source })?.port();
        // The rules before serving: nothing reaches the port meanwhile but the (not yet
        // created) container, and a failure here leaves nothing to stop.
        firewall::install(&net.name, &net.bridge, net.gateway, net.port)?;
        proxy
            .serve(listener, Peers::Within { network: net.subnet.into(), prefix: net.prefix })
            .map_err(|e| DockerError::Local(format!("the egress proxy could not start: {e}")))
    })();
    if let Err(e) = served {
        close(docker, name).await;
        return Err(e);
    }
    Ok(net)
}

/// A listener on a free port of `gateway`, bound with `IP_FREEBIND`: Docker brings a network's
/// bridge (and so the gateway address) up when it makes the network, Podman (netavark) only
/// when the first container joins it, after the proxy must already listen. The socket
/// accepts on that address as soon as it exists.
fn listen_on(gateway: Ipv4Addr) -> std::io::Result<TcpListener> {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket_with(AddressFamily::INET, SocketType::STREAM, rustix::net::SocketFlags::CLOEXEC, None)?;
    rustix::net::sockopt::set_ip_freebind(&fd, true)?;
    rustix::net::bind(&fd, &SocketAddr::from((gateway, 0)))?;
    rustix::net::listen(&fd, 128)?;
    Ok(TcpListener::from(fd))
}

async fn create(docker: &Docker, name: &str, labels: HashMap<String, String>) -> Result<RunNetwork, DockerError> {
    let bridge = bridge_name(name);
    let request = NetworkCreateRequest {
        name: name.to_string(),
        driver: Some("bridge".into()),
        internal: Some(true),
        enable_ipv6: Some(false),
        labels: Some(labels),
        options: Some(HashMap::from([("com.docker.network.bridge.name".to_string(), bridge.clone())])),
        ..Default::default()
    };
    docker.create_network(request).await.map_err(|e| DockerError::Api { what: format!("create the run's network {name}"), source: e })?;
    let inspected = docker.inspect_network(name, None::<bollard::query_parameters::InspectNetworkOptions>).await;
    let parsed = inspected.map_err(|e| DockerError::Api { what: format!("inspect the run's network {name}"), source: e }).and_then(|n| {
        n.ipam
            .and_then(|i| i.config)
            .into_iter()
            .flatten()
            .find_map(|c| {
                let gateway: Ipv4Addr = c.gateway?.parse().ok()?;
                let (subnet, prefix) = c.subnet?.split_once('/').and_then(|(a, p)| Some((a.parse().ok()?, p.parse().ok()?)))?;
                Some(RunNetwork { name: name.to_string(), bridge: bridge.clone(), gateway, subnet, prefix, port: 0 })
            })
            .ok_or_else(|| DockerError::Local(format!("the daemon made the network {name} without an IPv4 subnet and gateway")))
    });
    if parsed.is_err() {
        remove(docker, name).await;
    }
    parsed
}

/// Removes the rules and the network of run `name` (neither existing is fine). Failures are
/// reported, not returned: the run's outcome matters more, and `workcell gc` can finish the
/// job.
pub(super) async fn close(docker: &Docker, name: &str) {
    // Only root can have set rules: a proxied run is refused to anyone else.
    if rustix::process::geteuid().is_root() {
        if let Err(e) = firewall::remove(name) {
            eprintln!("workcell: could not remove the firewall rules of {name}: {e}; run `workcell gc` as root to clean up");
        }
    }
    remove(docker, name).await;
}

async fn remove(docker: &Docker, name: &str) {
    match docker.remove_network(name).await {
        Ok(()) => {}
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {}
        Err(e) => eprintln!("workcell: could not remove the network {name}: {}; run `workcell gc` to clean up", api_message(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bridge_names_fit_an_interface_name() {
        assert_eq!(bridge_name("workcell-0123456789abcdef"), "wc-0123456789ab");
        assert!(bridge_name("workcell-0123456789abcdef").len() <= 15);
    }

    #[test]
    fn proxy_variables_replace_the_plans() {
        let mut env = vec!["PATH=/usr/bin".to_string(), "HTTP_PROXY=http://elsewhere:1".to_string(), "http_proxyish=x".to_string()];
        set_proxy_env(&mut env, "172.18.0.1:3128".parse().unwrap());
        assert!(env.contains(&"HTTP_PROXY=http://172.18.0.1:3128".to_string()));
        assert!(env.contains(&"ALL_PROXY=socks5h://172.18.0.1:3128".to_string()));
        assert!(env.contains(&"no_proxy=localhost,127.0.0.1,::1".to_string()));
        assert!(!env.iter().any(|e| e.contains("elsewhere")));
        assert!(env.contains(&"PATH=/usr/bin".to_string()) && env.contains(&"http_proxyish=x".to_string()));
    }
}
