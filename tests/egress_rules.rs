//! `network: {allow, deny, hosts, ask}`: how entries are read and refused (with file, line and
//! column), how destinations are judged, and that a worker's rules never reach past its
//! project's (property tests over random rule sets).

use std::fs;
use std::net::IpAddr;
use std::sync::Arc;

use proptest::prelude::*;
use workcell::config::{ConfigError, Project};
use workcell::egress::policy::{Access, Host, Policy, RuleSet, Verdict};
use workcell::egress::rules::{Entry, Ports};

/// Loads a project (and worker files) from text in a fresh directory.
fn load(yaml: &str, workers: &[(&str, &str)]) -> (tempfile::TempDir, Result<Project, ConfigError>) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("data")).unwrap();
    fs::create_dir_all(dir.join("workers")).unwrap();
    for (name, text) in workers {
        fs::write(dir.join("workers").join(format!("{name}.worker")), text).unwrap();
    }
    let p = Project::from_text(yaml, &dir.join("workcell.yaml"), &dir);
    (tmp, p)
}

fn project_with(network: &str) -> String {
    format!("sandbox:\n  zones:\n    data: {{path: ./data}}\n  network:\n{network}")
}

const PROJECT: &str = "    allow: [pypi.org, \"*.pythonhosted.org\", \"api.example.com:8443\", \"10.20.0.0/16\"]\n    deny: [\"evil.pythonhosted.org\"]\n    hosts: {registry.internal: 10.20.0.7}\n";

/// The refusal of a project, or else of its (only) worker file: a refused worker file does not
/// stop the project, its refusal is kept for the commands that use it.
fn refusal(r: Result<Project, ConfigError>, case: &str) -> ConfigError {
    match r {
        Err(e) => e,
        Ok(p) => p.broken.into_values().next().unwrap_or_else(|| panic!("must be refused: {case}")),
    }
}

/// `file:line:column: message` with the directory left out, for snapshots.
fn shown(e: &ConfigError) -> String {
    format!("{}:{}:{}: {}", e.file.file_name().unwrap().to_string_lossy(), e.line, e.column, e.message)
}

#[test]
fn config_errors() {
    let project_cases = [
        "    allow: [\"pypi.org:0\"]\n",
        "    allow: [\"pypi.org:http\"]\n",
        "    allow: [\"10.0.0.0/33\"]\n",
        "    allow: [\"10.0.0.1/8\"]\n",
        "    allow: [\"a.*.example.com\"]\n",
        "    allow: [\"bücher.de\"]\n",
        "    allow: [\"300.1.2.3\"]\n",
        "    allow: [\"[2001:db8::1]x\"]\n",
        "    allow: [pypi.org]\n    deny: [\"\"]\n",
        "    allow: [pypi.org]\n    hosts: {registry.internal: not-an-address}\n",
        "    allow: [pypi.org]\n    hosts: {\"bad name\": 10.0.0.1}\n",
        "    alow: [pypi.org]\n",
    ];
    let mut out = String::new();
    for case in project_cases {
        let (_tmp, r) = load(&project_with(case), &[]);
        out.push_str(&shown(&refusal(r, case)));
        out.push('\n');
    }
    let worker_cases = [
        "---\nnetwork:\n  allow: [example.com]\n---\n",
        "---\nnetwork:\n  allow: [\"pypi.org:8080\"]\n---\n",
        "---\nnetwork:\n  allow: [\"*.org\"]\n---\n",
        "---\nnetwork:\n  allow: [\"10.0.0.0/8\"]\n---\n",
        "---\nnetwork:\n  allow: [pypi.org]\n  hosts: {registry.internal: 10.20.0.8}\n---\n",
        "---\nnetwork:\n  allow: [pypi.org]\n  hosts: {pypi.org: 10.20.0.8}\n---\n",
        "---\nnetwork:\n  allow: [pypi.org]\n  ask: true\n---\n",
    ];
    for case in worker_cases {
        let (_tmp, r) = load(&project_with(PROJECT), &[("w", case)]);
        out.push_str(&shown(&refusal(r, case)));
        out.push('\n');
    }
    let (_tmp, r) = load("sandbox:\n  zones:\n    data: {path: ./data}\n", &[("w", "---\nnetwork:\n  allow: [pypi.org]\n---\n")]);
    out.push_str(&shown(&refusal(r, "rules under network off")));
    out.push('\n');
    insta::assert_snapshot!("config_errors", out);
}

