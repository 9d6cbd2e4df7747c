//! Files the host runs, planted by a hostile worker in a writable zone that held none at
//! launch (issue 22): after the run they are no longer where the host's tools look, they
//! are in the zone's `.workcell/quarantine/RUN_ID/`, stderr and the audit log name them,
//! and a host-side `git status` / `git checkout` as the zone's owner runs nothing of the
//! worker's. The same bodies run on bwrap and docker.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use support::scratch::Root;

/// A project directory (`proj/`, the runs' cwd) with zones made on demand, and `outside/`
/// beside it that no zone holds.
struct Scratch(Root);

impl std::ops::Deref for Scratch {
    type Target = Root;
    fn deref(&self) -> &Root {
        &self.0
    }
}

impl Scratch {
    fn new() -> Scratch {
        Scratch(Root::new(&["proj", "outside"], |root| std::fs::write(root.join("outside/keep.txt"), "untouched\n").expect("write")))
    }

    fn proj(&self) -> PathBuf {
        self.root.join("proj")
    }

    fn zone(&self, name: &str) -> PathBuf {
        let p = self.proj().join(name);
        std::fs::create_dir_all(&p).expect("mkdir");
        support::give_to_worker(&p);
        p
    }

    fn run(&self, backend: &str, args: &[&str]) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
            .current_dir(self.proj())
            .env_remove("RUST_LOG")
            .arg("run")
            .args(match backend.split_once('+') {
                Some((backend, runtime)) => vec!["--backend", backend, "--runtime", runtime],
                None => vec!["--backend", backend],
            })
            .args(args)
            .output()
            .expect("start workcell");
        eprintln!("workcell {args:?} -> {:?}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
        out
    }

    fn audit(&self) -> Vec<Value> {
        let log = std::fs::read_to_string(self.proj().join(".workcell/audit.jsonl")).unwrap_or_default();
        log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    }

    fn outside_unchanged(&self) {
        let names: Vec<_> = std::fs::read_dir(self.root.join("outside")).expect("outside").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("keep.txt")], "something was made outside the zone");
    }
}

/// The one run id of `audit`'s `quarantine` records, and their items' paths.
fn quarantined(audit: &[Value]) -> (String, Vec<String>) {
    let recs: Vec<&Value> = audit.iter().filter(|e| e["event"] == "quarantine").collect();
    assert_eq!(recs.len(), 1, "one quarantine record per run: {audit:?}");
    let items = recs[0]["areas"].as_array().expect("areas").iter().flat_map(|a| a["items"].as_array().cloned().unwrap_or_default());
    (recs[0]["run_id"].as_str().expect("run id").to_string(), items.map(|i| i["path"].as_str().unwrap_or("").to_string()).collect())
}

/// `git ARGS` in `dir` on the host, as the zone's owner, with no configuration of ours.
fn host_git(dir: &Path, home: &Path, args: &[&str]) -> Output {
    let mut c = support::as_worker("git");
    c.current_dir(dir).args(args).env("HOME", home).env("GIT_CONFIG_NOSYSTEM", "1").env_remove("GIT_DIR");
    c.output().expect("git")
}

mod body {
    use super::*;

