//! The egress proxy driven directly on loopback: test servers on 127.0.0.2 and 127.0.0.3
//! reached through names of `hosts:`, a proxy listening on 127.0.0.1, and clients that speak
//! HTTP forward requests, CONNECT and SOCKS5 to it. Each refusal is a 403 (or SOCKS reply 2)
//! that says why, and leaves an `egress` line in the audit log. Traffic stays on loopback.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::servers::{echo_server, web_server};

use workcell::audit::AuditLog;
use workcell::backend::egress::{EgressProxy, Peers};
use workcell::config::Project;
use workcell::egress::limits::{Timeouts, MAX_CONNECTIONS};
use workcell::egress::{Consent, ConsentDenied, Policy, Proxy};

/// A generous deadline that only turns a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    proxy: Proxy,
    addr: SocketAddr,
    web: SocketAddr,
    echo: SocketAddr,
    local: SocketAddr,
}

/// The policy of a project whose `network:` is `rules`, with `WEB`, `ECHO` and `LOCAL`
/// replaced by the servers' ports.
fn policy(dir: &Path, rules: &str, web: SocketAddr, echo: SocketAddr, local: SocketAddr) -> Arc<Policy> {
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let rules = rules.replace("WEB", &web.port().to_string()).replace("ECHO", &echo.port().to_string()).replace("LOCAL", &local.port().to_string());
    let yaml = format!("sandbox:\n  zones:\n    data: {{path: ./data}}\n  network:\n{rules}");
    let p = Project::from_text(&yaml, &dir.join("workcell.yaml"), dir).unwrap_or_else(|e| panic!("{e}"));
    p.sandbox.network_access().policy().expect("rules").clone()
}

const RULES: &str = "    allow: [\"allowed.test:WEB\", \"denied.test:WEB\", \"echo.test:ECHO\", \"localhost:LOCAL\", \"asked.test:1\"]\n    deny: [denied.test]\n    hosts: {allowed.test: 127.0.0.2, denied.test: 127.0.0.2, echo.test: 127.0.0.3, asked.test: 127.0.0.2}\n";

fn start(rules: &str, consent: Option<Arc<dyn Consent>>) -> Fixture {
    start_with(rules, consent, Timeouts::default())
}

fn start_with(rules: &str, consent: Option<Arc<dyn Consent>>, timeouts: Timeouts) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    // A server on 127.0.0.1 too, so that a name resolving there would really be served if
    // the proxy connected to it.
    let (web, echo, local) = (web_server("127.0.0.2"), echo_server("127.0.0.3"), web_server("127.0.0.1"));
    let policy = policy(&dir, rules, web, echo, local);
    let proxy = Proxy::start_with(policy, Some(AuditLog::new(&dir, "egress-test")), consent, timeouts).expect("the proxy starts");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    proxy.serve(listener, Peers::Any).expect("the proxy serves");
    Fixture { _tmp: tmp, dir, proxy, addr, web, echo, local }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to the proxy");
    s.set_read_timeout(Some(HANG)).unwrap();
    s.set_write_timeout(Some(HANG)).unwrap();
    s
}

