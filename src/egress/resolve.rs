//! From a destination the worker asked for to a connected socket: the rules judge it (asking
//! a person when `ask:` says so), the name is resolved here (from `hosts:`, else the host's
//! resolver; the worker needs no DNS), answers in special ranges are dropped unless `hosts:`
//! or an allowed network names them (no DNS rebinding into the host's own networks), as are
//! answers that are addresses of this host itself ([`super::local`]), and the remaining
//! addresses are tried in turn; a connection that turns out to reach the host is closed.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};

use ipnet::IpNet;
use tokio::net::TcpStream;

use super::limits::{CONNECT_TIMEOUT, MAX_ADDRESSES, MAX_PENDING_ASKS, RESOLVE_TIMEOUT};
use super::local;
use super::policy::{Host, Policy, Verdict};
use super::rules::{normalise_name, Entry};
use super::Consent;

/// Why a destination was not connected to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `denied`, `unlisted`, `special`, `host`, `asked`, `invalid` (the rules said no: HTTP 403,
    /// SOCKS 2), or `unresolved`, `unreachable` (the destination failed: 502, SOCKS 4/5).
    pub kind: &'static str,
    /// Why, in words for the worker and the audit log.
    pub reason: String,
}

impl Refusal {
    fn new(kind: &'static str, reason: impl Into<String>) -> Refusal {
        Refusal { kind, reason: reason.into() }
    }

    /// The rules refused it (as opposed to the destination failing).
    pub fn by_policy(&self) -> bool {
        !matches!(self.kind, "unresolved" | "unreachable")
    }
}

/// A connection the rules allowed.
#[derive(Debug)]
pub struct Opened {
    pub stream: TcpStream,
    pub address: SocketAddr,
    /// The allow entry that let it through, or how a person approved it.
    pub rule: String,
}

/// Reads the host part of a request: a name, or an address (IPv6 possibly in brackets).
pub fn parse_host(text: &str) -> Result<Host, Refusal> {
    let bare = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(Host::Ip(ip.to_canonical()));
    }
    normalise_name(text).map(Host::Name).map_err(|why| Refusal::new("invalid", format!("'{}' is not a host name: {why}", crate::term::escape(text))))
}

/// Who is asked about unlisted destinations, and the questions that may wait at once.
#[derive(Clone)]
pub struct Asker {
    consent: Arc<dyn Consent>,
    pending: Arc<tokio::sync::Semaphore>,
}

impl Asker {
    pub fn new(consent: Arc<dyn Consent>) -> Asker {
        Asker { consent, pending: Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_ASKS)) }
    }
}

/// Judges `host:port`, resolves it and connects.
pub async fn open(policy: &Policy, consent: Option<&Asker>, host: &Host, port: u16) -> Result<Opened, Refusal> {
    let rule = match policy.judge(host, port) {
        Verdict::Allowed { rule } => describe(&rule),
        Verdict::Denied { rule } => return Err(Refusal::new("denied", format!("it matches the deny entry {}", describe(&rule)))),
        Verdict::Unlisted { source } => return Err(Refusal::new("unlisted", format!("no allow entry of {source} covers {host}:{port}"))),
        Verdict::Ask => ask(consent, host, port).await?,
    };
    let (addresses, trusted) = addresses(policy, host, port).await?;
    let mut refused = Vec::new();
    let mut usable = Vec::new();
    let mut denied = None;
    let mut own = None;
    let mut owns = 0;
    for ip in addresses {
        if let Some(rule) = policy.denied_address(ip, port) {
            denied.get_or_insert_with(|| format!("{host} leads to {ip}, which matches the deny entry {}", describe(rule)));
            continue;
        }
        // Named by the config (hosts:, or an allowed address or network): connected to even
        // when special or the host's own, and not checked for the host after connecting.
        let named = trusted || policy.address_allowed(ip, port);
        // Loopback is refused below, as the special range it is, in the words for it.
        if !named && !ip.is_loopback() {
            if let Some(interface) = local::interface_of(ip) {
                own.get_or_insert_with(|| own_address(host, ip, &interface));
                refused.push(format!("{ip} (an address of this host, interface {})", crate::term::escape(&interface)));
                owns += 1;
                continue;
            }
        }
        match special(ip) {
            Some(range) if !named => refused.push(format!("{ip} ({range})")),
            _ => usable.push((SocketAddr::new(ip, port), named)),
        }
    }
    if usable.is_empty() {
        if let Some(reason) = denied.filter(|_| refused.is_empty()) {
            return Err(Refusal::new("denied", reason));
        }
        if let Some(reason) = own.filter(|_| refused.len() == owns) {
            return Err(Refusal::new("host", reason));
        }
        return Err(Refusal::new(
            "special",
            format!(
                "{host} resolves only to {}, which the proxy does not connect to unless the address comes from hosts: or an allow entry names its network",
                refused.join(", ")
            ),
        ));
    }
    let mut last = String::new();
    let mut reached_host = None;
    for (address, named) in usable.into_iter().take(MAX_ADDRESSES) {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                // An address the host took on since the interfaces were last read: the kernel
                // answers from the address asked for. Closed before a byte is relayed.
                if !named && stream.local_addr().is_ok_and(|local| local::is_self_connection(local, address)) {
                    let interface = local::interface_of_now(address.ip()).unwrap_or_else(|| "unknown".into());
                    reached_host.get_or_insert_with(|| own_address(host, address.ip(), &interface));
                    continue;
                }
                let _ = stream.set_nodelay(true);
                return Ok(Opened { stream, address, rule });
            }
            Ok(Err(e)) => last = format!("{address}: {e}"),
            Err(_) => last = format!("{address}: no answer within {} s", CONNECT_TIMEOUT.as_secs()),
        }
    }
    if let Some(reason) = reached_host {
        return Err(Refusal::new("host", reason));
    }
    Err(Refusal::new("unreachable", format!("{host}:{port} could not be reached ({last})")))
}

