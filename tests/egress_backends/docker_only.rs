//! The docker-only parts of the egress suite: a named image, other containers, and the
//! cleanup of a run whose workcell was killed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use workcell::plan::{LaunchPlan, Network};

use super::{docker0_address, read_greeting, run, text, HostServer, Scene, TestProxy, ANSWER};
use crate::support::{self, BusyboxImage};

/// Whether the docker network `name` exists.
fn network_exists(name: &str) -> bool {
    Command::new("docker").args(["network", "inspect", name]).stdout(Stdio::null()).stderr(Stdio::null()).status().expect("docker").success()
}

/// The host firewall rules (IPv4 and IPv6, every chain of the filter table) tagged for run
/// `name`.
fn rules_of(name: &str) -> Vec<String> {
    let tag = workcell::backend::docker::firewall::tag(name);
    let mut out = Vec::new();
    for tool in ["iptables", "ip6tables"] {
        let listed = Command::new(tool).args(["-w", "-S"]).output().expect(tool);
        out.extend(String::from_utf8_lossy(&listed.stdout).lines().filter(|l| l.contains(&tag)).map(|l| format!("{tool} {l}")));
    }
    out
}

/// After a docker run: its network and its firewall rules are gone.
pub fn assert_run_cleaned(backend: &str, plan: &LaunchPlan) {
    if backend != "docker" {
        return;
    }
    let name = format!("workcell-{}", plan.run_id);
    assert!(!network_exists(&name), "the run's network {name} is left");
    assert_eq!(rules_of(&name), Vec::<String>::new(), "firewall rules of {name} are left");
}

/// Removes whatever a run named `name` left, even when the test fails half-way.
struct Leftovers(String);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f", &self.0]).output();
        let _ = workcell::backend::docker::firewall::remove(&self.0);
        let _ = Command::new("docker").args(["network", "rm", &self.0]).output();
    }
}

/// A named image (static busybox, no Python): `nc` straight to the host server fails on
/// every address, and so does `nc` to a web server in a container on Docker's default
/// network; `wget` through the proxy variables reaches the proxy.
pub fn named_image_reaches_only_the_proxy() {
    let image = BusyboxImage::build("egress");
    let scene = Scene::new();
    let server = HostServer::start();
    let web = support::Server::httpd(&image, &format!("dev.workcell.test={}", support::unique()));
    let proxy = TestProxy::default();
    let mut targets = vec!["127.0.0.1".to_string(), "${p%:*}".to_string()];
    targets.extend(docker0_address().map(|a| a.to_string()));
    let mut pairs: Vec<String> = targets.iter().map(|a| format!("{a}:{}", server.tcp_port)).collect();
    pairs.push(format!("{}:8080", web.ip));
    let script = format!(
        "p=${{HTTP_PROXY#http://}}; for t in {}; do \
         if /bin/busybox nc -w 10 ${{t%:*}} ${{t##*:}} </dev/null >/dev/null 2>&1; then echo TCP-CONNECTED $t; else echo TCP-FAILED $t; fi; done; \
         /bin/busybox wget -q -O- http://workcell-test.invalid/",
        pairs.join(" ")
    );
    let plan = scene.plan(&["/bin/busybox", "sh", "-c", &script], Network::Proxied, Some(&image.tag));
    let _left = Leftovers(format!("workcell-{}", plan.run_id));
    let out = run("docker", &plan, Some(&proxy));
    let stdout = text(&out.stdout);
    assert_eq!(out.exit_code, 0, "{stdout}");
    assert!(stdout.contains(ANSWER), "wget did not reach the proxy: {stdout}");
    assert!(!stdout.contains("TCP-CONNECTED"), "a direct connection got through: {stdout}");
    assert_eq!(stdout.matches("TCP-FAILED").count(), pairs.len(), "{stdout}");
    assert_eq!(server.accepted(), vec![], "the host server accepted a direct connection");
    assert_run_cleaned("docker", &plan);
}

/// Lets a waiting worker finish (it waits for `/out/go`) and waits for its run, also when
/// the test fails half-way.
struct Release {
    go: PathBuf,
    run: Option<std::thread::JoinHandle<workcell::backend::Finished>>,
}

impl Release {
    fn finish(mut self) -> workcell::backend::Finished {
        std::fs::write(&self.go, "").expect("go");
        self.run.take().expect("running").join().expect("the run thread")
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(r) = self.run.take() {
            let _ = std::fs::write(&self.go, "");
            let _ = r.join();
        }
    }
}

