//! The egress proxy: the only way out of a worker whose network is `network: {allow: [...]}`.
//! A backend hands it a listening socket only the worker can reach ([`EgressProxy::serve`]);
//! the proxy serves HTTP forward requests, `CONNECT` and SOCKS5 on that one port (the first
//! byte tells them apart: 5 is SOCKS), resolves names itself, applies the rules, and writes
//! one audit line per connection. It runs on a thread and runtime of its own, so a flood of
//! worker connections cannot stall the run's other services, and it stops when the
//! [`Proxy`] is dropped (at the end of the run's session).
//!
//! Modules by job: `rules` (one entry), `policy` (rule layers, verdicts, narrowing),
//! `resolve` (judge, resolve, refuse special answers, connect), `http`, `socks5`, `pin` (a
//! tunnel's first bytes name the judged host), `audit`,
//! `limits` (bounds and counters).

mod audit;
pub use audit::{Refused, FIELD_MAX, MAX_LINES, MAX_TRACKED};
mod http;
pub mod limits;
pub mod local;
mod pin;
pub mod policy;
pub mod resolve;
pub mod rules;
pub mod seam;
mod socks5;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Semaphore};

use crate::audit::AuditLog;
use limits::{Activity, Counters, Lease, Metered, Side, Stats, Timeouts, MAX_CONNECTIONS, MAX_RESOLVERS};
pub use policy::{Access, HostEntry, Policy, RuleSet};
use resolve::Refusal;
use seam::{EgressProxy, Peers, ServiceError};

/// Asks a person whether a worker may connect to a destination no rule lists (`ask: true`).
pub trait Consent: Send + Sync {
    /// `destination` is `host:port`. Blocks until answered.
    fn connect(&self, destination: &str) -> Result<(), ConsentDenied>;
}

/// A person (or the approval mode) said no.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConsentDenied(pub String);

/// Why the proxy could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("cannot start the egress proxy's thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("cannot start the egress proxy's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("the egress proxy stopped before it could serve")]
    Stopped,
    #[error("cannot serve the egress proxy's listening socket: {0}")]
    Listener(#[source] std::io::Error),
}

/// What every connection of one proxy shares.
pub(crate) struct Shared {
    policy: Arc<Policy>,
    consent: Option<resolve::Asker>,
    ledger: Arc<audit::Ledger>,
    counters: Arc<Counters>,
    slots: Arc<Semaphore>,
    stop: watch::Receiver<bool>,
    timeouts: Timeouts,
}

impl Shared {
    /// The body of a refusal: what was refused, why, and what this run may reach.
    fn explain(&self, asked: &str, refusal: &Refusal) -> String {
        let head = if refusal.by_policy() { "refused" } else { "could not connect to" };
        format!("workcell egress proxy {head} {}: {}\n\n{}", crate::term::escape(asked), crate::term::escape(&refusal.reason), self.policy.describe(4096))
    }
}

/// The egress proxy of one run.
pub struct Proxy {
    shared: Arc<Shared>,
    handle: tokio::runtime::Handle,
    stop: watch::Sender<bool>,
    done: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy").field("stats", &self.stats()).finish()
    }
}

impl Proxy {
    /// Starts the proxy's thread; it serves nothing until [`EgressProxy::serve`] gives it a
    /// listener. Lines go to `log` (none: not recorded, for tests of the proxy alone).
    pub fn start(policy: Arc<Policy>, log: Option<AuditLog>, consent: Option<Arc<dyn Consent>>) -> Result<Proxy, EgressError> {
        Proxy::start_with(policy, log, consent, Timeouts::default())
    }

    /// [`Proxy::start`] with other time limits.
    pub fn start_with(policy: Arc<Policy>, log: Option<AuditLog>, consent: Option<Arc<dyn Consent>>, timeouts: Timeouts) -> Result<Proxy, EgressError> {
        // The host's own addresses, which no answer may lead to, read before the first request.
        local::refresh();
        let (stop, stop_rx) = watch::channel(false);
        let (done, done_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready, handle_rx) = std::sync::mpsc::channel();
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let draining = slots.clone();
        let thread = std::thread::Builder::new()
            .name("workcell-egress".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(MAX_RESOLVERS).build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let _ = ready.send(Ok(rt.handle().clone()));
                rt.block_on(async move {
                    let _ = done_rx.await;
                    // Connections see the stop and end, writing their lines; give them a moment.
                    let _ = tokio::time::timeout(Duration::from_secs(2), draining.acquire_many(MAX_CONNECTIONS as u32)).await;
                });
                rt.shutdown_timeout(Duration::from_millis(200));
            })
            .map_err(EgressError::Thread)?;
        let handle = handle_rx.recv().map_err(|_| EgressError::Stopped)?.map_err(EgressError::Runtime)?;
        let shared = Arc::new(Shared {
            policy,
            consent: consent.map(resolve::Asker::new),
            ledger: Arc::new(audit::Ledger::new(log)),
            counters: Arc::default(),
            slots,
            stop: stop_rx,
            timeouts,
        });
        Ok(Proxy { shared, handle, stop, done: Some(done), thread: Some(thread) })
    }

    /// The proxy's counters now.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    pub fn policy(&self) -> &Arc<Policy> {
        &self.shared.policy
    }

    /// Serves `listener` (see [`EgressProxy::serve`]); the typed error.
    pub fn serve_listener(&self, listener: TcpListener, peers: Peers) -> Result<(), EgressError> {
        listener.set_nonblocking(true).map_err(EgressError::Listener)?;
        let listener = {
            let _entered = self.handle.enter();
            tokio::net::TcpListener::from_std(listener).map_err(EgressError::Listener)?
        };
        self.handle.spawn(accept_loop(listener, peers, self.shared.clone()));
        Ok(())
    }
}