    pub fn planted_files_are_moved_aside(backend: &str) {
        let s = Scratch::new();
        let out = s.zone("out");
        s.zone("home");
        let marker = s.root.join("outside/RAN");
        let outside = s.root.join("outside");
        let hook = format!("#!/bin/sh\\ntouch {}\\n", marker.display());
        // Each step as a hostile worker would: the .workcell link first, so that a careless
        // quarantine would follow it out of the zone.
        let script = format!(
            "set -e; cd /out; ln -s {outside} .workcell; echo 'touch {m}' > .envrc; mkdir -p .vscode; \
             echo '{{\"tasks\":[{{\"runOptions\":{{\"runOn\":\"folderOpen\"}}}}]}}' > .vscode/tasks.json; \
             git init -q sub; cd sub; git config user.email w@x; git config user.name w; echo a > a; git add a; git commit -qm a; \
             git branch other; git config core.fsmonitor 'touch {m}; false'; printf '{hook}' > .git/hooks/post-checkout; \
             chmod +x .git/hooks/post-checkout; cd /out; git init -q hidden/src; mv hidden/src/.git hidden/g; \
             printf '{hook}' > hidden/g/hooks/post-checkout; chmod +x hidden/g/hooks/post-checkout; mkdir p; \
             printf 'gitdir: ../hidden/g\\n' > p/.git; git init -q --bare bare; git -C bare config core.pager 'touch {m}; cat'; \
             echo 'touch {m}' >> /home/.bashrc; echo done",
            outside = outside.display(),
            m = marker.display(),
        );
        let o = s.run(backend, &["--zone", "out=./out:rw", "--zone", "home=./home:rw", "--", "sh", "-c", &script]);
        assert_eq!(o.status.code(), Some(0), "the worker's script ran");
        let stderr = String::from_utf8_lossy(&o.stderr);
        // A git directory by its contents, whatever its name (git run inside a bare repository
        // reads its config): its config and hooks go too.
        for gone in [".envrc", ".vscode", "sub/.git/config", "sub/.git/hooks", "p/.git", "hidden/g/config", "hidden/g/hooks", "bare/config"] {
            assert!(out.join(gone).symlink_metadata().is_err(), "{gone} stayed in place");
            assert!(stderr.contains(&format!("moved aside {gone} in ")), "stderr names {gone}: {stderr}");
        }
        assert!(s.proj().join("home/.bashrc").symlink_metadata().is_err(), ".bashrc stayed");
        assert!(stderr.contains("moved aside .bashrc in "), "{stderr}");
        // The repository itself stays a repository: objects, refs, HEAD.
        assert!(out.join("sub/.git/HEAD").is_file() && out.join("sub/.git/objects").is_dir());
        let (run_id, items) = quarantined(&s.audit());
        for p in [".envrc", ".vscode", "sub/.git/config", "sub/.git/hooks", "p/.git", ".bashrc"] {
            assert!(items.iter().any(|i| i == p), "audit names {p}: {items:?}");
        }
        // In the zone's own quarantine (the planted .workcell link was set aside, not followed).
        let q = out.join(".workcell/quarantine").join(&run_id);
        assert!(std::fs::symlink_metadata(out.join(".workcell")).expect(".workcell").is_dir());
        assert!(q.join("0001-.envrc").is_file() || std::fs::read_dir(&q).expect("quarantine").count() >= 5);
        assert!(std::fs::read_dir(&q).expect("quarantine").any(|e| e.expect("e").file_name().to_string_lossy().ends_with("sub%2F.git%2Fhooks")));
        assert!(s.proj().join("home/.workcell/quarantine").join(&run_id).is_dir());
        s.outside_unchanged();
        // The person's own git, on the host: nothing of the worker's runs.
        for (dir, args) in [("sub", &["status"][..]), ("sub", &["checkout", "-q", "other"]), ("sub", &["checkout", "-q", "-"]), ("p", &["status"])] {
            let g = host_git(&out.join(dir), &s.root, args);
            eprintln!("git {args:?} in {dir}: {:?} {}", g.status.code(), String::from_utf8_lossy(&g.stderr));
        }
        assert!(!marker.exists(), "a host-side git ran the worker's hook or fsmonitor");
        s.outside_unchanged();
        // And the quarantine is inert for the next run: nothing new found there.
        let o = s.run(backend, &["--zone", "out=./out:rw", "--", "true"]);
        assert_eq!(o.status.code(), Some(0));
        assert!(!String::from_utf8_lossy(&o.stderr).contains("moved aside"), "{}", String::from_utf8_lossy(&o.stderr));
    }

