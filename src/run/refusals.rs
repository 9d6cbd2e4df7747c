//! The run's side of the egress proxy's refusals: a client often shows only "403" (curl's
//! `CONNECT tunnel failed`), so at the end of a run with network rules every destination the
//! rules refused is told with its count and what would allow it: on stderr (or, for a
//! captured run, after the worker's stderr), or as one JSON line with `--json`. The worker
//! chose the names, so they are escaped and the list is bounded.

use serde_json::json;

use crate::backend::{Finished, Output};
use crate::egress::Refused;

/// How many destinations are told one per line; the rest are counted.
pub const LISTED: usize = 20;

/// Tells `refused` (see the module's documentation).
pub(super) fn tell(refused: &[Refused], output: Output, json: bool, result: &mut Result<Finished, crate::backend::BackendError>) {
    if refused.is_empty() {
        return;
    }
    let text = lines(refused);
    match (output, result.as_mut()) {
        (Output::Capture, Ok(finished)) => {
            for line in &text {
                finished.stderr.extend_from_slice(line.as_bytes());
                finished.stderr.push(b'\n');
            }
        }
        _ if json => {
            let listed: Vec<_> = refused
                .iter()
                .take(LISTED)
                .map(|r| {
                    json!({"destination": r.destination, "protocol": r.protocol, "kind": r.kind,
                "count": r.count, "reason": r.reason, "hint": hint(r)})
                })
                .collect();
            let more = refused.len().saturating_sub(LISTED);
            let line = serde_json::to_string(&json!({"egress_refused": {"destinations": listed, "more": more}})).unwrap_or_default();
            eprintln!("{}", crate::term::json_for_terminal(&line));
        }
        _ => text.iter().for_each(|l| eprintln!("{l}")),
    }
}

/// One line per destination (at most [`LISTED`]), then a count of the rest.
pub fn lines(refused: &[Refused]) -> Vec<String> {
    let mut out: Vec<String> = refused
        .iter()
        .take(LISTED)
        .map(|r| format!("workcell: egress refused {}× {} ({})", r.count, crate::term::escape(&shown(r)), crate::term::escape(&hint(r))))
        .collect();
    if refused.len() > LISTED {
        out.push(format!("workcell: and {} more refused destinations (see the egress lines of the audit log)", refused.len() - LISTED));
    }
    out
}

/// The destination as the worker most likely asked for it.
fn shown(r: &Refused) -> String {
    match r.protocol {
        "http" => format!("http://{}", r.destination),
        "connect" if r.destination.ends_with(":443") => format!("https://{}", r.destination),
        "connect" => format!("CONNECT {}", r.destination),
        "socks5" => format!("SOCKS5 {}", r.destination),
        _ => r.destination.clone(),
    }
}

/// What the refusal was and what would allow it.
fn hint(r: &Refused) -> String {
    let reason = r.reason.strip_prefix(&format!("{}: ", r.kind)).unwrap_or(&r.reason);
    match r.kind {
        "unlisted" => format!("not in allow; add {} to network.allow", crate::term::quoted(&allow_entry(&r.destination))),
        "denied" => format!("denied: {reason}; remove or narrow that entry of network.deny"),
        _ => reason.to_string(),
    }
}

/// The allow entry that allows `destination` (`host:port` as asked): the bare host for ports
/// 80 and 443 (what an entry without a port allows), else the host with its port, or following
/// the hint would change nothing. An IPv6 address takes brackets before a port.
fn allow_entry(destination: &str) -> String {
    let Some((host, port)) = destination.rsplit_once(':') else { return destination.to_string() };
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    match port {
        "80" | "443" => host.to_string(),
        _ if host.contains(':') => format!("[{host}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(kind: &'static str, destination: &str, reason: &str) -> Refused {
        Refused { protocol: "connect", destination: destination.into(), kind, reason: format!("{kind}: {reason}"), count: 3 }
    }

    #[test]
    fn says_what_would_allow_it() {
        let l = lines(&[refused("unlisted", "api.example.com:443", "no allow entry covers api.example.com:443")]);
        assert_eq!(l, vec![r#"workcell: egress refused 3× https://api.example.com:443 (not in allow; add "api.example.com" to network.allow)"#]);
        let l = lines(&[refused("denied", "x.example.com:80", "it matches the deny entry *.example.com")]);
        assert!(l[0].contains("CONNECT x.example.com:80 (denied: it matches the deny entry *.example.com; remove"), "{l:?}");
    }

    #[test]
    fn the_hint_is_the_entry_that_allows_that_port() {
        let hint_of = |d: &str| lines(&[refused("unlisted", d, "no allow entry covers it")]).remove(0);
        assert!(hint_of("other.test:18081").contains(r#"add "other.test:18081" to network.allow"#));
        assert!(hint_of("other.test:80").contains(r#"add "other.test" to network.allow"#));
        assert!(hint_of("[2001:db8::1]:8443").contains(r#"add "[2001:db8::1]:8443" to network.allow"#));
        assert!(hint_of("2001:db8::1:8443").contains(r#"add "[2001:db8::1]:8443" to network.allow"#));
        assert!(hint_of("[2001:db8::1]:443").contains(r#"add "2001:db8::1" to network.allow"#));
        // Each hint parses as an allow entry that covers the destination it was made for.
        use crate::egress::rules::{Entry, Ports};
        for (dest, host, port) in [("other.test:18081", "other.test", 18081), ("other.test:443", "other.test", 443)] {
            let entry = Entry::parse(&allow_entry(dest), Ports::Web, "hint").expect("the hint parses");
            assert!(entry.matches_name(host, port), "{dest}");
        }
    }

    #[test]
    fn escapes_and_bounds() {
        let many: Vec<_> = (0..30).map(|i| refused("unlisted", &format!("a\u{1b}[2J{i}:443"), "r")).collect();
        let l = lines(&many);
        assert_eq!(l.len(), LISTED + 1);
        assert!(l.iter().all(|l| !l.contains('\u{1b}')), "{l:?}");
        assert!(l[LISTED].contains("and 10 more"), "{l:?}");
    }
}
