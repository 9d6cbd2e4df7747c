//! Pins a tunnel (`CONNECT`, SOCKS5) to the name it was judged by. The worker's first bytes
//! are read before anything reaches the destination: a TLS ClientHello must name the judged
//! host in its SNI, a plaintext HTTP request must carry it in `Host` (and in an absolute-form
//! target). Otherwise a tunnel to an allowed CDN address could ask that CDN for any site it
//! serves, the switch the forward path already prevents by rewriting `Host`.
//!
//! What is not inspected: anything after the first hello or request head (TLS contents, later
//! requests on a kept-alive plaintext connection, HTTP/2 `:authority` inside TLS, the inner
//! hello of Encrypted Client Hello). Bytes that are neither TLS nor an HTTP request line (ssh,
//! a database protocol) pass unread: the destination was judged, and there is no name in them
//! to check.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::policy::{Host, Policy, Verdict};
use super::resolve::parse_host;

/// The most the proxy reads of a hello or request head before deciding.
pub const MAX_SNIFF: usize = 16 * 1024;

/// The longest HTTP method the sniffer recognises (`OPTIONS`, `CONNECT`, `PROPFIND`...).
const MAX_METHOD: usize = 16;

/// What the tunnel was judged as: the requested host and port.
#[derive(Debug, Clone)]
pub struct Pin {
    pub host: Host,
    pub port: u16,
}

