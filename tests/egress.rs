//! Network rules end to end: `workcell run` of a project with `network: {allow, deny, hosts}`
//! on docker and on bwrap (the same bodies), the worker an ordinary Python client. Test
//! servers listen on 127.0.0.2 of the host, reached through names of `hosts:`; the proxy runs
//! on the host, so only it can reach them. Traffic stays on loopback and on this test's own
//! containers (the compose topology).

mod support;

use support::servers::{echo_server, web_server};

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::Command as StdCommand;

/// A project whose worker may reach `good.test` (the web server) and `echo.test` (the echo
/// server) and nothing else; `bad.test` points at the web server too but is denied.
fn project(backend: &str, web: SocketAddr, echo: SocketAddr) -> (tempfile::TempDir, std::path::PathBuf) {
    let p = support::Proj::new();
    let config = format!(
        "sandbox:\n  zones:\n    out: {{path: ./out, mode: rw}}\n  network:\n    allow: [\"good.test:{w}\", \"*.good.test:{w}\", \"echo.test:{e}\", \"localhost:{w}\"]\n    deny: [\"bad.good.test\"]\n    hosts: {{good.test: 127.0.0.2, bad.good.test: 127.0.0.2, x.good.test: 127.0.0.2, other.test: 127.0.0.2, echo.test: 127.0.0.2}}\ndefaults:\n  image: host\n  backend: {backend}\n  limits: {{timeout: 2m}}\n",
        w = web.port(),
        e = echo.port()
    );
    support::write_project(&p.dir, &config, &[]);
    (p.tmp, p.dir)
}

/// The start of every worker script here: no proxy bypass (loopback names must go through
/// the proxy too, to be judged) and `get(url)`, which prints a status and the body's first line.
macro_rules! python_prelude {
    () => {
        r#"import os, socket, sys, urllib.request, urllib.error
for k in ("no_proxy", "NO_PROXY"):
    os.environ.pop(k, None)
def get(url):
    try:
        r = urllib.request.urlopen(url, timeout=30)
        return "%d %s" % (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "%d %s" % (e.code, e.read().decode().splitlines()[0])
    except Exception as e:
        return "ERR %s" % type(e).__name__
"#
    };
}

/// The worker's Python: one line of output per step, the proxy from its environment.
const CLIENT: &str = concat!(
    python_prelude!(),
    r#"web, echo = int(sys.argv[1]), int(sys.argv[2])
for name, url in [("allowed", "http://good.test:%d/a" % web), ("wildcard", "http://x.good.test:%d/b" % web),
                  ("unlisted", "http://other.test:%d/" % web), ("denied", "http://bad.good.test:%d/" % web),
                  ("port", "http://good.test:%d/" % echo), ("literal", "http://127.0.0.2:%d/" % web),
                  ("loopback", "http://localhost:%d/" % web)]:
    print(name, get(url))
proxy = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/")
host, port = proxy.rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=30)
s.sendall(b"CONNECT echo.test:%d HTTP/1.1\r\nHost: echo.test:%d\r\n\r\n" % (echo, echo))
f = s.makefile("rwb")
status = f.readline().decode().strip()
while f.readline() not in (b"\r\n", b""):
    pass
f.write(b"ping\n"); f.flush()
print("connect", status.split(" ")[1], f.readline().decode().strip())
s.close()
s = socket.create_connection((host, int(port)), timeout=30)
s.sendall(b"\x05\x01\x00")
assert s.recv(2) == b"\x05\x00"
name = b"echo.test"
s.sendall(b"\x05\x01\x00\x03" + bytes([len(name)]) + name + echo.to_bytes(2, "big"))
reply = s.recv(10)
s.sendall(b"socks\n")
print("socks", reply[1], s.makefile("rb").readline().decode().strip())
try:
    socket.create_connection(("127.0.0.2", web), timeout=5)
    print("direct CONNECTED")
except OSError as e:
    print("direct refused")
sys.exit(7)
"#
);

/// The `egress` lines of the project's audit log.
fn egress_lines(dir: &Path) -> Vec<serde_json::Value> {
    let log = std::fs::read_to_string(dir.join(".workcell/audit.jsonl")).expect("audit log");
    log.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).filter(|v| v["event"] == "egress").collect()
}

mod body {
    use super::*;