/// The policy of the project (no worker) or of worker `w`.
fn policy_of(network: &str, worker: Option<&str>) -> Arc<Policy> {
    let workers: Vec<(&str, &str)> = worker.map(|w| vec![("w", w)]).unwrap_or_default();
    let (_tmp, r) = load(&project_with(network), &workers);
    let p = r.unwrap();
    let sandbox = match worker {
        Some(_) => p.workers["w"].sandbox.clone(),
        None => p.sandbox.clone(),
    };
    sandbox.network_access().policy().expect("a filtered network").clone()
}

fn name(n: &str) -> Host {
    Host::Name(n.into())
}

fn ip(a: &str) -> Host {
    Host::Ip(a.parse().unwrap())
}

#[test]
fn matching() {
    let p = policy_of(PROJECT, None);
    let allowed = |h: Host, port| matches!(p.judge(&h, port), Verdict::Allowed { .. });
    assert!(allowed(name("pypi.org"), 443));
    assert!(allowed(name("pypi.org"), 80));
    assert!(!allowed(name("pypi.org"), 8080), "unlisted port");
    assert!(allowed(name("files.pythonhosted.org"), 443));
    assert!(!allowed(name("pythonhosted.org"), 443), "a wildcard covers names below it only");
    assert!(matches!(p.judge(&name("evil.pythonhosted.org"), 443), Verdict::Denied { .. }), "deny before allow");
    assert!(allowed(name("api.example.com"), 8443));
    assert!(!allowed(name("api.example.com"), 443));
    assert!(allowed(ip("10.20.3.4"), 443));
    assert!(!allowed(ip("10.21.0.1"), 443));
    assert!(matches!(p.judge(&name("example.org"), 443), Verdict::Unlisted { .. }));
    assert!(p.address_allowed("10.20.0.9".parse().unwrap(), 443), "an allowed network admits private answers");
    assert!(!p.address_allowed("127.0.0.1".parse().unwrap(), 443));
    assert_eq!(p.hosts["registry.internal"].address, "10.20.0.7".parse::<IpAddr>().unwrap());
}

#[test]
fn worker_narrows_and_keeps_hosts() {
    let p = policy_of(PROJECT, Some("---\nnetwork:\n  allow: [\"files.pythonhosted.org:443\"]\n  deny: [\"10.20.0.0/16\"]\n---\n"));
    assert!(matches!(p.judge(&name("files.pythonhosted.org"), 443), Verdict::Allowed { .. }));
    assert!(matches!(p.judge(&name("files.pythonhosted.org"), 80), Verdict::Unlisted { .. }), "the worker's port");
    assert!(matches!(p.judge(&name("pypi.org"), 443), Verdict::Unlisted { .. }), "not in the worker's list");
    assert!(matches!(p.judge(&ip("10.20.0.1"), 443), Verdict::Denied { .. }));
    assert!(p.hosts.contains_key("registry.internal"), "a worker keeps the project's hosts");
    // network: false and true
    let (_tmp, r) = load(&project_with(PROJECT), &[("off", "---\nnetwork: false\n---\n"), ("on", "---\nnetwork: true\n---\n")]);
    let r = r.unwrap();
    assert_eq!(*r.workers["off"].sandbox.network_access(), Access::Off);
    assert_eq!(r.workers["on"].sandbox.network_access(), r.sandbox.network_access(), "true keeps the project's rules");
}

#[test]
fn a_called_worker_gets_both_layers_and_the_callers_hosts() {
    let caller = "---\nnetwork:\n  allow: [pypi.org, \"files.pythonhosted.org\"]\n---\n";
    let child = "---\nnetwork:\n  allow: [\"*.pythonhosted.org\"]\n---\n";
    let (_tmp, r) = load(&project_with(PROJECT), &[("caller", caller), ("child", child)]);
    let p = r.unwrap();
    // What call_worker does: the child's own network under the caller's current one.
    let called = p.workers["caller"].sandbox.clone().network_narrowed_by(p.workers["child"].sandbox.network_access());
    let policy = called.network_access().policy().unwrap().clone();
    assert_eq!(policy.layers.len(), 3, "project, caller, child: {policy:?}");
    assert!(matches!(policy.judge(&name("files.pythonhosted.org"), 443), Verdict::Allowed { .. }));
    assert!(matches!(policy.judge(&name("cdn.pythonhosted.org"), 443), Verdict::Unlisted { .. }), "not in the caller's list");
    assert!(matches!(policy.judge(&name("pypi.org"), 443), Verdict::Unlisted { .. }), "not in the child's list");
    assert!(matches!(policy.judge(&name("evil.pythonhosted.org"), 443), Verdict::Denied { .. }), "the project's deny holds");
    assert!(policy.hosts.contains_key("registry.internal"));
    let off = p.workers["caller"].sandbox.clone().without_network().network_narrowed_by(p.workers["child"].sandbox.network_access());
    assert_eq!(*off.network_access(), Access::Off, "a caller without network gives none");
}