/// While a proxied run waits, a container on Docker's default network and a host process
/// try the proxy's port on the run's gateway: neither gets through.
pub fn other_containers_cannot_use_the_proxy_port() {
    let image = BusyboxImage::build("egress-outsider");
    let scene = Scene::new();
    let proxy = TestProxy::default();
    let plan = scene.plan(&["sh", "-c", "while [ ! -e /out/go ]; do sleep 0.1; done; echo finished"], Network::Proxied, None);
    let _left = Leftovers(format!("workcell-{}", plan.run_id));
    let (p, pl) = (proxy.clone(), plan.clone());
    let release = Release { go: scene.dir.join("out/go"), run: Some(std::thread::spawn(move || run("docker", &pl, Some(&p)))) };
    let (addr, _) = proxy.wait_listener(Duration::from_secs(120));

    let outsider = Command::new("docker")
        .args(["run", "--rm", "--label", "dev.workcell.managed=true", "--label", &format!("dev.workcell.test={}", support::unique())])
        .args(support::run_args())
        .arg(&image.tag)
        .args([
            "/bin/busybox",
            "sh",
            "-c",
            &format!("if /bin/busybox nc -w 20 {} {} </dev/null; then echo OUT-CONNECTED; else echo OUT-FAILED; fi", addr.ip(), addr.port()),
        ])
        .output()
        .expect("docker run");
    let said = text(&outsider.stdout);
    eprintln!("outsider: {said}{}", text(&outsider.stderr));
    assert!(said.contains("OUT-FAILED") && !said.contains(ANSWER), "a container outside the run reached the proxy: {said}");
    let host = read_greeting(addr);
    assert!(host.as_ref().is_err() || !host.as_ref().is_ok_and(|g| g.contains(ANSWER)), "a host process reached the proxy on the gateway: {host:?}");
    assert_eq!(proxy.seen(|s| s.peers.clone()), vec![], "the proxy was reached from outside the run");

    let out = release.finish();
    assert_eq!(out.exit_code, 0);
    assert!(text(&out.stdout).contains("finished"));
    assert_run_cleaned("docker", &plan);
}

/// The environment variable that makes [`victim`] run.
const VICTIM: &str = "WORKCELL_TEST_EGRESS_VICTIM";

/// In a process of its own (this test binary, asked by [`VICTIM`]): a proxied docker run of
/// a worker that sleeps, in the project at `$VICTIM`, until the process is killed.
pub fn victim() {
    let Some(dir) = std::env::var_os(VICTIM).map(PathBuf::from) else { return };
    let project = workcell::config::Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project loads");
    let ov = workcell::plan::Overrides { command: Some(vec!["sleep".into(), "600".into()]), ..Default::default() };
    let mut plan = LaunchPlan::build(&project, None, &project.sandbox, &ov).expect("plan");
    plan.network = Network::Proxied;
    let proxy = TestProxy::default();
    let _ = workcell::backend::run(
        workcell::backend::Selected::Docker,
        &plan,
        workcell::backend::Output::Capture,
        workcell::backend::Attached { egress: Some(&proxy), ..Default::default() },
    );
}

/// Starts a victim run in `dir` and signals its workcell (this test binary) once its
/// container runs; returns the run's name (container and network) after the victim ended.
fn signal_a_run(dir: &Path, signal: rustix::process::Signal) -> String {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["docker::victim", "--exact", "--nocapture"])
        .env(VICTIM, dir)
        .stdin(Stdio::null())
        .spawn()
        .expect("start the victim");
    let label = format!("dev.workcell.project={}", dir.display());
    let id = support::wait_for_running(&label, Duration::from_secs(120));
    let name = Command::new("docker").args(["inspect", "-f", "{{.Name}}", &id]).output().expect("inspect");
    let name = text(&name.stdout).trim().trim_start_matches('/').to_string();
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, signal).expect("signal the victim");
    child.wait().expect("reap the victim");
    name
}

/// A run whose workcell is interrupted (SIGTERM) removes its network and rules itself; one
/// whose workcell is killed (SIGKILL: no cleanup of its own) leaves its container, network
/// and rules, and the watchdog removes all three, and so does `workcell gc`.
pub fn killed_run_is_cleaned_by_the_watchdog_and_by_gc() {
    use rustix::process::Signal;
    for cleaner in ["interrupt", "watchdog", "gc"] {
        let scene = Scene::new();
        let signal = if cleaner == "interrupt" { Signal::TERM } else { Signal::KILL };
        let name = signal_a_run(&scene.dir, signal);
        let _left = Leftovers(name.clone());
        if cleaner != "interrupt" {
            // Left behind, unless another suite's `workcell gc` (they run in parallel) was
            // quicker: then this cleaner finds nothing, which must still go well.
            if !network_exists(&name) || rules_of(&name).is_empty() {
                eprintln!("note: the killed run's leftovers were removed meanwhile, by a concurrent `workcell gc`");
            }
            let workcell = assert_cmd::cargo::cargo_bin("workcell");
            let out = match cleaner {
                "watchdog" => Command::new(&workcell).args(["__reap", &name]).stdin(Stdio::null()).output().expect("watchdog"),
                _ => Command::new(&workcell).arg("gc").output().expect("gc"),
            };
            eprintln!("{cleaner}: {:?}\n{}{}", out.status, text(&out.stdout), text(&out.stderr));
            assert!(out.status.success(), "{cleaner} failed");
        }
        assert!(support::containers_with_label(&format!("dev.workcell.project={}", scene.dir.display())).is_empty(), "{cleaner} left the container");
        assert!(!network_exists(&name), "{cleaner} left the network {name}");
        assert_eq!(rules_of(&name), Vec::<String>::new(), "{cleaner} left firewall rules");
    }
}
