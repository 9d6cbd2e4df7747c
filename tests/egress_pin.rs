//! Tunnels are pinned to the judged name: a `CONNECT` or SOCKS5 tunnel whose first bytes are
//! a TLS ClientHello or an HTTP request for another host is closed before anything reaches the
//! destination, and audited; other protocols pass. Forwarded requests lose the worker's
//! `Forwarded`/`X-Forwarded-*` claims. Driven against the proxy directly, on loopback.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use workcell::audit::AuditLog;
use workcell::backend::egress::{EgressProxy, Peers};
use workcell::config::Project;
use workcell::egress::Proxy;

const HANG: Duration = Duration::from_secs(60);
const BANNER: &[u8] = b"SSH-2.0-recorder\r\n";

/// Every connection's bytes as the server received them.
type Received = Arc<Mutex<Vec<Arc<Mutex<Vec<u8>>>>>>;

/// A server that speaks first (an ssh-like banner), then echoes and records what it gets.
fn recorder(ip: &str) -> (SocketAddr, Received) {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let received: Received = Arc::default();
    let all = received.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let mine = Arc::new(Mutex::new(Vec::new()));
            all.lock().unwrap().push(mine.clone());
            std::thread::spawn(move || {
                let _ = s.write_all(BANNER);
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf) {
                    mine.lock().unwrap().extend_from_slice(&buf[..n]);
                    if s.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    (addr, received)
}

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    _proxy: Proxy,
    addr: SocketAddr,
    server: SocketAddr,
    received: Received,
}

fn start() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::create_dir_all(dir.join("data")).unwrap();
    let (server, received) = recorder("127.0.0.5");
    let port = server.port();
    let yaml = format!(
        "sandbox:\n  zones:\n    data: {{path: ./data}}\n  network:\n    allow: [\"allowed.test:{port}\", \"also.test:{port}\", \"127.0.0.5:{port}\"]\n    hosts: {{allowed.test: 127.0.0.5, also.test: 127.0.0.5, refused.test: 127.0.0.5}}\n"
    );
    let p = Project::from_text(&yaml, &dir.join("workcell.yaml"), &dir).unwrap_or_else(|e| panic!("{e}"));
    let policy = p.sandbox.network_access().policy().expect("rules").clone();
    let proxy = Proxy::start(policy, Some(AuditLog::new(&dir, "pin-test")), None).expect("the proxy starts");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    proxy.serve(listener, Peers::Any).expect("the proxy serves");
    Fixture { _tmp: tmp, dir, _proxy: proxy, addr, server, received }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect to the proxy");
    s.set_read_timeout(Some(HANG)).unwrap();
    s.set_write_timeout(Some(HANG)).unwrap();
    s
}

/// A `CONNECT host:port` tunnel, its 200 read.
fn tunnel(f: &Fixture, host: &str) -> TcpStream {
    let mut s = connect(f.addr);
    let target = format!("{host}:{}", f.server.port());
    write!(s, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    s
}

/// A SOCKS5 CONNECT by name, succeeded.
fn socks(f: &Fixture, name: &str) -> TcpStream {
    let mut s = connect(f.addr);
    s.write_all(&[5, 1, 0]).unwrap();
    let mut greet = [0u8; 2];
    s.read_exact(&mut greet).unwrap();
    let mut req = vec![5, 1, 0, 3, name.len() as u8];
    req.extend_from_slice(name.as_bytes());
    req.extend_from_slice(&f.server.port().to_be_bytes());
    s.write_all(&req).unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply[1], 0, "succeeded");
    s
}

