//! The behaviour suite on warm starts (`workcell pool fill`, then `workcell run` with the
//! same arguments takes the pooled sandbox): the docker bodies, each run checked to have
//! been warm, and what only a pool has — two runs never share a sandbox, an entry that no
//! longer matches its run (a zone replaced, a protected path made, other limits, a stopped
//! container) is never used, Ctrl-C gives 130 and removes the container, `pool drain` and
//! `gc` leave nothing.

use super::*;

/// `workcell pool fill --backend docker ARGS` (the run's arguments, its command
/// included), with `env` set for the fill.
pub fn fill_with(cwd: &Path, args: &[&str], env: &[(&str, &str)]) {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"));
    cmd.current_dir(cwd).args(["pool", "fill", "--backend", "docker"]).args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("start workcell pool fill");
    assert!(out.status.success(), "pool fill {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// The pooled sandboxes of the project in `cwd` (`pool ls --json`): (id, state).
pub fn entries(cwd: &Path) -> Vec<(String, String)> {
    let out = support::workcell_in(cwd).args(["pool", "ls", "--json"]).output().expect("pool ls");
    assert!(out.status.success(), "pool ls: {}", String::from_utf8_lossy(&out.stderr));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).expect("pool ls --json");
    list.as_array()
        .expect("a list")
        .iter()
        .map(|e| (e["id"].as_str().unwrap_or_default().to_string(), e["state"].as_str().unwrap_or_default().to_string()))
        .collect()
}

/// The run took the pooled sandbox made for it: none is left ready for this project.
pub fn assert_taken(cwd: &Path) {
    let ready: Vec<_> = entries(cwd).into_iter().filter(|(_, s)| s == "ready").collect();
    if !ready.is_empty() {
        let _ = support::workcell_in(cwd).args(["pool", "drain"]).output();
        panic!("the run started cold: the pooled sandbox made for it is still there ({ready:?})");
    }
}

fn containers_of(dir: &Path) -> Vec<String> {
    support::containers_with_label(&format!("dev.workcell.project={}", dir.display()))
}

fn assert_none_left(dir: &Path) {
    assert!(wait_until(Duration::from_secs(20), || containers_of(dir).is_empty()), "containers left: {:?}", containers_of(dir));
}

backend_suite!(
    pooled,
    "docker+pool",
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
        /// Four runs at once against two pooled sandboxes: each sees only its own `/tmp`
        /// (two go warm, two cold), and nothing is left.
        #[test]
        fn concurrent_runs_never_share_a_sandbox() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let args = ["--zone", "in=./in:ro", "--", "sh", "-c", "touch /tmp/mark-$1; sleep 1; ls /tmp", "sh"];
            fill_with(&s.root, &args, &[]);
            fill_with(&s.root, &args, &[]);
            assert_eq!(entries(&s.root).len(), 2);
            let runs: Vec<_> = (0..4)
                .map(|i| {
                    let mut a: Vec<String> = args.iter().map(|x| x.to_string()).collect();
                    a.push(format!("run{i}"));
                    workcell("docker", &s.root).args(&a).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("spawn")
                })
                .collect::<Vec<_>>();
            for (i, child) in runs.into_iter().enumerate() {
                let out = child.wait_with_output().expect("run");
                assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
                let seen: Vec<String> = stdout(&out).split_whitespace().filter(|f| f.starts_with("mark-")).map(str::to_string).collect();
                assert_eq!(seen, vec![format!("mark-run{i}")], "run {i} saw another run's /tmp");
            }
            assert!(entries(&s.root).is_empty(), "the pooled sandboxes were not taken: {:?}", entries(&s.root));
            assert_none_left(&s.root);
        }

        /// Four runs at the same moment over two pooled sandboxes: each sandbox serves one
        /// run at most (a claim is a rename only one run can win).
        #[test]
        fn simultaneous_claims_take_each_sandbox_once() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("out");
            let args = ["--zone", "out=./out:rw", "--", "sh", "-c", "ls /tmp > /out/$1; touch /tmp/used; sleep 1", "sh"];
            fill_with(&s.root, &args, &[]);
            fill_with(&s.root, &args, &[]);
            let children: Vec<_> = (0..4)
                .map(|i| workcell("docker", &s.root).args(args).arg(format!("r{i}")).stdout(std::process::Stdio::null()).spawn().expect("spawn"))
                .collect();
            for mut c in children {
                assert!(c.wait().expect("wait").success());
            }
            for i in 0..4 {
                let seen = std::fs::read_to_string(s.root.join(format!("out/r{i}"))).expect("each run wrote its listing");
                assert!(!seen.contains("used"), "run r{i} got a sandbox another run had used: {seen}");
            }
            assert!(entries(&s.root).is_empty());
            assert_none_left(&s.root);
        }

        /// An entry that no longer matches the run is never used: the run goes cold, says
        /// why at RUST_LOG=debug, and the entry stays until drained.
        #[test]
        fn a_stale_entry_is_never_used() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            let zone = s.mkdir("out");
            let args = ["--zone", "out=./out:rw", "--", "sh", "-c", "ls -a /out; touch /out/ran"];
            let debug_run = |args: &[&str]| {
                let out = workcell("docker", &s.root).env("RUST_LOG", "workcell=debug").args(args).output().expect("run");
                assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
                String::from_utf8_lossy(&out.stderr).into_owned()
            };
            // The zone's directory replaced by another of the same name.
            fill_with(&s.root, &args, &[]);
            std::fs::rename(&zone, s.root.join("out.old")).expect("move the zone away");
            s.mkdir("out");
            let err = debug_run(&args);
            assert!(err.contains("its zones differ"), "the reason is told at debug: {err}");
            assert_eq!(entries(&s.root).len(), 1, "the stale entry was used");
            assert!(s.root.join("out/ran").exists(), "the cold run worked in the new directory");
            assert!(!s.root.join("out.old/ran").exists(), "the run wrote to the replaced directory");
            drain(&s.root);

            // A protected path made after the fill (a git checkout's hooks).
            fill_with(&s.root, &args, &[]);
            std::fs::create_dir_all(s.root.join("out/.git/hooks")).expect("mkdir .git/hooks");
            support::give_to_worker(&s.root.join("out"));
            let err = debug_run(&args);
            assert!(err.contains("protected paths differ"), "{err}");
            assert_eq!(entries(&s.root).len(), 1, "{:?}", entries(&s.root));
            drain(&s.root);

            // Other limits.
            let limited = ["--memory", "128m", "--zone", "out=./out:rw", "--", "true"];
            fill_with(&s.root, &limited, &[]);
            let err = debug_run(&["--memory", "256m", "--zone", "out=./out:rw", "--", "true"]);
            assert!(err.contains("its limits is not this run's"), "{err}");
            // The same limits take it.
            debug_run(&limited);
            assert!(entries(&s.root).is_empty());

            // A container stopped behind the pool's back: removed, and the run goes cold.
            fill_with(&s.root, &args, &[]);
            for c in containers_of(&s.root) {
                let _ = std::process::Command::new("docker").args(["kill", &c]).output();
            }
            let err = debug_run(&args);
            assert!(err.contains("unusable"), "{err}");
            assert!(entries(&s.root).is_empty(), "the unusable entry stays: {:?}", entries(&s.root));
            assert_none_left(&s.root);
        }

        /// Ctrl-C during a warm run: 130, the container and the worker's processes gone.
        #[test]
        fn interrupt_removes_the_pooled_container() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let marker = format!("0.{}", unique());
            let args = ["--zone", "in=./in:ro", "--", "sleep", "60", &marker];
            fill_with(&s.root, &args, &[]);
            let child = workcell("docker", &s.root)
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start workcell");
            let sleeping =
                || processes_with_arg(&marker).into_iter().any(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "sleep"));
            assert!(wait_until(Duration::from_secs(30), sleeping), "the worker never started");
            assert!(entries(&s.root).iter().all(|(_, st)| st == "claimed"), "the run is warm");
            let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
            rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT");
            let out = child.wait_with_output().expect("wait");
            assert_eq!(out.status.code(), Some(130));
            assert!(String::from_utf8_lossy(&out.stderr).contains("interrupted by SIGINT"));
            assert!(wait_until(Duration::from_secs(10), || processes_with_arg(&marker).is_empty()), "the worker still runs");
            assert_none_left(&s.root);
            assert!(entries(&s.root).is_empty());
        }

        /// `pool drain` removes what it filled; `gc` removes entries whose container is gone
        /// and containers whose entry is gone.
        #[test]
        fn drain_and_gc_leave_nothing() {
            if !support::backend_ready(BACKEND) {
                return;
            }
            let s = Scratch::new();
            s.mkdir("in");
            let args = ["--zone", "in=./in:ro", "--", "true"];
            fill_with(&s.root, &args, &[]);
            fill_with(&s.root, &args, &[]);
            assert_eq!(containers_of(&s.root).len(), 2);
            drain(&s.root);
            assert!(entries(&s.root).is_empty());
            assert_none_left(&s.root);

            // The container gone (stopped, then removed by the daemon): gc removes the entry.
            fill_with(&s.root, &args, &[]);
            for c in containers_of(&s.root) {
                let _ = std::process::Command::new("docker").args(["kill", &c]).output();
            }
            assert_none_left(&s.root);
            gc(&s.root);
            assert!(entries(&s.root).is_empty(), "gc left {:?}", entries(&s.root));

            // The entry gone: gc removes the container.
            fill_with(&s.root, &args, &[]);
            let (id, _) = entries(&s.root).pop().expect("an entry");
            std::fs::remove_dir_all(std::path::Path::new("/run/workcell/pool").join(&id)).expect("remove the entry");
            gc(&s.root);
            assert_none_left(&s.root);
        }
    }
);

fn drain(cwd: &Path) {
    let out = support::workcell_in(cwd).args(["pool", "drain"]).output().expect("pool drain");
    assert!(out.status.success(), "pool drain: {}", String::from_utf8_lossy(&out.stderr));
}

fn gc(cwd: &Path) {
    let out = support::workcell_in(cwd).arg("gc").output().expect("gc");
    assert!(out.status.success(), "gc: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}
