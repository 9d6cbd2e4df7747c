//! Attacks on the egress proxy: destinations a worker words so that the rules judge one
//! thing and the proxy connects to another. The proxy is driven directly on loopback (test
//! servers on 127.0.0.2, a proxy on 127.0.0.1); traffic stays on loopback.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use support::servers::web_server;

use workcell::backend::egress::{EgressProxy, Peers};
use workcell::config::Project;
use workcell::egress::{Policy, Proxy};

/// A deadline that only turns a hang into a failure.
const HANG: Duration = Duration::from_secs(60);

/// A proxy for a project whose `network:` is `rules` (`WEB` replaced by `web`'s port),
/// listening on 127.0.0.1.
fn proxy(dir: &Path, rules: &str, web: SocketAddr) -> (Proxy, SocketAddr) {
    let yaml = format!("sandbox:\n  network:\n{}", rules.replace("WEB", &web.port().to_string()));
    let p = Project::from_text(&yaml, &dir.join("workcell.yaml"), dir).unwrap_or_else(|e| panic!("{e}"));
    let policy: Arc<Policy> = p.sandbox.network_access().policy().expect("rules").clone();
    let proxy = Proxy::start(policy, None, None).expect("the proxy starts");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    proxy.serve(listener, Peers::Any).expect("the proxy serves");
    (proxy, addr)
}

