//! A proxied worker's only way out is the egress proxy, on docker and on bwrap (the same
//! bodies): it finds the proxy through its environment; a direct TCP connection or UDP
//! datagram to a host server listening on every address gets nowhere; `network: false` and
//! `true` are unchanged; on docker the run's network and firewall rules go with the run,
//! also when workcell is killed (the watchdog, `workcell gc`), and no other container can
//! use the proxy's port. The docker bodies run on Podman's Docker-compatible service too
//! (module `podman`).
//!
//! The proxy here is a stand-in ([`TestProxy`]) that answers every connection with one
//! fixed HTTP response and records who connected: these tests are about the boundary the
//! backends build, not about the proxy's rules. It answers every peer, even outside the
//! run's network, so that what keeps others out is shown to be the firewall.

mod support;

#[path = "egress_backends/docker_only.rs"]
mod docker_only;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use workcell::backend::egress::{EgressProxy, Peers, PROXY_PORT};
use workcell::backend::{self, Finished, Selected, ServiceError};
use workcell::config::Project;
use workcell::plan::{LaunchPlan, Network, Overrides};

/// What the stand-in proxy answers.
const ANSWER: &str = "workcell-test-proxy";

/// The stand-in proxy: every listener it is given is served on a thread of its own.
#[derive(Clone, Default)]
pub struct TestProxy {
    state: Arc<(Mutex<Seen>, Condvar)>,
    /// Refuse to serve (an egress proxy that cannot start).
    pub fail: bool,
}

#[derive(Default)]
pub struct Seen {
    /// Each listener's address and whose connections it was told to serve.
    pub listeners: Vec<(SocketAddr, Peers)>,
    /// The peers that connected.
    pub peers: Vec<SocketAddr>,
}

impl EgressProxy for TestProxy {
    fn serve(&self, listener: TcpListener, peers: Peers) -> Result<(), ServiceError> {
        if self.fail {
            return Err("the test proxy refuses to serve".into());
        }
        let addr = listener.local_addr()?;
        let (lock, cv) = &*self.state;
        lock.lock().expect("lock").listeners.push((addr, peers));
        cv.notify_all();
        let state = self.state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                if let Ok(peer) = conn.peer_addr() {
                    state.0.lock().expect("lock").peers.push(peer);
                    state.1.notify_all();
                }
                // Answer at once (raw clients read it as it is), then drain the request until
                // the client is done, so that it never sees a reset; one thread per
                // connection, so that a slow client holds up no other.
                std::thread::spawn(move || {
                    let body = format!("{ANSWER}\n");
                    let _ = write!(conn, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                    let _ = conn.shutdown(std::net::Shutdown::Write);
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
                    let _ = std::io::copy(&mut (&mut conn).take(1 << 20), &mut std::io::sink());
                });
            }
        });
        Ok(())
    }
}

impl TestProxy {
    pub fn seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.state.0.lock().expect("lock"))
    }

    /// Waits until a listener is served (at most `limit`, to turn a hang into a failure).
    pub fn wait_listener(&self, limit: Duration) -> (SocketAddr, Peers) {
        let (lock, cv) = &*self.state;
        let guard = lock.lock().expect("lock");
        let (guard, _) = cv.wait_timeout_while(guard, limit, |s| s.listeners.is_empty()).expect("lock");
        *guard.listeners.first().expect("the backend served no listener in time")
    }
}

pub fn selected(backend: &str) -> Selected {
    match backend {
        "bwrap" => Selected::Bwrap,
        "docker" => Selected::Docker,
        other => panic!("unknown backend {other}"),
    }
}