/// Sends `request` and reads the whole answer (the proxy closes after one).
fn exchange(addr: SocketAddr, request: &str) -> String {
    let mut s = connect(addr);
    s.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(addr: SocketAddr, host: &str, path: &str) -> String {
    // What urllib sends through a proxy: absolute form, a Host header.
    exchange(
        addr,
        &format!("GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: Python-urllib/3\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"),
    )
}

/// The `egress` lines of the audit log, waiting until one matches `pred` (lines are written
/// when a connection ends, which may be just after the client saw its answer).
fn audit_line(dir: &Path, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + HANG;
    loop {
        let text = std::fs::read_to_string(workcell::audit::audit_path(dir)).unwrap_or_default();
        let found = text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).find(|v| v["event"] == "egress" && pred(v));
        if let Some(v) = found {
            return v;
        }
        assert!(Instant::now() < deadline, "no matching egress line in:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn forward_get_through_a_static_name() {
    let f = start(RULES, None);
    let host = format!("allowed.test:{}", f.web.port());
    let answer = get(f.addr, &host, "/simple");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with(&format!("hello /simple (host {host})")), "the path reaches the server in origin form: {answer}");
    let line = audit_line(&f.dir, |v| v["destination"] == host.as_str());
    assert_eq!(line["verdict"], "allowed", "{line}");
    assert_eq!(line["protocol"], "http");
    assert_eq!(line["address"], f.web.to_string().as_str());
    assert!(line["rule"].as_str().unwrap().contains("allowed.test"), "{line}");
    assert!(line["bytes_up"].as_u64().unwrap() > 0 && line["bytes_down"].as_u64().unwrap() > 0, "{line}");
    assert!(line["duration_ms"].is_u64());
    // The destination sees the host that was judged, whatever Host the worker wrote.
    let spoofed = exchange(f.addr, &format!("GET http://{host}/x HTTP/1.1\r\nHost: elsewhere.example\r\n\r\n"));
    assert!(spoofed.ends_with(&format!("/x (host {host})")), "{spoofed}");
}

#[test]
fn connect_carries_bytes_both_ways() {
    let f = start(RULES, None);
    let mut s = connect(f.addr);
    let host = format!("echo.test:{}", f.echo.port());
    write!(s, "CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    for word in ["ping", "second"] {
        writeln!(s, "{word}").unwrap();
        let mut back = String::new();
        r.read_line(&mut back).unwrap();
        assert_eq!(back, format!("pong:{word}\n"));
    }
    s.shutdown(Shutdown::Write).unwrap();
    drop((r, s));
    let line = audit_line(&f.dir, |v| v["destination"] == host.as_str());
    assert_eq!((line["verdict"].as_str(), line["protocol"].as_str()), (Some("allowed"), Some("connect")), "{line}");
    assert_eq!(line["bytes_up"], 12, "ping\\n second\\n: {line}");
    assert_eq!(line["bytes_down"], 22, "{line}");
}

/// A SOCKS5 CONNECT by name; returns the reply code and the stream.
fn socks(addr: SocketAddr, name: &str, port: u16) -> (u8, TcpStream) {
    let mut s = connect(addr);
    s.write_all(&[5, 1, 0]).unwrap();
    let mut greet = [0u8; 2];
    s.read_exact(&mut greet).unwrap();
    assert_eq!(greet, [5, 0]);
    let mut req = vec![5, 1, 0, 3, name.len() as u8];
    req.extend_from_slice(name.as_bytes());
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply[0], 5);
    (reply[1], s)
}

#[test]
fn socks5_domain_request() {
    let f = start(RULES, None);
    let (code, mut s) = socks(f.addr, "echo.test", f.echo.port());
    assert_eq!(code, 0, "succeeded");
    writeln!(s, "over socks").unwrap();
    let mut back = String::new();
    BufReader::new(s.try_clone().unwrap()).read_line(&mut back).unwrap();
    assert_eq!(back, "pong:over socks\n");
    drop(s);
    let host = format!("echo.test:{}", f.echo.port());
    let line = audit_line(&f.dir, |v| v["destination"] == host.as_str());
    assert_eq!((line["verdict"].as_str(), line["protocol"].as_str()), (Some("allowed"), Some("socks5")), "{line}");

    let (code, _s) = socks(f.addr, "denied.test", f.web.port());
    assert_eq!(code, 2, "connection not allowed by ruleset");
    let host = format!("denied.test:{}", f.web.port());
    let line = audit_line(&f.dir, |v| v["destination"] == host.as_str());
    assert_eq!(line["verdict"], "refused", "{line}");
}