/// Sends `request` and reads the whole answer.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the proxy");
    s.set_read_timeout(Some(HANG)).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(addr: SocketAddr, host: &str) -> String {
    exchange(addr, format!("GET http://{host}/x HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
}

/// A SOCKS5 CONNECT for `name:port` (address type 3); the reply code.
fn socks(addr: SocketAddr, name: &str, port: u16) -> u8 {
    let mut address = vec![name.len() as u8];
    address.extend_from_slice(name.as_bytes());
    socks_address(addr, 3, &address, port)
}

/// A deny entry naming an address holds for every way of reaching that address: a name of
/// `hosts:` (or a DNS answer) that leads there is refused too, not only the literal.
#[test]
fn denied_address_is_not_reached_through_a_name() {
    let tmp = tempfile::tempdir().unwrap();
    let web = web_server("127.0.0.2");
    let rules = "    allow: [\"front.test:WEB\", \"127.0.0.0/8\"]\n    deny: [\"127.0.0.2\"]\n    hosts: {front.test: 127.0.0.2}\n";
    let (_proxy, addr) = proxy(tmp.path(), rules, web);
    let literal = get(addr, &format!("127.0.0.2:{}", web.port()));
    assert!(literal.starts_with("HTTP/1.1 403"), "the literal is denied: {literal}");
    let named = get(addr, &format!("front.test:{}", web.port()));
    assert!(named.starts_with("HTTP/1.1 403"), "a name leading to a denied address is refused: {named}");
    assert!(named.contains("deny entry '127.0.0.2'"), "the refusal names the deny entry: {named}");
    let tunnel = exchange(addr, format!("CONNECT front.test:{p} HTTP/1.1\r\nHost: front.test:{p}\r\n\r\n", p = web.port()).as_bytes());
    assert!(tunnel.starts_with("HTTP/1.1 403"), "{tunnel}");
    assert_eq!(socks(addr, "front.test", web.port()), 2, "SOCKS: not allowed by the rules");
}

/// A SOCKS5 CONNECT to `address` of type `atyp` (1 IPv4, 3 a name with its length, 4
/// IPv6); the reply code.
fn socks_address(addr: SocketAddr, atyp: u8, address: &[u8], port: u16) -> u8 {
    let mut s = TcpStream::connect(addr).expect("connect to the proxy");
    s.set_read_timeout(Some(HANG)).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut greeting = [0u8; 2];
    s.read_exact(&mut greeting).unwrap();
    let mut req = vec![5, 1, 0, atyp];
    req.extend_from_slice(address);
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).unwrap();
    reply[1]
}

/// Ways of writing a destination so that the rules would judge one thing and the proxy
/// connect to another: each is judged as what it is. Only `good.test` (a name of `hosts:`)
/// is allowed; a server on 127.0.0.1 would answer if the proxy went there.
#[test]
fn destinations_are_judged_as_connected() {
    let tmp = tempfile::tempdir().unwrap();
    let web = web_server("127.0.0.2");
    let local = web_server("127.0.0.1");
    let rules = "    allow: [\"good.test:WEB\"]\n    hosts: {good.test: 127.0.0.2}\n";
    let (_proxy, addr) = proxy(tmp.path(), rules, web);
    let (w, l) = (web.port(), local.port());
    // Spellings of the allowed name reach it.
    for host in [format!("good.test:{w}"), format!("GOOD.Test:{w}"), format!("good.test.:{w}")] {
        assert!(get(addr, &host).starts_with("HTTP/1.1 200"), "{host}");
    }
    // Everything else is refused, whatever the spelling.
    for host in [
        format!("good.test@127.0.0.1:{l}"),
        format!("good.test:{w}@127.0.0.1:{l}"),
        format!("[::ffff:127.0.0.1]:{l}"),
        format!("[::1]:{l}"),
        format!("127.1:{l}"),
        format!("2130706433:{l}"),
        format!("0x7f000001:{l}"),
        format!("good.test%2e:{w}"),
        format!("xn--good-test:{w}"),
        format!("x.good.test:{w}"),
        "good.test:0".to_string(),
        format!("good.test:{}", w as u32 + 65536),
    ] {
        let answer = get(addr, &host);
        assert!(!answer.starts_with("HTTP/1.1 200"), "{host} must not be fetched: {answer}");
        let tunnel = exchange(addr, format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes());
        assert!(!tunnel.starts_with("HTTP/1.1 200"), "{host} must not be tunnelled: {tunnel}");
    }
    // SOCKS by address: IPv4 and IPv6 (loopback, and IPv4-mapped loopback) are judged as addresses.
    assert_eq!(socks_address(addr, 1, &[127, 0, 0, 1], l), 2);
    assert_eq!(socks_address(addr, 1, &[127, 0, 0, 2], w), 2);
    assert_eq!(socks_address(addr, 4, &std::net::Ipv6Addr::LOCALHOST.octets(), l), 2);
    assert_eq!(socks_address(addr, 4, &"::ffff:127.0.0.2".parse::<std::net::Ipv6Addr>().unwrap().octets(), w), 2);
    assert_eq!(socks(addr, "good.test", w), 0, "the allowed name by SOCKS");
}

/// A second request on a connection (pipelined behind an allowed one, or smuggled in a
/// body) is never sent anywhere unjudged: one request per connection.
#[test]
fn pipelined_requests_are_not_forwarded() {
    let tmp = tempfile::tempdir().unwrap();
    let web = web_server("127.0.0.2");
    let local = web_server("127.0.0.1");
    let rules = "    allow: [\"good.test:WEB\"]\n    hosts: {good.test: 127.0.0.2}\n";
    let (_proxy, addr) = proxy(tmp.path(), rules, web);
    let (w, l) = (web.port(), local.port());
    let second = format!("GET http://127.0.0.1:{l}/second HTTP/1.1\r\nHost: 127.0.0.1:{l}\r\n\r\n");
    let pipelined = exchange(addr, format!("GET http://good.test:{w}/first HTTP/1.1\r\nHost: good.test:{w}\r\n\r\n{second}").as_bytes());
    assert!(pipelined.contains("hello /first"), "{pipelined}");
    assert!(!pipelined.contains("hello /second"), "{pipelined}");
    // Transfer-Encoding and Content-Length together, the classic desync.
    let smuggled = exchange(
        addr,
        format!("POST http://good.test:{w}/first HTTP/1.1\r\nHost: good.test:{w}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{second}")
            .as_bytes(),
    );
    assert!(!smuggled.contains("hello /second"), "{smuggled}");
}

/// A person who has not answered yet: counts the questions, answers none until opened.
#[derive(Default)]
struct Unanswered {
    asked: std::sync::Mutex<usize>,
    open: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
}

impl Unanswered {
    fn asked(&self) -> usize {
        *self.asked.lock().unwrap()
    }

    fn wait_asked(&self, n: usize) {
        let deadline = std::time::Instant::now() + HANG;
        let mut asked = self.asked.lock().unwrap();
        while *asked < n {
            assert!(std::time::Instant::now() < deadline, "only {} questions reached the person, not {n}", *asked);
            asked = self.changed.wait_timeout(asked, Duration::from_millis(50)).unwrap().0;
        }
    }

    fn answer_all(&self) {
        *self.open.lock().unwrap() = true;
        self.changed.notify_all();
    }
}

impl workcell::egress::Consent for Unanswered {
    fn connect(&self, _destination: &str) -> Result<(), workcell::egress::ConsentDenied> {
        *self.asked.lock().unwrap() += 1;
        self.changed.notify_all();
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.changed.wait(open).unwrap();
        }
        Err(workcell::egress::ConsentDenied("the user denied".into()))
    }
}

