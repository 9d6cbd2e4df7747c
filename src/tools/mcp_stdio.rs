//! `workcell mcp`'s stdio transport: newline-delimited JSON-RPC, as rmcp's own, except for a
//! message over [`MAX_MESSAGE_BYTES`]. rmcp drops such a line with a log line and no answer,
//! and its client waits for ever; here it is answered with a JSON-RPC error naming the limit
//! (the request's id found by [`IdScan`], else `id: null`), its bytes are skipped as they
//! arrive (memory: one message at most, never the oversized one), and the session goes on.

use std::future::Future;
use std::io;
use std::sync::Arc;

use rmcp::model::RequestId;
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::mcp_id::IdScan;

/// The largest message (one line, without its newline) `workcell mcp` reads: 16 MiB, rmcp's
/// own default, so a message rmcp's clients accept elsewhere is accepted here.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC's "Invalid Request": the code an answer to an oversized message carries.
const INVALID_REQUEST: i64 = -32600;

/// What reading one line found.
enum Next {
    /// A whole line is in `line`.
    Line,
    /// A line over the limit was skipped: its id (if found) and its size so far.
    Oversized(Option<RequestId>, usize),
    Eof,
}

pub struct Stdio<R, W> {
    read: BufReader<R>,
    /// The line being read; it never grows beyond the limit, and is kept for the next line
    /// (one buffer for the session: allocating a new one per large message leaves the freed
    /// ones in the allocator's per-thread arenas, a larger resident size than one kept).
    line: Vec<u8>,
    /// The current line's bytes so far, and whether it is over the limit (then it is only
    /// scanned and counted, never kept).
    seen: usize,
    over: bool,
    scan: IdScan,
    limit: usize,
    write: Arc<Mutex<Option<W>>>,
    /// An answer being written; the next message is read only after it, so answers come in
    /// the order of the messages they answer.
    answering: Option<JoinHandle<()>>,
}

impl<R: AsyncRead + Unpin + Send, W: AsyncWrite + Unpin + Send + 'static> Stdio<R, W> {
    pub fn new(read: R, write: W) -> Self {
        Self::with_limit(read, write, MAX_MESSAGE_BYTES)
    }

    pub fn with_limit(read: R, write: W, limit: usize) -> Self {
        Stdio {
            read: BufReader::with_capacity(64 * 1024, read),
            line: Vec::new(),
            seen: 0,
            over: false,
            scan: IdScan::default(),
            limit,
            write: Arc::new(Mutex::new(Some(write))),
            answering: None,
        }
    }

    /// Reads up to the end of a line, keeping it only while it is within the limit.
    /// Cancellation-safe (rmcp polls `receive` in a `select!`): all state is in `self`, and
    /// each chunk is taken and consumed with no await in between.
    async fn next_line(&mut self) -> io::Result<Next> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                if self.over {
                    return Ok(self.end_oversized());
                }
                return Ok(Next::Eof);
            }
            let newline = memchr::memchr(b'\n', available);
            let content = &available[..newline.unwrap_or(available.len())];
            self.scan.feed(content);
            self.seen = self.seen.saturating_add(content.len());
            if !self.over && self.seen > self.limit {
                self.over = true;
                self.line.clear();
            }
            if !self.over {
                self.line.extend_from_slice(content);
            }
            let take = newline.map_or(available.len(), |i| i + 1);
            self.read.consume(take);
            if newline.is_some() {
                if self.over {
                    return Ok(self.end_oversized());
                }
                self.seen = 0;
                self.scan = IdScan::default();
                return Ok(Next::Line);
            }
        }
    }

    fn end_oversized(&mut self) -> Next {
        let next = Next::Oversized(self.scan.id(), self.seen);
        self.over = false;
        self.seen = 0;
        self.scan = IdScan::default();
        next
    }

    /// Starts writing `message` as one line; [`Stdio::receive`] waits for it before reading on.
    fn answer(&mut self, message: Value) {
        let write = self.write.clone();
        self.answering = Some(tokio::spawn(async move {
            if let Err(e) = write_line(&write, &message).await {
                tracing::warn!("could not answer the client: {e}");
            }
        }));
    }

    fn too_large(&mut self, id: Option<RequestId>, size: usize) {
        let limit = self.limit;
        tracing::warn!(size, limit, "a message over the limit was skipped and answered with an error");
        let message = format!(
            "the message ({size} bytes) is over workcell mcp's limit of {limit} bytes ({}) for one message; it was skipped and nothing was done. Send less in one call: write large content in parts, or make it with a shell command.",
            mib(limit)
        );
        self.answer(json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": INVALID_REQUEST, "message": message, "data": {"limit_bytes": limit}},
        }));
    }
}