#[test]
fn plan_is_proxied() {
    let (_tmp, r) = load(&project_with(PROJECT), &[]);
    let p = r.unwrap();
    let ov = workcell::plan::Overrides { command: Some(vec!["true".into()]), ..Default::default() };
    let plan = workcell::plan::LaunchPlan::build(&p, None, &p.sandbox, &ov).unwrap();
    assert_eq!(plan.network, workcell::plan::Network::Proxied);
    assert_eq!(plan.env["WORKCELL_NETWORK"], "proxy");
    assert!(plan.egress.is_some());
}

/// Seatbelt and `none` cannot make the proxy the only way out: a plan with rules is refused
/// there, and no backend runs it without its proxy.
#[test]
fn rules_need_a_backend_that_enforces_them() {
    use workcell::backend::{self, BackendError, Selected};
    let (_tmp, r) = load(&project_with(PROJECT), &[]);
    let p = r.unwrap();
    let ov = workcell::plan::Overrides { command: Some(vec!["true".into()]), ..Default::default() };
    let plan = workcell::plan::LaunchPlan::build(&p, None, &p.sandbox, &ov).unwrap();
    let e = backend::select(workcell::config::BackendChoice::None, &plan, false).unwrap_err();
    assert!(matches!(e, BackendError::EgressUnsupported { backend: "none" }), "{e}");
    assert!(e.to_string().contains("cannot enforce network rules"), "{e}");
    for selected in [Selected::None, Selected::Seatbelt] {
        assert!(matches!(
            backend::run(selected, &plan, backend::Output::Capture, backend::Attached { egress: None, ..Default::default() }),
            Err(BackendError::EgressUnsupported { .. })
        ));
    }
    for selected in [Selected::Bwrap, Selected::Docker] {
        assert!(
            matches!(
                backend::run(selected, &plan, backend::Output::Capture, backend::Attached { egress: None, ..Default::default() }),
                Err(BackendError::EgressMissing)
            ),
            "never run without the proxy"
        );
    }
}

/// `ask: true` goes through the run's approvals: the mode answers, the decision is audited.
#[test]
fn ask_uses_the_runs_approvals() {
    use workcell::run::runner::BackendRunner;
    use workcell::tools::approval::ApprovalMode;
    use workcell::tools::service::Caller;
    let (tmp, r) = load(&project_with(PROJECT), &[]);
    let p = Arc::new(r.unwrap());
    for (mode, approved) in [(ApprovalMode::ApproveAll, true), (ApprovalMode::Strict, false)] {
        let service = BackendRunner::new(p.clone(), workcell::config::BackendChoice::Auto, mode).service_for(Caller::default(), p.sandbox.clone(), "ask-test");
        assert_eq!(service.consent_to_connect("asked.test:443").is_ok(), approved, "{mode:?}");
    }
    let log = fs::read_to_string(workcell::audit::audit_path(&fs::canonicalize(tmp.path()).unwrap())).unwrap();
    let decisions: Vec<serde_json::Value> =
        log.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).filter(|v| v["event"] == "decision" && v["action"] == "connect").collect();
    assert_eq!(decisions.len(), 2, "{log}");
    assert_eq!(decisions[0]["subject"], "asked.test:443");
}

