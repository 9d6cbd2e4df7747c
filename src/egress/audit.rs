//! One `egress` line in the run's audit log per connection to the proxy: who connected, what
//! it asked for, which rule decided, the verdict, bytes each way and how long it lasted. The
//! line is written when the connection's last holder lets go of its record, so that a tunnel
//! that outlives the request that opened it is counted to its end, and a connection cut off
//! when the run ends is still recorded.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::limits::Activity;
use super::resolve::Refusal;
use crate::tools::audit::AuditLog;

/// What became of one connection.
#[derive(Debug, Default)]
struct State {
    protocol: &'static str,
    destination: Option<String>,
    address: Option<SocketAddr>,
    rule: Option<String>,
    verdict: &'static str,
    reason: Option<String>,
}

/// The record of one connection; the line is written when the last clone drops.
#[derive(Debug, Clone)]
pub struct Record(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    log: Option<AuditLog>,
    peer: SocketAddr,
    activity: Arc<Activity>,
    state: Mutex<State>,
}

impl Record {
    pub fn new(log: Option<AuditLog>, peer: SocketAddr, activity: Arc<Activity>) -> Record {
        let state =
            State { protocol: "unknown", verdict: "malformed", reason: Some("the connection closed before a complete request".into()), ..State::default() };
        Record(Arc::new(Inner { log, peer, activity, state: Mutex::new(state) }))
    }

    fn with(&self, f: impl FnOnce(&mut State)) {
        let mut s = self.0.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut s);
    }

    pub fn protocol(&self, protocol: &'static str) {
        self.with(|s| s.protocol = protocol);
    }

    pub fn destination(&self, destination: String) {
        self.with(|s| s.destination = Some(destination));
    }

    pub fn allowed(&self, address: SocketAddr, rule: String) {
        self.with(|s| {
            s.address = Some(address);
            s.rule = Some(rule);
            s.verdict = "allowed";
            s.reason = None;
        });
    }

    pub fn refused(&self, refusal: &Refusal) {
        self.with(|s| {
            s.verdict = if refusal.by_policy() { "refused" } else { "failed" };
            s.reason = Some(format!("{}: {}", refusal.kind, refusal.reason));
        });
    }

    /// A request the proxy could not read or does not serve.
    pub fn malformed(&self, reason: impl Into<String>) {
        self.with(|s| {
            s.verdict = "malformed";
            s.reason = Some(reason.into());
        });
    }

    /// Something after the decision went wrong (the destination closed, a timeout).
    pub fn ended(&self, reason: impl Into<String>) {
        self.with(|s| {
            if s.verdict == "allowed" {
                s.reason = Some(reason.into());
            }
        });
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let Some(log) = &self.log else { return };
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
        if let Err(e) = log.record("egress", line) {
            tracing::error!("cannot write the audit log for an egress connection: {e}");
        }
    }
}