/// What a whole line is.
enum Parsed {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    Ignored,
    /// JSON that is no MCP message: this error answers it.
    Invalid(Value),
}

/// The message in `line`, as rmcp's own transport takes it: a UTF-8 byte order mark and a
/// `\r` are ignored, as are blank lines, text that is not JSON, and notifications that are not
/// MCP's; JSON that is no MCP message is answered "Invalid Request".
fn parse(line: &[u8]) -> Parsed {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Parsed::Ignored;
    }
    match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(message) => Parsed::Message(Box::new(message)),
        Err(e) if matches!(e.classify(), serde_json::error::Category::Syntax | serde_json::error::Category::Eof) => {
            // No id to answer, and answering junk can start an error storm with a peer that
            // echoes it (rmcp and the other SDKs ignore it too).
            tracing::debug!("ignoring a message that is not JSON: {e}");
            Parsed::Ignored
        }
        Err(e) => {
            let value: Value = serde_json::from_slice(line).unwrap_or(Value::Null);
            let method = value.get("method").and_then(Value::as_str);
            if let (Some(method), None) = (method, value.get("id")) {
                tracing::debug!("ignoring the notification {method:?}: {e}");
                return Parsed::Ignored;
            }
            let id = value.get("id").cloned().filter(|id| id.is_string() || id.is_number());
            Parsed::Invalid(json!({"jsonrpc": "2.0", "id": id, "error": {"code": INVALID_REQUEST, "message": format!("Invalid request: {e}")}}))
        }
    }
}

fn mib(bytes: usize) -> String {
    if bytes.is_multiple_of(1024 * 1024) {
        format!("{} MiB", bytes / (1024 * 1024))
    } else {
        format!("{bytes} bytes")
    }
}

async fn write_line<W: AsyncWrite + Unpin, T: serde::Serialize>(write: &Mutex<Option<W>>, message: &T) -> io::Result<()> {
    let mut bytes = serde_json::to_vec(message).map_err(io::Error::other)?;
    bytes.push(b'\n');
    // One message per lock: answers never interleave with rmcp's own.
    let mut guard = write.lock().await;
    let w = guard.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "the transport is closed"))?;
    w.write_all(&bytes).await?;
    w.flush().await
}

impl<R: AsyncRead + Unpin + Send, W: AsyncWrite + Unpin + Send + 'static> Transport<RoleServer> for Stdio<R, W> {
    type Error = io::Error;

    fn send(&mut self, item: TxJsonRpcMessage<RoleServer>) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        let write = self.write.clone();
        async move { write_line(&write, &item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if let Some(answering) = self.answering.as_mut() {
                let _ = answering.await;
                self.answering = None;
            }
            let next = match self.next_line().await {
                Ok(next) => next,
                Err(e) => {
                    tracing::error!("cannot read from stdin: {e}");
                    return None;
                }
            };
            match next {
                Next::Line => {
                    let parsed = parse(&self.line);
                    self.line.clear();
                    match parsed {
                        Parsed::Message(message) => return Some(*message),
                        Parsed::Ignored => {}
                        Parsed::Invalid(answer) => self.answer(answer),
                    }
                }
                Next::Oversized(id, size) => self.too_large(id, size),
                Next::Eof => return None,
            }
        }
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        if let Some(answering) = self.answering.take() {
            let _ = answering.await;
        }
        self.write.lock().await.take();
        Ok(())
    }
}
