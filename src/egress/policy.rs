//! The network a sandbox gives its workers (`Access`), and for a filtered one the rules that
//! decide each destination (`Policy`). A child's policy is its parent's with its own rules
//! added as another layer: a destination passes only when every layer lets it, so a child can
//! never reach more than its parent, whatever its own rules say.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;

use super::rules::{Entry, Target};

/// One file's `network: {allow, deny, ask}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleSet {
    /// The file the rules come from (`workcell.yaml`, `fetcher.worker`).
    pub source: String,
    pub allow: Vec<Entry>,
    /// Checked before `allow`.
    pub deny: Vec<Entry>,
    /// An unlisted destination asks a person instead of being refused.
    pub ask: bool,
}

/// A static name of `hosts:`, used instead of DNS.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostEntry {
    pub address: IpAddr,
    /// Where it was written.
    pub origin: String,
}

/// The rules of a filtered network: the static names and one rule set per level of the
/// chain (project, worker, child worker...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Policy {
    pub hosts: BTreeMap<String, HostEntry>,
    pub layers: Vec<Arc<RuleSet>>,
}

/// The network a sandbox gives its workers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Access {
    /// Loopback only.
    #[default]
    Off,
    /// The host's network, unfiltered.
    Open,
    /// Only what the policy lets through, by way of the egress proxy.
    Filtered(Arc<Policy>),
}

impl Access {
    /// Whether any network beyond loopback is reachable.
    pub fn any(&self) -> bool {
        !matches!(self, Access::Off)
    }

    pub fn policy(&self) -> Option<&Arc<Policy>> {
        match self {
            Access::Filtered(p) => Some(p),
            _ => None,
        }
    }

    /// The network of a child that asks for `child` under this one: never more than either.
    /// The child keeps this one's `hosts:`; its rules are added as another layer.
    pub fn narrowed_by(&self, child: &Access) -> Access {
        match (self, child) {
            (Access::Off, _) | (_, Access::Off) => Access::Off,
            (Access::Open, c) => c.clone(),
            (Access::Filtered(p), Access::Open) => Access::Filtered(p.clone()),
            (Access::Filtered(p), Access::Filtered(c)) => {
                let mut layers = p.layers.clone();
                for l in &c.layers {
                    if !layers.iter().any(|x| Arc::ptr_eq(x, l) || **x == **l) {
                        layers.push(l.clone());
                    }
                }
                Access::Filtered(Arc::new(Policy { hosts: p.hosts.clone(), layers }))
            }
        }
    }
}

impl From<bool> for Access {
    /// `true`: the host's network; `false`: loopback only.
    fn from(open: bool) -> Access {
        if open {
            Access::Open
        } else {
            Access::Off
        }
    }
}

/// A destination as the worker asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// A name, normalised (lower case, no trailing dot).
    Name(String),
    Ip(IpAddr),
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// What the rules say about a destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every layer allows it; `rule` is the innermost layer's entry.
    Allowed { rule: Entry },
    /// A deny entry matches.
    Denied { rule: Entry },
    /// Some layer does not list it and does not ask: `source` names that layer's file.
    Unlisted { source: String },
    /// Some layers do not list it, and all of those ask.
    Ask,
}

impl Policy {
    /// Judges `host:port`: deny entries first (in any layer), then each layer's allow list.
    pub fn judge(&self, host: &Host, port: u16) -> Verdict {
        let matches = |e: &Entry| match host {
            Host::Name(n) => e.matches_name(n, port),
            Host::Ip(ip) => e.matches_ip(*ip, port),
        };
        for layer in &self.layers {
            if let Some(rule) = layer.deny.iter().find(|e| matches(e)) {
                return Verdict::Denied { rule: rule.clone() };
            }
        }
        let mut rule = None;
        let mut asks = false;
        for layer in &self.layers {
            match layer.allow.iter().find(|e| matches(e)) {
                Some(r) => rule = Some(r.clone()),
                None if layer.ask => asks = true,
                None => return Verdict::Unlisted { source: layer.source.clone() },
            }
        }
        match rule {
            _ if asks => Verdict::Ask,
            Some(rule) => Verdict::Allowed { rule },
            None => Verdict::Unlisted { source: String::new() },
        }
    }

    /// The deny entry (of any layer) that names `ip` by address or network, if one does: a
    /// denied address stays denied however the worker names it (a `hosts:` name, a DNS answer).
    pub fn denied_address(&self, ip: IpAddr, port: u16) -> Option<&Entry> {
        self.layers.iter().flat_map(|l| l.deny.iter()).find(|e| e.matches_ip(ip, port))
    }

    /// Whether an answer of `ip` may be connected to although it is in a special range: only
    /// when every layer allows it by address or network.
    pub fn address_allowed(&self, ip: IpAddr, port: u16) -> bool {
        !self.layers.is_empty()
            && self.layers.iter().all(|l| l.allow.iter().any(|e| matches!(e.target, Target::Ip(_) | Target::Net(_)) && e.matches_ip(ip, port)))
    }

    /// What this policy lets through, for refusals and plans, at most `limit` bytes.
    pub fn describe(&self, limit: usize) -> String {
        let mut out = String::new();
        for l in &self.layers {
            let list = |v: &[Entry]| if v.is_empty() { "nothing".to_string() } else { v.iter().map(Entry::to_string).collect::<Vec<_>>().join(", ") };
            let _ = write!(out, "{} allows: {}", l.source, list(&l.allow));
            if !l.deny.is_empty() {
                let _ = write!(out, "; denies: {}", list(&l.deny));
            }
            out.push_str(if l.ask { "; asks about anything else.\n" } else { "; refuses anything else.\n" });
        }
        if !self.hosts.is_empty() {
            let hosts: Vec<String> = self.hosts.iter().map(|(n, h)| format!("{n} = {}", h.address)).collect();
            let _ = writeln!(out, "Static names (hosts:): {}", hosts.join(", "));
        }
        if out.len() > limit {
            let mut cut = limit.saturating_sub(4);
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
            out.push_str("...\n");
        }
        out
    }
}
