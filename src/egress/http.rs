//! The HTTP side of the proxy, on hyper: absolute-form requests (`GET http://host/path`) are
//! forwarded to the destination with `Connection: close`, `CONNECT host:port` opens a tunnel.
//! One request per connection (no keep-alive), so one connection is one destination and one
//! audit line. hyper bounds the head (64 KiB) and the time to send it (30 s).

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Bytes;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpStream;

use super::audit::Record;
use super::limits::{Activity, Lease, Metered, Side, MAX_HEAD_BYTES};
use super::pin::Pin;
use super::policy::Host;
use super::resolve::{self, Refusal};
use super::Shared;

type Body = BoxBody<Bytes, hyper::Error>;

/// Serves one client connection that opened with an HTTP request.
pub async fn serve(client: Metered<TcpStream>, shared: Arc<Shared>, record: Record, activity: Arc<Activity>, lease: Arc<Lease>) {
    record.protocol("http");
    let head_timeout = shared.timeouts.head;
    let handler = {
        let record = record.clone();
        hyper::service::service_fn(move |req| handle(req, shared.clone(), record.clone(), activity.clone(), lease.clone()))
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(false)
        .serve_connection(TokioIo::new(client), handler)
        .with_upgrades();
    if let Err(e) = conn.await {
        if e.is_parse() || e.is_timeout() || e.is_parse_too_large() {
            record.malformed(format!("the request could not be read: {e}"));
        } else {
            record.ended(format!("the connection ended with an error: {e}"));
        }
    }
}

async fn handle(req: Request<Incoming>, shared: Arc<Shared>, record: Record, activity: Arc<Activity>, lease: Arc<Lease>) -> Result<Response<Body>, Infallible> {
    Ok(if req.method() == Method::CONNECT { connect(req, shared, record, activity, lease).await } else { forward(req, shared, record, activity, lease).await })
}

/// `CONNECT host:port`: 200, then bytes both ways until either side closes or goes idle.
async fn connect(req: Request<Incoming>, shared: Arc<Shared>, record: Record, activity: Arc<Activity>, lease: Arc<Lease>) -> Response<Body> {
    record.protocol("connect");
    let Some(authority) = req.uri().authority().cloned() else {
        record.malformed("CONNECT without host:port");
        return text(StatusCode::BAD_REQUEST, "workcell egress proxy: CONNECT needs host:port\n".into());
    };
    let Some(port) = authority.port_u16() else {
        record.malformed("CONNECT without a port");
        return text(StatusCode::BAD_REQUEST, "workcell egress proxy: CONNECT needs host:port\n".into());
    };
    let (opened, host) = match destination(&shared, &record, authority.host(), port).await {
        Ok(o) => o,
        Err(response) => return response,
    };
    tokio::spawn(async move {
        let _lease = lease;
        let upstream = Metered::new(opened.stream, activity.clone(), Side::Destination);
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                let pin = Pin { host, port };
                super::tunnel(TokioIo::new(upgraded), upstream, &pin, &activity, &shared, &record).await;
            }
            Err(e) => record.ended(format!("the tunnel did not open: {e}")),
        }
    });
    Response::new(empty())
}

