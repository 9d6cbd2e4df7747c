//! Plain HTTP/1.0 requests on a local socket or plain TCP (one exchange, which the daemon closes) for
//! what bollard cannot give:
//!
//! - `GET /_ping` read for its headers: the API version the daemon speaks and which engine it
//!   is. Docker and Podman both answer it at once, whereas Podman's `/version` asks conmon and
//!   the OCI runtime for theirs (half a second idle, more than the probe's two seconds under
//!   load); bollard's `ping` returns only the body.
//! - [`get_json`]: an answer read as loose JSON, where bollard's typed models refuse one of
//!   Podman's values (a container state `stopped`, which Docker does not have).

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::engine::Engine;

/// What a ping's headers say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pong {
    /// `Api-Version` as (major, minor).
    pub api_version: Option<(usize, usize)>,
    pub engine: Engine,
}

/// The most of an answer read: a ping's is a few hundred bytes.
const MAX_ANSWER: u64 = 16 * 1024;

/// Where a plain exchange goes: a unix socket, or `host:port` over TCP without TLS.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint<'a> {
    Unix(&'a Path),
    Tcp(&'a str),
}

impl<'a> Endpoint<'a> {
    /// The endpoint of a Docker address when one is plain: `unix://PATH`, or `tcp://` and
    /// `http://` while `DOCKER_TLS_VERIFY` is unset (with it, bollard speaks TLS).
    pub fn of(address: &'a str) -> Option<Endpoint<'a>> {
        if let Some(path) = address.strip_prefix("unix://") {
            return Some(Endpoint::Unix(Path::new(path)));
        }
        if std::env::var_os("DOCKER_TLS_VERIFY").is_some() {
            return None;
        }
        let rest = address.strip_prefix("tcp://").or_else(|| address.strip_prefix("http://"))?;
        Some(Endpoint::Tcp(rest.trim_end_matches('/')))
    }
}

/// How long a daemon's answer to `/_ping` stands for it in this process: a run asks when its
/// backend is chosen and again when it connects, a few milliseconds apart, and the second
/// round trip told nothing new. Short, so that a daemon that stops answering is still found
/// by the next probe's deadline, not by a request's.
const FRESH: Duration = Duration::from_secs(1);

/// The last answer to `/_ping`: the address asked, when, and what it said.
static LAST: Mutex<Option<(String, Instant, Pong)>> = Mutex::new(None);

/// [`ping`], or the answer the daemon at `address` gave within [`FRESH`].
pub async fn ping_recent(address: &str, at: Endpoint<'_>) -> std::io::Result<Pong> {
    let fresh = LAST.lock().ok().and_then(|last| match last.as_ref() {
        Some((a, when, pong)) if a == address && when.elapsed() < FRESH => Some(pong.clone()),
        _ => None,
    });
    if let Some(pong) = fresh {
        return Ok(pong);
    }
    let pong = ping(at).await?;
    if let Ok(mut last) = LAST.lock() {
        *last = Some((address.to_string(), Instant::now(), pong.clone()));
    }
    Ok(pong)
}

/// Pings the daemon at `at`.
pub async fn ping(at: Endpoint<'_>) -> std::io::Result<Pong> {
    let answer = match at {
        Endpoint::Unix(path) => exchange(tokio::net::UnixStream::connect(path).await?, "/_ping", MAX_ANSWER).await?,
        Endpoint::Tcp(host) => exchange(tokio::net::TcpStream::connect(host).await?, "/_ping", MAX_ANSWER).await?,
    };
    let text = String::from_utf8_lossy(&answer);
    parse(&text).ok_or_else(|| invalid(format!("not a Docker API answer: {:?}", first_line(&text))))
}

/// The most of a listing read: far beyond any daemon's count of workcell's containers.
const MAX_LISTING: u64 = 64 << 20;

/// `GET uri` (path and query, already encoded) on the unix socket `path`, its body as JSON.
pub async fn get_json(path: &Path, uri: &str) -> std::io::Result<serde_json::Value> {
    let answer = exchange(tokio::net::UnixStream::connect(path).await?, uri, MAX_LISTING).await?;
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| invalid("an HTTP answer without a body".into()))?;
    let head = String::from_utf8_lossy(&answer[..split]);
    if first_line(&head).split_whitespace().nth(1) != Some("200") {
        return Err(invalid(format!("GET {uri}: {}", first_line(&head))));
    }
    // An HTTP/1.0 request gets a plain body (never chunked), ended by the close.
    serde_json::from_slice(&answer[split + 4..]).map_err(|e| invalid(format!("GET {uri}: {e}")))
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
pub fn encode(value: &str) -> String {
    value.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

async fn exchange(mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin, uri: &str, max: u64) -> std::io::Result<Vec<u8>> {
    stream.write_all(format!("GET {uri} HTTP/1.0\r\nHost: docker\r\n\r\n").as_bytes()).await?;
    let mut answer = Vec::new();
    (&mut stream).take(max).read_to_end(&mut answer).await?;
    Ok(answer)
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// Reads an HTTP answer to `/_ping`: `None` unless it is one (status 200). Podman names itself
/// in `Libpod-Api-Version` (and `Server: Libpod/…`); Docker in `Server: Docker/…`.
pub fn parse(answer: &str) -> Option<Pong> {
    let mut lines = answer.split("\r\n");
    let status = lines.next()?;
    if !(status.starts_with("HTTP/1.") && status.split_whitespace().nth(1) == Some("200")) {
        return None;
    }
    let mut api_version = None;
    let mut libpod = None;
    let mut server = String::new();
    for line in lines.take_while(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "api-version" => {
                let (major, minor) = value.split_once('.')?;
                api_version = Some((major.parse().ok()?, minor.parse().ok()?));
            }
            "libpod-api-version" => libpod = Some(value.to_string()),
            "server" => server = value.to_string(),
            _ => {}
        }
    }
    let engine = match libpod {
        Some(v) => Engine::Podman(v),
        None if server.starts_with("Libpod/") => Engine::Podman(server.trim_start_matches("Libpod/").split_whitespace().next().unwrap_or_default().to_string()),
        None => Engine::Docker,
    };
    Some(Pong { api_version, engine })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PODMAN: &str =
        "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nBuilder-Version: \r\nLibpod-Api-Version: 4.3.1\r\nServer: Libpod/4.3.1 (linux)\r\nContent-Length: 2\r\n\r\nOK";
    const DOCKER: &str = "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nOstype: linux\r\nServer: Docker/20.10.24+dfsg1 (linux)\r\nContent-Length: 2\r\n\r\nOK";

    #[test]
    fn engines_are_told_apart() {
        assert_eq!(parse(PODMAN), Some(Pong { api_version: Some((1, 41)), engine: Engine::Podman("4.3.1".into()) }));
        assert_eq!(parse(DOCKER), Some(Pong { api_version: Some((1, 41)), engine: Engine::Docker }));
        let old_podman = "HTTP/1.1 200 OK\r\nServer: Libpod/3.0.1 (linux)\r\n\r\nOK";
        assert_eq!(parse(old_podman), Some(Pong { api_version: None, engine: Engine::Podman("3.0.1".into()) }));
    }

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode(r#"{"label":["a=b"]}"#), "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D");
    }

    #[test]
    fn other_answers_are_refused() {
        assert_eq!(parse("HTTP/1.1 404 Not Found\r\n\r\n"), None);
        assert_eq!(parse("SSH-2.0-OpenSSH_9.2\r\n"), None);
        assert_eq!(parse("HTTP/1.1 200 OK\r\nApi-Version: one\r\n\r\n"), None);
    }
}
