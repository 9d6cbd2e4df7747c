//! One `egress` line in the run's audit log per connection to the proxy: who connected, what
//! it asked for, which rule decided, the verdict, bytes each way and how long it lasted. The
//! line is written when the connection's last holder lets go of its record, so that a tunnel
//! that outlives the request that opened it is counted to its end, and a connection cut off
//! when the run ends is still recorded.
//!
//! A worker decides how many connections it opens and what they ask for, so the lines go
//! through the run's [`Ledger`], which keeps the log bounded whatever the worker does: every
//! field is cut to [`FIELD_MAX`] bytes; a refusal of a destination already refused in this
//! run is counted instead of written, and one line per such destination gives the count when
//! the proxy stops; past [`MAX_LINES`] lines the rest are counted and one line says how many
//! were dropped. The refusals are also what the run tells a person at its end.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::limits::Activity;
use super::resolve::Refusal;
use crate::audit::{cut, AuditLog};

/// The most of one field of an egress line (a name, a reason), in bytes of JSON.
pub const FIELD_MAX: usize = 200;
/// The most connection lines one run writes; past it, lines are counted as dropped.
pub const MAX_LINES: usize = 2000;
/// The most distinct refused destinations counted (each gives one summary line at most).
pub const MAX_TRACKED: usize = 1000;

/// A destination refused in this run, and how often.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Refused {
    /// `http`, `connect`, `socks5`.
    pub protocol: &'static str,
    /// `host:port` as asked (cut to [`FIELD_MAX`]).
    pub destination: String,
    /// `denied`, `unlisted`, `special`, `asked`, `invalid`.
    pub kind: &'static str,
    /// The first refusal's reason (cut).
    pub reason: String,
    pub count: u64,
}

/// Which refusals are one destination's.
type Key = (&'static str, String, &'static str);

#[derive(Debug, Default)]
struct Tally {
    kind: Option<&'static str>,
    reason: Option<String>,
    count: u64,
    /// Its first line was written (so the summary adds to it).
    written: bool,
}

#[derive(Debug, Default)]
struct Book {
    lines: usize,
    dropped: u64,
    /// Refused, failed and malformed connections by destination, in the order first seen.
    tallies: HashMap<Key, Tally>,
    order: Vec<Key>,
    closed: bool,
}

/// The run's egress lines: bounded, refusals merged (see the module's documentation).
#[derive(Debug)]
pub struct Ledger {
    log: Option<AuditLog>,
    book: Mutex<Book>,
}

impl Ledger {
    pub fn new(log: Option<AuditLog>) -> Ledger {
        Ledger { log, book: Mutex::default() }
    }

    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self, event: &str, line: serde_json::Value) {
        let Some(log) = &self.log else { return };
        if let Err(e) = log.record(event, line) {
            tracing::error!("cannot write the audit log for an egress connection: {e}");
        }
    }

    /// Writes one connection's line, or counts it (a repeated refusal, or past the cap).
    fn connection(&self, s: &State, line: serde_json::Value) {
        let write = {
            let mut guard = self.book();
            let book = &mut *guard;
            let repeated = if s.verdict == "allowed" {
                false
            } else {
                let key: Key = (s.protocol, s.destination.clone().unwrap_or_default(), s.verdict);
                match book.tallies.get_mut(&key) {
                    Some(t) => {
                        t.count += 1;
                        true
                    }
                    None if book.order.len() < MAX_TRACKED => {
                        let written = book.lines < MAX_LINES;
                        book.tallies.insert(key.clone(), Tally { kind: s.kind, reason: s.reason.clone(), count: 1, written });
                        book.order.push(key);
                        false
                    }
                    None => false,
                }
            };
            if repeated {
                false
            } else if book.lines < MAX_LINES {
                book.lines += 1;
                true
            } else {
                book.dropped += 1;
                false
            }
        };
        if write {
            self.write("egress", line);
        }
    }

    /// Writes the summary lines (once) and returns the destinations the rules refused.
    pub fn close(&self) -> Vec<Refused> {
        let (summaries, dropped, refused) = {
            let mut book = self.book();
            let first = !book.closed;
            book.closed = true;
            let mut summaries = Vec::new();
            let mut refused = Vec::new();
            for key in &book.order {
                let t = &book.tallies[key];
                let (protocol, destination, verdict) = key;
                if first && t.count > 1 {
                    summaries.push(json!({"protocol": protocol, "destination": destination, "verdict": verdict, "reason": t.reason,
                        "count": t.count, "first_line_written": t.written}));
                }
                if *verdict == "refused" && !destination.is_empty() {
                    refused.push(Refused {
                        protocol,
                        destination: destination.clone(),
                        kind: t.kind.unwrap_or("refused"),
                        reason: t.reason.clone().unwrap_or_default(),
                        count: t.count,
                    });
                }
            }
            (summaries, if first { book.dropped } else { 0 }, refused)
        };
        for line in summaries {
            self.write("egress_repeated", line);
        }
        if dropped > 0 {
            self.write(
                "egress_dropped",
                json!({"dropped": dropped, "max_lines": MAX_LINES,
                "reason": format!("this run wrote its {MAX_LINES} egress lines; {dropped} more connections were not written one by one")}),
            );
        }
        refused
    }
}

