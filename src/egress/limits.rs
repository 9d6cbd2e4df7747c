//! What a worker can make the proxy hold, and the counting that shows it: a fixed number of
//! connections, a bounded request head, deadlines for the head and the SOCKS handshake, an
//! idle limit for every connection, and byte counters for the audit line.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Connections served at once; further ones wait in the kernel's backlog.
pub const MAX_CONNECTIONS: usize = 256;
/// The largest request head (request line and headers) and the largest SOCKS request.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// How long a client may take to send its request head or SOCKS handshake.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// A connection with no byte in either direction for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The time limits a proxy applies (the defaults above; tests shorten them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// To send the request head or the SOCKS handshake.
    pub head: Duration,
    /// Without traffic in either direction.
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts { head: HEAD_TIMEOUT, idle: IDLE_TIMEOUT }
    }
}

/// How long resolving a name may take.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting to one address may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Addresses of one answer that are tried.
pub const MAX_ADDRESSES: usize = 8;
/// Threads resolving names at once (the system resolver blocks).
pub const MAX_RESOLVERS: usize = 8;
/// Questions to a person (`ask: true`) waiting for an answer at once; more are refused. A
/// question runs on a blocking thread and cannot be taken back when its connection goes, so
/// without a bound a worker opening and dropping connections would queue questions without
/// end (and take the threads that resolve names).
pub const MAX_PENDING_ASKS: usize = 4;

/// The proxy's own counters, for tests and diagnostics.
#[derive(Debug, Default)]
pub struct Counters {
    pub active: AtomicUsize,
    pub peak: AtomicUsize,
    pub accepted: AtomicU64,
    pub refused_peers: AtomicU64,
}

/// A snapshot of [`Counters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// Connections being served now.
    pub active: usize,
    /// The most served at once.
    pub peak: usize,
    pub accepted: u64,
    /// Connections closed at once because the peer was outside the served network.
    pub refused_peers: u64,
}

impl Counters {
    pub fn snapshot(&self) -> Stats {
        Stats {
            active: self.active.load(Ordering::Relaxed),
            peak: self.peak.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            refused_peers: self.refused_peers.load(Ordering::Relaxed),
        }
    }

    /// Counts one connection as served until the returned guard drops.
    pub fn enter(self: &Arc<Self>) -> Active {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        let now = self.active.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        Active(self.clone())
    }
}

/// One connection being served.
#[derive(Debug)]
pub struct Active(Arc<Counters>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's hold on one of the [`MAX_CONNECTIONS`] slots; shared by every task that
/// serves it (a `CONNECT` tunnel outlives the request that opened it).
#[derive(Debug)]
pub struct Lease {
    pub _slot: tokio::sync::OwnedSemaphorePermit,
    pub _active: Active,
}

/// Bytes each way and the time of the last one, shared by both sides of a connection.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    /// To the destination.
    pub up: AtomicU64,
    /// From the destination.
    pub down: AtomicU64,
    last_ms: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity { start: Instant::now(), up: AtomicU64::new(0), down: AtomicU64::new(0), last_ms: AtomicU64::new(0) })
    }

    fn touch(&self) {
        self.last_ms.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Resolves once nothing has moved for `limit`.
    pub async fn idle(&self, limit: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let quiet = self.start.elapsed().saturating_sub(last);
            if quiet >= limit {
                return;
            }
            tokio::time::sleep(limit - quiet).await;
        }
    }
}

/// Which side of the proxy a stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The worker: moves count as activity only.
    Client,
    /// The destination: reads count as `down`, writes as `up`.
    Destination,
}

/// A stream that records its traffic in an [`Activity`].
#[derive(Debug)]
pub struct Metered<S> {
    inner: S,
    activity: Arc<Activity>,
    side: Side,
}

impl<S> Metered<S> {
    pub fn new(inner: S, activity: Arc<Activity>, side: Side) -> Metered<S> {
        Metered { inner, activity, side }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        if n > 0 {
            self.activity.touch();
            if self.side == Side::Destination {
                self.activity.down.fetch_add(n, Ordering::Relaxed);
            }
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &r {
            if *n > 0 {
                self.activity.touch();
                if self.side == Side::Destination {
                    self.activity.up.fetch_add(*n as u64, Ordering::Relaxed);
                }
            }
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
