//! SOCKS5 (RFC 1928) on the same port as HTTP: CONNECT only, no authentication, domain-name
//! requests (the proxy resolves; the worker needs no DNS) and address requests, judged by the
//! same rules. A refusal is reply 2 ("connection not allowed by ruleset"). The whole
//! handshake must arrive within the head timeout; every field has a fixed small size.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::audit::Record;
use super::limits::{Activity, Metered, Side};
use super::pin::Pin;
use super::policy::Host;
use super::resolve::{self, Refusal};
use super::Shared;

const VERSION: u8 = 5;
const NO_AUTH: u8 = 0;
const NO_ACCEPTABLE: u8 = 0xff;
const CMD_CONNECT: u8 = 1;

/// Reply codes.
const SUCCEEDED: u8 = 0;
const FAILURE: u8 = 1;
const NOT_ALLOWED: u8 = 2;
const HOST_UNREACHABLE: u8 = 4;
const COMMAND_NOT_SUPPORTED: u8 = 7;
const ADDRESS_NOT_SUPPORTED: u8 = 8;

/// A request that cannot be served, with the reply code to send (if one is due).
struct Bad(Option<u8>, String);

/// Serves one client connection that opened with the SOCKS5 version byte.
pub async fn serve(mut client: Metered<TcpStream>, shared: Arc<Shared>, record: Record, activity: Arc<Activity>) {
    record.protocol("socks5");
    let request = match tokio::time::timeout(shared.timeouts.head, handshake(&mut client)).await {
        Ok(Ok(r)) => r,
        Ok(Err(Bad(code, why))) => {
            if let Some(code) = code {
                let _ = reply(&mut client, code).await;
            }
            record.malformed(why);
            return;
        }
        Err(_) => {
            record.malformed(format!("the SOCKS handshake did not finish within {} s", shared.timeouts.head.as_secs()));
            return;
        }
    };
    let (host, port) = request;
    let asked = match &host {
        Ok(h) => format!("{h}:{port}"),
        Err(_) => format!("(invalid name):{port}"),
    };
    record.destination(asked.clone());
    let host = match host {
        Ok(h) => h,
        Err(refusal) => {
            record.refused(&refusal);
            let _ = reply(&mut client, NOT_ALLOWED).await;
            return;
        }
    };
    let result = resolve::open(&shared.policy, shared.consent.as_ref(), &host, port).await;
    let opened = match result {
        Ok(o) => o,
        Err(refusal) => {
            record.refused(&refusal);
            let code = if refusal.by_policy() { NOT_ALLOWED } else { HOST_UNREACHABLE };
            tracing::debug!("{}", shared.explain(&asked, &refusal));
            let _ = reply(&mut client, code).await;
            return;
        }
    };
    record.allowed(opened.address, opened.rule.clone());
    if reply(&mut client, SUCCEEDED).await.is_err() {
        record.ended("the client went away before the tunnel opened");
        return;
    }
    let upstream = Metered::new(opened.stream, activity.clone(), Side::Destination);
    let pin = Pin { host, port };
    super::tunnel(client, upstream, &pin, &activity, &shared, &record).await;
}

/// Reads the greeting and the request; answers the greeting.
async fn handshake(c: &mut Metered<TcpStream>) -> Result<(Result<Host, Refusal>, u16), Bad> {
    let io = |e: std::io::Error| Bad(None, format!("the SOCKS handshake broke off: {e}"));
    let mut head = [0u8; 2];
    c.read_exact(&mut head).await.map_err(io)?;
    let mut methods = vec![0u8; head[1] as usize];
    c.read_exact(&mut methods).await.map_err(io)?;
    if !methods.contains(&NO_AUTH) {
        let _ = c.write_all(&[VERSION, NO_ACCEPTABLE]).await;
        return Err(Bad(None, "the SOCKS client offers no method without authentication".into()));
    }
    c.write_all(&[VERSION, NO_AUTH]).await.map_err(io)?;
    let mut req = [0u8; 4];
    c.read_exact(&mut req).await.map_err(io)?;
    if req[0] != VERSION {
        return Err(Bad(Some(FAILURE), format!("SOCKS request of version {}", req[0])));
    }
    if req[1] != CMD_CONNECT {
        return Err(Bad(Some(COMMAND_NOT_SUPPORTED), format!("SOCKS command {} (only CONNECT is served)", req[1])));
    }
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            c.read_exact(&mut a).await.map_err(io)?;
            Ok(Host::Ip(std::net::IpAddr::from(a).to_canonical()))
        }
        4 => {
            let mut a = [0u8; 16];
            c.read_exact(&mut a).await.map_err(io)?;
            Ok(Host::Ip(std::net::IpAddr::from(a).to_canonical()))
        }
        3 => {
            let mut len = [0u8; 1];
            c.read_exact(&mut len).await.map_err(io)?;
            let mut name = vec![0u8; len[0] as usize];
            c.read_exact(&mut name).await.map_err(io)?;
            match String::from_utf8(name) {
                Ok(n) => resolve::parse_host(&n),
                Err(_) => Err(Refusal { kind: "invalid", reason: "the requested name is not text".into() }),
            }
        }
        other => return Err(Bad(Some(ADDRESS_NOT_SUPPORTED), format!("SOCKS address type {other}"))),
    };
    let mut port = [0u8; 2];
    c.read_exact(&mut port).await.map_err(io)?;
    Ok((host, u16::from_be_bytes(port)))
}

async fn reply(c: &mut Metered<TcpStream>, code: u8) -> std::io::Result<()> {
    c.write_all(&[VERSION, code, 0, 1, 0, 0, 0, 0, 0, 0]).await
}
