//! A zone that is a home directory (issue 37, finding 5): the worker plants what the person's
//! own login shell, vim and tmux run from a home (`~/.local/bin/git`, `~/bin/ls` first on the
//! stock `~/.profile`'s `PATH`, `~/.vimrc`, `~/.tmux.conf`, `~/.aws/config`'s
//! `credential_process`); after the run the real tools, run on the host as the person with
//! `HOME` at the zone, run nothing of the worker's. What existed before the run is bound
//! read-only. The same planting in a zone that is no home (no start-up file, nobody's home)
//! stays where the worker put it, and there the same tools do run it: the condition is what
//! decides, and the host-side tools really read these files. Bodies run on bwrap and docker.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::scratch::Root;

/// Debian's `/etc/skel/.profile`, the part that matters: `~/bin` and `~/.local/bin` first on
/// `PATH` when they exist.
const PROFILE: &str = "# ~/.profile: executed by the command interpreter for login shells.\n\
if [ -n \"$BASH_VERSION\" ]; then\n    if [ -f \"$HOME/.bashrc\" ]; then\n\t. \"$HOME/.bashrc\"\n    fi\nfi\n\
if [ -d \"$HOME/bin\" ] ; then\n    PATH=\"$HOME/bin:$PATH\"\nfi\n\
if [ -d \"$HOME/.local/bin\" ] ; then\n    PATH=\"$HOME/.local/bin:$PATH\"\nfi\n";

/// A project (`proj/`, the runs' cwd) with a zone `h/`, and `marks/` beside it that no zone
/// holds: a planted command that runs on the host leaves its mark there.
struct Scratch(Root);

impl std::ops::Deref for Scratch {
    type Target = Root;
    fn deref(&self) -> &Root {
        &self.0
    }
}

impl Scratch {
    /// `home`: the zone holds Debian's `.profile` (a home to a login shell).
    fn new(home: bool) -> Scratch {
        Scratch(Root::new(&["proj/h", "marks"], |root| {
            if home {
                let skel = std::fs::read_to_string("/etc/skel/.profile").unwrap_or_else(|_| PROFILE.to_string());
                std::fs::write(root.join("proj/h/.profile"), skel).expect("profile");
            }
        }))
    }

    fn zone(&self) -> PathBuf {
        self.root.join("proj/h")
    }

    fn marks(&self) -> PathBuf {
        self.root.join("marks")
    }

    fn run(&self, backend: &str, script: &str) -> Output {
        support::workcell_logged(&self.root.join("proj"), &["run", "--backend", backend, "--zone", "h=./h:rw", "--", "sh", "-c", script])
    }

    /// `program args` on the host as the zone's owner (the person), with nothing of this
    /// process's environment but `HOME` at the zone.
    fn as_person(&self, program: &str, args: &[&str]) -> Output {
        let mut c = support::as_worker("env");
        c.args(["-i", &format!("HOME={}", self.zone().display()), "PATH=/usr/local/bin:/usr/bin:/bin", "TERM=dumb"]);
        c.arg(format!("TMUX_TMPDIR={}", self.root.display()));
        c.arg(program).args(args).current_dir(&self.root).stdin(Stdio::null());
        let out = c.output().expect("start the host tool");
        eprintln!("{program} {args:?} -> {:?} {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
        out
    }

    /// The person's routine commands: a login shell that runs `git` and `ls`, vim, tmux.
    fn person_works(&self) {
        self.as_person("bash", &["-l", "-c", "git --version; ls / >/dev/null"]);
        self.as_person("vim", &["-X", "-n", "-T", "dumb", "-c", "qa!"]);
        let socket = format!("home{}", std::process::id());
        self.as_person("tmux", &["-L", &socket, "new-session", "-d", "true"]);
        self.as_person("tmux", &["-L", &socket, "kill-server"]);
    }

    fn marks_made(&self) -> Vec<String> {
        support::names_in(&self.marks())
    }
}

/// The worker's script: each file a home's tools run, leaving a mark in `marks` when run.
/// `vimrc`: `.vimrc` too (newer defaults protect it in every zone: vim's `exrc` reads it
/// in a project; `.vim/plugin/` is the home's alone).
fn planting(marks: &Path, vimrc: bool) -> String {
    let m = marks.display();
    let vimrc = if vimrc { format!("echo 'silent !touch {m}/vimrc' > .vimrc;") } else { String::new() };
    format!(
        "cd /h; mkdir -p .local/bin bin .aws .vim/plugin; \
         printf '#!/bin/sh\\ntouch {m}/git\\n' > .local/bin/git; chmod +x .local/bin/git; \
         printf '#!/bin/sh\\ntouch {m}/ls\\n' > bin/ls; chmod +x bin/ls; {vimrc} \
         echo 'silent !touch {m}/vim' > .vim/plugin/w.vim; \
         echo 'run-shell \"touch {m}/tmux\"' > .tmux.conf; \
         printf '[default]\\ncredential_process = sh -c \"touch {m}/aws\"\\n' > .aws/config; echo planted"
    )
}

fn tools_ready() -> bool {
    support::program_ready("vim", "vim") && support::program_ready("tmux", "tmux") && support::program_ready("bash", "bash")
}

mod body {
    use super::*;

