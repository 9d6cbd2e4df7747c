//! Protection by tool (issue 37, findings 1, 4, 8, 9): for each row of the tool table
//! (`workcell::hostrun::tools::TOOLS`, docs/configuration.md "Protection by tool") a hostile
//! worker plants what that tool reads to decide what to run, and then the person runs the
//! real tool on the host, the way they routinely would (`git commit`, `make`, `npm test`,
//! `cargo --version`, `vim`, `cd` with direnv). The planted code must not run: its marker file,
//! outside every zone, is never made.
//!
//! Each body first plants the same files on the host itself, in a folder no sandbox touched,
//! and runs the same tool there: its marker must appear, so a tool that ignores the plant (a
//! wrong name, a missing setting) cannot make the test pass. Tools that are not installed
//! here: husky's files are written as husky 9 writes them (`husky` is an npm package; the
//! stand-in is its documented layout, run by the real git); yarn, pnpm and bun are covered by
//! the family's expansion in `plan` (`tests/hostrun_families.rs`) only.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::scratch::Root;

/// `root/proj` (the project, the runs' cwd) with `out/` (the zone `/out`), `control/` (the
/// host's own folder for the control), `outside/` for the markers and `home/` for the
/// person's `HOME`.
struct Scratch(Root);

impl std::ops::Deref for Scratch {
    type Target = Root;
    fn deref(&self) -> &Root {
        &self.0
    }
}

impl Scratch {
    /// `protect` is the project's `sandbox.protect` list (YAML flow form).
    fn new(protect: &str) -> Scratch {
        Scratch(Root::new(&["proj/out", "proj/control", "outside", "home"], |root| {
            std::fs::write(root.join("proj/workcell.yaml"), format!("sandbox:\n  protect: {protect}\n")).expect("workcell.yaml");
            // The person's git: the worker's repositories are theirs to use, and who they are.
            std::fs::write(root.join("home/.gitconfig"), "[safe]\n\tdirectory = *\n[user]\n\tname = person\n\temail = p@example.invalid\n").expect("gitconfig");
        }))
    }

    fn out(&self) -> PathBuf {
        self.root.join("proj/out")
    }