/// A project with an `out` zone (rw), owned by the test worker.
struct Scene {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
        std::fs::create_dir_all(dir.join("out")).expect("mkdir");
        std::fs::write(
            dir.join("workcell.yaml"),
            "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
        )
        .expect("config");
        support::give_to_worker(&dir);
        Scene { _tmp: tmp, dir }
    }

    /// The plan of `command` with `network`; `image` names a docker image instead of `host`.
    pub fn plan(&self, command: &[&str], network: Network, image: Option<&str>) -> LaunchPlan {
        let project = Project::load(Some(&self.dir.join("workcell.yaml")), &self.dir).expect("project loads");
        let ov = Overrides {
            command: Some(command.iter().map(|s| s.to_string()).collect()),
            image: image.map(str::to_string),
            limits: workcell::config::Limits { timeout: Some(Duration::from_secs(120)), ..Default::default() },
            ..Overrides::default()
        };
        let mut plan = LaunchPlan::build(&project, None, &project.sandbox, &ov).expect("plan");
        plan.network = network;
        plan
    }
}

pub fn run(backend: &str, plan: &LaunchPlan, proxy: Option<&TestProxy>) -> Finished {
    let out = backend::run(
        selected(backend),
        plan,
        backend::Output::Capture,
        backend::Attached { egress: proxy.map(|p| p as &dyn EgressProxy), ..Default::default() },
    )
    .expect("the run starts");
    eprintln!("exit {}\nstdout: {}\nstderr: {}", out.exit_code, text(&out.stdout), text(&out.stderr));
    out
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A host server on every address (`0.0.0.0`, a free port) that accepts and closes, counting
/// connections, and a UDP socket beside it.
pub struct HostServer {
    pub tcp_port: u16,
    pub udp: UdpSocket,
    accepted: Arc<Mutex<Vec<SocketAddr>>>,
}

impl HostServer {
    pub fn start() -> HostServer {
        let listener = TcpListener::bind("0.0.0.0:0").expect("bind");
        let tcp_port = listener.local_addr().expect("addr").port();
        let udp = UdpSocket::bind("0.0.0.0:0").expect("bind udp");
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let seen = accepted.clone();
        std::thread::spawn(move || {
            for (c, peer) in std::iter::from_fn(|| Some(listener.accept())).flatten() {
                seen.lock().expect("lock").push(peer);
                drop(c);
            }
        });
        HostServer { tcp_port, udp, accepted }
    }

    pub fn udp_port(&self) -> u16 {
        self.udp.local_addr().expect("addr").port()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> Vec<SocketAddr> {
        self.accepted.lock().expect("lock").clone()
    }

    /// Datagrams waiting (read without blocking).
    pub fn datagrams(&self) -> Vec<(Vec<u8>, SocketAddr)> {
        self.udp.set_nonblocking(true).expect("nonblocking");
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok((n, from)) = self.udp.recv_from(&mut buf) {
            out.push((buf[..n].to_vec(), from));
        }
        out
    }
}

/// docker0's address on this host, if there is a docker0 (a host address a container could
/// try to reach through its gateway).
pub fn docker0_address() -> Option<IpAddr> {
    let out = std::process::Command::new("ip").args(["-4", "-o", "addr", "show", "dev", "docker0"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let words: Vec<&str> = text.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "inet")?;
    words.get(at + 1)?.split('/').next()?.parse().ok()
}

/// The worker's probe (Python, `image: host`): prints its proxy variables, fetches a URL
/// through them with urllib, then for each address in argv\[1\] (`GW` standing for the
/// proxy's own host) tries a TCP connection to port argv\[2\] and sends a UDP datagram to
/// port argv\[3\], and last connects to the proxy itself. That connection goes through the
/// same path as the datagrams before it, so once the proxy has seen it the datagrams have
/// been delivered or dropped.
pub const PROBE: &str = r#"
import os, socket, sys, urllib.request
for k in ("HTTP_PROXY", "https_proxy", "ALL_PROXY", "NO_PROXY"):
    print("ENV", k, os.environ.get(k))
print("FETCHED", urllib.request.urlopen("http://workcell-test.invalid/", timeout=60).read().decode().strip())
proxy_host, proxy_port = os.environ["HTTP_PROXY"][len("http://"):].rsplit(":", 1)
targets = [proxy_host if a == "GW" else a for a in sys.argv[1].split(",") if a]
for a in targets:
    try:
        socket.create_connection((a, int(sys.argv[2])), timeout=20).close()
        print("TCP-CONNECTED", a)
    except OSError as e:
        print("TCP-FAILED", a, e)
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"udp-escape", (a, int(sys.argv[3])))
        print("UDP-SENT", a)
    except OSError as e:
        print("UDP-FAILED", a, e)
s = socket.create_connection((proxy_host, int(proxy_port)), timeout=60)
print("SYNC", s.recv(200).decode().split("\r\n")[0])
"#;

/// The probe's command line for `targets` against `server`.
pub fn probe(targets: &[String], server: &HostServer) -> Vec<String> {
    vec!["python3".into(), "-c".into(), PROBE.into(), targets.join(","), server.tcp_port.to_string(), server.udp_port().to_string()]
}

mod body {
    use super::*;

    /// The worker's proxy variables name its side of the listener, and a client that honours
    /// them reaches the proxy.
    pub fn reaches_the_proxy_through_its_env(backend: &str) {
        let scene = Scene::new();
        let server = HostServer::start();
        let proxy = TestProxy::default();
        let cmd = probe(&[], &server);
        let plan = scene.plan(&cmd.iter().map(String::as_str).collect::<Vec<_>>(), Network::Proxied, None);
        let out = run(backend, &plan, Some(&proxy));
        let stdout = text(&out.stdout);
        assert_eq!(out.exit_code, 0, "{stdout}");
        assert!(stdout.contains(&format!("FETCHED {ANSWER}")), "urllib did not reach the proxy: {stdout}");
        let (addr, peers) = proxy.seen(|s| s.listeners[0]);
        // bwrap: the fixed port on the worker's own loopback; docker: the listener itself.
        let here = match backend {
            "bwrap" => SocketAddr::from(([127, 0, 0, 1], PROXY_PORT)),
            _ => addr,
        };
        if backend == "bwrap" {
            assert_eq!(addr.port(), PROXY_PORT);
        }
        for (k, scheme) in [("HTTP_PROXY", "http"), ("https_proxy", "http"), ("ALL_PROXY", "socks5h")] {
            assert!(stdout.contains(&format!("ENV {k} {scheme}://{here}\n")), "{k}: {stdout}");
        }
        assert!(stdout.contains("ENV NO_PROXY localhost,127.0.0.1,::1\n"), "{stdout}");
        let peer = proxy.seen(|s| s.peers.first().copied()).expect("the proxy saw the worker");
        match (backend, peers) {
            ("bwrap", Peers::Any) => assert_eq!(peer.ip().to_string(), "127.0.0.1"),
            ("docker", Peers::Within { network, prefix }) => assert!(within(peer.ip(), network, prefix), "{peer} outside {network}/{prefix}"),
            other => panic!("unexpected peers {other:?}"),
        }
        docker_only::assert_run_cleaned(backend, &plan);
    }

    /// TCP and UDP straight to a host server on every address (through the worker's
    /// loopback, the gateway, docker0's address) get nowhere; only the proxy answers.
    pub fn direct_connections_get_nowhere(backend: &str) {
        let scene = Scene::new();
        let server = HostServer::start();
        let proxy = TestProxy::default();
        let mut targets = vec!["127.0.0.1".to_string(), "GW".to_string()];
        targets.extend(docker0_address().map(|a| a.to_string()));
        let cmd = probe(&targets, &server);
        let plan = scene.plan(&cmd.iter().map(String::as_str).collect::<Vec<_>>(), Network::Proxied, None);
        let out = run(backend, &plan, Some(&proxy));
        let stdout = text(&out.stdout);
        assert_eq!(out.exit_code, 0, "{stdout}");
        assert!(stdout.contains("SYNC HTTP/1.0 200 OK"), "the worker did not reach the proxy at the end: {stdout}");
        assert!(!stdout.contains("TCP-CONNECTED"), "a direct connection got through: {stdout}");
        assert_eq!(stdout.matches("TCP-FAILED").count(), targets.len(), "{stdout}");
        assert_eq!(server.accepted(), vec![], "the host server accepted a direct connection");
        assert_eq!(server.datagrams(), vec![], "a datagram reached the host");
        docker_only::assert_run_cleaned(backend, &plan);
    }

    /// Without a proxied network nothing changes: no proxy variables, no listener, and with
    /// `network: false` the host server is out of reach.
    pub fn off_and_open_unchanged(backend: &str) {
        let scene = Scene::new();
        let server = HostServer::start();
        let script = format!(
            "import os, socket\nprint('PROXYVARS', sorted(k for k in os.environ if k.lower().endswith('_proxy')))\n\
             try:\n    socket.create_connection(('127.0.0.1', {}), timeout=20).close(); print('CONNECTED')\nexcept OSError as e:\n    print('FAILED', e)\n",
            server.tcp_port
        );
        for network in [Network::Off, Network::Open] {
            let proxy = TestProxy::default();
            let plan = scene.plan(&["python3", "-c", &script], network, None);
            let out = run(backend, &plan, Some(&proxy));
            let stdout = text(&out.stdout);
            assert_eq!(out.exit_code, 0, "{stdout}");
            assert!(stdout.contains("PROXYVARS []"), "{network:?}: {stdout}");
            assert!(proxy.seen(|s| s.listeners.is_empty()), "{network:?}: a proxy was served");
            if network == Network::Off {
                assert!(stdout.contains("FAILED"), "network off reached the host: {stdout}");
            }
        }
        // With the host's network (bwrap shares it), its loopback server is reached.
        if backend == "bwrap" {
            assert!(!server.accepted().is_empty(), "network: true lost the host's loopback under bwrap");
        }
        assert!(server.accepted().iter().all(|p| p.ip().is_loopback()), "{:?}", server.accepted());
    }

    /// A proxied plan never runs without its proxy, nor on a proxy that cannot start.
    pub fn no_proxy_no_run(backend: &str) {
        let scene = Scene::new();
        let plan = scene.plan(&["sh", "-c", "touch /out/ran"], Network::Proxied, None);
        let err = backend::run(selected(backend), &plan, backend::Output::Capture, backend::Attached { egress: None, ..Default::default() })
            .expect_err("a proxied plan without a proxy must not run");
        assert!(matches!(err, backend::BackendError::EgressMissing), "{err}");
        let failing = TestProxy { fail: true, ..TestProxy::default() };
        let err = backend::run(selected(backend), &plan, backend::Output::Capture, backend::Attached { egress: Some(&failing), ..Default::default() })
            .expect_err("a proxy that cannot start must stop the run");
        assert!(err.to_string().contains("the test proxy refuses to serve"), "{err}");
        assert!(!scene.dir.join("out/ran").exists(), "the worker ran");
        docker_only::assert_run_cleaned(backend, &plan);
    }
}

/// Whether `ip` lies in `network/prefix`.
pub fn within(ip: IpAddr, network: IpAddr, prefix: u8) -> bool {
    match (ip, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix)) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        _ => false,
    }
}

