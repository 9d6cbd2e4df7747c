//! A name the rules allow whose DNS answer is an address of the host itself does not lead to
//! the host: on bwrap (docker refuses a workcell in a mount namespace of its own, see
//! `docker_from_a_private_mount_namespace_is_refused_before_it_starts`), an allowed wildcard name resolving to
//! an address of one of the host's interfaces (not loopback, not in a special range) is
//! refused with the way to allow it, and is connected to once `hosts:` or an allowed network
//! names that address.
//!
//! The address is a /32 on an interface (a bridge without ports) this test makes in the host's network namespace
//! and removes however it ends (the docker run's network, and so the proxy's listener, live
//! in that namespace). The name resolves through the system resolver of `workcell` alone:
//! it runs in a mount namespace of its own where a hosts file of the test's is mounted over
//! `/etc/hosts`; the host's own `/etc/hosts` and DNS are untouched. The test server listens
//! on every address (`0.0.0.0`), like a host service a worker should not reach.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use support::servers::web_server;

/// The worker's Python: fetches `sys.argv[1]` through the proxy from its environment and
/// prints the status and the body's first line.
const FETCH: &str = r#"import os, sys, urllib.request, urllib.error
for k in ("no_proxy", "NO_PROXY"):
    os.environ.pop(k, None)
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=30)
    print("got %d %s" % (r.status, r.read().decode()))
except urllib.error.HTTPError as e:
    print("got %d %s" % (e.code, e.read().decode().splitlines()[0]))
except Exception as e:
    print("got ERR %s" % type(e).__name__)
"#;

/// An interface of the host holding one address (a bridge without ports: this kernel may
/// lack the dummy type), removed when dropped.
struct TestInterface {
    name: &'static str,
}

impl TestInterface {
    fn add(name: &'static str, address: &str) -> TestInterface {
        let _ = StdCommand::new("ip").args(["link", "del", name]).output();
        let dummy = TestInterface { name };
        for args in [vec!["link", "add", name, "type", "bridge"], vec!["addr", "add", &format!("{address}/32"), "dev", name], vec!["link", "set", name, "up"]] {
            let out = StdCommand::new("ip").args(&args).output().expect("ip");
            assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        dummy
    }
}

impl Drop for TestInterface {
    fn drop(&mut self) {
        let _ = StdCommand::new("ip").args(["link", "del", self.name]).output();
    }
}

/// A project of `backend` whose `network:` is `rules`.
fn project(backend: &str, rules: &str) -> (tempfile::TempDir, PathBuf) {
    let p = support::Proj::new();
    let config = format!(
        "sandbox:\n  zones:\n    out: {{path: ./out, mode: rw}}\n  network:\n{rules}defaults:\n  image: host\n  backend: {backend}\n  limits: {{timeout: 2m}}\n"
    );
    support::write_project(&p.dir, &config, &[]);
    (p.tmp, p.dir)
}

/// `workcell run` in `dir`, resolving with `hosts` as its `/etc/hosts`, fetching `url` in
/// the worker; the worker's line and everything said.
fn fetch(dir: &Path, hosts: &Path, url: &str) -> (String, String) {
    let workcell = assert_cmd::cargo::cargo_bin("workcell");
    let out = StdCommand::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c", "mount --bind \"$0\" /etc/hosts && exec \"$@\""])
        .arg(hosts)
        .arg(workcell)
        .args(["run", "--", "python3", "-c", FETCH, url])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .output()
        .expect("unshare workcell run");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let said = format!("status {:?}\n{stdout}\n{}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().find(|l| l.starts_with("got ")).unwrap_or_else(|| panic!("the worker printed nothing: {said}")).to_string();
    (line, said)
}

mod body {
    use super::*;

    pub fn host_address_is_refused(backend: &str, interface: &'static str, address: &str) {
        let _interface = TestInterface::add(interface, address);
        let web = web_server("0.0.0.0");
        let tmp = tempfile::tempdir().expect("tempdir");
        let hosts = tmp.path().join("hosts");
        std::fs::write(&hosts, format!("127.0.0.1 localhost\n{address} api.wild.test\n")).expect("hosts file");
        let url = format!("http://api.wild.test:{}/x", web.port());
        let allow = format!("    allow: [\"*.wild.test:{}\"]\n", web.port());

        // Only the wildcard names it: the answer is the host's own, and refused.
        let (_t, dir) = project(backend, &allow);
        let (line, said) = fetch(&dir, &hosts, &url);
        let expected = format!("{address} is an address of this host (interface {interface}); name it in network.hosts or allow its network to reach it");
        assert!(line.starts_with("got 403 workcell egress proxy refused"), "{said}");
        assert!(line.contains(&expected), "the refusal names the address, its interface and the fix: {said}");
        let log = std::fs::read_to_string(dir.join(".workcell/audit.jsonl")).expect("audit log");
        assert!(log.contains(&expected), "the audit line says why: {log}");

        // Named in hosts: it is reached.
        let (_t, dir) = project(backend, &format!("{allow}    hosts: {{api.wild.test: {address}}}\n"));
        let (line, said) = fetch(&dir, &hosts, &url);
        assert!(line.starts_with("got 200 hello /x"), "an address hosts: names is reached: {said}");

        // Its network allowed: the DNS answer is reached.
        let (_t, dir) = project(backend, &format!("    allow: [\"*.wild.test:{p}\", \"{address}/32:{p}\"]\n", p = web.port()));
        let (line, said) = fetch(&dir, &hosts, &url);
        assert!(line.starts_with("got 200 hello /x"), "an address an allowed network covers is reached: {said}");
    }
}