impl Proxy {
    /// Stops the proxy (as dropping it does), writes the audit log's summary lines, and
    /// returns the destinations the rules refused in this run, in the order first refused.
    pub fn finish(mut self) -> Vec<Refused> {
        self.stop_serving();
        self.shared.ledger.close()
    }

    fn stop_serving(&mut self) {
        let _ = self.stop.send(true);
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl EgressProxy for Proxy {
    fn serve(&self, listener: TcpListener, peers: Peers) -> Result<(), ServiceError> {
        self.serve_listener(listener, peers).map_err(|e| Box::new(e) as ServiceError)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop_serving();
        // Writes the summaries if `finish` did not.
        let _ = self.shared.ledger.close();
    }
}

/// Whether `peer` may use a listener serving `peers`.
fn admitted(peers: Peers, peer: SocketAddr) -> bool {
    match peers {
        Peers::Any => true,
        Peers::Within { network, prefix } => ipnet::IpNet::new(network, prefix).map(|n| n.trunc().contains(&peer.ip().to_canonical())).unwrap_or(false),
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, peers: Peers, shared: Arc<Shared>) {
    let mut stop = shared.stop.clone();
    loop {
        // A slot first: past the limit, connections wait in the kernel's backlog.
        let slot = tokio::select! {
            s = shared.slots.clone().acquire_owned() => match s { Ok(s) => s, Err(_) => return },
            _ = stop.changed() => return,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors and the like: wait instead of spinning.
                    tracing::warn!("egress proxy: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        if !admitted(peers, peer) {
            shared.counters.refused_peers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let activity = Activity::new();
            let record = audit::Record::new(shared.ledger.clone(), peer, activity);
            record.refused(&Refusal { kind: "peer", reason: format!("{peer} is outside the network this proxy serves") });
            drop(stream);
            continue;
        }
        let shared = shared.clone();
        let lease = Arc::new(Lease { _slot: slot, _active: shared.counters.enter() });
        tokio::spawn(connection(stream, peer, shared, lease));
    }
}

/// One client connection: SOCKS or HTTP by its first byte, bounded by the idle limit and
/// ended when the run ends.
async fn connection(stream: tokio::net::TcpStream, peer: SocketAddr, shared: Arc<Shared>, lease: Arc<Lease>) {
    let _ = stream.set_nodelay(true);
    let activity = Activity::new();
    let record = audit::Record::new(shared.ledger.clone(), peer, activity.clone());
    let mut stop = shared.stop.clone();
    let mut first = [0u8; 1];
    let peeked = tokio::select! {
        r = tokio::time::timeout(shared.timeouts.head, stream.peek(&mut first)) => r,
        _ = stop.changed() => return,
    };
    match peeked {
        Ok(Ok(1..)) => {}
        Ok(Ok(_)) | Ok(Err(_)) => return,
        Err(_) => {
            record.malformed(format!("nothing was sent within {} s", shared.timeouts.head.as_secs()));
            return;
        }
    }
    let client = Metered::new(stream, activity.clone(), Side::Client);
    let served = async {
        if first[0] == 5 {
            socks5::serve(client, shared.clone(), record.clone(), activity.clone()).await
        } else {
            http::serve(client, shared.clone(), record.clone(), activity.clone(), lease).await
        }
    };
    tokio::select! {
        _ = served => {}
        _ = activity.idle(shared.timeouts.idle) => record.ended(format!("closed after {} s without traffic", shared.timeouts.idle.as_secs())),
        _ = stop.changed() => record.ended("the run ended"),
    }
}

/// Bytes both ways between the worker and the destination until either closes, nothing
/// moves for the idle limit, or the run ends. The worker's first bytes are held back until
/// [`pin::check`] has read them (the destination's are relayed meanwhile, for protocols where
/// the server speaks first); a tunnel they do not match is closed and recorded as refused.
pub(crate) async fn tunnel<C, D>(client: C, upstream: D, pin: &pin::Pin, activity: &Activity, shared: &Shared, record: &audit::Record)
where
    C: AsyncRead + AsyncWrite + Unpin,
    D: AsyncRead + AsyncWrite + Unpin,
{
    use tokio::io::AsyncWriteExt;
    enum End {
        Refused(String),
        Broken(std::io::Error),
    }
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut upstream_read, mut upstream_write) = tokio::io::split(upstream);
    let up = async {
        let first = pin::check(&mut client_read, pin, &shared.policy, shared.timeouts.head).await.map_err(|e| End::Refused(e.to_string()))?;
        upstream_write.write_all(&first).await.map_err(End::Broken)?;
        tokio::io::copy(&mut client_read, &mut upstream_write).await.map_err(End::Broken)?;
        upstream_write.shutdown().await.map_err(End::Broken)
    };
    let down = async {
        tokio::io::copy(&mut upstream_read, &mut client_write).await.map_err(End::Broken)?;
        client_write.shutdown().await.map_err(End::Broken)
    };
    let mut stop = shared.stop.clone();
    tokio::select! {
        r = async { tokio::try_join!(up, down) } => match r {
            Ok(_) => {}
            Err(End::Refused(why)) => record.refused(&Refusal { kind: "pinned", reason: why }),
            Err(End::Broken(e)) => record.ended(format!("the tunnel ended with an error: {e}")),
        },
        _ = activity.idle(shared.timeouts.idle) => record.ended(format!("closed after {} s without traffic", shared.timeouts.idle.as_secs())),
        _ = stop.changed() => record.ended("the run ended"),
    }
}