/// Reads what a TCP server sends on connect (at most 200 bytes).
pub fn read_greeting(addr: SocketAddr) -> std::io::Result<String> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(20))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut buf = Vec::new();
    s.take(200).read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Seatbelt and no isolation cannot confine a worker to the proxy: a proxied plan is refused
/// before anything starts.
#[test]
fn unsupported_backends_refuse_a_proxied_plan() {
    let scene = Scene::new();
    let plan = scene.plan(&["sh", "-c", "touch /out/ran"], Network::Proxied, None);
    let proxy = TestProxy::default();
    for selected in [Selected::Seatbelt, Selected::None] {
        let err =
            backend::run(selected, &plan, backend::Output::Capture, backend::Attached { egress: Some(&proxy), ..Default::default() }).expect_err("refused");
        assert!(matches!(err, backend::BackendError::EgressUnsupported { .. }), "{err}");
        assert!(err.to_string().contains("--backend docker or --backend bwrap"), "{err}");
    }
    assert!(!scene.dir.join("out/ran").exists(), "the worker ran");
    assert!(proxy.seen(|s| s.listeners.is_empty()));
}

macro_rules! backend_suite {
    ($module:ident, $backend:literal, [$($test:ident),* $(,)?], { $($extra:item)* }) => {
        mod $module {
            #[allow(unused_imports)]
            use super::*;
            const BACKEND: &str = $backend;

            $(
                #[test]
                fn $test() {
                    if support::backend_ready(BACKEND) {
                        body::$test(BACKEND);
                    }
                }
            )*

            $($extra)*
        }
    };
}