    /// A checkout zone (its repository's hooks bound read-only) and entries with wildcards,
    /// a user's `protect:` among them: these are matched by globs, not by names, and what
    /// the worker makes under them is moved aside like the rest; the host's hook stays.
    pub fn wildcard_entries_in_a_checkout(backend: &str) {
        let s = Scratch::new();
        std::fs::write(s.proj().join("workcell.yaml"), "sandbox:\n  protect: ['build/*.sh']\n  zones: {}\n").expect("config");
        let out = s.zone("out");
        let init = Command::new("git").args(["init", "-q"]).current_dir(&out).status().expect("git init");
        assert!(init.success());
        let hook = out.join(".git/hooks/post-checkout");
        std::fs::write(&hook, "#!/bin/sh\nexit 0\n").expect("hook");
        support::give_to_worker(&out);
        let script = "cd /out; printf '#!/bin/sh\\ntouch /tmp/x\\n' > .git/hooks/post-checkout && echo WROTE:hook; \
             mkdir -p .git/modules/sub/hooks .git/worktrees/w sub a/b x/build; echo evil > .git/modules/sub/hooks/pre-commit; \
             echo /tmp > .git/worktrees/w/commondir; echo evil > sub/.envrc; echo evil > a/b/.bashrc; echo evil > x/build/run.sh; \
             echo ok > x/build/run.txt; echo done";
        let o = s.run(backend, &["--zone", "out=./out:rw", "--", "sh", "-c", script]);
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stdout.contains("done") && !stdout.contains("WROTE:"), "the bound hook was written: {stdout}");
        assert_eq!(std::fs::read_to_string(&hook).expect("hook"), "#!/bin/sh\nexit 0\n", "the host's hook changed");
        for (planted, moved) in [
            (".git/modules/sub/hooks/pre-commit", ".git/modules/sub/hooks"),
            (".git/worktrees/w/commondir", ".git/worktrees/w/commondir"),
            ("sub/.envrc", "sub/.envrc"),
            ("a/b/.bashrc", "a/b/.bashrc"),
            ("x/build/run.sh", "x/build/run.sh"),
        ] {
            assert!(out.join(planted).symlink_metadata().is_err(), "{planted} stayed in place");
            assert!(stderr.contains(&format!("moved aside {moved} in ")), "stderr names {moved}: {stderr}");
        }
        assert_eq!(std::fs::read_to_string(out.join("x/build/run.txt")).expect("kept"), "ok\n", "what no entry covers stays");
        s.outside_unchanged();
    }

    /// On a case-insensitive file system `.GIT/hooks` is git's `.git/hooks` and `MAKEFILE`
    /// the `Makefile` make runs: what a worker makes under another case of an entry (a
    /// user's `protect:` entry with capitals too) is moved aside like the entry itself.
    pub fn other_cases_of_entries(backend: &str) {
        let s = Scratch::new();
        std::fs::write(s.proj().join("workcell.yaml"), "sandbox:\n  protect: [Makefile]\n  zones: {}\n").expect("config");
        let out = s.zone("out");
        // The host's own file in another case is bound read-only for the run, like `Makefile`.
        std::fs::write(out.join("MAKEFILE"), "host\n").expect("host file");
        support::give_to_worker(&out);
        let script = "cd /out; mkdir -p .GIT/Hooks sub; echo evil > .GIT/Hooks/pre-commit; echo evil > MAKEFILE && echo WROTE; \
             echo evil > sub/makefile; echo evil > .BashRC; echo ok > Makefile.txt; echo done";
        let o = s.run(backend, &["--zone", "out=./out:rw", "--", "sh", "-c", script]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(stdout.contains("done") && !stdout.contains("WROTE"), "the host's MAKEFILE was written: {stdout} {stderr}");
        assert_eq!(std::fs::read_to_string(out.join("MAKEFILE")).expect("kept"), "host\n");
        for (planted, moved) in [(".GIT/Hooks/pre-commit", ".GIT/Hooks"), ("sub/makefile", "sub/makefile"), (".BashRC", ".BashRC")] {
            assert!(out.join(planted).symlink_metadata().is_err(), "{planted} stayed in place");
            assert!(stderr.contains(&format!("moved aside {moved} in ")), "stderr names {moved}: {stderr}");
        }
        assert_eq!(std::fs::read_to_string(out.join("Makefile.txt")).expect("kept"), "ok\n", "what no entry covers stays");
        s.outside_unchanged();
    }

    pub fn an_existing_repository_stays_and_the_worker_commits(backend: &str) {
        let s = Scratch::new();
        let out = s.zone("out");
        let g = host_git(&out, &s.root, &["init", "-q"]);
        assert!(g.status.success());
        let script = "cd /out && echo a > a && git add a && git -c user.name=w -c user.email=w@x commit -qm a && git log --oneline | wc -l";
        let o = s.run(backend, &["--zone", "out=./out:rw", "--", "sh", "-c", script]);
        assert_eq!(o.status.code(), Some(0), "the worker commits to its repository");
        assert!(!String::from_utf8_lossy(&o.stderr).contains("moved aside"), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(out.join(".git/config").is_file() && out.join(".git/hooks").is_dir());
        assert!(host_git(&out, &s.root, &["log", "--oneline"]).status.success());
    }

    pub fn quarantine_in_json_and_after_a_failure(backend: &str) {
        let s = Scratch::new();
        let out = s.zone("out");
        let o = s.run(backend, &["--json", "--timeout", "2s", "--zone", "out=./out:rw", "--", "sh", "-c", "touch /out/.envrc; sleep 60"]);
        assert_ne!(o.status.code(), Some(0), "timed out");
        assert!(!out.join(".envrc").exists());
        let stderr = String::from_utf8_lossy(&o.stderr);
        let line = stderr.lines().find(|l| l.starts_with("{\"quarantine\"")).unwrap_or_else(|| panic!("a quarantine JSON line: {stderr}"));
        let v: Value = serde_json::from_str(line).expect("json");
        assert_eq!(v["quarantine"]["areas"][0]["items"][0]["path"], ".envrc");
        assert_eq!(v["quarantine"]["areas"][0]["items"][0]["outcome"], "quarantined");
    }

    pub fn a_deep_chain_is_dealt_with_in_bounded_time(backend: &str) {
        let s = Scratch::new();
        let out = s.zone("out");
        // gVisor runs out of descriptors somewhere past a few thousand levels (EMFILE in the
        // worker): the chain then stops there, still far deeper than the walk goes.
        let script = "import os\nfd = os.open('/out', os.O_RDONLY)\nfor i in range(100000):\n    try:\n        os.mkdir('d', dir_fd=fd)\n        n = os.open('d', os.O_RDONLY, dir_fd=fd)\n    except OSError as e:\n        print('stopped at', i, e)\n        break\n    os.close(fd)\n    fd = n\ntry:\n    os.close(os.open('.envrc', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))\nexcept OSError as e:\n    print('no .envrc', e)\nprint('made')\n";
        let o = s.run(backend, &["--timeout", "300s", "--zone", "out=./out:rw", "--", "python3", "-c", script]);
        assert_eq!(o.status.code(), Some(0), "the chain was made");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains("moved aside d/d/d") && stderr.contains("not checked"), "{stderr}");
        // The chain below the walk's depth is in the quarantine: what stays is shallow.
        let mut depth = 0;
        let mut p = out.clone();
        while p.join("d").is_dir() {
            p = p.join("d");
            depth += 1;
        }
        assert!(depth <= workcell::hostrun::quarantine::MAX_DEPTH, "{depth} levels stayed");
        assert!(!p.join(".envrc").exists());
        let (_, items) = quarantined(&s.audit());
        assert_eq!(items.len(), 1, "{items:?}");
        // std's remove_dir_all would need a descriptor per level.
        let _ = Command::new("rm").arg("-rf").arg(&s.root).status();
    }

    pub fn mcp_shell_calls_are_swept(backend: &str) {
        // `workcell mcp` takes no --runtime: under gVisor the body runs on plain docker.
        let backend = backend.split('+').next().unwrap_or(backend);
        if !support::python_ready(&["mcp"]) {
            return;
        }
        let s = Scratch::new();
        let out = s.zone("out");
        std::fs::write(
            s.proj().join("workcell.yaml"),
            "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
        )
        .expect("config");
        let client = format!(
            "import asyncio, json, sys\nfrom mcp import ClientSession, StdioServerParameters\nfrom mcp.client.stdio import stdio_client\n\
             async def main():\n    p = StdioServerParameters(command={bin:?}, args=['mcp', '--backend', {backend:?}, '--approve-all'], cwd={cwd:?})\n\
             \x20   async with stdio_client(p) as (r, w):\n        async with ClientSession(r, w) as session:\n            await session.initialize()\n\
             \x20           out = []\n\
             \x20           for n in range(3):\n\
             \x20               res = await session.call_tool('shell', {{'command': f'printf \"echo call{{n}} > /out/.envrc\" > /tmp/plant.sh; sh /tmp/plant.sh'}})\n\
             \x20               out.append({{'error': res.is_error, 'text': ''.join(getattr(c, 'text', '') for c in res.content)}})\n\
             \x20           print(json.dumps(out))\n\
             asyncio.run(main())\n",
            bin = env!("CARGO_BIN_EXE_workcell"),
            cwd = s.proj().display().to_string(),
        );
        let o = Command::new(support::python()).arg("-c").arg(&client).output().expect("python");
        assert!(o.status.success(), "client: {}", String::from_utf8_lossy(&o.stderr));
        let calls: Vec<Value> = serde_json::from_slice(&o.stdout).expect("json");
        assert_eq!(calls.len(), 3);
        for v in &calls {
            let text = v["text"].as_str().unwrap_or("");
            assert!(text.contains("moved aside .envrc in /out "), "the agent is told, in its own paths: {text}");
            assert!(!text.contains(s.root.to_str().expect("utf8")), "no host path reaches the agent: {text}");
        }
        assert!(!out.join(".envrc").exists(), "the shell command's .envrc stayed");
        assert!(s.audit().iter().any(|e| e["event"] == "quarantine"));
        // Each call's plant is kept, in a quarantine of its own (a session's calls share its
        // run id: the third call's used to find the first's in the way and delete its plant).
        let mut kept: Vec<String> = Vec::new();
        for run in std::fs::read_dir(out.join(".workcell/quarantine")).expect("quarantine") {
            let run = run.expect("entry").path();
            assert!(!run.to_string_lossy().contains(".moved-"), "a call's quarantine was set aside: {}", run.display());
            for item in std::fs::read_dir(&run).expect("run") {
                kept.push(std::fs::read_to_string(item.expect("item").path()).expect("text").trim().to_string());
            }
        }
        kept.sort();
        assert_eq!(kept, ["call0", "call1", "call2"]);
    }
}

