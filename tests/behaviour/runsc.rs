//! The behaviour suite under gVisor: `workcell run --backend docker --runtime runsc`. The
//! isolation bodies are the docker ones; what differs under gVisor has bodies of its own
//! here: the worker's processes are not host processes (they live inside gVisor's kernel, so
//! the host-side process checks become container checks), the process limit counts gVisor's
//! own host threads, and the worker sees gVisor's kernel, not the host's.
//!
//! Gate: `support::backend_ready("docker+runsc")`; `WORKCELL_REQUIRE_RUNSC=1` (set by
//! `.ci/run`, which registers runsc with the daemon) makes a missing runtime a failure.
//! gVisor is slower to start than runc: no test here measures time, and the deadlines are
//! only there to turn a hang into a failure.

use super::*;

/// Containers (any state) of runs whose project directory is `dir`.
fn containers_of(dir: &Path) -> Vec<String> {
    support::containers_with_label(&format!("dev.workcell.project={}", dir.display()))
}

/// The host's kernel release, for comparing with what the worker sees.
fn host_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("host kernel release").trim().to_string()
}

backend_suite!(
    under_runsc,
    "docker+runsc",
    [
        ro_zone_not_writable,
        rw_zone_writable,
        host_paths_invisible,
        symlink_out_of_zone_does_not_reach,
        host_env_not_leaked,
        tmp_is_private,
        exit_statuses,
        memory_hog_is_killed,
        root_is_read_only,
        user_has_a_name,
        protected_git_stays_read_only,
    ],
    {
        /// The worker runs on gVisor's kernel: `uname -r` and `/proc/version` are gVisor's,
        /// and its kernel log is gVisor's own. The same probe under runc sees the host's
        /// kernel, so this test can tell the two apart.
        #[test]
        fn worker_sees_gvisors_kernel() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let probe = ["--zone", "in=./in:ro", "--", "sh", "-c", "uname -r; cat /proc/version; dmesg 2>&1 | head -n 3; exit 0"];
            let out = run(BACKEND, &s.root, &probe);
            assert_eq!(out.status.code(), Some(0));
            let text = stdout(&out);
            let release = text.lines().next().unwrap_or_default().trim().to_string();
            assert!(!release.is_empty(), "no kernel release: {text}");
            assert_ne!(release, host_release(), "the worker sees the host's kernel under runsc:\n{text}");
            assert!(text.contains("gVisor"), "gVisor's kernel log is missing:\n{text}");
            // The control: the same probe under the daemon's default runtime sees the host's.
            let plain = run("docker", &s.root, &probe);
            assert_eq!(plain.status.code(), Some(0));
            assert_eq!(stdout(&plain).lines().next().unwrap_or_default().trim(), host_release());
            assert!(!stdout(&plain).contains("gVisor"), "{}", stdout(&plain));
        }

        /// No capabilities and no_new_privs, as under runc. gVisor's `/proc/self/status` has
        /// no `NoNewPrivs` line, so the flag is read with prctl (util-linux's setpriv).
        #[test]
        fn no_new_privs_and_no_capabilities() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let probe = "setpriv --dump 2>/dev/null | grep no_new_privs; grep CapEff /proc/self/status";
            let out = run(BACKEND, &s.root, &["--zone", "in=./in:ro", "--", "sh", "-c", probe]);
            assert_eq!(out.status.code(), Some(0));
            let text = stdout(&out);
            assert!(text.contains("no_new_privs: 1"), "{text}");
            assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
        }

        /// The tool broker (a Unix socket bound into the container) answers under gVisor;
        /// it needs the runtime's `--host-uds=open`.
        #[test]
        fn broker_works_under_gvisor() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            let zone = s.mkdir("in");
            std::fs::write(zone.join("a.txt"), "read through the broker").expect("write");
            let call = "curl -s --max-time 60 --unix-socket \"$WORKCELL_BROKER\" -H \"Authorization: Bearer $WORKCELL_TOKEN\" \
                -H 'Content-Type: application/json' --data-binary '{\"path\":\"/in/a.txt\"}' http://workcell/v1/tools/read_file";
            let out = run(BACKEND, &s.root, &["--zone", "in=./in:ro", "--", "sh", "-c", call]);
            assert_eq!(out.status.code(), Some(0));
            let text = stdout(&out);
            assert!(text.contains("read through the broker"), "the broker did not answer under gVisor:\n{text}");
        }

        /// A timeout ends the run with 124 and removes its container: gVisor's sandbox (and
        /// every process inside it) goes with it.
        #[test]
        fn timeout_ends_the_sandbox() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let out = run(BACKEND, &s.root, &["--zone", "in=./in:ro", "--timeout", "3s", "--", "sh", "-c", "sleep 60 & sleep 61"]);
            assert_eq!(out.status.code(), Some(124));
            // Removed before workcell exits; the wait only turns a slow daemon into no failure.
            let gone = wait_until(Duration::from_secs(30), || containers_of(&s.root).is_empty());
            assert!(gone, "the container outlived the timeout: {:?}", containers_of(&s.root));
        }

        /// Killing workcell outright removes the container (the watchdog), and the sandbox
        /// with it.
        #[test]
        fn killing_workcell_removes_the_sandbox() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let mut child = workcell(BACKEND, &s.root)
                .args(["--zone", "in=./in:ro", "--", "sleep", "120"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("start workcell");
            let label = format!("dev.workcell.project={}", s.root.display());
            support::wait_for_running(&label, Duration::from_secs(120));
            child.kill().expect("SIGKILL workcell");
            let _ = child.wait();
            let gone = wait_until(Duration::from_secs(60), || containers_of(&s.root).is_empty());
            if !gone {
                for id in containers_of(&s.root) {
                    let _ = std::process::Command::new("docker").args(["rm", "-f", &id]).output();
                }
            }
            assert!(gone, "the container outlived workcell");
        }

        /// The process limit holds, but it counts gVisor's own host threads (about 80 for the
        /// sandbox, and more per worker process), not the worker's processes: 60 processes
        /// under a limit of 100 never all start. Depending on where the limit bites, the
        /// sandbox does not start (125, the daemon's message) or gVisor stops it. Either
        /// way the worker does not finish and the host is unaffected (docs/backends.md, "gVisor").
        #[test]
        fn fork_bomb_is_contained() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let many = "for i in $(seq 60); do sleep 2 & done; wait; echo finished";
            let out = run(BACKEND, &s.root, &["--zone", "in=./in:ro", "--pids", "100", "--timeout", "120s", "--", "sh", "-c", many]);
            assert!(!stdout(&out).contains("finished"), "60 processes ran under a limit of 100");
            assert_ne!(out.status.code(), Some(0));
            assert_ne!(out.status.code(), Some(124), "stopped by the limit, not the timeout");
            assert!(std::process::Command::new("true").status().expect("spawn").success());
            assert!(wait_until(Duration::from_secs(30), || containers_of(&s.root).is_empty()), "container left: {:?}", containers_of(&s.root));
        }

        /// A process limit high enough for gVisor's own threads lets the same work finish:
        /// the limit above refused it for its size, not for running under gVisor.
        #[test]
        fn a_generous_process_limit_lets_the_work_finish() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let many = "for i in $(seq 60); do sleep 2 & done; wait; echo finished";
            let out = run(BACKEND, &s.root, &["--zone", "in=./in:ro", "--pids", "8192", "--timeout", "120s", "--", "sh", "-c", many]);
            assert_eq!(out.status.code(), Some(0));
            assert!(stdout(&out).contains("finished"));
        }

        /// The network is off by default under gVisor too: a server in a sibling container
        /// is out of reach; `--network` reaches it.
        #[test]
        fn network_off_blocks_a_sibling_container_on_allows_it() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let img = support::BusyboxImage::build(&format!("runsc-net-{}", unique()));
            let server = support::Server::httpd(&img, &format!("dev.workcell.test=runsc-net-{}", unique()));
            let s = Scratch::new();
            s.mkdir("in");
            let get = format!("printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | busybox nc -w 5 {} 8080", server.ip);
            let script = format!("for i in 1 2 3 4 5 6 7 8; do if {get} | grep -qx ok; then echo reached; exit 0; fi; sleep 1; done; exit 1");
            let off = run(BACKEND, &s.root, &["--zone", "in=./in:ro", "--", "sh", "-c", &script]);
            assert_ne!(off.status.code(), Some(0), "the sibling was reached with the network off");
            assert!(!stdout(&off).contains("reached"));
            let on = run(BACKEND, &s.root, &["--network", "--zone", "in=./in:ro", "--", "sh", "-c", &script]);
            assert_eq!(on.status.code(), Some(0), "{}", stdout(&on));
            assert!(stdout(&on).contains("reached"));
        }
    }
);