/// An absolute-form request: judged, then sent on with `Connection: close`, and the answer
/// streamed back.
async fn forward(mut req: Request<Incoming>, shared: Arc<Shared>, record: Record, activity: Arc<Activity>, lease: Arc<Lease>) -> Response<Body> {
    let uri = req.uri().clone();
    match uri.scheme_str() {
        Some("http") => {}
        Some(_) => {
            record.malformed(format!("absolute-form request for scheme {:?}", uri.scheme_str()));
            return text(
                StatusCode::BAD_REQUEST,
                "workcell egress proxy: only http:// is forwarded; for https use CONNECT (clients do when HTTPS_PROXY is set)\n".into(),
            );
        }
        None => {
            record.malformed("a request in origin form");
            return text(
                StatusCode::BAD_REQUEST,
                "workcell egress proxy: send requests in absolute form (GET http://host/path) or use CONNECT host:port; set HTTP_PROXY/HTTPS_PROXY to this address\n".into(),
            );
        }
    }
    let Some(authority) = uri.authority().cloned() else {
        record.malformed("an absolute-form request without a host");
        return text(StatusCode::BAD_REQUEST, "workcell egress proxy: the request names no host\n".into());
    };
    let port = authority.port_u16().unwrap_or(80);
    let (opened, _) = match destination(&shared, &record, authority.host(), port).await {
        Ok(o) => o,
        Err(response) => return response,
    };
    // Origin form for the destination, hop-by-hop headers dropped, one request only.
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    *req.uri_mut() = path.parse().unwrap_or_else(|_| hyper::Uri::from_static("/"));
    strip_hop_by_hop(req.headers_mut());
    strip_forwarding(req.headers_mut());
    req.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    // The Host the destination sees is the one judged: a different one could reach another
    // site served from the same address (a CDN's), which no rule allowed.
    let judged = match authority.port_u16() {
        Some(p) => format!("{}:{p}", authority.host()),
        None => authority.host().to_string(),
    };
    match HeaderValue::from_str(&judged) {
        Ok(h) => {
            req.headers_mut().insert(header::HOST, h);
        }
        Err(_) => return failed(&record, format!("'{}' cannot be sent as a Host header", crate::term::escape(&judged))),
    }
    let upstream = Metered::new(opened.stream, activity.clone(), Side::Destination);
    let handshake = hyper::client::conn::http1::Builder::new().max_buf_size(MAX_HEAD_BYTES).handshake::<_, Incoming>(TokioIo::new(upstream)).await;
    let (mut sender, conn) = match handshake {
        Ok(pair) => pair,
        Err(e) => return failed(&record, format!("the connection to {authority} failed: {e}")),
    };
    let held = record.clone();
    let (idle, stop) = (activity.clone(), shared.stop.clone());
    // Polled until the answer's body is through; the record (and so the line) waits for it.
    tokio::spawn(async move {
        let _lease = lease;
        let mut stop = stop;
        let ended = tokio::select! {
            r = conn => r.err().map(|e| format!("the destination's connection ended with an error: {e}")),
            _ = idle.idle(shared.timeouts.idle) => Some(format!("closed after {} s without traffic", shared.timeouts.idle.as_secs())),
            _ = stop.changed() => Some("the run ended".into()),
        };
        if let Some(e) = ended {
            held.ended(e);
        }
    });
    match sender.send_request(req).await {
        Ok(mut resp) => {
            strip_hop_by_hop(resp.headers_mut());
            resp.map(|b| b.boxed())
        }
        Err(e) => failed(&record, format!("{authority} did not answer: {e}")),
    }
}

/// Judges and connects; on refusal, the answer to send (403 with the reason and the rules,
/// or 502 when the destination failed).
async fn destination(shared: &Shared, record: &Record, host: &str, port: u16) -> Result<(resolve::Opened, Host), Response<Body>> {
    let asked = format!("{host}:{port}");
    record.destination(asked.clone());
    let result = match resolve::parse_host(host) {
        Ok(h) => resolve::open(&shared.policy, shared.consent.as_ref(), &h, port).await.map(|o| (o, h)),
        Err(r) => Err(r),
    };
    match result {
        Ok((opened, host)) => {
            record.allowed(opened.address, opened.rule.clone());
            Ok((opened, host))
        }
        Err(refusal) => {
            record.refused(&refusal);
            let status = if refusal.by_policy() { StatusCode::FORBIDDEN } else { StatusCode::BAD_GATEWAY };
            Err(text(status, shared.explain(&asked, &refusal)))
        }
    }
}

fn failed(record: &Record, reason: String) -> Response<Body> {
    let refusal = Refusal { kind: "unreachable", reason };
    record.refused(&refusal);
    text(StatusCode::BAD_GATEWAY, format!("workcell egress proxy: {}\n", refusal.reason))
}

/// Headers that describe one hop, not the message (and `Proxy-*`, which are for this proxy).
fn strip_hop_by_hop(headers: &mut hyper::HeaderMap) {
    let listed: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()).collect::<Vec<_>>())
        .collect();
    for name in listed {
        if !name.is_empty() && name != "transfer-encoding" && name != "content-length" {
            headers.remove(name.as_str());
        }
    }
    for name in ["connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "te", "trailer", "upgrade"] {
        headers.remove(name);
    }
}

/// `Forwarded` and `X-Forwarded-*`: a worker's claims about where the request came from or
/// which site it is for, which a destination behind a CDN or load balancer may believe over
/// the `Host` that was judged.
fn strip_forwarding(headers: &mut hyper::HeaderMap) {
    let names: Vec<header::HeaderName> = headers.keys().filter(|n| n.as_str() == "forwarded" || n.as_str().starts_with("x-forwarded-")).cloned().collect();
    for name in names {
        headers.remove(name);
    }
}

fn empty() -> Body {
    Full::new(Bytes::new()).map_err(|never| match never {}).boxed()
}

fn text(status: StatusCode, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}