    pub fn planted_in_a_home_runs_nothing(backend: &str) {
        let s = Scratch::new(true);
        let o = s.run(backend, &planting(&s.marks(), true));
        assert_eq!(o.status.code(), Some(0), "the worker's script ran");
        assert!(String::from_utf8_lossy(&o.stdout).contains("planted"));
        let stderr = String::from_utf8_lossy(&o.stderr);
        for p in [".local/bin", "bin", ".vimrc", ".vim", ".tmux.conf", ".aws"] {
            assert!(s.zone().join(p).symlink_metadata().is_err(), "{p} stayed in the home");
            assert!(stderr.contains(&format!("moved aside {p} in ")), "stderr names {p}: {stderr}");
        }
        // The person's own start-up file stays.
        assert!(s.zone().join(".profile").is_file());
        s.person_works();
        assert_eq!(s.marks_made(), Vec::<String>::new(), "a host tool ran the worker's file");
    }

    pub fn existing_files_are_read_only(backend: &str) {
        let s = Scratch::new(true);
        let z = s.zone();
        std::fs::create_dir_all(z.join(".local/bin")).expect("mkdir");
        std::fs::write(z.join(".local/bin/tool"), "#!/bin/sh\necho mine\n").expect("tool");
        std::fs::write(z.join(".vimrc"), "set nocompatible\n").expect("vimrc");
        support::give_to_worker(&z);
        let m = s.marks();
        let script = format!(
            "cd /h; printf '#!/bin/sh\\ntouch {m}/git\\n' > .local/bin/git && echo WROTE:git; echo evil > .local/bin/tool && echo WROTE:tool; \
             echo 'silent !touch {m}/vim' >> .vimrc && echo WROTE:vimrc; echo done",
            m = m.display()
        );
        let o = s.run(backend, &script);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(stdout.contains("done") && !stdout.contains("WROTE:"), "a write went through: {stdout}");
        assert_eq!(std::fs::read_to_string(z.join(".vimrc")).expect("vimrc"), "set nocompatible\n");
        assert_eq!(std::fs::read_to_string(z.join(".local/bin/tool")).expect("tool"), "#!/bin/sh\necho mine\n");
        assert!(!z.join(".local/bin/git").exists());
        s.person_works();
        assert_eq!(s.marks_made(), Vec::<String>::new(), "a host tool ran the worker's file");
    }