/// A ClientHello naming `sni`, split into TLS records of at most `split` bytes.
fn hello(sni: Option<&str>, split: usize) -> Vec<u8> {
    let mut ext = vec![0x00, 0x0b, 0, 2, 1, 0]; // ec_point_formats, before the name
    if let Some(name) = sni {
        let mut entry = vec![0u8];
        entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
        entry.extend_from_slice(name.as_bytes());
        ext.extend_from_slice(&[0, 0]);
        ext.extend_from_slice(&((entry.len() + 2) as u16).to_be_bytes());
        ext.extend_from_slice(&(entry.len() as u16).to_be_bytes());
        ext.extend_from_slice(&entry);
    }
    let mut body = vec![3, 3];
    body.extend_from_slice(&[9u8; 32]);
    body.extend_from_slice(&[32]);
    body.extend_from_slice(&[1u8; 32]);
    body.extend_from_slice(&[0, 4, 0x13, 0x01, 0x13, 0x02, 1, 0]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut message = vec![1];
    message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    message.extend_from_slice(&body);
    message.chunks(split).flat_map(|c| [&[0x16, 3, 1][..], &(c.len() as u16).to_be_bytes(), c].concat()).collect()
}

/// Reads the banner, then expects `sent` echoed back: the bytes crossed the tunnel.
fn passes(s: &mut TcpStream, sent: &[u8]) {
    let mut back = vec![0u8; BANNER.len() + sent.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(&back[..BANNER.len()], BANNER);
    assert_eq!(&back[BANNER.len()..], sent);
}

/// The tunnel is closed (after the banner, relayed while the proxy waited), and the server
/// received nothing on it; returns the audit line.
fn closed(f: &Fixture, s: &mut TcpStream) -> serde_json::Value {
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(rest.is_empty() || rest == BANNER, "{rest:?}");
    let line = line_of(&f.dir, s);
    for conn in f.received.lock().unwrap().iter() {
        assert!(conn.lock().unwrap().is_empty(), "bytes reached the server through a refused tunnel");
    }
    line
}

fn line_of(dir: &Path, client: &TcpStream) -> serde_json::Value {
    let peer = client.local_addr().unwrap().to_string();
    let deadline = Instant::now() + HANG;
    loop {
        let text = std::fs::read_to_string(workcell::audit::audit_path(dir)).unwrap_or_default();
        let found =
            text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).find(|v| v["event"] == "egress" && v["peer"] == peer.as_str());
        if let Some(v) = found {
            return v;
        }
        assert!(Instant::now() < deadline, "no egress line for {peer} in:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn connect_with_another_sni_is_closed_and_audited() {
    let f = start();
    let mut s = tunnel(&f, "allowed.test");
    s.write_all(&hello(Some("refused.test"), 60)).unwrap();
    let line = closed(&f, &mut s);
    assert_eq!(line["verdict"], "refused", "{line}");
    let reason = line["reason"].as_str().unwrap();
    assert!(reason.starts_with("pinned:") && reason.contains("SNI") && reason.contains("refused.test"), "{line}");
    // Each case on a proxy of its own: repeated refusals of one destination in a run are
    // counted, not written again (the audit's bound).
    // Another allowed name is still another name: the tunnel was judged for allowed.test.
    let f = start();
    let mut s = tunnel(&f, "allowed.test");
    s.write_all(&hello(Some("also.test"), 1000)).unwrap();
    assert_eq!(closed(&f, &mut s)["verdict"], "refused");
    // No SNI at all, to a name.
    let f = start();
    let mut s = tunnel(&f, "allowed.test");
    s.write_all(&hello(None, 1000)).unwrap();
    assert_eq!(closed(&f, &mut s)["verdict"], "refused");
}

#[test]
fn connect_with_the_judged_sni_passes() {
    let f = start();
    for (sni, split) in [("allowed.test", 1000), ("ALLOWED.test.", 7)] {
        let mut s = tunnel(&f, "allowed.test");
        let h = hello(Some(sni), split);
        // In two writes, the second after a pause: the hello arrives across reads.
        s.write_all(&h[..10]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        s.write_all(&h[10..]).unwrap();
        passes(&mut s, &h);
        drop(s);
    }
    // A tunnel to an address may carry no name, or a name the rules allow there.
    for sni in [None, Some("also.test")] {
        let mut s = tunnel(&f, "127.0.0.5");
        let h = hello(sni, 1000);
        s.write_all(&h).unwrap();
        passes(&mut s, &h);
    }
    let mut s = tunnel(&f, "127.0.0.5");
    s.write_all(&hello(Some("unlisted.test"), 1000)).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert_eq!(line_of(&f.dir, &s)["verdict"], "refused");
}

#[test]
fn connect_with_another_host_is_closed() {
    let f = start();
    let mut s = tunnel(&f, "allowed.test");
    s.write_all(b"GET / HTTP/1.1\r\nHost: refused.test\r\n\r\n").unwrap();
    let line = closed(&f, &mut s);
    assert_eq!(line["verdict"], "refused", "{line}");
    assert!(line["reason"].as_str().unwrap().contains("Host header names refused.test"), "{line}");
    // An absolute-form target overrides Host at many servers: it must match too (on a proxy
    // of its own: a repeated refusal of one destination is counted, not written again).
    let f = start();
    let mut s = tunnel(&f, "allowed.test");
    s.write_all(b"GET http://refused.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n").unwrap();
    assert_eq!(closed(&f, &mut s)["verdict"], "refused");
    // Empty lines before the request line, which servers skip, and a lower-case method.
    let f = start();
    let mut s = tunnel(&f, "allowed.test");
    s.write_all(b"\r\n\r\nget / HTTP/1.1\r\nHost: refused.test\r\n\r\n").unwrap();
    assert_eq!(closed(&f, &mut s)["verdict"], "refused");
    // The judged host, port folded, passes.
    let mut s = tunnel(&f, "allowed.test");
    let req = format!("GET / HTTP/1.1\r\nHost: Allowed.Test:{}\r\n\r\n", f.server.port());
    s.write_all(req.as_bytes()).unwrap();
    passes(&mut s, req.as_bytes());
}

#[test]
fn socks5_with_another_host_is_closed() {
    let f = start();
    let mut s = socks(&f, "allowed.test");
    s.write_all(b"GET / HTTP/1.1\r\nHost: refused.test\r\n\r\n").unwrap();
    let line = closed(&f, &mut s);
    assert_eq!((line["verdict"].as_str(), line["protocol"].as_str()), (Some("refused"), Some("socks5")), "{line}");
    let f = start();
    let mut s = socks(&f, "allowed.test");
    s.write_all(&hello(Some("refused.test"), 1000)).unwrap();
    assert_eq!(closed(&f, &mut s)["verdict"], "refused");
}

#[test]
fn an_ssh_like_exchange_passes() {
    let f = start();
    for via_socks in [false, true] {
        let mut s = if via_socks { socks(&f, "allowed.test") } else { tunnel(&f, "allowed.test") };
        // The server speaks first; the client waits for its banner before answering.
        let mut banner = vec![0u8; BANNER.len()];
        s.read_exact(&mut banner).unwrap();
        assert_eq!(banner, BANNER);
        s.write_all(b"SSH-2.0-client\r\n").unwrap();
        let mut back = String::new();
        BufReader::new(s.try_clone().unwrap()).read_line(&mut back).unwrap();
        assert_eq!(back, "SSH-2.0-client\r\n");
        drop(s);
    }
}

#[test]
fn forwarded_headers_do_not_reach_the_server() {
    let f = start();
    let host = format!("allowed.test:{}", f.server.port());
    let mut s = connect(f.addr);
    write!(
        s,
        "GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Host: refused.test\r\nx-forwarded-proto: https\r\nForwarded: for=10.0.0.1;host=refused.test\r\nX-Kept: yes\r\n\r\n"
    )
    .unwrap();
    // The recorder answers with a banner, not HTTP: the request reached it all the same.
    let deadline = Instant::now() + HANG;
    let seen = loop {
        let text = f.received.lock().unwrap().iter().map(|c| String::from_utf8_lossy(&c.lock().unwrap()).into_owned()).collect::<String>();
        if text.contains("\r\n\r\n") {
            break text.to_ascii_lowercase();
        }
        assert!(Instant::now() < deadline, "the request did not reach the server");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(seen.contains("x-kept: yes"), "{seen}");
    assert!(!seen.contains("forwarded") && !seen.contains("refused.test") && !seen.contains("10.0.0.1"), "{seen}");
}