// The addresses: public (198.20.0.0/24 lies just past the benchmarking range), so that only
// the check of the host's own addresses can refuse them; one per test (198.20.0.1-3), as the tests run
// in parallel. Held by the host only while a test runs.
#[test]
fn bwrap_host_address_is_refused() {
    if support::backend_ready("bwrap") {
        body::host_address_is_refused("bwrap", "wctest-bw", "198.20.0.1");
    }
}

/// Docker cannot run this body: a workcell in a mount namespace of its own (as here, for its
/// hosts file) cannot prove that the engine sees its files (its staging binds of the zones
/// are private to that namespace, where the engine would have bound empty directories), so
/// the engine counts as remote, and a plan with network rules or `image: host` is refused
/// before anything starts. The proxy's judgement is the same on every backend (the bwrap
/// instance above); docker's side of egress is `egress_backends`.
#[test]
fn docker_from_a_private_mount_namespace_is_refused_before_it_starts() {
    if !support::backend_ready("docker") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let hosts = tmp.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").expect("hosts file");
    let (_t, dir) = project("docker", "    allow: [\"*.wild.test:80\"]\n");
    let out = StdCommand::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c", "mount --bind \"$0\" /etc/hosts && exec \"$@\""])
        .arg(&hosts)
        .arg(assert_cmd::cargo::cargo_bin("workcell"))
        .args(["run", "--", "python3", "-c", "print('started')"])
        .current_dir(&dir)
        .env_remove("RUST_LOG")
        .env_remove("DOCKER_HOST")
        .output()
        .expect("unshare workcell run");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "stdout: {stdout}\nstderr: {stderr}");
    assert!(!stdout.contains("started"), "the worker ran: {stdout}");
    assert!(stderr.contains("not proven to share this host's files"), "{stderr}");
    assert!(support::containers_with_label(&format!("dev.workcell.project={}", dir.display())).is_empty());
}

/// A person who approves every destination.
struct Approves;

impl workcell::egress::Consent for Approves {
    fn connect(&self, _destination: &str) -> Result<(), workcell::egress::ConsentDenied> {
        Ok(())
    }
}

/// Literals alike: an address of the host that a person approved (`ask: true`, no entry names
/// it) is refused too, on the proxy alone (on loopback); a literal an allow entry covers is
/// reached.
#[test]
fn host_address_literal_is_refused_even_when_approved() {
    use std::io::{Read, Write};
    use std::sync::Arc;
    use workcell::backend::egress::{EgressProxy, Peers};

    let address = "198.20.0.3";
    let _interface = TestInterface::add("wctest-px", address);
    let web = web_server("0.0.0.0");
    let get = |rules: &str| {
        let tmp = tempfile::tempdir().expect("tempdir");
        let yaml = format!("sandbox:\n  network:\n{rules}");
        let p = workcell::config::Project::from_text(&yaml, &tmp.path().join("workcell.yaml"), tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        let policy = p.sandbox.network_access().policy().expect("rules").clone();
        let proxy = workcell::egress::Proxy::start(policy, None, Some(Arc::new(Approves))).expect("the proxy starts");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let at = listener.local_addr().expect("addr");
        proxy.serve(listener, Peers::Any).expect("the proxy serves");
        let mut s = std::net::TcpStream::connect(at).expect("connect to the proxy");
        s.set_read_timeout(Some(std::time::Duration::from_secs(60))).expect("timeout");
        let target = format!("{address}:{}", web.port());
        write!(s, "GET http://{target}/lit HTTP/1.1\r\nHost: {target}\r\n\r\n").expect("send");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    let approved = get("    allow: []\n    ask: true\n");
    assert!(approved.starts_with("HTTP/1.1 403"), "{approved}");
    assert!(approved.contains(&format!("{address} is an address of this host (interface wctest-px)")), "{approved}");
    let allowed = get(&format!("    allow: [\"{address}:{}\"]\n", web.port()));
    assert!(allowed.starts_with("HTTP/1.1 200") && allowed.contains("hello /lit"), "an allowed literal is reached: {allowed}");
}
