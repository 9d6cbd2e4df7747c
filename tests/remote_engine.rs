//! The docker backend against a remote engine (issue 27): `DOCKER_HOST=tcp://…` names an
//! engine on another host, which cannot see this host's directories, so zones are shipped into
//! engine-side volumes through the Engine API and writable zones' results come back through
//! the same checker, review and publish as `delivery: copy` (tests/delivery.rs). `image: host`
//! and network rules are refused there.
//!
//! The "other host" is `.ci/remote-engine`: Podman's service in network, mount and pid
//! namespaces of its own, where this host's temporary directories (the projects here) are
//! hidden, so a bind mount of a host path could not even find it. Each test starts its own
//! engine ([`RemoteEngine`]) and checks, after every run, that no container and no volume
//! labelled `dev.workcell.managed=true` is left on it. Only the workcell commands get the
//! engine's `DOCKER_HOST`; the test process keeps its own.
//!
//! Gate: `support::backend_ready("remote")` (skips, or fails under
//! `WORKCELL_REQUIRE_REMOTE=1`).

mod support;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use support::remote::{host_traces, processes_of, script, RemoteEngine};
use support::{backend_ready, give_to_worker, write_project};

/// Exit status of a run whose delivery held something back (docs/commands.md, "Exit statuses").
const HELD_BACK: i32 = 3;
const PRE: &str = "approval: {write: preApproved, delete: preApproved}";