macro_rules! backend_suite {
    ($module:ident, $backend:literal) => {
        mod $module {
            use super::*;
            const BACKEND: &str = $backend;

            #[test]
            fn planted_files_are_moved_aside() {
                if support::backend_ready(BACKEND) {
                    body::planted_files_are_moved_aside(BACKEND);
                }
            }

            #[test]
            fn wildcard_entries_in_a_checkout() {
                if support::backend_ready(BACKEND) {
                    body::wildcard_entries_in_a_checkout(BACKEND);
                }
            }

            #[test]
            fn other_cases_of_entries() {
                if support::backend_ready(BACKEND) {
                    body::other_cases_of_entries(BACKEND);
                }
            }

            #[test]
            fn an_existing_repository_stays_and_the_worker_commits() {
                if support::backend_ready(BACKEND) {
                    body::an_existing_repository_stays_and_the_worker_commits(BACKEND);
                }
            }

            #[test]
            fn quarantine_in_json_and_after_a_failure() {
                if support::backend_ready(BACKEND) {
                    body::quarantine_in_json_and_after_a_failure(BACKEND);
                }
            }

            #[test]
            fn a_deep_chain_is_dealt_with_in_bounded_time() {
                if support::backend_ready(BACKEND) {
                    body::a_deep_chain_is_dealt_with_in_bounded_time(BACKEND);
                }
            }

            #[test]
            fn mcp_shell_calls_are_swept() {
                if support::backend_ready(BACKEND) {
                    body::mcp_shell_calls_are_swept(BACKEND);
                }
            }
        }
    };
}

backend_suite!(bwrap, "bwrap");
backend_suite!(docker, "docker");
// Under gVisor (`WORKCELL_REQUIRE_RUNSC=1` where `.ci/setup-runsc` installed it).
backend_suite!(runsc, "docker+runsc");