/// `workcell run --zone` keeps the project's rules (an ad-hoc sandbox is not a way around them):
/// the `none` backend refuses the run instead of running it with the open network.
#[test]
fn adhoc_zones_keep_the_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("data")).unwrap();
    fs::create_dir_all(dir.join("z")).unwrap();
    fs::write(dir.join("workcell.yaml"), project_with(PROJECT) + "  require_os_sandbox: false\n").unwrap();
    let out = assert_cmd::Command::cargo_bin("workcell")
        .unwrap()
        .current_dir(&dir)
        .env_remove("RUST_LOG")
        .args(["run", "--zone", "z=./z", "--backend", "none", "--no-broker", "--", "true"])
        .write_stdin("")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(stderr.contains("cannot enforce network rules"), "{stderr}");
}

// --- properties -------------------------------------------------------------------------

const TEXTS: &[&str] = &[
    "a.com",
    "b.a.com",
    "c.b.a.com",
    "*.a.com",
    "*.b.a.com",
    "x.org",
    "*.org",
    "a.com:8443",
    "*.a.com:80",
    "x.org:*",
    "10.0.0.1",
    "10.0.0.2:8443",
    "10.0.0.0/30",
    "10.0.0.0/31:*",
    "10.0.0.0/24",
    "[::1]:443",
    "fd00::/64",
];

const HOSTS: &[&str] =
    &["a.com", "b.a.com", "c.b.a.com", "d.c.b.a.com", "x.org", "y.x.org", "10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.1", "::1", "fd00::5"];
const PORTS: &[u16] = &[22, 80, 443, 8443];

fn entry(i: usize, default: Ports) -> Entry {
    Entry::parse(TEXTS[i], default, "prop").unwrap()
}

fn rule_set() -> impl Strategy<Value = RuleSet> {
    (prop::collection::vec(0..TEXTS.len(), 0..5), prop::collection::vec(0..TEXTS.len(), 0..2), any::<bool>()).prop_map(|(allow, deny, ask)| RuleSet {
        source: "prop".into(),
        allow: allow.into_iter().map(|i| entry(i, Ports::Web)).collect(),
        deny: deny.into_iter().map(|i| entry(i, Ports::Any)).collect(),
        ask,
    })
}

fn host(h: &str) -> Host {
    h.parse::<IpAddr>().map(Host::Ip).unwrap_or_else(|_| Host::Name(h.into()))
}

/// How much a verdict lets through: refused < asks < allowed.
fn rank(v: &Verdict) -> u8 {
    match v {
        Verdict::Denied { .. } | Verdict::Unlisted { .. } => 0,
        Verdict::Ask => 1,
        Verdict::Allowed { .. } => 2,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// A child's rules under a chain of parents never let through more than any parent.
    #[test]
    fn derived_rules_are_within_the_parent(chain in prop::collection::vec(rule_set(), 1..4)) {
        let mut access = Access::Open;
        let mut ancestors: Vec<Arc<Policy>> = Vec::new();
        for set in chain {
            let own = Access::Filtered(Arc::new(Policy { hosts: Default::default(), layers: vec![Arc::new(set)] }));
            access = access.narrowed_by(&own);
            let p = access.policy().unwrap().clone();
            for parent in &ancestors {
                for h in HOSTS {
                    for &port in PORTS {
                        let (child, up) = (p.judge(&host(h), port), parent.judge(&host(h), port));
                        prop_assert!(rank(&child) <= rank(&up), "{h}:{port}: child {child:?}, parent {up:?}");
                        if let Ok(ip) = h.parse::<IpAddr>() {
                            prop_assert!(!p.address_allowed(ip, port) || parent.address_allowed(ip, port));
                        }
                    }
                }
            }
            ancestors.push(p);
        }
        prop_assert!(matches!(access.narrowed_by(&Access::Off), Access::Off));
    }

    /// `covers` is sound: whatever the covered entry admits, the covering one admits too (so a
    /// worker whose entries all pass the load-time check asks for nothing its project refuses).
    #[test]
    fn covers_is_sound(a in 0..TEXTS.len(), b in 0..TEXTS.len()) {
        let (a, b) = (entry(a, Ports::Web), entry(b, Ports::Web));
        if a.covers(&b) {
            for h in HOSTS {
                for &port in PORTS {
                    let admits = |e: &Entry| match host(h) { Host::Name(n) => e.matches_name(&n, port), Host::Ip(ip) => e.matches_ip(ip, port) };
                    prop_assert!(!admits(&b) || admits(&a), "{} covers {} but not {h}:{port}", a.text, b.text);
                }
            }
        }
    }
}