backend_suite!(bwrap, "bwrap", [reaches_the_proxy_through_its_env, direct_connections_get_nowhere, off_and_open_unchanged, no_proxy_no_run], {
    /// The same bodies with workcell as a normal user (this test binary again, as the test
    /// worker's uid): the helper then enters a user namespace it owns instead of one it has
    /// every capability over as root.
    #[test]
    fn as_a_normal_user() {
        use std::os::unix::process::CommandExt;
        if !rustix::process::geteuid().is_root() || !support::backend_ready(BACKEND) {
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["bwrap::", "--skip", "as_a_normal_user", "--test-threads", "1"])
            .uid(support::TEST_WORKER_UID)
            .gid(support::TEST_WORKER_UID)
            .env("TMPDIR", "/tmp")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("the tests as a normal user");
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        eprintln!("{said}");
        assert!(out.status.success(), "as uid {}: {said}", support::TEST_WORKER_UID);
        assert!(said.contains("4 passed"), "{said}");
    }
});

backend_suite!(docker, "docker", [reaches_the_proxy_through_its_env, direct_connections_get_nowhere, off_and_open_unchanged, no_proxy_no_run], {
    #[test]
    fn named_image_reaches_only_the_proxy() {
        if support::backend_ready(BACKEND) {
            docker_only::named_image_reaches_only_the_proxy();
        }
    }

    #[test]
    fn other_containers_cannot_use_the_proxy_port() {
        if support::backend_ready(BACKEND) {
            docker_only::other_containers_cannot_use_the_proxy_port();
        }
    }

    #[test]
    fn killed_run_is_cleaned_by_the_watchdog_and_by_gc() {
        if support::backend_ready(BACKEND) {
            docker_only::killed_run_is_cleaned_by_the_watchdog_and_by_gc();
        }
    }

    /// Not a test on its own: the run that `killed_run_is_cleaned_by_the_watchdog_and_by_gc`
    /// starts in a process of its own and kills. Does nothing unless asked to.
    #[test]
    fn victim() {
        docker_only::victim();
    }
});

