//! The shared supervision layer, with the same bodies on bwrap, docker and none: a captured
//! run explains a command that cannot be run (127/126) in its own stderr; the timeout ends
//! the worker and everything it left in its reach; a process that left the sandbox's reach
//! (`setsid` under `--backend none`) cannot hold a captured run open; and an inherited run
//! forwards SIGTERM to the worker and ends with it, `--backend none` included.
//!
//! Captured runs go through the library (`backend::run` with `Output::Capture`, as the shell
//! tool and child workers do); inherited ones through the real `workcell` binary. A test that
//! hung would be ended by nextest's slow-timeout (.config/nextest.toml) as a failure.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::{processes_with_arg, unique};
use workcell::backend::{self, Attached, Finished, Output, Selected};
use workcell::config::{Limits, Project};
use workcell::plan::{LaunchPlan, Overrides};

/// A project directory with no zones.
struct Scene {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
        std::fs::write(dir.join("workcell.yaml"), "{}\n").expect("config");
        support::give_to_worker(&dir);
        Scene { _tmp: tmp, dir }
    }

    fn plan(&self, command: &[&str], timeout: Option<Duration>) -> LaunchPlan {
        let project = Project::load(Some(&self.dir.join("workcell.yaml")), &self.dir).expect("project loads");
        let ov = Overrides {
            command: Some(command.iter().map(|s| s.to_string()).collect()),
            limits: Limits { timeout, ..Limits::default() },
            ..Overrides::default()
        };
        LaunchPlan::build(&project, None, &project.sandbox, &ov).expect("plan")
    }
}

fn selected(backend: &str) -> Selected {
    match backend {
        "bwrap" => Selected::Bwrap,
        "docker" => Selected::Docker,
        "none" => Selected::None,
        other => panic!("unknown backend {other}"),
    }
}

