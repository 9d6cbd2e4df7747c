//! One behavioural suite for every backend: each test tries to cross one boundary through
//! the real `workcell` binary (`workcell run --backend X`), and the same bodies run for
//! bwrap and docker. Backend-specific bodies (the network tests, whose server must live
//! where the backend's worker can reach it) are added per backend.
//!
//! Gate (`support::backend_ready`): `WORKCELL_REQUIRE_BWRAP=1` / `WORKCELL_REQUIRE_DOCKER=1`
//! turn a missing backend into a failure; without them the tests are skipped with a note.
//! Workers use the host's own tools (`image: host`, the default): sh, cat, busybox nc.

mod support;

#[path = "behaviour/parity.rs"]
mod parity;

#[path = "behaviour/hostrun.rs"]
mod hostrun;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use support::scratch::Root;
use support::{assert_no_cgroup_left, processes_with_arg, run_cgroup_dirs, unique};
use workcell::backend::cgroup::{Controller, Support};

/// A scratch directory (`root`) holding zone directories and, beside them, things the
/// worker must not see.
struct Scratch(Root);

impl std::ops::Deref for Scratch {
    type Target = Root;
    fn deref(&self) -> &Root {
        &self.0
    }
}

impl Scratch {
    fn new() -> Scratch {
        Scratch(Root::new(&[], |_| {}))
    }

    fn mkdir(&self, name: &str) -> PathBuf {
        let p = self.root.join(name);
        std::fs::create_dir_all(&p).expect("mkdir");
        support::give_to_worker(&p);
        p
    }
}

/// `workcell run --backend BACKEND` in `cwd`; `docker+runsc` is the docker backend under
/// the runtime `runsc` (gVisor), `docker+pool` the docker backend starting warm from a pooled
/// sandbox that [`prefill`] made for the run.
fn workcell(backend: &str, cwd: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"));
    cmd.current_dir(cwd).arg("run");
    match backend.split_once('+') {
        Some((backend, "pool")) => cmd.arg("--backend").arg(backend),
        Some((backend, runtime)) => cmd.arg("--backend").arg(backend).arg("--runtime").arg(runtime),
        // The docker backend; `support::backend_ready` pointed DOCKER_HOST at Podman.
        None if backend == "podman" => cmd.arg("--backend").arg("docker"),
        None => cmd.arg("--backend").arg(backend),
    };
    cmd
}

/// For `docker+pool`: `workcell pool fill` with the run's own arguments, so that the run
/// that follows starts warm ([`pooled::assert_taken`] checks that it did).
fn prefill(backend: &str, cwd: &Path, args: &[&str]) {
    if backend == "docker+pool" {
        pooled::fill_with(cwd, args, &[]);
    }
}

