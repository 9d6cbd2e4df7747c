//! One entry of `network: {allow, deny}` as written: a domain (exact or `*.`-wildcard), an
//! IPv4/IPv6 address or a CIDR, with an optional `:port`. Parsing says what was wrong and
//! what the forms are; `covers` decides whether one entry admits everything another does
//! (a worker's entries must be covered by its project's).

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

/// What an entry names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// Exactly this name (lower case, no trailing dot).
    Name(String),
    /// Every name strictly below this one (`*.example.com`: `a.example.com`, `a.b.example.com`,
    /// not `example.com` itself).
    Below(String),
    /// Exactly this address.
    Ip(IpAddr),
    /// Every address in this network.
    Net(IpNet),
}

/// Which ports an entry covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ports {
    /// 80 and 443 (an allow entry written without a port).
    Web,
    /// One port (`:8443`).
    One(u16),
    /// Every port (`:*`; a deny entry written without a port).
    Any,
}

impl Ports {
    pub fn contains(self, port: u16) -> bool {
        match self {
            Ports::Web => port == 80 || port == 443,
            Ports::One(p) => p == port,
            Ports::Any => true,
        }
    }

    /// Whether every port of `other` is one of these.
    pub fn covers(self, other: Ports) -> bool {
        match (self, other) {
            (Ports::Any, _) => true,
            (_, Ports::Any) => false,
            (Ports::Web, Ports::Web) => true,
            (Ports::Web, Ports::One(p)) => Ports::Web.contains(p),
            (Ports::One(a), Ports::One(b)) => a == b,
            (Ports::One(_), Ports::Web) => false,
        }
    }
}

impl fmt::Display for Ports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ports::Web => f.write_str("ports 80, 443"),
            Ports::One(p) => write!(f, "port {p}"),
            Ports::Any => f.write_str("every port"),
        }
    }
}

/// One allow or deny entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    /// As written in the file.
    pub text: String,
    pub target: Target,
    pub ports: Ports,
    /// Whether `text` names the port itself (else `ports` is the list's default).
    pub port_written: bool,
    /// Where it was written (`workcell.yaml:5:12`), for refusals and plans.
    pub origin: String,
}

impl Serialize for Entry {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("Entry", 3)?;
        st.serialize_field("entry", &self.text)?;
        st.serialize_field("ports", &self.ports.to_string())?;
        st.serialize_field("origin", &self.origin)?;
        st.end()
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port_written {
            f.write_str(&self.text)
        } else {
            write!(f, "{} ({})", self.text, self.ports)
        }
    }
}

/// Why an entry cannot be read. Each says which forms are accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error("an entry is empty; write a domain (pypi.org, *.pythonhosted.org), an address (10.20.0.7, [2001:db8::1]) or a CIDR (10.20.0.0/16), each with an optional :port")]
    Empty,
    #[error("'{port}' is not a port; use a number from 1 to 65535, or * for every port")]
    BadPort { port: String },
    #[error("'{text}' is not a valid CIDR; write an address, '/', and a prefix length (10.20.0.0/16, 2001:db8::/32)")]
    BadCidr { text: String },
    #[error("the CIDR '{text}' has host bits set; did you mean {network}?")]
    HostBits { text: String, network: IpNet },
    #[error("'{text}' looks like an IP address but is not one; IPv4 is four numbers 0-255 (10.20.0.7), IPv6 goes in brackets when a port follows ([2001:db8::1]:443)")]
    BadAddress { text: String },
    #[error("a '*' is only allowed as the whole first label, like *.example.com")]
    MisplacedWildcard,
    #[error("'{text}' is not a domain name: {why}")]
    BadName { text: String, why: &'static str },
    #[error("an IPv6 address with a port is written in brackets: [2001:db8::1]:443")]
    Unbracketed,
}

impl Entry {
    /// Parses `text`; `default` are the ports of an entry written without one (allow: 80 and
    /// 443; deny: every port, so that denying a name never leaves a port open).
    pub fn parse(text: &str, default: Ports, origin: impl Into<String>) -> Result<Entry, EntryError> {
        let (target, ports, port_written) = parse_parts(text.trim(), default)?;
        Ok(Entry { text: text.trim().to_string(), target, ports, port_written, origin: origin.into() })
    }

    /// Whether this entry admits `name` on `port`.
    pub fn matches_name(&self, name: &str, port: u16) -> bool {
        self.ports.contains(port)
            && match &self.target {
                Target::Name(n) => n == name,
                Target::Below(suffix) => is_below(name, suffix),
                Target::Ip(_) | Target::Net(_) => false,
            }
    }

    /// Whether this entry admits `ip` on `port` (only address and network entries do).
    pub fn matches_ip(&self, ip: IpAddr, port: u16) -> bool {
        self.ports.contains(port)
            && match &self.target {
                Target::Ip(a) => *a == ip,
                Target::Net(n) => n.contains(&ip),
                Target::Name(_) | Target::Below(_) => false,
            }
    }

    /// Whether every destination `other` admits, this one admits too.
    pub fn covers(&self, other: &Entry) -> bool {
        self.ports.covers(other.ports)
            && match (&self.target, &other.target) {
                (Target::Name(a), Target::Name(b)) => a == b,
                (Target::Below(s), Target::Name(b)) => is_below(b, s),
                (Target::Below(s), Target::Below(t)) => s == t || is_below(t, s),
                (Target::Ip(a), Target::Ip(b)) => a == b,
                (Target::Ip(a), Target::Net(m)) => m.prefix_len() == m.max_prefix_len() && m.addr() == *a,
                (Target::Net(n), Target::Ip(b)) => n.contains(b),
                (Target::Net(n), Target::Net(m)) => n.contains(m),
                _ => false,
            }
    }
}

