//! `GET /_ping` on a local socket, read for its headers: the API version the daemon speaks
//! and which engine it is. Docker and Podman both answer it at once, whereas Podman's
//! `/version` asks conmon and the OCI runtime for theirs (about half a second idle, more
//! than the probe's two seconds under load). bollard's `ping` returns only the body, so the
//! request is written by hand: one HTTP/1.0 exchange, which the daemon closes.

use std::path::Path;

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

/// Pings the daemon listening on the unix socket `path`.
pub async fn ping(path: &Path) -> std::io::Result<Pong> {
    let mut stream = tokio::net::UnixStream::connect(path).await?;
    stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n").await?;
    let mut answer = Vec::new();
    (&mut stream).take(MAX_ANSWER).read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    parse(&text).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not a Docker API answer: {:?}", first_line(&text))))
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
    fn other_answers_are_refused() {
        assert_eq!(parse("HTTP/1.1 404 Not Found\r\n\r\n"), None);
        assert_eq!(parse("SSH-2.0-OpenSSH_9.2\r\n"), None);
        assert_eq!(parse("HTTP/1.1 200 OK\r\nApi-Version: one\r\n\r\n"), None);
    }
}