    /// No start-up file, nobody's home: `bin/` is a project's own folder. The planting stays,
    /// and the same tools with `HOME` there (and a `.profile` the person adds) do run it,
    /// which shows that they read these files.
    pub fn planted_in_a_project_stays(backend: &str) {
        let s = Scratch::new(false);
        let o = s.run(backend, &planting(&s.marks(), false));
        assert_eq!(o.status.code(), Some(0), "the worker's script ran");
        assert!(!String::from_utf8_lossy(&o.stderr).contains("moved aside"), "{}", String::from_utf8_lossy(&o.stderr));
        for p in [".local/bin/git", "bin/ls", ".vim/plugin/w.vim", ".tmux.conf", ".aws/config"] {
            assert!(s.zone().join(p).is_file(), "{p} was taken from a project");
        }
        std::fs::write(s.zone().join(".profile"), PROFILE).expect("profile");
        s.person_works();
        assert_eq!(s.marks_made(), vec!["git", "ls", "tmux", "vim"], "the host tools read what was planted");
    }
}

/// A zone that is nobody's home at its top but holds `alice/.profile`: the walk at launch finds
/// the home, and the run's own tool service (the broker, from inside the sandbox) refuses the
/// home entries anywhere in the zone, as the sweep would move them.
fn broker_refuses_home_entries(backend: &str) {
    let s = Scratch::new(false);
    std::fs::create_dir_all(s.zone().join("alice")).expect("mkdir");
    std::fs::write(s.zone().join("alice/.profile"), PROFILE).expect("profile");
    let paths = ["/h/alice/.local/bin/git", "/h/alice/bin/ls", "/h/bob/.vim/plugin/w.vim", "/h/alice/.aws/config", "/h/notes.md"];
    let mut script = String::new();
    for p in paths {
        script.push_str(&format!(
            r#"curl -s --unix-socket "$WORKCELL_BROKER" -H "Authorization: Bearer $WORKCELL_TOKEN" -H 'Content-Type: application/json' --data-binary '{{"path":"{p}","content":"touch {m}/x"}}' http://workcell/v1/tools/write_file; echo; "#,
            m = s.marks().display()
        ));
    }
    let command = serde_json::to_string(&["sh", "-c", &script]).expect("json");
    let worker = format!("---\nsandbox:\n  zones:\n    - {{name: h, mode: rw}}\ncommand: {command}\n---\nPlant.\n");
    support::write_project(
        &s.root.join("proj"),
        "sandbox:\n  zones:\n    h: {path: ./h, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
        &[("planter", &worker)],
    );
    support::give_to_worker(&s.root);
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .args(["run", "--backend", backend, "planter"])
        .current_dir(s.root.join("proj"))
        .output()
        .expect("workcell");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let answers: Vec<serde_json::Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(answers.len(), paths.len(), "{stdout}");
    for (p, a) in paths.iter().zip(&answers).take(paths.len() - 1) {
        assert_eq!(a["ok"], false, "{p}: {a}");
        assert_eq!(a["error"]["kind"], "protected", "{p}: {a}");
    }
    assert_eq!(answers[paths.len() - 1]["ok"], true, "an ordinary file is written: {}", answers[paths.len() - 1]);
    for p in ["alice/.local", "alice/bin", "bob", "alice/.aws"] {
        assert!(s.zone().join(p).symlink_metadata().is_err(), "{p} was made");
    }
}

/// The file tools outside any run (`workcell mcp`, the broker): a zone with a start-up file at
/// its top is a home when the configuration is read, so they refuse its home entries too,
/// `unprotect:` turns one off, and a zone that is no home keeps its `bin/` writable.
#[test]
fn file_tools_refuse_home_entries() {
    use std::sync::Arc;
    use workcell::config::{BackendChoice, Project};
    use workcell::run::runner::BackendRunner;
    use workcell::tools::approval::{ApprovalMode, Approver};
    use workcell::tools::service::{Caller, ToolService};

    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    for d in ["h", "u", "p"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    for d in ["h", "u"] {
        std::fs::write(root.join(d).join(".profile"), PROFILE).expect("profile");
    }
    let pre = "approval: {write: preApproved, delete: preApproved}";
    let config = format!(
        "sandbox:\n  zones:\n    h: {{path: ./h, mode: rw, {pre}}}\n    u: {{path: ./u, mode: rw, {pre}, unprotect: [bin]}}\n    p: {{path: ./p, mode: rw, {pre}}}\n"
    );
    let project = Arc::new(Project::from_text(&config, &root.join("workcell.yaml"), &root).expect("project"));
    let mode = ApprovalMode::ApproveAll;
    let runner = Arc::new(BackendRunner::new(project.clone(), BackendChoice::None, mode));
    let service = ToolService::new(
        project.clone(),
        Caller::default(),
        project.sandbox.clone(),
        Approver::new(mode, None),
        workcell::audit::AuditLog::new(&project.dir, "test-run"),
        runner,
    );
    let write = |path: &str| service.call("write_file", serde_json::json!({"path": path, "content": "touch /tmp/x\n"}));
    for path in ["/h/.local/bin/git", "/h/bin/ls", "/h/sub/.vimrc", "/h/.tmux.conf", "/h/.aws/config", "/h/.kube/config", "/u/.local/bin/git"] {
        let err = write(path).expect_err(path);
        assert_eq!(err.kind(), "protected", "{path}: {err}");
    }
    for path in ["/h/notes.md", "/u/bin/mine", "/p/bin/ls", "/p/.local/bin/git", "/p/.tmux.conf"] {
        write(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    assert!(!root.join("h/.local").exists() && !root.join("h/bin").exists());
}

macro_rules! backend_suite {
    ($module:ident, $backend:literal) => {
        mod $module {
            use super::*;
            const BACKEND: &str = $backend;

            #[test]
            fn planted_in_a_home_runs_nothing() {
                if support::backend_ready(BACKEND) && tools_ready() {
                    body::planted_in_a_home_runs_nothing(BACKEND);
                }
            }

            #[test]
            fn existing_files_are_read_only() {
                if support::backend_ready(BACKEND) && tools_ready() {
                    body::existing_files_are_read_only(BACKEND);
                }
            }

            #[test]
            fn broker_refuses_home_entries() {
                if support::backend_ready(BACKEND) {
                    super::broker_refuses_home_entries(BACKEND);
                }
            }

            #[test]
            fn planted_in_a_project_stays() {
                if support::backend_ready(BACKEND) && tools_ready() {
                    body::planted_in_a_project_stays(BACKEND);
                }
            }
        }
    };
}

backend_suite!(bwrap, "bwrap");
backend_suite!(docker, "docker");
