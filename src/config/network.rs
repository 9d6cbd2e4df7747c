//! `network:` of the project and of workers, into the [`Access`] a sandbox carries. A
//! worker's rules narrow the project's: every allow entry must be covered by the project's,
//! its `hosts:` are the project's (at most a subset, same addresses), and it may ask only
//! where the project asks. Anything wider is refused with the entry's line and column.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_saphyr::{Location, Spanned};

use super::raw::{RawNetwork, RawNetworkRules};
use super::{ConfigError, Diag};
use crate::egress::rules::{normalise_name, Entry, Ports};
use crate::egress::{Access, HostEntry, Policy, RuleSet};

impl Diag {
    /// `workcell.yaml:5:12`: where an entry was written, as refusals and plans show it (the
    /// file's name only: the worker reads refusals, and host paths are not its business).
    fn origin(&self, loc: Location) -> String {
        let name = self.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        format!("{name}:{}:{}", loc.line() + self.line_offset, loc.column())
    }

    fn source(&self) -> String {
        self.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

/// The project's `network:`.
pub(super) fn project_access(raw: Option<&Spanned<RawNetwork>>, diag: &Diag) -> Result<Access, ConfigError> {
    Ok(match raw.map(|n| &n.value) {
        None | Some(RawNetwork::Enabled(false)) => Access::Off,
        Some(RawNetwork::Enabled(true)) => Access::Open,
        Some(RawNetwork::Rules(r)) => {
            let (set, hosts) = rules(r, diag)?;
            Access::Filtered(Arc::new(Policy { hosts, layers: vec![Arc::new(set)] }))
        }
    })
}

/// A worker's `network:` under the project's access.
pub(super) fn worker_access(raw: Option<&Spanned<RawNetwork>>, diag: &Diag, project: &Access) -> Result<Access, ConfigError> {
    let Some(raw) = raw else { return Ok(project.clone()) };
    match &raw.value {
        RawNetwork::Enabled(false) => Ok(Access::Off),
        RawNetwork::Enabled(true) if !project.any() => {
            Err(diag.spanned(raw, "network: true needs the project's network; the project sets network: false (the default)"))
        }
        RawNetwork::Enabled(true) => Ok(project.clone()),
        RawNetwork::Rules(_) if !project.any() => {
            Err(diag.spanned(raw, "network rules need the project's network; the project sets network: false (the default), so this worker has loopback only"))
        }
        RawNetwork::Rules(r) => {
            let (set, hosts) = rules(r, diag)?;
            if let Access::Filtered(p) = project {
                within(r, &set, &hosts, p, diag)?;
            }
            let own = Access::Filtered(Arc::new(Policy { hosts, layers: vec![Arc::new(set)] }));
            Ok(project.narrowed_by(&own))
        }
    }
}

/// Refuses a worker's rules that reach past the project's.
fn within(raw: &RawNetworkRules, set: &RuleSet, hosts: &BTreeMap<String, HostEntry>, project: &Policy, diag: &Diag) -> Result<(), ConfigError> {
    let allowed = || project.layers.iter().flat_map(|l| l.allow.iter().map(|e| e.text.as_str())).collect::<Vec<_>>().join(", ");
    for (entry, spanned) in set.allow.iter().zip(raw.allow.iter().flatten()) {
        if !project.layers.iter().all(|l| l.allow.iter().any(|p| p.covers(entry))) {
            return Err(diag.spanned(
                spanned,
                format!(
                    "the network entry '{}' ({}) reaches past the project's rules, which allow: {}; a worker may only narrow them (name a destination they cover)",
                    entry.text,
                    entry.ports,
                    allowed()
                ),
            ));
        }
    }
    for (name, spanned) in raw.hosts.iter().flatten() {
        let key = normalise_name(&name.value).unwrap_or_default();
        let mine = hosts.get(&key).map(|h| h.address);
        match project.hosts.get(&key) {
            Some(h) if Some(h.address) == mine => {}
            Some(h) => {
                return Err(diag.spanned(
                    spanned,
                    format!("hosts: '{key}' is {} in the project; a worker keeps the project's hosts (remove it or give the same address)", h.address),
                ))
            }
            None => {
                return Err(
                    diag.spanned(name, format!("hosts: '{key}' is not a static name of the project; a worker keeps the project's hosts and cannot add names"))
                )
            }
        }
    }
    if let Some(ask) = raw.ask.as_ref().filter(|a| a.value) {
        if !project.layers.iter().all(|l| l.ask) {
            return Err(diag.spanned(ask, "ask: true needs the project's network to ask too (it sets ask: false, refusing unlisted destinations)"));
        }
    }
    Ok(())
}

/// Reads `{allow, deny, hosts, ask}`; each bad entry is refused with its location.
fn rules(raw: &RawNetworkRules, diag: &Diag) -> Result<(RuleSet, BTreeMap<String, HostEntry>), ConfigError> {
    let entries = |list: &Option<Vec<Spanned<String>>>, default: Ports| -> Result<Vec<Entry>, ConfigError> {
        let mut out = Vec::new();
        for s in list.iter().flatten() {
            super::text::check_printable("a network entry", &s.value).map_err(|m| diag.spanned(s, m))?;
            let e = Entry::parse(&s.value, default, diag.origin(s.referenced)).map_err(|e| diag.spanned(s, format!("network entry '{}': {e}", s.value)))?;
            out.push(e);
        }
        Ok(out)
    };
    let allow = entries(&raw.allow, Ports::Web)?;
    let deny = entries(&raw.deny, Ports::Any)?;
    let mut hosts = BTreeMap::new();
    for (name, address) in raw.hosts.iter().flatten() {
        super::text::check_printable("a host name", &name.value).map_err(|m| diag.spanned(name, m))?;
        let key = normalise_name(&name.value).map_err(|why| diag.spanned(name, format!("hosts: '{}' is not a host name: {why}", name.value)))?;
        let ip = address.value.trim().parse::<std::net::IpAddr>().map_err(|_| {
            diag.spanned(address, format!("hosts: '{}' is not an IP address; give the address {key} stands for, like 10.20.0.7 or 2001:db8::7", address.value))
        })?;
        if hosts.insert(key.clone(), HostEntry { address: ip.to_canonical(), origin: diag.origin(name.referenced) }).is_some() {
            return Err(diag.spanned(name, format!("hosts: '{key}' is given twice")));
        }
    }
    Ok((RuleSet { source: diag.source(), allow, deny, ask: raw.ask.as_ref().is_some_and(|a| a.value) }, hosts))
}