    /// Allowed names are fetched through the proxy (forward, CONNECT, SOCKS5); every other
    /// destination gets an explained 403 and an audit line; a direct connection gets nowhere;
    /// the run's status is the worker's.
    pub fn rules_hold(backend: &str) {
        let (web, echo) = (web_server("127.0.0.2"), echo_server("127.0.0.2"));
        let (_tmp, dir) = project(backend, web, echo);
        let out = support::workcell_in(&dir)
            .args(["run", "--", "python3", "-c", CLIENT, &web.port().to_string(), &echo.port().to_string()])
            .output()
            .expect("workcell run");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let said = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(7), "the worker's own status: {said}");
        let line = |name: &str| stdout.lines().find(|l| l.starts_with(&format!("{name} "))).unwrap_or_else(|| panic!("no {name} line: {said}")).to_string();
        assert!(line("allowed").starts_with("allowed 200 hello /a "), "{said}");
        assert!(line("wildcard").starts_with("wildcard 200 hello /b "), "{said}");
        for refused in ["unlisted", "denied", "port", "literal", "loopback"] {
            let l = line(refused);
            assert!(l.starts_with(&format!("{refused} 403 workcell egress proxy refused")), "{refused} must be an explained 403: {l}\n{said}");
        }
        assert_eq!(line("connect"), "connect 200 pong:ping", "{said}");
        assert_eq!(line("socks"), "socks 0 pong:socks", "{said}");
        assert_eq!(line("direct"), "direct refused", "{said}");

        let lines = egress_lines(&dir);
        let refused = lines.iter().filter(|v| v["verdict"] == "refused").count();
        let allowed = lines.iter().filter(|v| v["verdict"] == "allowed").count();
        assert!(refused >= 5, "one audit line per refusal: {lines:#?}");
        assert!(allowed >= 4, "one audit line per allowed connection: {lines:#?}");
    }
}

/// The child's Python: the name both may reach, then the one only its caller may reach.
const CHILD: &str = concat!(
    python_prelude!(),
    r#"web = int(sys.argv[1])
print("child-allowed", get("http://good.test:%d/child" % web))
print("child-narrowed", get("http://other.test:%d/child" % web))
"#
);

/// The caller's script: it reaches `other.test` itself, calls the child through the broker,
/// then (the child's run and its network torn down) still reaches only the proxy: a direct
/// connection to a host port (`direct`, listening on every address) gets nowhere.
fn caller_script(web: u16, direct: u16) -> String {
    let after = format!(
        r#"import os, socket, urllib.request
[os.environ.pop(k, None) for k in ("no_proxy", "NO_PROXY")]
print("caller-after", urllib.request.urlopen("http://other.test:{web}/after", timeout=30).read().decode())
host = os.environ["HTTP_PROXY"].split("//")[1].rsplit(":", 1)[0]
try:
    socket.create_connection((host, {direct}), timeout=10).close()
    print("caller-direct CONNECTED")
except OSError:
    print("caller-direct refused")"#
    );
    format!(
        r#"python3 -c 'import os, urllib.request; [os.environ.pop(k, None) for k in ("no_proxy", "NO_PROXY")]; print("caller-other", urllib.request.urlopen("http://other.test:{web}/caller", timeout=30).read().decode())'; curl -s --max-time 120 --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json' --data-binary '{{"name":"child"}}' http://workcell/v1/tools/call_worker; echo; python3 -c '{after}'"#
    )
}

mod child_body {
    use super::*;

    /// A child worker called through the broker, whose own rules are narrower than its
    /// caller's, is held to them end to end: it fetches its allowed name, and gets the
    /// proxy's 403 for a name its caller reaches but it may not.
    pub fn child_is_confined(backend: &str) {
        let web = web_server("127.0.0.2");
        // A host server on every address: on docker, the gateway would reach it were the
        // run's firewall rules gone (say, removed with the child's).
        let direct = TcpListener::bind("0.0.0.0:0").expect("bind a host port");
        direct.set_nonblocking(true).unwrap();
        let p = support::Proj::new();
        let config = format!(
            "sandbox:\n  network:\n    allow: [\"good.test:{w}\", \"other.test:{w}\"]\n    hosts: {{good.test: 127.0.0.2, other.test: 127.0.0.2}}\ndefaults:\n  image: host\n  backend: {backend}\n  limits: {{timeout: 2m}}\n",
            w = web.port()
        );
        let command = |argv: &[&str]| serde_json::to_string(argv).expect("json");
        let caller = format!(
            "---\nworkers: [child]\ncommand: {}\n---\nCalls the child.\n",
            command(&["sh", "-c", &caller_script(web.port(), direct.local_addr().unwrap().port())])
        );
        let child = format!(
            "---\nnetwork:\n  allow: [\"good.test:{w}\"]\ncommand: {}\n---\nFetches.\n",
            command(&["python3", "-c", CHILD, &web.port().to_string()]),
            w = web.port()
        );
        support::write_project(&p.dir, &config, &[("caller", &caller), ("child", &child)]);
        let out = support::workcell_in(&p.dir).args(["run", "--approve-all", "caller"]).output().expect("workcell run");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let said = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{said}");
        assert!(stdout.contains("caller-other hello /caller"), "the caller itself reaches other.test: {said}");
        assert!(stdout.contains("child-allowed 200 hello /child"), "the child reaches its allowed name: {said}");
        assert!(
            stdout.contains(&format!("child-narrowed 403 workcell egress proxy refused other.test:{}", web.port())),
            "the child is refused what only its caller may reach: {said}"
        );
        assert!(
            stdout.contains(&format!("workcell: egress refused 1× http://other.test:{} (not in allow", web.port())),
            "the child's refusal follows its stderr, which its caller reads: {said}"
        );
        assert!(stdout.contains("caller-after hello /after"), "the caller still reaches other.test after the child: {said}");
        assert!(stdout.contains("caller-direct refused"), "the caller is still confined after the child's run ended: {said}");
        assert!(direct.accept().is_err(), "nothing reached the host port directly: {said}");
        let refused: Vec<_> = egress_lines(&p.dir).into_iter().filter(|v| v["verdict"] == "refused").collect();
        assert!(refused.iter().any(|v| v["destination"].as_str().is_some_and(|d| d.starts_with("other.test:"))), "{refused:#?}");
    }
}