/// Why a tunnel must close before anything of it reaches the destination: its first bytes
/// could not be read in time, cannot be read, or name another host than the judged one.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("reading the tunnel's first bytes failed: {0}")]
    Read(#[source] std::io::Error),
    #[error("the tunnel's TLS hello or HTTP request head is longer than {MAX_SNIFF} bytes")]
    TooLong,
    #[error("the tunnel closed in the middle of its TLS hello or HTTP request head")]
    Closed,
    #[error("the tunnel's TLS hello or HTTP request head did not arrive within {0} s")]
    Slow(u64),
    #[error(transparent)]
    Unreadable(#[from] Unreadable),
    #[error("{what} is missing; a tunnel to {judged} must name {judged}")]
    Missing { what: &'static str, judged: Host },
    #[error("{what} cannot be read: {reason}")]
    BadName { what: &'static str, reason: String },
    /// `claimed` is escaped for a terminal.
    #[error("{what} names {claimed}, but the tunnel was allowed for {judged}; open the tunnel to the name you send (CONNECT {claimed}:{port})")]
    Other { what: &'static str, claimed: String, judged: Host, port: u16 },
}

/// A hello or request head the check cannot read: the tunnel closes rather than pass
/// something the check did not understand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error("a TLS record other than a handshake came before the ClientHello was complete")]
    NotHandshake,
    #[error("a TLS record of version {0}.{1}")]
    Version(u8, u8),
    #[error("the first TLS handshake message is of type {0}, not a ClientHello")]
    NotClientHello(u8),
    #[error("the TLS ClientHello is longer than {MAX_SNIFF} bytes")]
    HelloTooLong,
    #[error("the TLS ClientHello is cut short or a length in it is wrong")]
    CutShort,
    #[error("the TLS ClientHello has more than one server_name extension")]
    TwoServerNameExtensions,
    #[error("the TLS ClientHello names more than one server")]
    TwoServerNames,
    #[error("the TLS ClientHello's server name is not text")]
    NameNotText,
    #[error("the tunnel's HTTP request head is not text")]
    HeadNotText,
    #[error("the tunnel's HTTP request has more than one Host header")]
    TwoHosts,
}

/// What the first bytes are.
#[derive(Debug, PartialEq, Eq)]
enum First {
    /// A TLS ClientHello, with its SNI if it has one.
    Tls(Option<String>),
    /// A plaintext HTTP request head: its `Host` and, for an absolute-form target, the target's
    /// authority.
    Http { host: Option<String>, target: Option<String> },
    /// Anything else: passed unread.
    Opaque,
}

/// Reads the worker's first bytes and checks them against `pin`. Returns the bytes read, to be
/// sent on before relaying; `Err` says why the tunnel must close. The wait for the first byte
/// is unbounded (a protocol where the server speaks first is served while this waits; the
/// tunnel's idle limit ends it); once it has come, a hello or head must be complete within
/// `head`.
pub async fn check<R: AsyncRead + Unpin>(client: &mut R, pin: &Pin, policy: &Policy, head: Duration) -> Result<Vec<u8>, PinError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let n = client.read(&mut chunk).await.map_err(PinError::Read)?;
    if n == 0 {
        return Ok(buf);
    }
    buf.extend_from_slice(&chunk[..n]);
    let first = tokio::time::timeout(head, async {
        loop {
            if let Some(first) = classify(&buf)? {
                return Ok(first);
            }
            if buf.len() >= MAX_SNIFF {
                return Err(PinError::TooLong);
            }
            let room = (MAX_SNIFF - buf.len()).min(chunk.len());
            let n = client.read(&mut chunk[..room]).await.map_err(PinError::Read)?;
            if n == 0 {
                return Err(PinError::Closed);
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .map_err(|_| PinError::Slow(head.as_secs()))??;
    match first {
        First::Opaque => {}
        First::Tls(sni) => matches(sni.as_deref(), pin, policy, "the TLS hello's server name (SNI)")?,
        First::Http { host, target } => {
            matches(host.as_deref(), pin, policy, "the HTTP request's Host header")?;
            if let Some(t) = target {
                matches(Some(&t), pin, policy, "the HTTP request's target")?;
            }
        }
    }
    Ok(buf)
}

/// Whether `claimed` (a server name, or a `Host` value with an optional port) is the judged
/// host. A tunnel opened to an address carries no name or one the rules allow on that port.
fn matches(claimed: Option<&str>, pin: &Pin, policy: &Policy, what: &'static str) -> Result<(), PinError> {
    let judged = &pin.host;
    let Some(text) = claimed else {
        return match judged {
            Host::Ip(_) => Ok(()),
            Host::Name(_) => Err(PinError::Missing { what, judged: judged.clone() }),
        };
    };
    let claimed = parse_host(strip_port(text)).map_err(|r| PinError::BadName { what, reason: r.reason })?;
    if &claimed == judged {
        return Ok(());
    }
    if let (Host::Ip(_), Host::Name(_)) = (judged, &claimed) {
        if matches!(policy.judge(&claimed, pin.port), Verdict::Allowed { .. }) {
            return Ok(());
        }
    }
    Err(PinError::Other { what, claimed: crate::term::escape(&claimed.to_string()).to_string(), judged: judged.clone(), port: pin.port })
}

/// `host:port`, `[v6]:port`, `host` → the host part.
fn strip_port(text: &str) -> &str {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('[') {
        return match rest.find(']') {
            Some(end) => &text[..end + 2],
            None => text,
        };
    }
    match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => text,
    }
}

/// What `buf` is, `None` while more bytes are needed to tell, `Err` for a hello or head that
/// cannot be read (the tunnel closes rather than pass something the check did not understand).
fn classify(buf: &[u8]) -> Result<Option<First>, Unreadable> {
    // Servers skip empty lines before a request line (RFC 9112, 2.2): so does the check, or a
    // leading CRLF would pass a request as opaque bytes.
    let start = buf.iter().take_while(|b| matches!(b, b'\r' | b'\n')).count();
    let rest = &buf[start..];
    match rest.first() {
        None => Ok(None),
        // A TLS handshake record.
        Some(0x16) if start == 0 => client_hello(buf).map(|o| o.map(First::Tls)),
        // A method (some servers take it in any case), a space, and once the line is whole,
        // an HTTP version at its end; a line without one (`EHLO x`, `USER x`) is another
        // protocol's.
        Some(b) if b.is_ascii_alphabetic() => {
            let method = rest.iter().take_while(|b| b.is_ascii_alphabetic()).count();
            match rest.get(method) {
                None if method <= MAX_METHOD => Ok(None),
                Some(b' ') if method <= MAX_METHOD => {
                    let Some(eol) = rest.iter().position(|b| *b == b'\n') else { return Ok(None) };
                    let line = rest[..eol].strip_suffix(b"\r").unwrap_or(&rest[..eol]);
                    let version = line.rsplit(|b| *b == b' ').next().unwrap_or_default();
                    if version.len() >= 5 && version[..5].eq_ignore_ascii_case(b"HTTP/") {
                        http_head(rest)
                    } else {
                        Ok(Some(First::Opaque))
                    }
                }
                _ => Ok(Some(First::Opaque)),
            }
        }
        Some(_) => Ok(Some(First::Opaque)),
    }
}

/// The SNI of the ClientHello that `buf` starts with (its handshake message may span several
/// records), `Ok(None)` inside `Some` for a hello without one; `None` while incomplete.
fn client_hello(buf: &[u8]) -> Result<Option<Option<String>>, Unreadable> {
    let mut message = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + 5) else { return Ok(None) };
        if header[0] != 0x16 {
            return Err(Unreadable::NotHandshake);
        }
        if header[1] != 3 {
            return Err(Unreadable::Version(header[1], header[2]));
        }
        let len = u16::from_be_bytes([header[3], header[4]]) as usize;
        let Some(fragment) = buf.get(at + 5..at + 5 + len) else { return Ok(None) };
        message.extend_from_slice(fragment);
        at += 5 + len;
        if message.len() < 4 {
            continue;
        }
        if message[0] != 1 {
            return Err(Unreadable::NotClientHello(message[0]));
        }
        let body_len = u32::from_be_bytes([0, message[1], message[2], message[3]]) as usize;
        if 4 + body_len > MAX_SNIFF {
            return Err(Unreadable::HelloTooLong);
        }
        if message.len() >= 4 + body_len {
            return server_name(&message[4..4 + body_len]).map(Some);
        }
    }
}

/// Reads fields off a byte slice, failing on any length that overruns it.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Unreadable> {
        if self.0.len() < n {
            return Err(Unreadable::CutShort);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<usize, Unreadable> {
        Ok(self.take(1)?[0] as usize)
    }

    fn u16(&mut self) -> Result<usize, Unreadable> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    }

    /// A field with a length prefix of `width` bytes.
    fn vector(&mut self, width: usize) -> Result<Reader<'a>, Unreadable> {
        let len = if width == 1 { self.u8()? } else { self.u16()? };
        Ok(Reader(self.take(len)?))
    }
}

/// The host name of a ClientHello body's `server_name` extension (RFC 6066), if any. More than
/// one such extension or name is refused: a server might read another one than the check did.
fn server_name(body: &[u8]) -> Result<Option<String>, Unreadable> {
    let mut r = Reader(body);
    r.take(2 + 32)?; // version, random
    r.vector(1)?; // session id
    r.vector(2)?; // cipher suites
    r.vector(1)?; // compression methods
    if r.0.is_empty() {
        return Ok(None);
    }
    let mut extensions = r.vector(2)?;
    let mut found = None;
    while !extensions.0.is_empty() {
        let kind = extensions.u16()?;
        let mut data = extensions.vector(2)?;
        if kind != 0 {
            continue;
        }
        if found.is_some() {
            return Err(Unreadable::TwoServerNameExtensions);
        }
        let mut list = data.vector(2)?;
        let mut name = None;
        while !list.0.is_empty() {
            let name_type = list.u8()?;
            let value = list.vector(2)?;
            if name_type == 0 {
                if name.is_some() {
                    return Err(Unreadable::TwoServerNames);
                }
                let text = std::str::from_utf8(value.0).map_err(|_| Unreadable::NameNotText)?;
                name = Some(text.to_string());
            }
        }
        found = Some(name);
    }
    Ok(found.flatten())
}

/// A plaintext request head: its `Host` and an absolute-form target's authority. `None` until
/// the blank line ending the head has come.
fn http_head(buf: &[u8]) -> Result<Option<First>, Unreadable> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n").or_else(|| buf.windows(2).position(|w| w == b"\n\n")) else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| Unreadable::HeadNotText)?;
    let mut lines = head.lines();
    let request = lines.next().unwrap_or_default();
    let target = request.split(' ').nth(1).unwrap_or_default();
    let target = target.split_once("://").map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or_default());
    let target = target.map(|t| t.rsplit_once('@').map_or(t, |(_, host)| host).to_string());
    let mut host = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { continue };
        if name.trim().eq_ignore_ascii_case("host") {
            if host.is_some() {
                return Err(Unreadable::TwoHosts);
            }
            host = Some(value.trim().to_string());
        }
    }
    Ok(Some(First::Http { host, target }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello record carrying `sni`, split into records of `split` bytes.
    pub fn hello(sni: Option<&str>, split: usize) -> Vec<u8> {
        let mut ext = Vec::new();
        if let Some(name) = sni {
            let mut entry = vec![0u8];
            entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
            entry.extend_from_slice(name.as_bytes());
            let mut list = (entry.len() as u16).to_be_bytes().to_vec();
            list.extend_from_slice(&entry);
            ext.extend_from_slice(&[0, 0]);
            ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
            ext.extend_from_slice(&list);
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7u8; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut message = vec![1];
        message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        message.extend_from_slice(&body);
        message.chunks(split).flat_map(|c| [&[0x16, 3, 1][..], &(c.len() as u16).to_be_bytes(), c].concat()).collect()
    }

    #[test]
    fn sni_is_read_across_records() {
        for split in [1, 5, 40, 1000] {
            let h = hello(Some("Allowed.Test."), split);
            assert_eq!(classify(&h), Ok(Some(First::Tls(Some("Allowed.Test.".into())))), "split {split}");
            assert_eq!(classify(&h[..h.len() - 1]), Ok(None), "split {split}");
        }
        assert_eq!(classify(&hello(None, 1000)), Ok(Some(First::Tls(None))));
    }

    #[test]
    fn http_and_opaque() {
        assert_eq!(classify(b"GE"), Ok(None));
        assert_eq!(classify(b"GET / HTTP/1.1\r\nHost: a.test:80\r\n"), Ok(None));
        assert_eq!(
            classify(b"GET http://b.test/x HTTP/1.1\r\nhOsT: a.test:80\r\n\r\n"),
            Ok(Some(First::Http { host: Some("a.test:80".into()), target: Some("b.test".into()) }))
        );
        assert_eq!(classify(b"SSH-2.0-OpenSSH_9.6\r\n"), Ok(Some(First::Opaque)));
        assert_eq!(classify(b"\x00\x01binary"), Ok(Some(First::Opaque)));
        assert!(classify(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").is_err());
        // Empty lines before the request line, and a method in lower case, are still HTTP.
        assert_eq!(classify(b"\r\n\r\nget / HTTP/1.1\r\nHost: b.test\r\n\r\n"), Ok(Some(First::Http { host: Some("b.test".into()), target: None })));
        // A line without an HTTP version is another protocol's (SMTP, FTP).
        assert_eq!(classify(b"EHLO client.test\r\n"), Ok(Some(First::Opaque)));
    }

    #[test]
    fn names_are_compared_folded() {
        let policy = Policy { hosts: Default::default(), layers: Vec::new() };
        let pin = Pin { host: Host::Name("allowed.test".into()), port: 443 };
        assert!(matches(Some("ALLOWED.test."), &pin, &policy, "x").is_ok());
        assert!(matches(Some("allowed.test:443"), &pin, &policy, "x").is_ok());
        assert!(matches(Some("refused.test"), &pin, &policy, "x").is_err());
        assert!(matches(None, &pin, &policy, "x").is_err());
        let ip = Pin { host: Host::Ip("127.0.0.1".parse().unwrap()), port: 80 };
        assert!(matches(None, &ip, &policy, "x").is_ok());
        assert!(matches(Some("127.0.0.1:80"), &ip, &policy, "x").is_ok());
        assert!(matches(Some("refused.test"), &ip, &policy, "x").is_err());
        assert_eq!(strip_port("[::1]:80"), "[::1]");
    }
}