/// Why an answer that is an address of this host is refused, and how to allow it.
fn own_address(host: &Host, ip: IpAddr, interface: &str) -> String {
    let fix =
        format!("{ip} is an address of this host (interface {}); name it in network.hosts or allow its network to reach it", crate::term::escape(interface));
    match host {
        Host::Ip(_) => fix,
        Host::Name(_) => format!("{host} leads to {ip}: {fix}"),
    }
}

fn describe(rule: &Entry) -> String {
    format!("'{}' ({}, {})", rule.text, rule.ports, rule.origin)
}

/// Asks a person (through the run's approvals) about a destination no layer lists.
async fn ask(asker: Option<&Asker>, host: &Host, port: u16) -> Result<String, Refusal> {
    let Some(asker) = asker else {
        return Err(Refusal::new("unlisted", format!("{host}:{port} is not listed, and nobody can be asked in this run")));
    };
    let destination = format!("{host}:{port}");
    // Held until the question is answered, even when the connection has gone meanwhile.
    let Ok(waiting) = asker.pending.clone().try_acquire_owned() else {
        return Err(Refusal::new(
            "asked",
            format!("{destination} is not listed, and {MAX_PENDING_ASKS} questions about other destinations are still waiting for an answer; ask again once they are answered"),
        ));
    };
    let (consent, asked) = (asker.consent.clone(), destination.clone());
    let answer = tokio::task::spawn_blocking(move || {
        let _waiting = waiting;
        consent.connect(&asked)
    });
    match answer.await {
        Ok(Ok(())) => Ok(format!("approved: {destination}")),
        Ok(Err(denied)) => Err(Refusal::new("asked", format!("{destination} is not listed, and the approval was refused: {denied}"))),
        Err(_) => Err(Refusal::new("asked", format!("{destination} is not listed, and the approval failed"))),
    }
}

/// The addresses of `host`, and whether they came from `hosts:` (or are the literal asked for,
/// which the rules have judged by address already).
async fn addresses(policy: &Policy, host: &Host, port: u16) -> Result<(Vec<IpAddr>, bool), Refusal> {
    let name = match host {
        Host::Ip(ip) => return Ok((vec![*ip], policy.address_allowed(*ip, port))),
        Host::Name(n) => n,
    };
    if let Some(h) = policy.hosts.get(name) {
        return Ok((vec![h.address], true));
    }
    let lookup = tokio::net::lookup_host((name.as_str(), port));
    match tokio::time::timeout(RESOLVE_TIMEOUT, lookup).await {
        Ok(Ok(found)) => {
            let mut out: Vec<IpAddr> = Vec::new();
            for a in found {
                let ip = a.ip().to_canonical();
                if !out.contains(&ip) {
                    out.push(ip);
                }
            }
            if out.is_empty() {
                return Err(Refusal::new("unresolved", format!("{name} has no address")));
            }
            Ok((out, false))
        }
        Ok(Err(e)) => Err(Refusal::new("unresolved", format!("{name} could not be resolved: {e}"))),
        Err(_) => Err(Refusal::new("unresolved", format!("{name} could not be resolved within {} s", RESOLVE_TIMEOUT.as_secs()))),
    }
}

/// Address ranges that are not the public internet, with the words a refusal uses.
static RANGES: LazyLock<Vec<(IpNet, &'static str)>> = LazyLock::new(|| {
    [
        ("0.0.0.0/8", "'this network'"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (carrier-grade NAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local, where cloud metadata services answer"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved (and broadcast)"),
        ("::/96", "unspecified or IPv4-compatible"),
        ("::1/128", "loopback"),
        ("64:ff9b:1::/48", "local NAT64"),
        ("100::/64", "discard"),
        ("2001::/23", "IETF special purpose (Teredo and others)"),
        ("2001:db8::/32", "documentation"),
        ("fc00::/7", "unique-local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    ]
    .into_iter()
    .filter_map(|(net, name)| net.parse().ok().map(|n| (n, name)))
    .collect()
});

/// The special range `ip` lies in, if any. Addresses that embed an IPv4 address (IPv4-mapped,
/// NAT64, 6to4) are judged by that address too.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    let ip = ip.to_canonical();
    if let Some((_, name)) = RANGES.iter().find(|(net, _)| net.contains(&ip)) {
        return Some(name);
    }
    if let IpAddr::V6(v6) = ip {
        let s = v6.segments();
        let embedded = match s {
            [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some((hi, lo)),
            [0x2002, hi, lo, ..] => Some((hi, lo)),
            _ => None,
        };
        if let Some((hi, lo)) = embedded {
            let v4 = std::net::Ipv4Addr::from(((hi as u32) << 16) | lo as u32);
            return special(IpAddr::V4(v4));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_ranges() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "169.254.169.254",
            "::1",
            "::ffff:127.0.0.1",
            "fd00::1",
            "fe80::1",
            "0.0.0.0",
            "::",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
        ] {
            assert!(special(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in ["1.1.1.1", "2606:4700::1111", "64:ff9b::101:101"] {
            assert!(special(ip.parse().unwrap()).is_none(), "{ip}");
        }
    }
}