/// A project in a temp dir (zones given as `sandbox.zones` YAML entries) and an engine.
struct Rig {
    engine: RemoteEngine,
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

/// `None` (the test returns) when no remote engine can be made here and none is required.
fn rig(zones: &[&str]) -> Option<Rig> {
    rig_with(zones, "")
}

fn rig_with(zones: &[&str], more_sandbox: &str) -> Option<Rig> {
    if !backend_ready("remote") {
        return None;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
    let mut config = String::from("sandbox:\n  zones:\n");
    for z in zones {
        let name = z.split(':').next().expect("zone name");
        std::fs::create_dir_all(dir.join(name)).expect("mkdir zone");
        config += &format!("    {z}\n");
    }
    config += more_sandbox;
    write_project(&dir, &config, &[]);
    Some(Rig { engine: RemoteEngine::start(), _tmp: tmp, dir })
}

impl Rig {
    fn put(&self, path: &str, content: &str) {
        let p = self.dir.join(path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, content).expect("write");
    }

    /// Everything beneath zone directory `zone`: path -> content (`<dir>` for a directory).
    fn listing(&self, zone: &str) -> BTreeMap<String, String> {
        fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
            for e in std::fs::read_dir(dir).expect("read_dir").map(|e| e.expect("entry")) {
                let rel = e.path().strip_prefix(root).expect("below").to_string_lossy().into_owned();
                let t = e.file_type().expect("type");
                if t.is_dir() {
                    out.insert(rel, "<dir>".into());
                    walk(root, &e.path(), out);
                } else if t.is_symlink() {
                    out.insert(rel, format!("-> {}", std::fs::read_link(e.path()).expect("link").display()));
                } else {
                    out.insert(rel, std::fs::read_to_string(e.path()).unwrap_or_else(|_| "<binary>".into()));
                }
            }
        }
        let mut out = BTreeMap::new();
        let root = self.dir.join(zone);
        walk(&root, &root, &mut out);
        out
    }

    /// `workcell run --backend docker --image BUSYBOX <extra> -- CMD…` against the engine,
    /// without a terminal; then nothing of the run may be left on the engine.
    fn run_cmd(&self, extra: &[&str], cmd: &[&str]) -> Output {
        give_to_worker(&self.dir);
        let image = self.engine.busybox().to_string();
        let out =
            self.engine.workcell(&self.dir).args(["run", "--backend", "docker", "--image", &image]).args(extra).arg("--").args(cmd).output().expect("workcell");
        eprintln!("exit {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        self.engine.assert_nothing_left();
        out
    }

    fn run(&self, extra: &[&str], script: &str) -> Output {
        self.run_cmd(extra, &["/bin/sh", "-c", script])
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn a_read_only_zone_is_read_and_not_written() {
    let Some(r) = rig(&["in: {path: ./in, mode: ro}"]) else { return };
    r.put("in/a.txt", "hello from in\n");
    let script = "cat /in/a.txt; echo changed > /in/a.txt && echo WROTE; touch /in/new && echo CREATED; rm /in/a.txt && echo REMOVED; true";
    let out = r.run(&["--approve-all"], script);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.contains("hello from in"), "the worker read the host file's content: {text}");
    assert!(!text.contains("WROTE") && !text.contains("CREATED") && !text.contains("REMOVED"), "a read-only zone was changed: {text}");
    assert_eq!(r.listing("in"), map(&[("a.txt", "hello from in\n")]), "the host zone changed");
}

/// The host's `out/` before each run of the rw bodies, and what the worker does to it.
fn seed_out(r: &Rig) -> BTreeMap<String, String> {
    r.put("out/keep.txt", "keep\n");
    r.put("out/change.txt", "old\n");
    r.put("out/del.txt", "del\n");
    r.put("out/sub/old.txt", "o\n");
    r.listing("out")
}
const CHANGES: &str = "cd /out && echo new > new.txt && echo changed > change.txt && rm del.txt && rm -r sub && mkdir -p made/deep && echo d > made/deep/d.txt";

fn changes_reach_the_host_when_approved(delivery: &str) {
    let Some(r) = rig(&[&format!("out: {{path: ./out, mode: rw{delivery}}}")]) else { return };
    seed_out(&r);
    let out = r.run(&["--approve-all"], CHANGES);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let expected = map(&[
        ("keep.txt", "keep\n"),
        ("change.txt", "changed\n"),
        ("new.txt", "new\n"),
        ("made", "<dir>"),
        ("made/deep", "<dir>"),
        ("made/deep/d.txt", "d\n"),
    ]);
    assert_eq!(r.listing("out"), expected, "the host shows exactly the worker's changes");
}

#[test]
fn rw_zone_changes_reach_the_host_when_approved() {
    changes_reach_the_host_when_approved("");
}

#[test]
fn copy_zone_changes_reach_the_host_when_approved() {
    changes_reach_the_host_when_approved(", delivery: copy");
}

/// The zone asks (the default approval) and there is nobody to ask: held back, exit 3.
fn changes_are_held_back_without_approval(delivery: &str) {
    let Some(r) = rig(&[&format!("out: {{path: ./out, mode: rw{delivery}}}")]) else { return };
    let before = seed_out(&r);
    let out = r.run(&[], CHANGES);
    assert_eq!(out.status.code(), Some(HELD_BACK), "{}", stderr(&out));
    assert_eq!(r.listing("out"), before, "a change reached the host without approval");
}

#[test]
fn rw_zone_changes_are_held_back_without_approval() {
    changes_are_held_back_without_approval("");
}

#[test]
fn copy_zone_changes_are_held_back_without_approval() {
    changes_are_held_back_without_approval(", delivery: copy");
}

#[test]
fn a_preapproved_rw_zone_publishes_without_asking() {
    let Some(r) = rig(&[&format!("out: {{path: ./out, mode: rw, {PRE}}}")]) else { return };
    seed_out(&r);
    let out = r.run(&[], "echo new > /out/new.txt && rm /out/del.txt");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let l = r.listing("out");
    assert_eq!(l.get("new.txt").map(String::as_str), Some("new\n"));
    assert!(!l.contains_key("del.txt") && l.contains_key("keep.txt"), "{l:?}");
}

/// The worker's zones are copies on the engine's side: what the host adds while the worker
/// runs is not seen, no mount inside names the host's directory, and the worker's own
/// writes still come back.
#[test]
fn the_worker_gets_shipped_zones_not_the_host_directories() {
    let Some(r) = rig(&["in: {path: ./in, mode: ro}", &format!("out: {{path: ./out, mode: rw, {PRE}}}")]) else { return };
    r.put("in/a.txt", "hello from in\n");
    r.put("out/keep.txt", "keep\n");
    give_to_worker(&r.dir);
    let image = r.engine.busybox().to_string();
    // The worker waits for the test's line on stdin (sent once the host files exist).
    let script = "read go; cat /in/a.txt; for f in /in/late.txt /out/late.txt; do [ -e $f ] && echo SAW $f; done; \
                  echo MOUNTS; cat /proc/self/mountinfo; echo w > /out/w.txt";
    let mut child = r
        .engine
        .workcell_process(&r.dir)
        .args(["run", "--backend", "docker", "--image", &image, "-i", "--", "/bin/sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn workcell");
    r.engine.wait_for_running(&mut child, Duration::from_secs(90));
    r.put("in/late.txt", "late\n");
    r.put("out/late.txt", "late\n");
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("signal the worker");
    let out = child.wait_with_output().expect("wait workcell");
    let text = stdout(&out);
    eprintln!("exit {:?}\nstdout: {text}\nstderr: {}", out.status.code(), stderr(&out));
    assert_eq!(out.status.code(), Some(0));
    assert!(text.contains("hello from in"), "the zone's content was shipped: {text}");
    assert!(!text.contains("SAW"), "the worker saw a file the host made during the run: {text}");
    let mounts = text.split("MOUNTS").nth(1).unwrap_or_default();
    assert!(mounts.contains(" /in ") && mounts.contains(" /out "), "the zones are mounts in the worker: {mounts}");
    assert!(!mounts.contains(&*r.dir.to_string_lossy()), "a mount names the host's project directory: {mounts}");
    let expected = map(&[("keep.txt", "keep\n"), ("late.txt", "late\n"), ("w.txt", "w\n")]);
    assert_eq!(r.listing("out"), expected, "the worker's write came back; the host's own file stayed");
    assert_eq!(r.listing("in"), map(&[("a.txt", "hello from in\n"), ("late.txt", "late\n")]));
    r.engine.assert_nothing_left();
}

/// The checker of `delivery: copy` judges what comes back from the engine (the same cases
/// as tests/delivery.rs `only_checked_files_reach_the_host`).
#[test]
fn only_checked_files_come_back_from_a_copy_zone() {
    let zone = format!("out: {{path: ./out, mode: rw, suffixes: [.md], max_file_bytes: 1000, delivery: copy, {PRE}}}");
    let Some(r) = rig(&[&zone]) else { return };
    r.put("out/del.md", "delete me");
    let script = "cd /out && echo ok > ok.md && echo x > bad.exe && head -c 5000 /dev/zero > big.md && ln -s /etc/passwd link.md \
                  && echo h > h.md && ln h.md hard.md && mkfifo fifo.md && echo r > run.md && { chmod 4755 run.md 2>/dev/null; rm del.md; }";
    let out = r.run(&["--json"], script);
    assert_eq!(out.status.code(), Some(HELD_BACK), "refusals end the run with the held-back status");
    assert_eq!(r.listing("out"), map(&[("ok.md", "ok\n"), ("run.md", "r\n")]), "the host holds what passed, and nothing else");
    let mode = std::fs::metadata(r.dir.join("out/run.md")).expect("run.md").permissions().mode();
    assert_eq!(mode & 0o7000, 0, "run.md kept its set-uid bit: {mode:o}");
    let err = stderr(&out);
    let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).unwrap_or_else(|| panic!("no delivery summary in: {err}"));
    let sum = serde_json::from_str::<serde_json::Value>(line).expect("summary JSON")["delivery"].clone();
    assert_eq!(sum["published"], true, "{sum}");
    assert_eq!(sum["deleted"], serde_json::json!(["del.md"]), "{sum}");
    let reason = |path: &str| {
        sum["refused"].as_array().expect("refused").iter().find(|e| e["path"] == path).and_then(|e| e["reason"].as_str()).unwrap_or_default().to_string()
    };
    for (path, why) in
        [("bad.exe", "suffix"), ("big.md", "too_large"), ("link.md", "symlink"), ("h.md", "hard_link"), ("hard.md", "hard_link"), ("fifo.md", "fifo")]
    {
        assert_eq!(reason(path), why, "{path}: {sum}");
    }
}

/// `--pids` reaches the container's cgroup on the engine, and a real fork bomb stays in it
/// (tests/docker.rs `fork_bomb_is_contained_by_pids_limit`): only the timeout ends the run.
#[test]
fn a_fork_bomb_is_held_by_the_pids_limit() {
    let Some(r) = rig(&["in: {path: ./in, mode: ro}"]) else { return };
    let out = r.run(&["--pids", "64"], "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(stdout(&out).trim(), "64");
    let out = r.run(&["--pids", "64", "--timeout", "5s"], "(f() { f | f & }; f); exec sleep 60");
    assert_eq!(out.status.code(), Some(124), "the bomb must neither end the run nor outlast the timeout");
    assert!(std::process::Command::new("true").status().expect("spawn").success(), "the host can still start processes");
}

#[test]
fn a_memory_hog_is_killed() {
    let Some(r) = rig(&["in: {path: ./in, mode: ro}"]) else { return };
    let hog = "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo done ${#x}";
    let out = r.run(&["--memory", "64m", "--timeout", "60s"], hog);
    assert!(!stdout(&out).contains("done"), "the hog got its memory");
    assert_ne!(out.status.code(), Some(0));
    assert_ne!(out.status.code(), Some(124), "killed by the memory limit, not the timeout");
}

/// A timed-out run publishes nothing, from a bind-delivered zone and a copy zone alike, even
/// when both are pre-approved.
#[test]
fn a_timed_out_run_exits_124_and_publishes_nothing() {
    let Some(r) = rig(&[&format!("out: {{path: ./out, mode: rw, {PRE}}}"), &format!("cp: {{path: ./cp, mode: rw, delivery: copy, {PRE}}}")]) else { return };
    r.put("out/keep.txt", "keep\n");
    r.put("cp/keep.txt", "keep\n");
    let out = r.run(&["--timeout", "3s"], "echo t > /out/t.txt; rm /out/keep.txt; echo t > /cp/t.txt; rm /cp/keep.txt; exec sleep 60");
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert_eq!(r.listing("out"), map(&[("keep.txt", "keep\n")]), "the timed-out run published into out");
    assert_eq!(r.listing("cp"), map(&[("keep.txt", "keep\n")]), "the timed-out run published into cp");
}

#[test]
fn exit_statuses_pass_through() {
    let Some(r) = rig(&["in: {path: ./in, mode: ro}"]) else { return };
    for (script, code) in [("exit 0", 0), ("exit 7", 7), ("no-such-command-here", 127)] {
        let out = r.run(&[], script);
        assert_eq!(out.status.code(), Some(code), "sh -c {script:?}");
    }
    // Podman's init for named images (catatonit) reports an exec failure as 1 (`failed to
    // exec pid1`), where Docker's and workcell's own say 127: the status must still be 127.
    let out = r.run_cmd(&[], &["/no/such/command"]);
    assert_eq!(out.status.code(), Some(127), "a command the image lacks: {}", stderr(&out));
    assert!(stderr(&out).contains("/no/such/command"), "the missing command is named");
}

/// Killed outright, workcell cannot clean up; its watchdog removes the container and the
/// volumes from the engine, and nothing is published.
#[test]
fn nothing_is_left_when_workcell_is_killed() {
    let Some(r) = rig(&["in: {path: ./in, mode: ro}", &format!("out: {{path: ./out, mode: rw, {PRE}}}")]) else { return };
    r.put("in/a.txt", "a\n");
    r.put("out/keep.txt", "keep\n");
    give_to_worker(&r.dir);
    let image = r.engine.busybox().to_string();
    let mut child = r
        .engine
        .workcell_process(&r.dir)
        .args(["run", "--backend", "docker", "--image", &image, "--", "/bin/sh", "-c", "echo k > /out/k.txt; exec sleep 600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn workcell");
    r.engine.wait_for_running(&mut child, Duration::from_secs(90));
    child.kill().expect("SIGKILL workcell");
    child.wait().expect("wait");
    // A give-up guard for the watchdog, not a measure of it.
    r.engine.wait_until_nothing_left(Duration::from_secs(60));
    assert_eq!(r.listing("out"), map(&[("keep.txt", "keep\n")]), "a killed run published");
}

/// `workcell plan` (no engine) accepts the project: what the run refuses is the remote engine.
fn plan_accepts(r: &Rig, args: &[&str]) {
    let out = support::workcell_in(&r.dir).arg("plan").args(args).args(["--", "true"]).output().expect("plan");
    assert_eq!(out.status.code(), Some(0), "the project itself is valid: {}", stderr(&out));
}

#[test]
fn image_host_is_refused() {
    let Some(r) = rig(&["in: {path: ./in, mode: ro}"]) else { return };
    let worker = "---\nimage: host\nsandbox:\n  zones:\n    - {name: in, mode: ro}\ncommand: [/bin/sh, -c, echo RAN]\n---\n";
    std::fs::create_dir_all(r.dir.join("workers")).expect("mkdir workers");
    std::fs::write(r.dir.join("workers/w.worker"), worker).expect("write worker");
    plan_accepts(&r, &[]);
    give_to_worker(&r.dir);
    // The default image, then a worker that names it.
    for args in [&["run", "--backend", "docker"][..], &["run", "w", "--backend", "docker"][..]] {
        let mut c = r.engine.workcell(&r.dir);
        c.args(args);
        if args.len() == 3 {
            c.args(["--", "/bin/sh", "-c", "echo RAN"]);
        }
        let out = c.output().expect("workcell");
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("image: host"), "{args:?}: the refusal names image: host: {err}");
        assert!(!stdout(&out).contains("RAN"), "{args:?}: the worker ran");
        r.engine.assert_nothing_left();
    }
}

#[test]
fn network_rules_are_refused() {
    let Some(r) = rig_with(&["in: {path: ./in, mode: ro}"], "  network:\n    allow: [example.invalid]\n") else { return };
    plan_accepts(&r, &[]);
    let out = r.run(&[], "echo RAN");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("network"), "the refusal names the network rules: {err}");
    assert!(!stdout(&out).contains("RAN"), "the worker ran");
}

/// The harness itself: engines started at once get their own namespace, address and
/// storage, and taking one down leaves nothing of it on this host.
#[test]
fn harness_engines_are_separate_and_leave_nothing() {
    if !backend_ready("remote") {
        return;
    }
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(RemoteEngine::start);
        let b = s.spawn(RemoteEngine::start);
        (a.join().expect("engine a"), b.join().expect("engine b"))
    });
    assert_ne!(a.docker_host(), b.docker_host());
    let made = a.docker().args(["volume", "create", "--label", "dev.workcell.kind=test", "only-on-a"]).output().expect("volume create");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let on_b = b.docker().args(["volume", "ls", "-q"]).output().expect("volume ls");
    assert!(!String::from_utf8_lossy(&on_b.stdout).contains("only-on-a"), "the engines share storage");
    // The host's own Podman storage is not the engine's either.
    assert!(!std::path::Path::new("/var/lib/containers/storage/volumes/only-on-a").exists());
    for e in [a, b] {
        let (name, link) = (e.name().to_string(), e.link());
        assert!(!processes_of(&name).is_empty(), "no process found for {name}: the check below would prove nothing");
        let out = e.stop();
        assert!(out.status.success(), "down {name}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(host_traces(&name), Vec::<String>::new());
        assert_eq!(processes_of(&name), Vec::<u32>::new(), "processes of {name} left");
        let link_left = std::process::Command::new("ip").args(["link", "show", &link]).output().expect("ip").status.success();
        assert!(!link_left, "link {link} left");
    }
}

/// The engine is on "another host" as far as files go: a bind mount of a host temp dir
/// cannot show a worker its content, so only shipping can get a zone there.
#[test]
fn harness_engine_cannot_see_this_hosts_files() {
    if !backend_ready("remote") {
        return;
    }
    let e = RemoteEngine::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    std::fs::write(dir.join("secret.txt"), "host secret\n").expect("write");
    let out = e
        .docker()
        .args(["run", "--rm", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "-v", &format!("{}:/x:ro", dir.display()), e.busybox()])
        .args(["sh", "-c", "ls -a /x; cat /x/secret.txt"])
        .output()
        .expect("docker run");
    let seen = String::from_utf8_lossy(&out.stdout);
    // (The status says nothing: Docker's CLI reports 0 for a `--rm` container on Podman.)
    assert!(seen.contains(".."), "the listing ran: {seen} {}", String::from_utf8_lossy(&out.stderr));
    assert!(!seen.contains("secret"), "the engine reached a host file through a bind mount: {seen}");
}

/// An engine whose owner dies without taking it down (a test killed outright) goes too.
#[test]
fn harness_engine_goes_when_its_owner_dies() {
    if !backend_ready("remote") {
        return;
    }
    struct Down(String);
    impl Drop for Down {
        fn drop(&mut self) {
            let _ = std::process::Command::new(script()).args(["down", &self.0]).output();
        }
    }
    let name = format!("wcr-owner-{}", std::process::id());
    let _down = Down(name.clone());
    let mut owner = std::process::Command::new("sleep").arg("600").spawn().expect("spawn owner");
    let up = std::process::Command::new(script()).args(["up", &name, "--owner", &owner.id().to_string()]).output().expect("up");
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    assert!(!processes_of(&name).is_empty());
    owner.kill().expect("kill owner");
    owner.wait().expect("wait owner");
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) && !(host_traces(&name).is_empty() && processes_of(&name).is_empty()) {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(host_traces(&name), Vec::<String>::new(), "the engine outlived its owner");
    assert_eq!(processes_of(&name), Vec::<u32>::new(), "processes of {name} left");
}

/// A unix socket forwarded to the remote engine (`ssh -L`, socat) is served by a process in
/// this mount namespace, but not by the engine: zones must be shipped, never bound by path
/// (the engine would bind whatever those paths are on its side).
#[test]
fn a_forwarded_socket_gets_the_zones_shipped() {
    forwarded_socket_gets_the_zones_shipped(None);
}

/// The same forwarder, named `dockerd` (any process may choose its name): still not the
/// engine, whose own pid the daemon's pid file names.
#[test]
fn a_forwarder_named_dockerd_gets_the_zones_shipped() {
    forwarded_socket_gets_the_zones_shipped(Some("dockerd"));
}

fn forwarded_socket_gets_the_zones_shipped(named: Option<&str>) {
    let Some(r) = rig(&[&format!("out: {{path: ./out, mode: rw, {PRE}}}")]) else { return };
    r.put("out/host.txt", "from the host\n");
    give_to_worker(&r.dir);
    let image = r.engine.busybox().to_string();
    let sock = r.dir.parent().expect("parent").join("fwd.sock");
    let target = r.engine.docker_host().trim_start_matches("tcp://").to_string();
    let socat = match named {
        Some(name) => {
            let socat = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join("socat"))
                .find(|p| p.is_file())
                .expect("socat (`bash .ci/test` as root installs it; apt-get install socat)");
            let renamed = r.dir.parent().expect("parent").join(name);
            std::fs::copy(socat, &renamed).expect("copy socat");
            renamed
        }
        None => "socat".into(),
    };
    let mut fwd = std::process::Command::new(socat)
        .arg(format!("UNIX-LISTEN:{},fork", sock.display()))
        .arg(format!("TCP:{target}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("socat (apt-get install socat)");
    let start = Instant::now();
    while !sock.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "socat did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = r
        .engine
        .workcell(&r.dir)
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .args(["run", "--backend", "docker", "--image", &image, "--", "/bin/sh", "-c", "cat /out/host.txt && echo back > /out/w.txt"])
        .output()
        .expect("workcell");
    let _ = fwd.kill();
    let _ = fwd.wait();
    assert_eq!(out.status.code(), Some(0), "stdout: {}\nstderr: {}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("from the host"), "the zone was not shipped: {}", stdout(&out));
    assert_eq!(r.listing("out"), map(&[("host.txt", "from the host\n"), ("w.txt", "back\n")]));
    r.engine.assert_nothing_left();
}

/// Ctrl-C while the writable zone comes back: the run ends 130 and nothing is published.
#[test]
fn an_interrupted_download_publishes_nothing() {
    let Some(r) = rig(&[&format!("out: {{path: ./out, mode: rw, {PRE}}}")]) else { return };
    give_to_worker(&r.dir);
    let image = r.engine.busybox().to_string();
    // A large file to bring back (sparse on the engine, every byte in the archive).
    let mut child = r
        .engine
        .workcell_process(&r.dir)
        .args(["run", "--backend", "docker", "--image", &image, "--", "/bin/sh", "-c", "echo m > /out/marker && truncate -s 3G /out/big && sleep 2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn workcell");
    // The worker's container is gone while workcell still runs: the download is under way.
    let start = Instant::now();
    let mut seen = false;
    loop {
        assert!(start.elapsed() < Duration::from_secs(120), "never saw the download phase");
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("workcell ended before the download could be interrupted: {status}");
        }
        let running =
            r.engine.docker().args(["ps", "-q", "--filter", "label=dev.workcell.managed=true", "--filter", "status=running"]).output().expect("docker ps");
        let any = !String::from_utf8_lossy(&running.stdout).trim().is_empty();
        if any {
            seen = true;
        } else if seen {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    rustix::process::kill_process(rustix::process::Pid::from_raw(child.id() as i32).expect("pid"), rustix::process::Signal::INT).expect("SIGINT");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(130), "stderr: {}", stderr(&out));
    assert!(r.listing("out").is_empty(), "something was published after the interruption: {:?}", r.listing("out"));
    r.engine.wait_until_nothing_left(Duration::from_secs(60));
}