/// The docker bodies against Podman's Docker-compatible service: `support::backend_ready`
/// points DOCKER_HOST (this process's, inherited by the `workcell` and `docker` commands it
/// starts, and by the victim) at `WORKCELL_PODMAN_SOCKET`; the backend is still docker.
mod podman {
    use super::*;

    macro_rules! on_podman {
        ($($test:ident => $call:expr),* $(,)?) => {
            $(
                #[test]
                fn $test() {
                    if support::backend_ready("podman") {
                        $call;
                    }
                }
            )*
        };
    }

    on_podman!(
        reaches_the_proxy_through_its_env => body::reaches_the_proxy_through_its_env("docker"),
        direct_connections_get_nowhere => body::direct_connections_get_nowhere("docker"),
        off_and_open_unchanged => body::off_and_open_unchanged("docker"),
        no_proxy_no_run => body::no_proxy_no_run("docker"),
        named_image_reaches_only_the_proxy => docker_only::named_image_reaches_only_the_proxy(),
        other_containers_cannot_use_the_proxy_port => docker_only::other_containers_cannot_use_the_proxy_port(),
        killed_run_is_cleaned_by_the_watchdog_and_by_gc => docker_only::killed_run_is_cleaned_by_the_watchdog_and_by_gc(),
    );
}