#[test]
fn refusals_explain_and_are_audited() {
    let f = start(RULES, None);
    let web = f.web.port();
    // (what is asked for, words the 403 must hold, the audit line's reason kind)
    let cases = [
        (format!("other.test:{web}"), "no allow entry of workcell.yaml covers other.test", "unlisted"),
        (format!("denied.test:{web}"), "deny entry 'denied.test'", "denied"),
        (format!("allowed.test:{}", web.wrapping_add(1).max(1)), "no allow entry", "unlisted"),
        (format!("127.0.0.2:{web}"), "no allow entry of workcell.yaml covers 127.0.0.2", "unlisted"),
        (format!("localhost:{}", f.local.port()), "loopback", "special"),
    ];
    for (host, words, kind) in cases {
        for connect in [false, true] {
            let answer = if connect { exchange(f.addr, &format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n")) } else { get(f.addr, &host, "/") };
            assert!(answer.starts_with("HTTP/1.1 403"), "{host}: {answer}");
            assert!(answer.contains(words), "{host}: the refusal says why ({words}): {answer}");
            assert!(answer.contains("workcell.yaml allows: allowed.test"), "{host}: the refusal says what is allowed: {answer}");
            assert!(!answer.contains("hello /"), "{host}: nothing reached the server");
        }
        let line = audit_line(&f.dir, |v| v["destination"] == host.as_str() && v["protocol"] == "connect");
        assert_eq!(line["verdict"], "refused", "{line}");
        assert!(line["reason"].as_str().unwrap().starts_with(kind), "{line}");
        assert_eq!(line["bytes_up"], 0, "{line}");
    }
}

struct Answer(bool);

impl Consent for Answer {
    fn connect(&self, destination: &str) -> Result<(), ConsentDenied> {
        assert!(destination.starts_with("asked.test:"), "{destination}");
        if self.0 {
            Ok(())
        } else {
            Err(ConsentDenied("the user denied".into()))
        }
    }
}

#[test]
fn ask_goes_to_the_approvals() {
    let rules = "    allow: [\"allowed.test:WEB\"]\n    ask: true\n    hosts: {allowed.test: 127.0.0.2, asked.test: 127.0.0.2}\n";
    for approve in [true, false] {
        let f = start(rules, Some(Arc::new(Answer(approve))));
        let host = format!("asked.test:{}", f.web.port());
        let answer = get(f.addr, &host, "/asked");
        if approve {
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        } else {
            assert!(answer.starts_with("HTTP/1.1 403") && answer.contains("the user denied"), "{answer}");
        }
        let line = audit_line(&f.dir, |v| v["destination"] == host.as_str());
        assert_eq!(line["verdict"], if approve { "allowed" } else { "refused" }, "{line}");
    }
}

#[test]
fn peers_outside_the_network_are_closed() {
    let f = start(RULES, None);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // The test's client comes from 127.0.0.1, outside 10.0.0.0/8.
    f.proxy.serve(listener, Peers::Within { network: "10.0.0.0".parse().unwrap(), prefix: 8 }).unwrap();
    let answer = get(addr, &format!("allowed.test:{}", f.web.port()), "/");
    assert_eq!(answer, "", "closed without an answer");
    let line = audit_line(&f.dir, |v| v["reason"].as_str().is_some_and(|r| r.starts_with("peer")));
    assert_eq!(line["verdict"], "refused");
    assert_eq!(f.proxy.stats().refused_peers, 1);
    // The same proxy still serves its own network.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    f.proxy.serve(listener, Peers::Within { network: "127.0.0.0".parse().unwrap(), prefix: 8 }).unwrap();
    assert!(get(addr, &format!("allowed.test:{}", f.web.port()), "/").starts_with("HTTP/1.1 200"));
    assert_eq!(f.proxy.stats().refused_peers, 1);
}

/// Resident memory of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).unwrap()
}

fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + HANG;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn survives_a_flood() {
    let f = start(RULES, None);
    let good = format!("allowed.test:{}", f.web.port());
    assert!(get(f.addr, &good, "/before").starts_with("HTTP/1.1 200"));
    let before = rss_kib();

    // Malformed request lines: each answered 400 and closed.
    for i in 0..300 {
        let answer = exchange(f.addr, &format!("THIS IS NOT HTTP {i}\r\n\r\n"));
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 400"), "{answer}");
    }
    // 1 MiB of headers: cut off at the 64 KiB head limit, never buffered whole.
    for _ in 0..8 {
        let mut s = connect(f.addr);
        let _ = s.write_all(format!("GET http://{good}/ HTTP/1.1\r\nHost: {good}\r\n").as_bytes());
        let filler = format!("X-Filler: {}\r\n", "a".repeat(1000));
        let mut answer = Vec::new();
        for _ in 0..1024 {
            if s.write_all(filler.as_bytes()).is_err() {
                break;
            }
        }
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 431") || answer.starts_with("HTTP/1.1 400"), "{answer}");
    }
    // Slowloris: more unfinished heads than the proxy serves at once.
    let mut slow = Vec::new();
    for _ in 0..MAX_CONNECTIONS + 44 {
        let mut s = connect(f.addr);
        s.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nX-Slow: ").unwrap();
        slow.push(s);
    }
    wait_for("the proxy to reach its connection limit", || f.proxy.stats().peak == MAX_CONNECTIONS);
    let stats = f.proxy.stats();
    assert!(stats.peak <= MAX_CONNECTIONS, "{stats:?}");
    let grown = rss_kib().saturating_sub(before);
    // 256 connections with at most a 64 KiB head each is 16 MiB; the bound is far above what
    // the proxy uses and far below what unbounded buffering of the flood would take.
    eprintln!("egress flood: the test process grew by {grown} KiB; {stats:?}");
    assert!(grown < 128 * 1024, "the process grew by {grown} KiB during the flood");
    drop(slow);
    wait_for("the unfinished connections to end", || f.proxy.stats().active == 0);
    assert!(get(f.addr, &good, "/after").contains("hello /after"), "still serving");
    assert!(f.proxy.stats().peak <= MAX_CONNECTIONS);
}

/// Reads until the proxy closes the connection (or the hang deadline fails the test).
fn read_until_closed(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let r = s.read_to_end(&mut out);
    assert!(
        !matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
        "the proxy kept the connection open"
    );
    String::from_utf8_lossy(&out).into_owned()
}

/// The audit line of the connection made from `client` (the proxy's peer).
fn line_of(dir: &Path, client: &TcpStream) -> serde_json::Value {
    let peer = client.local_addr().unwrap().to_string();
    audit_line(dir, |v| v["peer"] == peer.as_str())
}

#[test]
fn unfinished_heads_are_cut_off() {
    // Short enough for a test, long enough that the partial heads below are sent in time
    // even on a busy machine (a late one is still cut off, with another reason).
    let f = start_with(RULES, None, Timeouts { head: Duration::from_secs(3), ..Timeouts::default() });
    let mut silent = connect(f.addr);
    let mut half_http = connect(f.addr);
    half_http.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nX-Slow: ").unwrap();
    let mut half_socks = connect(f.addr);
    half_socks.write_all(&[5, 1, 0, 5, 1, 0, 3]).unwrap();
    for s in [&mut silent, &mut half_http, &mut half_socks] {
        let answer = read_until_closed(s);
        assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 408") || answer.starts_with("\u{5}\u{0}"), "{answer:?}");
        let line = line_of(&f.dir, s);
        assert_eq!(line["verdict"], "malformed", "{line}");
        assert!(line["reason"].as_str().is_some_and(|r| r.contains("within 3 s") || r.contains("could not be read")), "{line}");
    }
    assert!(line_of(&f.dir, &silent)["reason"].as_str().unwrap().contains("nothing was sent within 3 s"));
    wait_for("the cut-off connections to end", || f.proxy.stats().active == 0);
}

#[test]
fn idle_tunnels_are_closed() {
    let f = start_with(RULES, None, Timeouts { idle: Duration::from_secs(5), ..Timeouts::default() });
    let (code, mut s) = socks(f.addr, "echo.test", f.echo.port());
    assert_eq!(code, 0);
    // Nothing moves: the proxy closes the tunnel.
    let rest = read_until_closed(&mut s);
    assert_eq!(rest, "");
    let line = line_of(&f.dir, &s);
    assert_eq!(line["verdict"], "allowed", "{line}");
    assert!(line["reason"].as_str().is_some_and(|r| r.contains("5 s without traffic")), "{line}");
}
