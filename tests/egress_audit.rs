//! The egress audit stays bounded and refusals are told to a person, on docker and bwrap
//! (the same bodies). The worker only talks to the run's proxy: every name it asks for is
//! refused before any lookup, so no traffic leaves the host's loopback.

mod support;

use std::path::Path;
use std::time::Duration;

/// The most the audit log may grow in one run, whatever the worker does: 2,000 connection
/// lines and 1,000 summary lines of at most about 1 KiB each (docs/network.md).
const AUDIT_BOUND: u64 = 3 * 1024 * 1024;

/// A project whose network allows one name only, which the worker never asks for.
fn project(backend: &str) -> support::Proj {
    let p = support::Proj::new();
    let config = format!(
        "sandbox:\n  network:\n    allow: [\"good.test:80\"]\n    deny: [\"*.denied.test\"]\ndefaults:\n  image: host\n  backend: {backend}\n  limits: {{timeout: 2m}}\n"
    );
    support::write_project(&p.dir, &config, &[]);
    p
}

/// The worker: three CONNECTs to `api.example.com:443`, one to a denied name, then (given a
/// number of seconds) a flood of CONNECTs to distinct 60,000-character names from 4 threads,
/// kept up (on a slow machine) until a given number was sent.
const FLOOD: &str = r#"import os, socket, sys, threading, time
for k in ("no_proxy", "NO_PROXY"):
    os.environ.pop(k, None)
proxy = os.environ["HTTP_PROXY"].split("//")[1].rstrip("/")
host, port = proxy.rsplit(":", 1)
def connect(name):
    s = socket.create_connection((host, int(port)), timeout=30)
    s.sendall(b"CONNECT " + name + b":443 HTTP/1.1\r\n\r\n")
    status = s.makefile("rb").readline()
    s.close()
    return status.decode().strip()
for _ in range(3):
    print("api", connect(b"api.example.com"))
print("denied", connect(b"x.denied.test"))
end, least = time.time() + float(sys.argv[1]), int(sys.argv[2])
sent = [0]
def flood(k):
    i = 0
    while time.time() < end or sent[0] < least:
        try:
            connect(b"%d-%d-" % (k, i) + b"a" * 60000)
            sent[0] += 1
        except OSError:
            pass
        i += 1
threads = [threading.Thread(target=flood, args=(k,)) for k in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print("flooded", sent[0])
"#;

fn events(dir: &Path) -> Vec<serde_json::Value> {
    let log = std::fs::read_to_string(dir.join(".workcell/audit.jsonl")).expect("audit log");
    log.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).collect()
}

mod body {
    use super::*;

    /// 8 s of refused 60,000-character names: the log grows by at most [`AUDIT_BOUND`];
    /// the repeated refusal is one line and one summary with its count; the cap's line says
    /// how many were dropped; stderr names the refused HTTPS destination and what allows it.
    pub fn flood_is_bounded(backend: &str) {
        let p = project(backend);
        let out = support::workcell_in(&p.dir)
            .timeout(Duration::from_secs(110))
            .args(["run", "--", "python3", "-c", FLOOD, "8", "2500"])
            .output()
            .expect("workcell run");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let said = format!("{stdout}\n{}", &stderr[..stderr.len().min(4000)]);
        assert_eq!(out.status.code(), Some(0), "{said}");
        assert_eq!(stdout.lines().filter(|l| l.starts_with("api HTTP/1.1 403")).count(), 3, "{said}");
        let flooded: u64 = stdout.lines().find_map(|l| l.strip_prefix("flooded ")).and_then(|n| n.parse().ok()).expect(&said);
        assert!(flooded > 2000, "the flood must pass the cap to test it: {said}");

        let size = std::fs::metadata(p.dir.join(".workcell/audit.jsonl")).unwrap().len();
        eprintln!("{backend}: {flooded} refused connections in 8 s or more, audit log {size} bytes");
        assert!(size <= AUDIT_BOUND, "{size} bytes after {flooded} refusals");
        let events = events(&p.dir);
        let api = |e: &&serde_json::Value| e["destination"] == "api.example.com:443";
        assert_eq!(events.iter().filter(|e| e["event"] == "egress").filter(api).count(), 1, "one line for the first refusal");
        let summary: Vec<_> = events.iter().filter(|e| e["event"] == "egress_repeated").filter(api).collect();
        assert_eq!(summary.len(), 1, "{summary:#?}");
        assert_eq!(summary[0]["count"], 3);
        let long = events.iter().find(|e| e["event"] == "egress" && e["destination"].as_str().is_some_and(|d| d.contains("aaaa"))).expect("a flood line");
        let d = long["destination"].as_str().unwrap();
        assert!(d.len() < 400 && d.contains("…[cut "), "{d}");
        let dropped = events.iter().find(|e| e["event"] == "egress_dropped").expect("the cap's line");
        assert!(dropped["dropped"].as_u64().unwrap() > 0, "{dropped}");

        assert!(stderr.contains(r#"workcell: egress refused 3× https://api.example.com:443 (not in allow; add "api.example.com" to network.allow)"#), "{said}");
        assert!(stderr.contains("workcell: egress refused 1× https://x.denied.test:443 (denied: it matches the deny entry"), "{said}");
        assert!(stderr.contains("more refused destinations"), "{said}");
        assert!(stderr.lines().filter(|l| l.starts_with("workcell: egress refused")).count() <= 20, "bounded");
    }

    /// `--json`: the refusals as one JSON line on stderr.
    pub fn json_tells_refusals(backend: &str) {
        let p = project(backend);
        let out = support::workcell_in(&p.dir).args(["run", "--json", "--", "python3", "-c", FLOOD, "0", "0"]).output().expect("workcell run");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let told = stderr
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v.get("egress_refused").is_some())
            .unwrap_or_else(|| panic!("no egress_refused line: {stderr}"));
        let d = &told["egress_refused"]["destinations"][0];
        assert_eq!(d["destination"], "api.example.com:443", "{told}");
        assert_eq!(d["count"], 3, "{told}");
        assert_eq!(d["kind"], "unlisted", "{told}");
        assert_eq!(d["hint"], r#"not in allow; add "api.example.com" to network.allow"#, "{told}");
        assert!(!stderr.contains("workcell: egress refused"), "--json tells it as JSON only: {stderr}");
    }
}

macro_rules! backend_suite {
    ($module:ident, $backend:literal) => {
        mod $module {
            use super::*;
            #[test]
            fn flood_is_bounded() {
                if support::backend_ready($backend) {
                    body::flood_is_bounded($backend);
                }
            }
            #[test]
            fn json_tells_refusals() {
                if support::backend_ready($backend) {
                    body::json_tells_refusals($backend);
                }
            }
        }
    };
}

backend_suite!(bwrap, "bwrap");
backend_suite!(docker, "docker");
