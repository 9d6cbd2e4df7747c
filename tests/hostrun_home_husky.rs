//! husky's home start-up files in a zone that is a home (issue 37, finding 5): husky 9's
//! `.husky/_/h` sources `~/.config/husky/init.sh` before every hook, husky 7 and 8's
//! `.husky/_/husky.sh` sources `~/.huskyrc`; a worker that plants either in a home zone would
//! run on the person's next `git commit` in any repository that uses husky, wherever it is.
//! After the run both are moved aside, and the real `git commit` (the husky layouts, as
//! `husky install` writes them, in a repository outside every zone) runs nothing of the
//! worker's; in a zone that is no home they stay and that commit does run them (the
//! control). Bodies run on bwrap and docker.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use support::scratch::Root;

/// husky 9's `.husky/_/h`, the part that matters.
const H9: &str = "#!/usr/bin/env sh\nn=$(basename \"$0\")\ns=$(dirname \"$(dirname \"$0\")\")/$n\n[ ! -f \"$s\" ] && exit 0\n\
i=\"${XDG_CONFIG_HOME:-$HOME/.config}/husky/init.sh\"\n[ -f \"$i\" ] && . \"$i\"\n[ \"${HUSKY-}\" = \"0\" ] && exit 0\nsh -e \"$s\" \"$@\"\n";
/// husky 8's `.husky/_/husky.sh`, the part that matters.
const H8: &str = "#!/usr/bin/env sh\nif [ -z \"$husky_skip_init\" ]; then\n  if [ -f ~/.huskyrc ]; then\n    . ~/.huskyrc\n  fi\n  readonly husky_skip_init=1\n  export husky_skip_init\n  sh -e \"$0\" \"$@\"\n  exit $?\nfi\n";

struct Scratch(Root);

impl std::ops::Deref for Scratch {
    type Target = Root;
    fn deref(&self) -> &Root {
        &self.0
    }
}

impl Scratch {
    /// `home`: the zone `proj/h` holds a `.profile` (a home to a login shell). Two husky
    /// repositories outside every zone: `r9` (husky 9) and `r8` (husky 8).
    fn new(home: bool) -> Scratch {
        let s = Scratch(Root::new(&["proj/h", "marks", "r9/.husky/_", "r8/.husky/_"], |root| {
            if home {
                std::fs::write(root.join("proj/h/.profile"), "PATH=\"$HOME/bin:$PATH\"\n").expect("profile");
            }
            let exe = |p: PathBuf, text: &str| {
                std::fs::write(&p, text).expect("write");
                std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
            };
            exe(root.join("r9/.husky/_/h"), H9);
            exe(root.join("r9/.husky/_/pre-commit"), "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"\n");
            exe(root.join("r9/.husky/pre-commit"), "true\n");
            exe(root.join("r8/.husky/_/husky.sh"), H8);
            exe(root.join("r8/.husky/pre-commit"), "#!/usr/bin/env sh\n. \"$(dirname -- \"$0\")/_/husky.sh\"\ntrue\n");
        }));
        for r in ["r9", "r8"] {
            let hooks = if r == "r9" { ".husky/_" } else { ".husky" };
            for args in [&["init", "-q"][..], &["config", "core.hooksPath", hooks]] {
                assert!(s.as_person(&s.root.join(r), "git", args).status.success());
            }
        }
        s
    }

    fn zone(&self) -> PathBuf {
        self.root.join("proj/h")
    }

    fn run(&self, backend: &str, script: &str) -> Output {
        support::workcell_logged(&self.root.join("proj"), &["run", "--backend", backend, "--zone", "h=./h:rw", "--", "sh", "-c", script])
    }

    /// `program args` in `cwd` on the host as the person, `HOME` at the zone.
    fn as_person(&self, cwd: &Path, program: &str, args: &[&str]) -> Output {
        let mut c = support::as_worker("env");
        c.args(["-i", &format!("HOME={}", self.zone().display()), "PATH=/usr/local/bin:/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"]);
        c.args(["GIT_AUTHOR_NAME=p", "GIT_AUTHOR_EMAIL=p@x", "GIT_COMMITTER_NAME=p", "GIT_COMMITTER_EMAIL=p@x"]);
        c.arg(program).args(args).current_dir(cwd).stdin(Stdio::null());
        let out = c.output().expect("start the host tool");
        eprintln!("{program} {args:?} -> {:?} {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
        out
    }

    /// The person commits in both husky repositories; the marks the worker's files left.
    fn commit_and_marks(&self) -> Vec<String> {
        for r in ["r9", "r8"] {
            let out = self.as_person(&self.root.join(r), "git", &["commit", "-q", "--allow-empty", "-m", "person"]);
            assert!(out.status.success(), "git commit in {r}");
        }
        support::names_in(&self.root.join("marks"))
    }
}

fn planting(marks: &Path) -> String {
    let m = marks.display();
    format!("cd /h && mkdir -p .config/husky && echo 'touch {m}/init' > .config/husky/init.sh && echo 'touch {m}/huskyrc' > .huskyrc && echo planted")
}

mod body {
    use super::*;

    pub fn husky_start_up_files_in_a_home_run_nothing(backend: &str) {
        let s = Scratch::new(true);
        let o = s.run(backend, &planting(&s.root.join("marks")));
        assert!(String::from_utf8_lossy(&o.stdout).contains("planted"));
        for p in [".config/husky", ".huskyrc"] {
            assert!(s.zone().join(p).symlink_metadata().is_err(), "{p} stayed in the home");
        }
        assert_eq!(s.commit_and_marks(), Vec::<String>::new(), "git commit in a husky repository ran the worker's file");
    }

    pub fn the_same_planting_in_a_project_is_run_by_husky(backend: &str) {
        let s = Scratch::new(false);
        let o = s.run(backend, &planting(&s.root.join("marks")));
        assert!(String::from_utf8_lossy(&o.stdout).contains("planted"));
        assert_eq!(s.commit_and_marks(), ["huskyrc", "init"], "the control: husky sources these files from HOME");
    }
}

support::backend_suite!(bwrap, "bwrap", [husky_start_up_files_in_a_home_run_nothing, the_same_planting_in_a_project_is_run_by_husky]);
support::backend_suite!(docker, "docker", [husky_start_up_files_in_a_home_run_nothing, the_same_planting_in_a_project_is_run_by_husky]);