/// `ask: true`: a worker that opens connections to ever new unlisted names and drops them at
/// once cannot queue questions for the person without end. A question cannot be taken back
/// once asked, so only a few may wait at a time; past them the worker gets a 403 at once.
#[test]
fn questions_cannot_pile_up() {
    use workcell::egress::limits::MAX_PENDING_ASKS;
    let tmp = tempfile::tempdir().unwrap();
    let web = web_server("127.0.0.2");
    let yaml = format!("sandbox:\n  network:\n    allow: [\"good.test:{}\"]\n    ask: true\n", web.port());
    let p = Project::from_text(&yaml, &tmp.path().join("workcell.yaml"), tmp.path()).unwrap_or_else(|e| panic!("{e}"));
    let person = Arc::new(Unanswered::default());
    let proxy = Proxy::start(p.sandbox.network_access().policy().expect("rules").clone(), None, Some(person.clone())).expect("the proxy starts");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    proxy.serve(listener, Peers::Any).expect("the proxy serves");
    let ask = |i: usize| {
        let mut s = TcpStream::connect(addr).expect("connect to the proxy");
        s.set_read_timeout(Some(HANG)).unwrap();
        s.write_all(format!("CONNECT n{i}.unlisted.test:443 HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
        s
    };
    // Questions the worker walks away from (once asked) still wait for the person.
    let walked_away: Vec<TcpStream> = (0..MAX_PENDING_ASKS).map(ask).collect();
    person.wait_asked(MAX_PENDING_ASKS);
    drop(walked_away);
    // Past them, each connection is refused without a question (here the worker reads its
    // answer; it would not have to).
    for i in MAX_PENDING_ASKS..MAX_PENDING_ASKS + 40 {
        let mut s = ask(i);
        let mut answer = String::new();
        s.read_to_string(&mut answer).expect("an answer without waiting for the person");
        assert!(answer.starts_with("HTTP/1.1 403") && answer.contains("still waiting for an answer"), "{answer}");
    }
    assert_eq!(person.asked(), MAX_PENDING_ASKS, "no further question was queued");
    // Once answered, the next destination is asked about again.
    person.answer_all();
    let deadline = std::time::Instant::now() + HANG;
    let answer = loop {
        // The waiting questions end just after the person answers them.
        let mut answer = String::new();
        ask(1000).read_to_string(&mut answer).expect("the answer");
        if !answer.contains("still waiting for an answer") {
            break answer;
        }
        assert!(std::time::Instant::now() < deadline, "the answered questions still count as waiting");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(answer.starts_with("HTTP/1.1 403") && answer.contains("the user denied"), "{answer}");
    assert_eq!(person.asked(), MAX_PENDING_ASKS + 1);
}