fn run(backend: &str, cwd: &Path, args: &[&str]) -> Output {
    prefill(backend, cwd, args);
    let out = workcell(backend, cwd).args(args).output().expect("start workcell");
    if backend == "docker+pool" {
        pooled::assert_taken(cwd);
    }
    eprintln!(
        "workcell {args:?} -> {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// Whether `backend` enforces `c` here. Docker always does; bwrap needs a cgroup of its own,
/// which `WORKCELL_REQUIRE_CGROUP=1` (set by CI) makes a requirement.
fn enforces(backend: &str, c: Controller) -> bool {
    backend != "bwrap" || support::cgroup_ready(c)
}

/// Test bodies shared by every backend.
mod body {
    use super::*;
    pub use crate::hostrun::protected_git_stays_read_only;
    pub use crate::parity::{root_is_read_only, user_has_a_name};

    pub fn ro_zone_not_writable(backend: &str) {
        let s = Scratch::new();
        let zone = s.mkdir("in");
        std::fs::write(zone.join("a.txt"), "original").expect("write");
        let out = run(
            backend,
            &s.root,
            &["--zone", "in=./in:ro", "--", "sh", "-c", "cat /in/a.txt; echo changed > /in/a.txt; echo new > /in/b.txt; rm -f /in/a.txt; exit 0"],
        );
        assert_eq!(out.status.code(), Some(0));
        assert!(stdout(&out).starts_with("original"), "the zone itself must be readable");
        assert_eq!(std::fs::read_to_string(zone.join("a.txt")).expect("a.txt still there"), "original");
        assert!(!zone.join("b.txt").exists(), "a read-only zone got a new file");
    }

    pub fn rw_zone_writable(backend: &str) {
        let s = Scratch::new();
        let zone = s.mkdir("out");
        let out = run(backend, &s.root, &["--zone", "out=./out:rw", "--", "sh", "-c", "echo hello > /out/f.txt"]);
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(std::fs::read_to_string(zone.join("f.txt")).expect("written on the host"), "hello\n");
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(zone.join("f.txt")).expect("meta");
        assert_eq!(meta.uid(), support::worker_uid(), "the file belongs to the worker's user (the project owner), never root");
        assert_ne!(meta.uid(), 0);
    }

    pub fn host_paths_invisible(backend: &str) {
        let s = Scratch::new();
        let zone = s.mkdir("zone");
        let sibling = s.mkdir("sibling");
        std::fs::write(sibling.join("secret.txt"), "secret").expect("write");
        let probe = format!(
            "for p in /root /home /var/run/docker.sock /run/docker.sock /etc/shadow {} {} {}; do if [ -e \"$p\" ]; then echo VISIBLE:$p; fi; done; if grep -qs '^daemon:' /etc/passwd; then echo VISIBLE:the-host-passwd; fi; echo /*",
            sibling.display(),
            sibling.join("secret.txt").display(),
            zone.display()
        );
        let out = run(backend, &s.root, &["--zone", "zone=./zone:ro", "--", "sh", "-c", &probe]);
        assert_eq!(out.status.code(), Some(0));
        let text = stdout(&out);
        assert!(!text.contains("VISIBLE:"), "host paths visible inside the sandbox:\n{text}");
    }

    pub fn symlink_out_of_zone_does_not_reach(backend: &str) {
        let s = Scratch::new();
        let zone = s.mkdir("zone");
        let secret = s.root.join("secret.txt");
        std::fs::write(&secret, "TOPSECRET").expect("write");
        std::os::unix::fs::symlink(&secret, zone.join("abs-link")).expect("symlink");
        std::os::unix::fs::symlink("../secret.txt", zone.join("rel-link")).expect("symlink");
        let out = run(
            backend,
            &s.root,
            &["--zone", "zone=./zone:rw", "--", "sh", "-c", "echo /zone/*; cat /zone/abs-link; cat /zone/rel-link; echo x > /zone/abs-link; exit 0"],
        );
        assert_eq!(out.status.code(), Some(0));
        assert!(stdout(&out).contains("rel-link"), "the zone itself must be visible");
        assert!(!stdout(&out).contains("TOPSECRET"), "a symlink reached a file outside the zone");
        assert_eq!(std::fs::read_to_string(&secret).expect("secret"), "TOPSECRET", "a write through a symlink changed a file outside the zone");
    }

    pub fn host_env_not_leaked(backend: &str) {
        let s = Scratch::new();
        s.mkdir("in");
        let name = format!("WORKCELL_TEST_SECRET_{}", unique());
        let args = ["--zone", "in=./in:ro", "--", "env"];
        if backend == "docker+pool" {
            // The sandbox is made by a `pool fill` that has the variable too.
            pooled::fill_with(&s.root, &args, &[(name.as_str(), "leaked-value")]);
        }
        let out = workcell(backend, &s.root).env(&name, "leaked-value").args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(0));
        let text = stdout(&out);
        assert!(!text.contains(&name) && !text.contains("leaked-value"), "host variable reached the worker:\n{text}");
        assert!(text.contains("WORKCELL_RUN_ID="), "the plan's own variables are set:\n{text}");
    }

    pub fn no_new_privs_and_no_capabilities(backend: &str) {
        let s = Scratch::new();
        s.mkdir("in");
        let out = run(backend, &s.root, &["--zone", "in=./in:ro", "--", "cat", "/proc/self/status"]);
        assert_eq!(out.status.code(), Some(0));
        let text = stdout(&out);
        assert!(text.contains("NoNewPrivs:\t1"), "{text}");
        assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    }

    pub fn tmp_is_private(backend: &str) {
        let s = Scratch::new();
        s.mkdir("in");
        let marker = format!("workcell-tmp-marker-{}", unique());
        let script = format!("echo x > /tmp/{marker} && echo /tmp/*");
        let out = run(backend, &s.root, &["--zone", "in=./in:ro", "--", "sh", "-c", &script]);
        assert_eq!(out.status.code(), Some(0));
        assert!(stdout(&out).contains(&marker));
        assert!(!Path::new("/tmp").join(&marker).exists(), "the worker's /tmp is the host's");
        let again = run(backend, &s.root, &["--zone", "in=./in:ro", "--", "sh", "-c", &format!("test -e /tmp/{marker} && echo STILL-THERE; exit 0")]);
        assert!(!stdout(&again).contains("STILL-THERE"), "/tmp survived into the next run");
    }

    pub fn timeout_kills_everything(backend: &str) {
        let s = Scratch::new();
        s.mkdir("in");
        // `sleep A B` sleeps A+B seconds; B is a marker to find the processes again.
        let marker = format!("0.{}", unique());
        let script = format!("sleep 60 {marker} & sleep 61 {marker}");
        let out = run(backend, &s.root, &["--zone", "in=./in:ro", "--timeout", "2s", "--", "sh", "-c", &script]);
        assert_eq!(out.status.code(), Some(124));
        let left = processes_with_arg(&marker);
        assert!(left.is_empty(), "processes left running after the timeout: {left:?}");
    }

    pub fn killing_workcell_kills_worker(backend: &str) {
        let s = Scratch::new();
        s.mkdir("in");
        let marker = format!("0.{}", unique());
        let args = ["--zone", "in=./in:ro", "--", "sleep", "60", &marker];
        prefill(backend, &s.root, &args);
        let mut child = workcell(backend, &s.root).args(args).stdout(std::process::Stdio::null()).spawn().expect("start workcell");
        // The worker's own `sleep` (workcell and bwrap carry the marker in their argv too).
        let sleeping =
            || processes_with_arg(&marker).into_iter().any(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep"));
        assert!(wait_until(Duration::from_secs(30), sleeping), "the worker never started");
        child.kill().expect("SIGKILL workcell");
        let _ = child.wait();
        let gone = wait_until(Duration::from_secs(10), || processes_with_arg(&marker).is_empty());
        assert!(gone, "worker still running after workcell was killed: {:?}", processes_with_arg(&marker));
        if backend == "bwrap" {
            // Killed outright, workcell leaves its empty cgroups for `workcell gc`; the test
            // removes them itself (gc leaves cgroups younger than a minute alone).
            for dir in run_cgroup_dirs(&s.root).iter().filter(|d| d.exists()) {
                assert!(wait_until(Duration::from_secs(10), || std::fs::remove_dir(dir).is_ok() || !dir.exists()), "cannot remove {}", dir.display());
            }
        }
    }

    pub fn memory_hog_is_killed(backend: &str) {
        let s = Scratch::new();
        s.mkdir("in");
        let hog = "x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo done ${#x}";
        let out = run(backend, &s.root, &["--zone", "in=./in:ro", "--memory", "64m", "--timeout", "60s", "--", "sh", "-c", hog]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if !enforces(backend, Controller::Memory) {
            assert!(err.contains("not enforced") && err.contains("memory limit"), "an unenforced limit must be named: {err}");
            return;
        }
        assert!(!stdout(&out).contains("done"), "the hog got its memory");
        assert_ne!(out.status.code(), Some(0));
        assert_ne!(out.status.code(), Some(124), "killed by the memory limit, not the timeout");
        if backend == "bwrap" {
            assert!(err.contains("more than its memory limit"), "the kill is explained: {err}");
            assert_no_cgroup_left(&s.root);
        }
    }

    pub fn fork_bomb_is_contained(backend: &str) {
        let s = Scratch::new();
        s.mkdir("in");
        // 60 background processes against a limit of 20: some forks must fail.
        let many = "for i in $(seq 60); do sleep 2 & done; wait; echo finished";
        let out = run(backend, &s.root, &["--zone", "in=./in:ro", "--pids", "20", "--timeout", "60s", "--", "sh", "-c", many]);
        let err = String::from_utf8_lossy(&out.stderr).to_lowercase();
        if !enforces(backend, Controller::Pids) {
            assert!(err.contains("not enforced") && err.contains("process limit"), "an unenforced limit must be named: {err}");
            return;
        }
        assert!(err.contains("fork"), "60 processes started under a limit of 20: {err}");
        // The host can still start processes.
        assert!(std::process::Command::new("true").status().expect("spawn").success());
        if backend == "bwrap" {
            assert_no_cgroup_left(&s.root);
        }
    }

    fn fetch_script(ip: &str) -> String {
        // busybox wget segfaults in Debian 12's static build, so speak HTTP through nc.
        let get = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 2 {ip} 8080");
        format!("for i in 1 2 3 4 5 6 7 8; do if {get} | grep -qx ok; then echo reached; exit 0; fi; sleep 0.5; done; exit 1")
    }

    /// Engine backends: a server in a sibling container (a busybox httpd built FROM scratch by
    /// the test itself, on the engine's default bridge), not the host's loopback.
    pub fn network_off_blocks_a_sibling_container_on_allows_it(backend: &str) {
        let img = support::BusyboxImage::build("behaviour-net");
        let server = support::Server::httpd(&img, &format!("dev.workcell.test=behaviour-net-{}", std::process::id()));
        let s = Scratch::new();
        s.mkdir("in");
        let script = fetch_script(&server.ip);
        let off = run(backend, &s.root, &["--zone", "in=./in:ro", "--", "sh", "-c", &script]);
        assert_ne!(off.status.code(), Some(0), "the sibling was reached with the network off");
        assert!(!stdout(&off).contains("reached"));
        let on = run(backend, &s.root, &["--network", "--zone", "in=./in:ro", "--", "sh", "-c", &script]);
        assert_eq!(on.status.code(), Some(0), "{}", stdout(&on));
        assert!(stdout(&on).contains("reached"));
    }

    /// `workcell run … | head -1`: once the reader of workcell's stdout is gone, the worker
    /// ends (SIGPIPE, as when it writes to that pipe itself) and so does the run.
    pub fn closed_stdout_ends_the_run(backend: &str) {
        use std::io::BufRead;
        let s = Scratch::new();
        s.mkdir("in");
        let args = ["--zone", "in=./in:ro", "--", "yes"];
        prefill(backend, &s.root, &args);
        let mut child =
            workcell(backend, &s.root).args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().expect("start workcell");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("a line");
        assert_eq!(line, "y\n");
        // The reader is dropped: the pipe has no reader any more.
        let ended = wait_until(Duration::from_secs(60), || child.try_wait().expect("try_wait").is_some());
        if !ended {
            let _ = child.kill();
        }
        assert!(ended, "the run went on after the reader of its output was gone");
    }

    pub fn exit_statuses(backend: &str) {
        let s = Scratch::new();
        let zone = s.mkdir("in");
        std::fs::write(zone.join("data.txt"), "not a program").expect("write");
        assert_eq!(run(backend, &s.root, &["--zone", "in=./in:ro", "--", "sh", "-c", "exit 7"]).status.code(), Some(7));
        assert_eq!(run(backend, &s.root, &["--zone", "in=./in:ro", "--", "no-such-command-xyz"]).status.code(), Some(127));
        assert_eq!(run(backend, &s.root, &["--zone", "in=./in:ro", "--", "/in/data.txt"]).status.code(), Some(126));
    }
}

/// Generates one module per backend from the shared bodies, plus backend-specific items.
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

backend_suite!(
    bwrap,
    "bwrap",
    [
        ro_zone_not_writable,
        rw_zone_writable,
        host_paths_invisible,
        symlink_out_of_zone_does_not_reach,
        host_env_not_leaked,
        no_new_privs_and_no_capabilities,
        tmp_is_private,
        timeout_kills_everything,
        killing_workcell_kills_worker,
        exit_statuses,
        closed_stdout_ends_the_run,
        memory_hog_is_killed,
        fork_bomb_is_contained,
        root_is_read_only,
        user_has_a_name,
        protected_git_stays_read_only,
    ],
    {
        /// A server on the host loopback: with the network off the worker has its own
        /// network namespace, whose 127.0.0.1 has nothing listening.
        fn loopback_server() -> (std::net::TcpListener, u16) {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
            l.set_nonblocking(true).expect("nonblocking");
            let port = l.local_addr().expect("addr").port();
            (l, port)
        }

        #[test]
        fn network_off_blocks_loopback() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let (listener, port) = loopback_server();
            let script = format!("echo ping | busybox nc -w 2 127.0.0.1 {port}");
            let out = run(BACKEND, &s.root, &["--zone", "in=./in:ro", "--", "sh", "-c", &script]);
            assert_ne!(out.status.code(), Some(0), "the connection succeeded with the network off");
            assert!(listener.accept().is_err(), "the host server got a connection from a worker without network");
        }

        #[test]
        fn network_on_reaches_loopback() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let (listener, port) = loopback_server();
            let server = std::thread::spawn(move || {
                use std::io::Read;
                let start = Instant::now();
                loop {
                    match listener.accept() {
                        Ok((mut conn, _)) => {
                            let mut buf = String::new();
                            let _ = conn.set_nonblocking(false);
                            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                            let _ = conn.read_to_string(&mut buf);
                            return Some(buf);
                        }
                        Err(_) if start.elapsed() < Duration::from_secs(20) => std::thread::sleep(Duration::from_millis(20)),
                        Err(_) => return None,
                    }
                }
            });
            let script = format!("echo ping | busybox nc -w 2 127.0.0.1 {port}");
            let out = run(BACKEND, &s.root, &["--network", "--zone", "in=./in:ro", "--", "sh", "-c", &script]);
            assert_eq!(out.status.code(), Some(0));
            assert_eq!(server.join().expect("server thread").as_deref().map(str::trim), Some("ping"));
        }

        /// Every limit lands in the cgroup the worker's processes live in, read from the
        /// host while the worker runs; the cgroup is gone afterwards.
        #[test]
        fn limits_are_set_on_the_workers_cgroup() {
            if !(support::backend_ready(BACKEND)
                && enforces(BACKEND, Controller::Memory)
                && enforces(BACKEND, Controller::Pids)
                && enforces(BACKEND, Controller::Cpu))
            {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let marker = format!("0.{}", unique());
            let mut child = workcell(BACKEND, &s.root)
                .args(["--zone", "in=./in:ro", "--memory", "96m", "--pids", "33", "--cpus", "0.5", "--", "sleep", "30", &marker])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("start workcell");
            // The worker's own process (workcell and bwrap carry the marker in their argv too).
            let sleeper =
                || processes_with_arg(&marker).into_iter().find(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep"));
            assert!(wait_until(Duration::from_secs(30), || sleeper().is_some()), "the worker never started");
            let pid = sleeper().expect("worker pid");
            let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("the worker's cgroups");
            let support = Support::detect();
            let mut dirs = Vec::new();
            for (controller, place, file, want) in [
                ("memory", &support.memory, if support.memory.as_ref().is_ok_and(|p| p.v2) { "memory.max" } else { "memory.limit_in_bytes" }, "100663296"),
                ("pids", &support.pids, "pids.max", "33"),
                ("cpu", &support.cpu, if support.cpu.as_ref().is_ok_and(|p| p.v2) { "cpu.max" } else { "cpu.cfs_quota_us" }, "50000"),
            ] {
                let place = place.as_ref().expect("supported");
                let line = cgroups
                    .lines()
                    .find(|l| if place.v2 { l.starts_with("0::") } else { l.split(':').nth(1).is_some_and(|c| c.split(',').any(|x| x == controller)) })
                    .unwrap_or_else(|| panic!("no {controller} line in {cgroups}"));
                let name = line.rsplit('/').next().unwrap_or_default();
                assert!(name.starts_with("workcell-"), "the worker is not in a run cgroup for {controller}: {line}");
                let dir = place.parent.join(name);
                let value = std::fs::read_to_string(dir.join(file)).expect("limit file");
                assert!(value.trim().starts_with(want), "{controller}: {file} is {value:?}, want {want}");
                dirs.push(dir);
            }
            // bwrap and the sandbox's init are inside too (nothing of the sandbox was born
            // outside), while every thread of workcell itself is back in its own cgroup.
            let run_cgroup = |p: &str| std::fs::read_to_string(p).unwrap_or_default().lines().filter(|l| l.contains("/workcell-")).count();
            let bwraps: Vec<u32> = processes_with_arg(&marker)
                .into_iter()
                .filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "bwrap"))
                .collect();
            assert!(!bwraps.is_empty(), "no bwrap process found");
            for p in &bwraps {
                // One line per v1 hierarchy; v2 has one line for all controllers.
                let hierarchies = dirs.iter().collect::<std::collections::HashSet<_>>().len();
                assert_eq!(run_cgroup(&format!("/proc/{p}/cgroup")), hierarchies, "bwrap process {p} is not in every run cgroup");
            }
            let tasks = std::fs::read_dir(format!("/proc/{}/task", child.id())).expect("workcell's threads");
            for t in tasks.flatten() {
                assert_eq!(run_cgroup(&format!("{}/cgroup", t.path().display())), 0, "workcell thread {:?} stayed in the run cgroup", t.file_name());
            }
            child.kill().expect("stop workcell");
            let _ = child.wait();
            // Killed outright, workcell cannot clean up: the sandbox dies with it, and `gc`
            // removes the empty cgroups later; here the test does.
            assert!(wait_until(Duration::from_secs(10), || sleeper().is_none()), "the worker outlived workcell");
            for d in &dirs {
                assert!(wait_until(Duration::from_secs(10), || std::fs::remove_dir(d).is_ok() || !d.exists()), "cannot remove {}", d.display());
            }
            // A normal end removes the run's cgroups at once.
            let out = run(BACKEND, &s.root, &["--zone", "in=./in:ro", "--pids", "33", "--", "true"]);
            assert_eq!(out.status.code(), Some(0));
            assert_no_cgroup_left(&s.root);
        }
    }
);

// The docker network test needs a server in a sibling container, not the host's loopback.
backend_suite!(
    docker,
    "docker",
    [
        ro_zone_not_writable,
        rw_zone_writable,
        host_paths_invisible,
        symlink_out_of_zone_does_not_reach,
        host_env_not_leaked,
        no_new_privs_and_no_capabilities,
        tmp_is_private,
        timeout_kills_everything,
        killing_workcell_kills_worker,
        exit_statuses,
        closed_stdout_ends_the_run,
        memory_hog_is_killed,
        fork_bomb_is_contained,
        root_is_read_only,
        user_has_a_name,
        protected_git_stays_read_only,
        network_off_blocks_a_sibling_container_on_allows_it,
    ],
    {}
);

// The same bodies under gVisor (`--runtime runsc` on docker), with what differs there.
#[path = "behaviour/pooled.rs"]
mod pooled;

#[path = "behaviour/runsc.rs"]
mod runsc;

// The docker bodies on Podman's Docker-compatible service: `support::backend_ready` points
// DOCKER_HOST at `WORKCELL_PODMAN_SOCKET`; `WORKCELL_REQUIRE_PODMAN=1` makes it a requirement.
backend_suite!(
    podman,
    "podman",
    [
        ro_zone_not_writable,
        rw_zone_writable,
        host_paths_invisible,
        symlink_out_of_zone_does_not_reach,
        host_env_not_leaked,
        no_new_privs_and_no_capabilities,
        tmp_is_private,
        timeout_kills_everything,
        killing_workcell_kills_worker,
        exit_statuses,
        memory_hog_is_killed,
        fork_bomb_is_contained,
        root_is_read_only,
        user_has_a_name,
        protected_git_stays_read_only,
        network_off_blocks_a_sibling_container_on_allows_it,
    ],
    {
        /// With a read-only root Podman mounts a /var/tmp that every user may write; workcell
        /// lays a read-only one over it, so the worker writes only where the plan says.
        #[test]
        fn no_scratch_beyond_the_plans() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let probe = "for p in /var/tmp/x /run/x /x /etc/x; do if (echo x > $p) 2>/dev/null; then echo WROTE:$p; fi; done; exit 0";
            let out = run(BACKEND, &s.root, &["--zone", "in=./in:ro", "--", "sh", "-c", probe]);
            assert_eq!(out.status.code(), Some(0));
            assert!(!stdout(&out).contains("WROTE:"), "the worker wrote outside its zones and /tmp:\n{}", stdout(&out));
        }
    }
);
