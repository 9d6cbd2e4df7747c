//! Red-team checks for issue 22 ("a worker must not plant code that the host runs later"):
//! a hostile worker, or a hostile earlier run preparing the zone for a later one, tries to
//! leave something the person's own host-side tools run as the person. Each body runs on
//! bwrap and docker and asserts that the person's `git` on the host runs nothing of the
//! worker's, and that the next run still starts.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::scratch::Root;

/// A project directory (`proj/`, the runs' cwd) and `outside/` beside it that no zone holds
/// (where a payload that ran on the host leaves its marker).
struct Scratch(Root);

impl std::ops::Deref for Scratch {
    type Target = Root;
    fn deref(&self) -> &Root {
        &self.0
    }
}

impl Scratch {
    fn new() -> Scratch {
        Scratch(Root::new(&["proj/out", "outside"], |_| {}))
    }

    fn out(&self) -> PathBuf {
        self.root.join("proj/out")
    }

    /// The file a payload makes when it runs on the host.
    fn marker(&self) -> PathBuf {
        self.root.join("outside/RAN")
    }

    /// `sh -c script` as the worker, with `out/` as the writable zone `/out`.
    fn run(&self, backend: &str, script: &str) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
            .current_dir(self.root.join("proj"))
            .env_remove("RUST_LOG")
            .args(["run", "--backend", backend, "--zone", "out=./out:rw", "--", "sh", "-c", script])
            .output()
            .expect("start workcell");
        eprintln!("workcell -> {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        out
    }

    /// The directories of the zone's quarantine (all runs).
    fn quarantined(&self) -> Vec<PathBuf> {
        let Ok(runs) = std::fs::read_dir(self.out().join(".workcell/quarantine")) else { return Vec::new() };
        runs.flat_map(|r| std::fs::read_dir(r.expect("run").path()).expect("run dir")).map(|e| e.expect("item").path()).collect()
    }
}

/// `git ARGS` in `dir` on the host, as the zone's owner (the person), with no system or
/// global configuration of the test machine's.
fn host_git(s: &Scratch, dir: &Path, args: &[&str]) -> Output {
    let mut c = if rustix::process::geteuid().is_root() {
        let uid = support::worker_uid().to_string();
        let mut c = Command::new("setpriv");
        c.args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "git"]);
        c
    } else {
        Command::new("git")
    };
    c.current_dir(dir)
        .args(args)
        .env("HOME", &s.root)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "person")
        .env("GIT_AUTHOR_EMAIL", "person@example.com")
        .env("GIT_COMMITTER_NAME", "person")
        .env("GIT_COMMITTER_EMAIL", "person@example.com")
        .env_remove("GIT_DIR");
    let out = c.output().expect("git");
    eprintln!("host git {args:?} in {}: {:?} {}", dir.display(), out.status.code(), String::from_utf8_lossy(&out.stderr));
    out
}

mod body {
    use super::*;

    /// A protected directory is moved into the quarantine whole; the worker had put a whole
    /// repository inside it (with an fsmonitor command in its config) and a link named
    /// `.envrc`. The person looks at the quarantine with git (or a git-aware prompt): nothing
    /// runs; and the next run is not refused for a link inside the quarantine.
    pub fn a_moved_directory_holds_nothing_the_host_runs(backend: &str) {
        let s = Scratch::new();
        let m = s.marker();
        let script = format!(
            "set -e; cd /out; mkdir -p .vscode/sub; cd .vscode; git init -q .; git config core.fsmonitor 'touch {m}; false'; \
             printf '#!/bin/sh\\ntouch {m}\\n' > .git/hooks/post-checkout; chmod +x .git/hooks/post-checkout; \
             ln -s /etc/passwd .envrc; git init -q --bare sub/bare; git -C sub/bare config core.fsmonitor 'touch {m}; false'; echo planted",
            m = m.display()
        );
        let o = s.run(backend, &script);
        assert_eq!(o.status.code(), Some(0), "the worker's script ran");
        assert!(!s.out().join(".vscode").exists(), ".vscode stayed in place");
        let items = s.quarantined();
        assert!(!items.is_empty(), "something was quarantined");
        for item in &items {
            for dir in [item.clone(), item.join("sub"), item.join("sub/bare")] {
                if dir.is_dir() {
                    host_git(&s, &dir, &["status"]);
                }
            }
        }
        assert!(!m.exists(), "a host-side git in the quarantine ran the worker's command");
        let o = s.run(backend, "echo second run");
        assert_eq!(o.status.code(), Some(0), "the next run is refused for what the quarantine holds");
        assert!(!String::from_utf8_lossy(&o.stderr).contains("moved aside"), "the quarantine is inert for the next run");
    }