/// `name` lies strictly below `suffix` (`a.b.c` below `b.c`).
fn is_below(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1 && name.ends_with(suffix) && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

fn parse_parts(text: &str, default: Ports) -> Result<(Target, Ports, bool), EntryError> {
    let (target, ports) = parse_target_ports(text)?;
    Ok((target, ports.unwrap_or(default), ports.is_some()))
}

/// The target, and the port when one is written.
fn parse_target_ports(text: &str) -> Result<(Target, Option<Ports>), EntryError> {
    if text.is_empty() {
        return Err(EntryError::Empty);
    }
    // `[v6]` or `[v6]:port` or `[v6/len]:port`.
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or_else(|| EntryError::BadAddress { text: text.into() })?;
        let ports = match after {
            "" => None,
            p => Some(parse_port(p.strip_prefix(':').ok_or_else(|| EntryError::BadAddress { text: text.into() })?)?),
        };
        return Ok((parse_address(inside)?, ports));
    }
    // A bare IPv6 address or network: colons belong to it, there is no port.
    if text.matches(':').count() > 1 {
        return match parse_address(text) {
            Ok(t) => Ok((t, None)),
            Err(_) if text.rsplit_once(':').is_some_and(|(a, _)| parse_address(a).is_ok()) => Err(EntryError::Unbracketed),
            Err(e) => Err(e),
        };
    }
    let (host, ports) = match text.rsplit_once(':') {
        Some((h, p)) => (h, Some(parse_port(p)?)),
        None => (text, None),
    };
    let looks_numeric =
        host.rsplit('.').next().is_some_and(|last| !last.is_empty() && last.split('/').next().is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit())));
    if host.contains('/') || looks_numeric {
        return Ok((parse_address(host)?, ports));
    }
    Ok((parse_name(host)?, ports))
}

fn parse_port(p: &str) -> Result<Ports, EntryError> {
    if p == "*" {
        return Ok(Ports::Any);
    }
    match p.parse::<u16>() {
        Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(Ports::One(n)),
        _ => Err(EntryError::BadPort { port: p.into() }),
    }
}

/// An address or a network, IPv4-mapped IPv6 folded to IPv4 (`::ffff:10.0.0.1` is 10.0.0.1).
fn parse_address(text: &str) -> Result<Target, EntryError> {
    if text.contains('/') {
        let net: IpNet = text.parse().map_err(|_| EntryError::BadCidr { text: text.into() })?;
        if net.trunc() != net {
            return Err(EntryError::HostBits { text: text.into(), network: net.trunc() });
        }
        return Ok(Target::Net(net));
    }
    text.parse::<IpAddr>().map(|ip| Target::Ip(ip.to_canonical())).map_err(|_| EntryError::BadAddress { text: text.into() })
}

fn parse_name(host: &str) -> Result<Target, EntryError> {
    let (below, name) = match host.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, host),
    };
    if name.contains('*') || host == "*" {
        return Err(EntryError::MisplacedWildcard);
    }
    let name = normalise_name(name).map_err(|why| EntryError::BadName { text: host.into(), why })?;
    Ok(if below { Target::Below(name) } else { Target::Name(name) })
}

/// A host name in the form rules compare: lower case, without a trailing dot, checked to be a
/// DNS name (letters, digits, `-` and `_`, labels of 1 to 63, at most 253 in all).
pub fn normalise_name(name: &str) -> Result<String, &'static str> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err("it is empty");
    }
    if !name.is_ascii() {
        return Err("write an internationalised name in its ASCII form (xn--...)");
    }
    if name.len() > 253 {
        return Err("it is longer than 253 characters");
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err("it has an empty label (two dots in a row, or a leading dot)");
        }
        if label.len() > 63 {
            return Err("a label is longer than 63 characters");
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err("only letters, digits, '-' and '_' may appear between the dots");
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label may not start or end with '-'");
        }
    }
    Ok(name.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(t: &str) -> Entry {
        Entry::parse(t, Ports::Web, "t").unwrap()
    }

    #[test]
    fn forms() {
        assert_eq!(e("PyPI.org.").target, Target::Name("pypi.org".into()));
        assert_eq!(e("*.pythonhosted.org").target, Target::Below("pythonhosted.org".into()));
        assert_eq!(e("api.example.com:8443").ports, Ports::One(8443));
        assert_eq!(e("10.20.0.0/16").target, Target::Net("10.20.0.0/16".parse().unwrap()));
        assert_eq!(e("[2001:db8::1]:443").ports, Ports::One(443));
        assert_eq!(e("2001:db8::/32").ports, Ports::Web);
        assert_eq!(e("[::ffff:10.0.0.1]").target, Target::Ip("10.0.0.1".parse().unwrap()));
        assert_eq!(e("git.example.com:*").ports, Ports::Any);
        for bad in ["", "a..b", "*", "a.*.b", "10.0.0.1/33", "10.0.0.1/8", "300.1.1.1", "x:0", "x:70000", "2001:db8::1:443x", "ex ample.com", "bücher.de"] {
            assert!(Entry::parse(bad, Ports::Web, "t").is_err(), "{bad}");
        }
        assert_eq!(Entry::parse("2001:db8::1:443", Ports::Web, "t").unwrap().target, Target::Ip("2001:db8::1:443".parse().unwrap()));
    }

    #[test]
    fn wildcard_is_strictly_below() {
        let w = e("*.example.com");
        assert!(w.matches_name("a.example.com", 443));
        assert!(w.matches_name("a.b.example.com", 80));
        assert!(!w.matches_name("example.com", 443));
        assert!(!w.matches_name("badexample.com", 443));
        assert!(!w.matches_name("a.example.com", 22));
    }
}
