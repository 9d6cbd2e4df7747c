//! Rules too broad to appear in any rendered profile, found by reading the profile as
//! s-expressions ([`super::sexp`]). The tests run this over every rendering, and over the
//! rules a review once found in the old base profile, to show it would have caught them.

use super::sexp::{parse, Sexp, SexpError};

/// A rule that gives the worker more than workcell means to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broad {
    /// `(allow default)`: everything.
    AllowDefault,
    /// `sysctl-read` without a name filter, or with a name prefix that covers
    /// `kern.procargs2` (the argv and environment of the user's other processes).
    SysctlUnfiltered,
    /// Opening a terminal device by path (the user's other terminals) without the
    /// extension that only ptys made inside the sandbox carry.
    TtyOpenByPath,
    /// A network rule without a filter, or one that admits any Unix socket.
    NetworkAdmitsUnixSockets,
    /// Listening (bind / inbound) on more than loopback.
    ListensBeyondLoopback,
}

/// Operations that open a file for reading or writing.
const OPEN_OPS: &[&str] = &["file*", "file-read*", "file-read-data", "file-write*", "file-write-data"];
const NETWORK_OPS: &[&str] = &["network*", "network-outbound", "network-inbound", "network-bind"];

/// Every broad `allow` rule of `profile`, with the rule as read.
pub fn broad_rules(profile: &str) -> Result<Vec<(Broad, Sexp)>, SexpError> {
    let mut out = Vec::new();
    for rule in parse(profile)? {
        let Some(items) = rule.form("allow") else { continue };
        let ops: Vec<&str> = items.iter().map_while(Sexp::atom).collect();
        // `(with message ...)` and the like modify a rule; they filter nothing.
        let filters: Vec<&Sexp> = items[ops.len()..].iter().filter(|f| f.form("with").is_none()).collect();
        let has = |set: &[&str]| ops.iter().any(|o| set.contains(o));
        let mut found = |b: Broad| out.push((b, rule.clone()));
        if ops.contains(&"default") {
            found(Broad::AllowDefault);
        }
        if has(&["sysctl*", "sysctl-read"]) && (filters.is_empty() || filters.iter().any(|f| sysctl_covers_procargs(f))) {
            found(Broad::SysctlUnfiltered);
        }
        if has(OPEN_OPS) && filters.iter().any(|f| tty_by_path(f)) {
            found(Broad::TtyOpenByPath);
        }
        if has(NETWORK_OPS) && (filters.is_empty() || filters.iter().any(|f| any_unix_socket(f))) {
            found(Broad::NetworkAdmitsUnixSockets);
        }
        if has(&["network*", "network-inbound", "network-bind"]) && filters.iter().any(|f| listens_widely(f)) {
            found(Broad::ListensBeyondLoopback);
        }
    }
    Ok(out)
}

/// The string argument of a one-argument form such as `(regex #"...")`.
fn arg(items: &[Sexp]) -> Option<&str> {
    match items.first()? {
        Sexp::Str(s) | Sexp::Regex(s) => Some(s),
        _ => None,
    }
}

fn sysctl_covers_procargs(f: &Sexp) -> bool {
    if let Some(items) = f.form("require-any") {
        return items.iter().any(sysctl_covers_procargs);
    }
    f.form("sysctl-name-prefix").and_then(arg).is_some_and(|p| "kern.procargs2".starts_with(p))
}

/// A filter that matches `/dev/ttysNNN` by its path. A `require-all` that also requires an
/// extension is not: only ptys created inside the sandbox carry `com.apple.sandbox.pty`.
fn tty_by_path(f: &Sexp) -> bool {
    if let Some(items) = f.form("require-all") {
        return !items.iter().any(|i| i.form("extension").is_some()) && items.iter().any(tty_by_path);
    }
    if let Some(items) = f.form("require-any") {
        return items.iter().any(tty_by_path);
    }
    for (form, covers) in [("regex", "ttys"), ("literal", "/dev/ttys"), ("subpath", "")] {
        if let Some(p) = f.form(form).and_then(arg) {
            let hit = match form {
                "subpath" => "/dev/ttys000".starts_with(p.trim_end_matches('/')) || p == "/",
                _ => p.contains(covers),
            };
            if hit {
                return true;
            }
        }
    }
    false
}

/// A network filter that matches Unix sockets beyond one named path.
fn any_unix_socket(f: &Sexp) -> bool {
    if let Some(items) = f.form("require-any") {
        return items.iter().any(any_unix_socket);
    }
    if f.form("subpath").is_some() || f.form("regex").is_some() {
        return true;
    }
    for side in ["remote", "local"] {
        if let Some(items) = f.form(side) {
            if items.first().and_then(Sexp::atom) == Some("unix-socket") {
                let named = items.get(1).is_some_and(|p| p.form("path-literal").is_some());
                return !named;
            }
        }
    }
    false
}

fn listens_widely(f: &Sexp) -> bool {
    if let Some(items) = f.form("require-any") {
        return items.iter().any(listens_widely);
    }
    match f.form("local") {
        Some(items) if items.first().and_then(Sexp::atom) == Some("ip") => !arg(&items[1..]).is_some_and(|a| a.starts_with("localhost:")),
        _ => false,
    }
}