    /// The zone is a home directory. The worker cannot write `.config/git/config` (a
    /// protected path), so it writes `x/git/config` and makes `.config` a link to `x`: the
    /// person's git reads `~/.config/git/config` through the link, in every repository.
    pub fn a_link_on_the_way_to_a_protected_path(backend: &str) {
        let s = Scratch::new();
        let m = s.marker();
        let script = format!(
            "set -e; cd /out; mkdir -p x/git y/hooks; printf '[core]\\n\\tfsmonitor = \"touch {m}; false\"\\n' > x/git/config; ln -s x .config; \
             git init -q repo; mv repo/.git/hooks repo/.git/h; ln -s ../../y repo/.git/modules; echo planted",
            m = m.display()
        );
        let o = s.run(backend, &script);
        assert_eq!(o.status.code(), Some(0), "the worker's script ran");
        std::fs::create_dir_all(s.out().join("mine")).expect("mkdir");
        support::give_to_worker(&s.out().join("mine"));
        let mut c = if rustix::process::geteuid().is_root() {
            let uid = support::worker_uid().to_string();
            let mut c = Command::new("setpriv");
            c.args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "git"]);
            c
        } else {
            Command::new("git")
        };
        // The person's git with the zone as its home (and its XDG configuration).
        let g = c
            .current_dir(s.out().join("mine"))
            .args(["init", "-q"])
            .env("HOME", s.out())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .expect("git");
        eprintln!("host git init: {:?} {}", g.status.code(), String::from_utf8_lossy(&g.stderr));
        let mut c = if rustix::process::geteuid().is_root() {
            let uid = support::worker_uid().to_string();
            let mut c = Command::new("setpriv");
            c.args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "git"]);
            c
        } else {
            Command::new("git")
        };
        let g = c
            .current_dir(s.out().join("mine"))
            .args(["status"])
            .env("HOME", s.out())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .expect("git");
        eprintln!("host git status: {:?} {}", g.status.code(), String::from_utf8_lossy(&g.stderr));
        assert!(!m.exists(), "the person's git read the worker's config through the .config link");
        assert!(s.out().join(".config").symlink_metadata().is_err(), "the .config link stayed");
        assert!(s.out().join("repo/.git/modules").symlink_metadata().is_err(), "the .git/modules link stayed");
        let o = s.run(backend, "echo second run");
        assert_eq!(o.status.code(), Some(0), "the next run is refused");
    }

    /// The person's repository sends git to `.githooks` (`git config core.hooksPath
    /// .githooks`, as many projects ask) and to `.husky/_` in a second one; the first
    /// holds a hook of the person's, the second does not exist yet. The worker rewrites the
    /// one and creates the other: the person's `git commit` runs neither.
    pub fn hooks_named_by_core_hookspath(backend: &str) {
        let s = Scratch::new();
        let m = s.marker();
        let (one, two) = (s.out().join("one"), s.out().join("two"));
        for (repo, hooks) in [(&one, ".githooks"), (&two, ".husky/_")] {
            std::fs::create_dir_all(repo).expect("mkdir");
            support::give_to_worker(repo);
            assert!(host_git(&s, repo, &["init", "-q"]).status.success());
            assert!(host_git(&s, repo, &["config", "core.hooksPath", hooks]).status.success());
        }
        std::fs::create_dir_all(one.join(".githooks")).expect("mkdir");
        std::fs::write(one.join(".githooks/pre-commit"), "#!/bin/sh\nexit 0\n").expect("hook");
        let _ = Command::new("chmod").arg("+x").arg(one.join(".githooks/pre-commit")).status();
        support::give_to_worker(&s.out());
        let hook = format!("#!/bin/sh\\ntouch {}\\n", m.display());
        let script = format!(
            "cd /out; printf '{hook}' > one/.githooks/pre-commit; printf '{hook}' > one/.githooks/post-commit; chmod +x one/.githooks/*; \
             mkdir -p two/.husky/_; printf '{hook}' > two/.husky/_/pre-commit; chmod +x two/.husky/_/pre-commit; echo planted"
        );
        let o = s.run(backend, &script);
        assert_eq!(o.status.code(), Some(0), "the worker's script ran");
        for repo in [&one, &two] {
            std::fs::write(repo.join("f"), "x").expect("write");
            support::give_to_worker(&repo.join("f"));
            host_git(&s, repo, &["add", "f"]);
            host_git(&s, repo, &["commit", "-qm", "x"]);
        }
        assert!(!m.exists(), "the person's git commit ran a hook the worker wrote");
        let o = s.run(backend, "echo second run");
        assert_eq!(o.status.code(), Some(0), "the next run is refused");
    }

    /// The zone is a home directory: the worker plants start-up files the defaults did not
    /// name — `.bash_aliases` (Debian's and Ubuntu's `.bashrc` source it), `.bashrc.d/`
    /// (Fedora's), fish's `config.fish` and `conf.d/`, and `.ssh/config` (a `ProxyCommand`
    /// that the person's `git fetch` over ssh runs). None stays.
    pub fn more_start_up_files(backend: &str) {
        let s = Scratch::new();
        let m = s.marker();
        let script = format!(
            "set -e; cd /out; echo 'touch {m}' > .bash_aliases; mkdir -p .bashrc.d .config/fish/conf.d .ssh; echo 'touch {m}' > .bashrc.d/x.sh; \
             echo 'touch {m}' > .config/fish/config.fish; echo 'touch {m}' > .config/fish/conf.d/x.fish; \
             printf 'Host *\\n  ProxyCommand sh -c \"touch {m}\"\\n' > .ssh/config; echo planted",
            m = m.display()
        );
        let o = s.run(backend, &script);
        assert_eq!(o.status.code(), Some(0), "the worker's script ran");
        for planted in [".bash_aliases", ".bashrc.d/x.sh", ".config/fish/config.fish", ".config/fish/conf.d/x.fish", ".ssh/config"] {
            assert!(s.out().join(planted).symlink_metadata().is_err(), "{planted} stayed in place");
        }
        let o = s.run(backend, "echo second run");
        assert_eq!(o.status.code(), Some(0), "the next run is refused");
    }

    /// A chain of directories deeper than the sweep checks is moved into the quarantine
    /// whole, three levels down (`.workcell/quarantine/RUN_ID/`): the next run's plan must
    /// not refuse the zone for it (every later run refused, until the person finds why).
    pub fn a_deep_chain_does_not_refuse_later_runs(backend: &str) {
        let s = Scratch::new();
        let script = "cd /out && python3 -c \"
import os
fd = os.open('.', os.O_RDONLY)
for i in range(300):
    os.mkdir('d', dir_fd=fd); n = os.open('d', os.O_RDONLY, dir_fd=fd); os.close(fd); fd = n
os.close(os.open('.envrc', os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
\"";
        let o = s.run(backend, script);
        assert_eq!(o.status.code(), Some(0), "the chain was made");
        assert!(String::from_utf8_lossy(&o.stderr).contains("moved aside d/d/d"));
        for run in ["second", "third"] {
            let o = s.run(backend, &format!("echo {run}"));
            assert_eq!(o.status.code(), Some(0), "the {run} run is refused for the quarantined chain");
        }
        let _ = Command::new("rm").arg("-rf").arg(&s.root).status();
    }

    /// The person's repository config includes a file of the work tree (`git config
    /// include.path ../tools/git.cfg`, as projects that share settings ask), one that exists
    /// and one not made yet. The worker writes an fsmonitor command into both: the person's
    /// `git status` runs nothing.
    pub fn files_a_protected_config_includes(backend: &str) {
        let s = Scratch::new();
        let m = s.marker();
        let (one, two) = (s.out().join("one"), s.out().join("two"));
        for repo in [&one, &two] {
            std::fs::create_dir_all(repo.join("tools")).expect("mkdir");
            support::give_to_worker(repo);
            assert!(host_git(&s, repo, &["init", "-q"]).status.success());
            assert!(host_git(&s, repo, &["config", "include.path", "../tools/git.cfg"]).status.success());
        }
        std::fs::write(one.join("tools/git.cfg"), "[user]\n\tname = person\n").expect("cfg");
        support::give_to_worker(&s.out());
        let script = format!(
            "cd /out; for r in one two; do printf '[core]\\n\\tfsmonitor = \"touch {m}; false\"\\n' > $r/tools/git.cfg; done; echo planted",
            m = m.display()
        );
        let o = s.run(backend, &script);
        assert_eq!(o.status.code(), Some(0), "the worker's script ran");
        for repo in [&one, &two] {
            host_git(&s, repo, &["status"]);
        }
        assert!(!m.exists(), "the person's git status ran an fsmonitor the worker wrote into an included file");
        let o = s.run(backend, "echo second run");
        assert_eq!(o.status.code(), Some(0), "the next run is refused");
    }
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [
        a_moved_directory_holds_nothing_the_host_runs,
        a_link_on_the_way_to_a_protected_path,
        hooks_named_by_core_hookspath,
        more_start_up_files,
        a_deep_chain_does_not_refuse_later_runs,
        files_a_protected_config_includes
    ]
);
support::backend_suite!(
    docker,
    "docker",
    [
        a_moved_directory_holds_nothing_the_host_runs,
        a_link_on_the_way_to_a_protected_path,
        hooks_named_by_core_hookspath,
        more_start_up_files,
        a_deep_chain_does_not_refuse_later_runs,
        files_a_protected_config_includes
    ]
);