macro_rules! backend_suite {
    ($module:ident, $backend:literal) => {
        mod $module {
            use super::*;
            #[test]
            fn rules_hold() {
                if support::backend_ready($backend) {
                    body::rules_hold($backend);
                }
            }
            #[test]
            fn child_is_confined() {
                if support::backend_ready($backend) {
                    child_body::child_is_confined($backend);
                }
            }
            #[test]
            fn compose_topology() {
                if support::backend_ready($backend) {
                    compose::topology($backend);
                }
            }
        }
    };
}

backend_suite!(bwrap, "bwrap");
backend_suite!(docker, "docker");

/// The repository's `docker-compose.yml` (the demo in docs/network.md, which marks its block `tested-by=tests/egress.rs`) and `examples/egress`: the
/// allowed server is fetched, the refused one gets the proxy's 403.
mod compose {
    use super::*;

    /// `docker-compose down` when the test ends, however it ends.
    struct Up {
        project: String,
        env: Vec<(String, String)>,
    }

    impl Drop for Up {
        fn drop(&mut self) {
            let _ = compose(&self.project, &self.env, &["down", "--remove-orphans"]);
        }
    }

    fn compose(project: &str, env: &[(String, String)], args: &[&str]) -> std::process::Output {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("docker-compose.yml");
        StdCommand::new("docker-compose")
            .arg("-f")
            .arg(file)
            .args(["-p", project])
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::null())
            .output()
            .expect("docker-compose (apt-get install docker-compose)")
    }

    pub fn topology(backend: &str) {
        let (allowed, refused) = (support::compose::free_port(), support::compose::free_port());
        let env = vec![("WORKCELL_DEMO_ALLOWED_PORT".to_string(), allowed.to_string()), ("WORKCELL_DEMO_REFUSED_PORT".to_string(), refused.to_string())];
        let up = Up { project: format!("wctest{}{}", backend, support::unique()), env };
        let out = compose(&up.project, &up.env, &["up", "-d", "--build"]);
        assert!(out.status.success(), "docker-compose up: {}", String::from_utf8_lossy(&out.stderr));
        support::compose::wait_until_serving(allowed);
        support::compose::wait_until_serving(refused);

        // The example project, with the ports this test's servers got.
        let tmp = tempfile::tempdir().unwrap();
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/egress");
        let config = std::fs::read_to_string(example.join("workcell.yaml")).unwrap().replace("18080", &allowed.to_string());
        let worker = std::fs::read_to_string(example.join("workers/fetch.worker"))
            .unwrap()
            .replace("18080", &allowed.to_string())
            .replace("18081", &refused.to_string());
        support::write_project(tmp.path(), &config, &[("fetch", &worker)]);
        support::give_to_worker(tmp.path());
        let out = support::workcell_in(tmp.path()).args(["run", "--backend", backend, "fetch"]).output().expect("workcell run");
        let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{said}");
        assert!(said.contains(&format!("http://allowed.test:{allowed}/ -> allowed: you reached the allowed server")), "{said}");
        assert!(said.contains(&format!("http://refused.test:{refused}/ -> 403 workcell egress proxy refused refused.test:{refused}")), "{said}");
        assert!(!said.contains("you should never see this"), "{said}");

        // The hint names the entry that allows that port; following it lets the fetch through.
        let entry = format!("refused.test:{refused}");
        assert!(said.contains(&format!("add \"{entry}\" to network.allow")), "{said}");
        let allowed_entry = format!("\"allowed.test:{allowed}\"");
        let widened = config.replace(&allowed_entry, &format!("{allowed_entry}, \"{entry}\""));
        assert_ne!(widened, config);
        std::fs::write(tmp.path().join("workcell.yaml"), widened).unwrap();
        let out = support::workcell_in(tmp.path()).args(["run", "--backend", backend, "fetch"]).output().expect("workcell run");
        let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{said}");
        assert!(said.contains(&format!("http://refused.test:{refused}/ -> refused: you should never see this")), "{said}");
        assert!(!said.contains("egress refused"), "{said}");
    }
}