fn captured(backend: &str, plan: &LaunchPlan) -> Finished {
    let out = backend::run(selected(backend), plan, Output::Capture, Attached::default()).expect("the run starts");
    eprintln!("exit {}\nstdout: {}\nstderr: {}", out.exit_code, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// Waits (up to a generous limit that only turns a hang into a failure) until no process
/// carries `marker`; returns whether none does.
fn gone(marker: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    while !processes_with_arg(marker).is_empty() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Kills what carries `marker` (and its process group) when the test ends, passed or not: a
/// process that left an unisolated run's reach is the test's to clean up.
struct Reap(String);

impl Drop for Reap {
    fn drop(&mut self) {
        for pid in processes_with_arg(&self.0) {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
    }
}

/// A `sleep` that runs until it is killed, recognisable by `marker` (GNU sleep adds its
/// arguments up).
fn long_sleep(marker: &str) -> String {
    format!("sleep 100000 {marker}")
}

mod body {
    use super::*;

    /// A program that does not exist: 127, explained in the captured stderr.
    pub fn not_found_explained(backend: &str) {
        let scene = Scene::new();
        let out = captured(backend, &scene.plan(&["/nonexistent-workcell-program"], None));
        assert_eq!(out.exit_code, 127);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("/nonexistent-workcell-program: command not found inside the worker"), "{stderr}");
        assert!(!out.timed_out);
    }

    /// A program that exists but cannot be executed (a directory): 126, explained.
    pub fn not_executable_explained(backend: &str) {
        let scene = Scene::new();
        let out = captured(backend, &scene.plan(&["/usr"], None));
        assert_eq!(out.exit_code, 126);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("/usr: not executable inside the worker"), "{stderr}");
    }

    /// The timeout stops the worker and what it started (124, explained, `timed_out`), and
    /// nothing of it is left running when the run returns.
    pub fn timeout_ends_everything(backend: &str) {
        let scene = Scene::new();
        let marker = unique();
        let _reap = Reap(marker.clone());
        let script = format!("{} & wait", long_sleep(&marker));
        let out = captured(backend, &scene.plan(&["sh", "-c", &script], Some(Duration::from_secs(2))));
        assert_eq!(out.exit_code, 124);
        assert!(out.timed_out);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("ran longer than its timeout"), "{stderr}");
        assert!(gone(&marker), "the worker's background process outlived the run");
    }

    /// A worker that exits leaving a process behind in its reach: the run returns with the
    /// worker's status, and the process goes with the run.
    pub fn leftovers_go_with_the_run(backend: &str) {
        let scene = Scene::new();
        let marker = unique();
        let _reap = Reap(marker.clone());
        // The worker exits only once the process runs `sleep` (its command line shows the marker).
        let script = format!(
            "{} >/dev/null 2>&1 & p=$!; until tr '\\0' ' ' < /proc/$p/cmdline | grep -q {marker}; do sleep 0.01; done; echo started; exit 5",
            long_sleep(&marker)
        );
        let out = captured(backend, &scene.plan(&["sh", "-c", &script], None));
        assert_eq!(out.exit_code, 5);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
        assert!(gone(&marker), "a process the worker left behind outlived the run");
    }

    /// A process in a session of its own that keeps the output pipes open: the run still
    /// returns, with the worker's own status and output. (Under bwrap and docker the pid
    /// namespace takes it with the run; under none it lives on, beyond reach.)
    pub fn escapee_cannot_hold_the_run(backend: &str) {
        let scene = Scene::new();
        let marker = unique();
        let _reap = Reap(marker.clone());
        // The worker exits only once the escapee leads its own session (`setsid` execs the
        // sleep in the same process when it is not a group leader, so `$!` is the escapee).
        let script =
            format!("setsid {} & p=$!; until [ \"$(cut -d' ' -f6 /proc/$p/stat)\" = \"$p\" ]; do sleep 0.01; done; echo worker; exit 3", long_sleep(&marker));
        let out = captured(backend, &scene.plan(&["sh", "-c", &script], None));
        assert_eq!(out.exit_code, 3);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "worker\n");
        assert!(!out.timed_out);
        if backend != "none" {
            assert!(gone(&marker), "the escapee outlived a {backend} run");
        }
    }

    /// SIGTERM to workcell reaches the worker (which dies of it: 143), and nothing of the
    /// run is left.
    pub fn sigterm_reaches_the_worker(backend: &str) {
        let scene = Scene::new();
        let marker = unique();
        let _reap = Reap(marker.clone());
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
            .current_dir(&scene.dir)
            .args(["run", "--no-broker", "--backend", backend, "--", "sh", "-c", &format!("{}; exit 9", long_sleep(&marker))])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn workcell");
        let until = Instant::now() + Duration::from_secs(60);
        while processes_with_arg(&marker).is_empty() {
            assert!(Instant::now() < until, "the worker never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).expect("signal workcell");
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(143), "{status:?}");
        assert!(gone(&marker), "the worker outlived the signalled run");
    }

    /// The timeout of an inherited run: 124, explained on workcell's stderr.
    pub fn inherited_timeout(backend: &str) {
        let scene = Scene::new();
        let marker = unique();
        let _reap = Reap(marker.clone());
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
            .current_dir(&scene.dir)
            .args(["run", "--no-broker", "--backend", backend, "--timeout", "2s", "--", "sh", "-c", &format!("{} & wait", long_sleep(&marker))])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run workcell");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(124), "{stderr}");
        assert!(stderr.contains("ran longer than its timeout"), "{stderr}");
        assert!(gone(&marker), "the worker outlived the timeout");
    }
}

macro_rules! backend_suite {
    ($module:ident, $backend:literal) => {
        mod $module {
            use super::*;
            const BACKEND: &str = $backend;

            #[test]
            fn not_found_explained() {
                if support::backend_ready(BACKEND) {
                    body::not_found_explained(BACKEND);
                }
            }

            #[test]
            fn not_executable_explained() {
                if support::backend_ready(BACKEND) {
                    body::not_executable_explained(BACKEND);
                }
            }

            #[test]
            fn timeout_ends_everything() {
                if support::backend_ready(BACKEND) {
                    body::timeout_ends_everything(BACKEND);
                }
            }

            #[test]
            fn leftovers_go_with_the_run() {
                if support::backend_ready(BACKEND) {
                    body::leftovers_go_with_the_run(BACKEND);
                }
            }

            #[test]
            fn escapee_cannot_hold_the_run() {
                if support::backend_ready(BACKEND) {
                    body::escapee_cannot_hold_the_run(BACKEND);
                }
            }

            #[test]
            fn sigterm_reaches_the_worker() {
                if support::backend_ready(BACKEND) {
                    body::sigterm_reaches_the_worker(BACKEND);
                }
            }

            #[test]
            fn inherited_timeout() {
                if support::backend_ready(BACKEND) {
                    body::inherited_timeout(BACKEND);
                }
            }
        }
    };
}

backend_suite!(bwrap, "bwrap");
backend_suite!(docker, "docker");
backend_suite!(none, "none");