/// What became of one connection.
#[derive(Debug, Default)]
struct State {
    protocol: &'static str,
    destination: Option<String>,
    address: Option<SocketAddr>,
    rule: Option<String>,
    verdict: &'static str,
    /// The refusal's kind (`denied`, `unlisted`…), for the summary a person reads.
    kind: Option<&'static str>,
    reason: Option<String>,
}

/// The record of one connection; the line is written when the last clone drops.
#[derive(Debug, Clone)]
pub struct Record(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    ledger: Arc<Ledger>,
    peer: SocketAddr,
    activity: Arc<Activity>,
    state: Mutex<State>,
}

impl Record {
    pub fn new(ledger: Arc<Ledger>, peer: SocketAddr, activity: Arc<Activity>) -> Record {
        let state =
            State { protocol: "unknown", verdict: "malformed", reason: Some("the connection closed before a complete request".into()), ..State::default() };
        Record(Arc::new(Inner { ledger, peer, activity, state: Mutex::new(state) }))
    }

    fn with(&self, f: impl FnOnce(&mut State)) {
        let mut s = self.0.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut s);
    }

    pub fn protocol(&self, protocol: &'static str) {
        self.with(|s| s.protocol = protocol);
    }

    pub fn destination(&self, destination: String) {
        self.with(|s| s.destination = Some(cut(&destination, FIELD_MAX).into_owned()));
    }

    pub fn allowed(&self, address: SocketAddr, rule: String) {
        self.with(|s| {
            s.address = Some(address);
            s.rule = Some(cut(&rule, FIELD_MAX).into_owned());
            s.verdict = "allowed";
            s.kind = None;
            s.reason = None;
        });
    }

    pub fn refused(&self, refusal: &Refusal) {
        self.with(|s| {
            s.verdict = if refusal.by_policy() { "refused" } else { "failed" };
            s.kind = Some(refusal.kind);
            s.reason = Some(cut(&format!("{}: {}", refusal.kind, refusal.reason), FIELD_MAX).into_owned());
        });
    }

    /// A request the proxy could not read or does not serve.
    pub fn malformed(&self, reason: impl Into<String>) {
        self.with(|s| {
            s.verdict = "malformed";
            s.reason = Some(cut(&reason.into(), FIELD_MAX).into_owned());
        });
    }

    /// Something after the decision went wrong (the destination closed, a timeout).
    pub fn ended(&self, reason: impl Into<String>) {
        self.with(|s| {
            if s.verdict == "allowed" {
                s.reason = Some(cut(&reason.into(), FIELD_MAX).into_owned());
            }
        });
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let s = self.state.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        let line = json!({
            "peer": self.peer.to_string(),
            "protocol": s.protocol,
            "destination": s.destination,
            "address": s.address.map(|a| a.to_string()),
            "rule": s.rule,
            "verdict": s.verdict,
            "reason": s.reason,
            "bytes_up": self.activity.up.load(Ordering::Relaxed),
            "bytes_down": self.activity.down.load(Ordering::Relaxed),
            "duration_ms": self.activity.elapsed().as_millis() as u64,
        });
        self.ledger.connection(s, line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refuse(ledger: &Arc<Ledger>, destination: &str) {
        let r = Record::new(ledger.clone(), "127.0.0.1:1".parse().unwrap(), Activity::new());
        r.protocol("connect");
        r.destination(destination.into());
        r.refused(&Refusal { kind: "unlisted", reason: format!("no allow entry covers {destination}") });
    }

    #[test]
    fn repeats_are_counted_and_lines_capped() {
        let tmp = tempfile::tempdir().unwrap();
        let ledger = Arc::new(Ledger::new(Some(AuditLog::new(tmp.path(), "r1"))));
        for _ in 0..5 {
            refuse(&ledger, "api.example.com:443");
        }
        for i in 0..MAX_LINES + 10 {
            refuse(&ledger, &format!("{i}{}:443", "a".repeat(60_000)));
        }
        let refused = ledger.close();
        assert_eq!(refused.len(), MAX_TRACKED);
        assert_eq!((refused[0].destination.as_str(), refused[0].count, refused[0].kind), ("api.example.com:443", 5, "unlisted"));
        let events = crate::audit::read_all(tmp.path()).unwrap();
        let of = |name: &str| events.iter().filter(|e| e["event"] == name).collect::<Vec<_>>();
        assert_eq!(of("egress").len(), MAX_LINES);
        assert_eq!(of("egress").iter().filter(|e| e["destination"] == "api.example.com:443").count(), 1);
        let repeated = of("egress_repeated");
        assert_eq!((repeated.len(), &repeated[0]["count"]), (1, &json!(5)));
        assert_eq!(of("egress_dropped")[0]["dropped"], 11);
        let d = of("egress")[1]["destination"].as_str().unwrap();
        assert!(d.len() <= FIELD_MAX + 20 && d.ends_with("…[cut 59805 bytes]"), "{d}");
        // Closing again writes nothing more.
        ledger.close();
        assert_eq!(crate::audit::read_all(tmp.path()).unwrap().len(), events.len());
        let size = std::fs::metadata(crate::audit::audit_path(tmp.path())).unwrap().len();
        assert!(size < (MAX_LINES as u64 + 2) * 1024, "{size}");
    }
}