    fn control(&self) -> PathBuf {
        self.root.join("proj/control")
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    /// The marker a planted payload makes: `outside/RAN` for the zone, `outside/CONTROL` for
    /// the control's.
    fn marker(&self, control: bool) -> PathBuf {
        self.root.join(if control { "outside/CONTROL" } else { "outside/RAN" })
    }

    /// `plant` (a shell script run with `D` the folder, `H` its host path, `M` the marker) as
    /// the worker on `backend`, in the zone; then the same script on the host in `control/`,
    /// as the worker's user.
    fn plant(&self, backend: &str, plant: &str) {
        // `true` last: a write the sandbox refused does not end the run with another status than
        // 0, so a status other than 0 is workcell refusing the run.
        let script = format!("D=/out; H='{}'; M='{}'; cd \"$D\"; {plant}; true", self.out().display(), self.marker(false).display());
        let o = support::workcell_logged(&self.root.join("proj"), &["run", "--backend", backend, "--zone", "out=./out:rw", "--", "sh", "-c", &script]);
        assert_eq!(o.status.code(), Some(0), "the worker's run was not refused");
        let control = format!("D='{c}'; H='{c}'; M='{}'; cd \"$D\"; {plant}", self.marker(true).display(), c = self.control().display());
        // As the worker's user: the same files, owned alike.
        let c = support::as_worker("sh")
            .args(["-c", &control])
            .env("HOME", self.home())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", self.home().join(".gitconfig"))
            .output()
            .expect("sh");
        assert!(c.status.success(), "the control's plant: {}", String::from_utf8_lossy(&c.stderr));
    }

    /// The person's `tool` ran in the zone and in the control: the control's marker is there
    /// (the tool does run such a plant), the zone's is not.
    fn assert_held(&self, tool: &str) {
        assert!(self.marker(true).exists(), "the control: {tool} did not run the plant even outside any sandbox, so this test proves nothing");
        assert!(!self.marker(false).exists(), "the person's {tool} ran what the worker planted");
    }

    /// The person runs `program` in the zone's folder and in the control's (`args` adds to
    /// each call, given the folder); then the plant ran in the control's only.
    fn person_runs(&self, what: &str, program: &str, args: impl Fn(&mut Command, &Path)) {
        for d in [self.out(), self.control()] {
            let mut c = self.person(program, &d);
            args(&mut c, &d);
            let o = c.output().expect(program);
            eprintln!("{what} in {}: {:?} {}", d.display(), o.status.code(), String::from_utf8_lossy(&o.stderr));
        }
        self.assert_held(what);
    }

    /// The person's next commit in the zone's folder and in the control's; then the plant ran
    /// in the control's only.
    fn commit_in_both(&self, what: &str) {
        for d in [self.out(), self.control()] {
            commit(self, &d);
        }
        self.assert_held(what);
    }

    /// `program` on the host as the person (root here, the worst case; git is told the
    /// worker's repositories are safe), with `HOME` the scratch home and nothing of the
    /// test's own cargo or rustup environment.
    fn person(&self, program: &str, dir: &Path) -> Command {
        let mut c = Command::new(program);
        c.current_dir(dir).env("HOME", self.home()).env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", self.home().join(".gitconfig"));
        for v in ["RUSTUP_TOOLCHAIN", "CARGO", "RUSTC", "RUSTC_WRAPPER", "CARGO_TARGET_DIR", "CARGO_HOME", "RUSTUP_HOME", "CARGO_MANIFEST_DIR", "GIT_DIR"] {
            c.env_remove(v);
        }
        // rustup and cargo are root's own (~/.cargo), found by their real home.
        if let Some(real) = std::env::var_os("HOME") {
            c.env("RUSTUP_HOME", Path::new(&real).join(".rustup")).env("CARGO_HOME", Path::new(&real).join(".cargo"));
        }
        let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin");
        c.env("PATH", format!("{}:{}", venv.display(), std::env::var("PATH").unwrap_or_default()));
        c
    }

    /// `git ARGS` as the person, in `dir`.
    fn git(&self, dir: &Path, args: &[&str]) -> Output {
        let o = self
            .person("git", dir)
            .args(["-c", "safe.directory=*", "-c", "user.name=person", "-c", "user.email=p@example.invalid"])
            .args(args)
            .output()
            .expect("git");
        eprintln!("git {args:?} in {}: {:?} {}", dir.display(), o.status.code(), String::from_utf8_lossy(&o.stderr));
        o
    }

    /// Runs `f` for the zone's folder and the control's: what the person had before the run.
    fn both(&self, mut f: impl FnMut(&Path)) {
        for d in [self.out(), self.control()] {
            f(&d);
        }
        support::give_to_worker(&self.root.join("proj"));
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

fn executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    write(path, text);
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A repository of the person's with one commit, then `f` files and `git add` of them.
fn repository(s: &Scratch, dir: &Path, files: &[(&str, &str)]) {
    assert!(s.git(dir, &["init", "-q"]).status.success());
    for (p, text) in files {
        write(&dir.join(p), text);
    }
    s.git(dir, &["add", "-A"]);
    assert!(s.git(dir, &["commit", "-qm", "person's", "--no-verify"]).status.success());
}

/// The person's next commit in `dir`.
fn commit(s: &Scratch, dir: &Path) {
    write(&dir.join("work.txt"), "the person's change\n");
    s.git(dir, &["add", "work.txt"]);
    s.git(dir, &["commit", "-qm", "work"]);
}

mod body {
    use super::*;

    /// Finding 1: husky 9 sets `core.hooksPath = .husky/_`; the stub there sources `h`, which
    /// runs `.husky/<hook>`. The worker rewrites `.husky/pre-commit` (the person's hook), not
    /// the stub; the person's `git commit` runs it.
    pub fn husky_hook_one_folder_up(backend: &str) {
        let s = Scratch::new("[]");
        s.both(|d| {
            repository(&s, d, &[("README", "x\n")]);
            // husky 9's files, as `husky` (its `init`) writes them.
            executable(
                &d.join(".husky/_/h"),
                "#!/usr/bin/env sh\nn=$(basename \"$0\")\ns=$(dirname \"$(dirname \"$0\")\")/$n\n[ ! -f \"$s\" ] && exit 0\nsh -e \"$s\" \"$@\"\n",
            );
            executable(&d.join(".husky/_/pre-commit"), "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n");
            write(&d.join(".husky/pre-commit"), "exit 0\n");
            assert!(s.git(d, &["config", "core.hooksPath", ".husky/_"]).status.success());
        });
        s.plant(backend, "echo \"touch $M\" > .husky/pre-commit; echo \"touch $M\" > .husky/pre-push");
        s.commit_in_both("git commit (husky)");
    }

    /// pre-commit: the installed hook obeys `.pre-commit-config.yaml`; a `repo: local` hook
    /// runs any command. The worker rewrites it and stages it (pre-commit refuses to run with
    /// an unstaged configuration).
    pub fn pre_commit_configuration(backend: &str) {
        if !support::program_ready(&support::python().with_file_name("pre-commit").display().to_string(), "pre-commit (pip, in .venv)") {
            return;
        }
        let s = Scratch::new("[]");
        let config = |entry: &str| {
            format!("repos:\n- repo: local\n  hooks:\n  - id: x\n    name: x\n    entry: {entry}\n    language: system\n    always_run: true\n    pass_filenames: false\n")
        };
        s.both(|d| {
            repository(&s, d, &[(".pre-commit-config.yaml", &config("true"))]);
            let o = s.person("pre-commit", d).arg("install").output().expect("pre-commit");
            assert!(o.status.success(), "pre-commit install: {}", String::from_utf8_lossy(&o.stderr));
        });
        let planted = config("touch MARK");
        s.plant(backend, &format!("printf '%s' '{planted}' | sed \"s|MARK|$M|\" > .pre-commit-config.yaml; git add .pre-commit-config.yaml"));
        s.commit_in_both("git commit (pre-commit)");
    }

    /// lefthook merges `lefthook-local.yml` into its configuration on every hook; the worker
    /// creates one.
    pub fn lefthook_local_configuration(backend: &str) {
        if !support::program_ready(&support::python().with_file_name("lefthook").display().to_string(), "lefthook (pip, in .venv)") {
            return;
        }
        let s = Scratch::new("[]");
        s.both(|d| {
            repository(&s, d, &[("lefthook.yml", "pre-commit:\n  commands:\n    ok:\n      run: \"true\"\n")]);
            let o = s.person("lefthook", d).arg("install").output().expect("lefthook");
            assert!(o.status.success(), "lefthook install: {}", String::from_utf8_lossy(&o.stderr));
        });
        s.plant(backend, "printf 'pre-commit:\\n  commands:\\n    planted:\\n      run: touch %s\\n' \"$M\" > lefthook-local.yml");
        s.commit_in_both("git commit (lefthook)");
    }

    /// Finding 4: `rust-toolchain.toml`'s `[toolchain] path` names a directory whose
    /// `bin/cargo` the rustup proxy runs on the person's `cargo --version`.
    pub fn rustup_toolchain_path(backend: &str) {
        if !support::program_ready("rustup", "rustup (https://rustup.rs)") {
            return;
        }
        let s = Scratch::new("[]");
        s.plant(
            backend,
            "mkdir -p tc/bin tc/lib; for b in cargo rustc; do printf '#!/bin/sh\\ntouch %s\\n' \"$M\" > tc/bin/$b; chmod +x tc/bin/$b; done; \
             printf '[toolchain]\\npath = \"%s/tc\"\\n' \"$H\" > rust-toolchain.toml",
        );
        // rustup's proxy (`~/.cargo/bin/cargo`), not the toolchain's own cargo that a test run
        // under cargo may find first on PATH.
        let proxy = std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo/bin/cargo")).filter(|p| p.exists());
        let cargo = proxy.map_or("cargo".to_string(), |p| p.display().to_string());
        s.person_runs("cargo --version (rustup)", &cargo, |c, _| {
            c.arg("--version");
        });
    }

    /// cargo's `.cargo/config.toml`: `build.rustc-wrapper` runs on the person's `cargo check`.
    pub fn cargo_configuration(backend: &str) {
        if !support::program_ready("cargo", "cargo (https://rustup.rs)") {
            return;
        }
        let s = Scratch::new("[]");
        s.both(|d| {
            write(&d.join("Cargo.toml"), "[package]\nname = \"p\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n");
            write(&d.join("src/lib.rs"), "");
        });
        s.plant(
            backend,
            "mkdir -p .cargo; printf '#!/bin/sh\\ntouch %s\\nexec \"$@\"\\n' \"$M\" > w.sh; chmod +x w.sh; \
             printf '[build]\\nrustc-wrapper = \"%s/w.sh\"\\n' \"$H\" > .cargo/config.toml",
        );
        // A target directory of each folder's own, outside both.
        s.person_runs("cargo check", "cargo", |c, d| {
            c.args(["check", "--offline", "-q", "--target-dir"]).arg(s.root.join("outside/target").join(d.file_name().expect("name")));
        });
    }

    /// Finding 8: under `protect: [Makefile]` the worker writes `GNUmakefile`, which GNU make
    /// reads first; the person's `make` runs it.
    pub fn make_reads_gnumakefile_first(backend: &str) {
        if !support::program_ready("make", "make") {
            return;
        }
        let s = Scratch::new("[Makefile]");
        s.both(|d| write(&d.join("Makefile"), "all:\n\t@echo the person's\n"));
        s.plant(backend, "printf 'all:\\n\\ttouch %s\\n' \"$M\" > GNUmakefile; cp GNUmakefile makefile");
        s.person_runs("make", "make", |_, _| {});
    }

    /// Finding 9: under `protect: [package.json]` the worker writes `.npmrc` with
    /// `script-shell=`; the person's own `npm test` runs the worker's shell.
    pub fn npmrc_script_shell(backend: &str) {
        if !support::program_ready("npm", "npm") {
            return;
        }
        let s = Scratch::new("[package.json]");
        s.both(|d| write(&d.join("package.json"), "{\"name\": \"p\", \"version\": \"1.0.0\", \"scripts\": {\"test\": \"true\"}}\n"));
        s.plant(backend, "printf '#!/bin/sh\\ntouch %s\\n' \"$M\" > sh.sh; chmod +x sh.sh; printf 'script-shell=%s/sh.sh\\n' \"$H\" > .npmrc");
        s.person_runs("npm test", "npm", |c, _| {
            c.args(["test", "--silent"]).env("npm_config_cache", s.root.join("outside/npm"));
        });
    }

    /// vim with `exrc` set (in the person's `~/.vimrc`) runs a folder's `.exrc`.
    pub fn vim_exrc(backend: &str) {
        if !support::program_ready("vim", "vim") {
            return;
        }
        let s = Scratch::new("[]");
        write(&s.home().join(".vimrc"), "set exrc\n");
        s.plant(backend, "printf 'silent !touch %s\\n' \"$M\" > .exrc");
        s.person_runs("vim (exrc)", "vim", |c, _| {
            c.args(["-N", "-i", "NONE", "--not-a-term", "-c", "qa!"]).env("TERM", "dumb").stdin(std::process::Stdio::null());
        });
    }

    /// direnv runs `.envrc` once the person allowed it; the worker rewrites the allowed one.
    /// (direnv asks again for a changed file itself: this row holds on main too, and the
    /// control is the person's own allowed file, which must still load.)
    pub fn direnv_envrc(backend: &str) {
        if !support::program_ready("direnv", "direnv") {
            return;
        }
        let s = Scratch::new("[]");
        let allowed = s.marker(true);
        s.both(|d| write(&d.join(".envrc"), &format!("touch {}\n", allowed.display())));
        let o = s.person("direnv", &s.out()).args(["allow", "."]).output().expect("direnv");
        assert!(o.status.success(), "direnv allow: {}", String::from_utf8_lossy(&o.stderr));
        s.plant(backend, "if [ \"$D\" = /out ]; then echo \"touch $M\" >> .envrc; fi; true");
        let o = s.person("direnv", &s.out()).args(["exec", ".", "true"]).output().expect("direnv");
        eprintln!("direnv exec: {:?} {}", o.status.code(), String::from_utf8_lossy(&o.stderr));
        s.assert_held("direnv");
    }

    /// Coding agents' project folders (`.codex/`, `.gemini/`, `.cursor/`): no such agent is
    /// installed here; what it would read (a project `config.toml`, `settings.json`,
    /// `mcp.json`) must not be the worker's. The stand-in for the agent is reading the file:
    /// the person's stays as it was, a new one is moved aside.
    pub fn agent_folders(backend: &str) {
        let s = Scratch::new("[]");
        let person = "[mcp_servers.docs]\ncommand = \"docs-server\"\n";
        write(&s.out().join(".codex/config.toml"), person);
        support::give_to_worker(&s.out());
        s.plant(
            backend,
            "printf '[mcp_servers.x]\\ncommand = \"touch\"\\nargs = [\"%s\"]\\n' \"$M\" > .codex/config.toml; \
             mkdir -p .gemini .cursor; echo \"{\\\"mcpServers\\\": {\\\"x\\\": {\\\"command\\\": \\\"touch $M\\\"}}}\" | tee .gemini/settings.json > .cursor/mcp.json",
        );
        assert_eq!(std::fs::read_to_string(s.out().join(".codex/config.toml")).expect("config"), person, "the worker rewrote .codex/config.toml");
        for p in [".gemini/settings.json", ".cursor/mcp.json"] {
            assert!(s.out().join(p).symlink_metadata().is_err(), "{p} stayed in place");
        }
    }
    /// Editors' and environment managers' folder files: Dev Containers (`initializeCommand`
    /// runs on the host), Zed (`lsp.*.binary.path`), mise (`[env] _.source`). None is
    /// installed here; the stand-in for each tool is reading the file it would read: the
    /// person's stays as it was, a new one is moved aside.
    pub fn container_editor_and_mise_files(backend: &str) {
        let s = Scratch::new("[]");
        let person = "{\"image\": \"debian\"}\n";
        write(&s.out().join(".devcontainer/devcontainer.json"), person);
        support::give_to_worker(&s.out());
        s.plant(
            backend,
            "echo \"{\\\"initializeCommand\\\": \\\"touch $M\\\"}\" | tee .devcontainer/devcontainer.json > .devcontainer.json; \
             mkdir -p .zed .config/mise; echo '{\"lsp\": {\"x\": {\"binary\": {\"path\": \"/bin/sh\"}}}}' > .zed/settings.json; \
             printf '[env]\\n_.source = \"./env.sh\"\\n' | tee mise.toml .mise.local.toml > .config/mise/config.toml",
        );
        assert_eq!(
            std::fs::read_to_string(s.out().join(".devcontainer/devcontainer.json")).expect("devcontainer.json"),
            person,
            "the worker rewrote .devcontainer/devcontainer.json"
        );
        for p in [".devcontainer.json", ".zed/settings.json", "mise.toml", ".mise.local.toml", ".config/mise/config.toml"] {
            assert!(s.out().join(p).symlink_metadata().is_err(), "{p} stayed in place");
        }
    }
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [
        husky_hook_one_folder_up,
        pre_commit_configuration,
        lefthook_local_configuration,
        rustup_toolchain_path,
        cargo_configuration,
        make_reads_gnumakefile_first,
        npmrc_script_shell,
        vim_exrc,
        direnv_envrc,
        agent_folders,
        container_editor_and_mise_files
    ]
);
support::backend_suite!(
    docker,
    "docker",
    [
        husky_hook_one_folder_up,
        pre_commit_configuration,
        lefthook_local_configuration,
        rustup_toolchain_path,
        cargo_configuration,
        make_reads_gnumakefile_first,
        npmrc_script_shell,
        vim_exrc,
        direnv_envrc,
        agent_folders,
        container_editor_and_mise_files
    ]
);
