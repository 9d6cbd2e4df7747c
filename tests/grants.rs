//! Grants of directories a worker will create (`allow_write: [/out/reports/2026]` before
//! `reports/` exists), on the real backends, through the real `workcell` binary: the
//! directory is created at launch beneath the held zone, given to the worker's user and
//! bound; a read-only grant of a missing directory is refused; and a link planted where the
//! directory should be (by an earlier run, or between load and launch) is never followed,
//! so nothing is created or written through it. The same bodies run on bwrap and docker.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use support::{give_to_worker, worker_uid, write_project};
use workcell::config::{BackendChoice, Project};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::ApprovalMode;
use workcell::tools::service::SandboxRunner;

/// `out` is read-write and its writes need nobody's yes, so a granted area is bound
/// read-write (the worker writes to it directly).
const CONFIG: &str = "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n";

/// `tmp/proj` (the project, with `out/`, owned by the test worker) and `tmp/secret`
/// beside it, which no zone contains.
struct Scratch {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    secret: PathBuf,
}

impl Scratch {
    fn new(workers: &[(&str, &str)]) -> Scratch {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let dir = root.join("proj");
        let secret = root.join("secret");
        std::fs::create_dir_all(dir.join("out")).expect("mkdir out");
        std::fs::create_dir_all(&secret).expect("mkdir secret");
        write_project(&dir, CONFIG, workers);
        give_to_worker(&dir);
        give_to_worker(&secret);
        Scratch { _tmp: tmp, dir, secret }
    }

    fn run(&self, backend: &str, worker: &str) -> Output {
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
            .current_dir(&self.dir)
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::null())
            .args(["run", worker, "--backend", backend])
            .output()
            .expect("start workcell");
        eprintln!(
            "workcell run {worker} -> {:?}\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn secret_is_empty(&self) -> bool {
        std::fs::read_dir(&self.secret).expect("read secret").next().is_none()
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn worker(sandbox: &str, script: &str) -> String {
    format!("---\nsandbox:\n{sandbox}\ncommand: [sh, -c, '{script}']\n---\n")
}

fn owner(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (m.uid(), m.gid())
}

mod body {
    use super::*;

    /// The granted directory (two levels missing) is created at launch, owned by the
    /// worker's user, bound read-write, and the worker writes into it.
    pub fn creates_its_granted_directory(backend: &str) {
        let w = worker("  allow_write: [/out/reports/2026]", "echo done > /out/reports/2026/r.txt && ls /out");
        let s = Scratch::new(&[("rep", &w)]);
        let out = s.run(backend, "rep");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let reports = s.dir.join("out/reports");
        assert_eq!(std::fs::read_to_string(reports.join("2026/r.txt")).expect("written on the host"), "done\n");
        let uid = worker_uid();
        for p in [reports.clone(), reports.join("2026"), reports.join("2026/r.txt")] {
            assert_eq!(owner(&p).0, uid, "{} belongs to the worker's user", p.display());
        }
        // Only the granted area is bound: the rest of `out` stays out of sight.
        assert_eq!(String::from_utf8_lossy(&out.stdout), "reports\n");
    }

    /// A read-only grant of a directory that does not exist is refused before anything
    /// starts (exit 2, saying what to do), and creates nothing; once the directory exists the
    /// same grant is bound read-only.
    pub fn read_only_grant(backend: &str) {
        let w = worker("  allow_read: [/out/reports]", "cat /out/reports/r.txt; echo x > /out/reports/new.txt; exit 0");
        let s = Scratch::new(&[("reader", &w)]);
        let out = s.run(backend, "reader");
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("Cannot grant read access to '/out/reports': the directory does not exist"), "{}", stderr(&out));
        assert!(!s.dir.join("out/reports").exists(), "a read-only grant created its directory");

        std::fs::create_dir(s.dir.join("out/reports")).expect("mkdir");
        std::fs::write(s.dir.join("out/reports/r.txt"), "kept\n").expect("write");
        give_to_worker(&s.dir.join("out"));
        let out = s.run(backend, "reader");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("kept\n"));
        assert!(!s.dir.join("out/reports/new.txt").exists(), "a read-only grant was writable");
    }

    /// An earlier run plants `out/reports` as a link (to `../../secret`, beside the project,
    /// and to `/tmp`); the worker granted `/out/reports` gets nothing through it: its run is
    /// refused and nothing appears where the link leads.
    pub fn a_planted_link_is_not_followed(backend: &str) {
        let marker = format!("workcell-grant-{}-{}.txt", std::process::id(), support::unique());
        for target in ["../../secret", "/tmp"] {
            let planter = worker("  allow_write: [/out]", &format!("ln -s {target} /out/reports"));
            let rep = worker("  allow_write: [/out/reports]", &format!("echo pwned > /out/reports/{marker}"));
            let s = Scratch::new(&[("planter", &planter), ("rep", &rep)]);
            let out = s.run(backend, "planter");
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
            assert!(std::fs::symlink_metadata(s.dir.join("out/reports")).expect("planted").file_type().is_symlink());

            let out = s.run(backend, "rep");
            assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
            assert!(stderr(&out).contains("rep.worker:3:17: ") && stderr(&out).contains("through a symlink"), "{}", stderr(&out));
            assert!(s.secret_is_empty(), "something was created through the link in secret/");
            assert!(!Path::new("/tmp").join(&marker).exists(), "the worker wrote through the link into the host's /tmp");
            assert!(std::fs::symlink_metadata(s.dir.join("out/reports")).expect("still there").file_type().is_symlink());
        }
    }

    /// The race: the directory is missing when the project is loaded, and a link appears in
    /// its place before the launch (a worker of another run could do this at any time). The
    /// launch creates nothing through it and the worker never starts.
    pub fn a_link_planted_after_load_is_not_followed(backend: &str) {
        let marker = format!("workcell-grant-{}-{}", std::process::id(), support::unique());
        let rep = worker("  allow_write: [/out/reports]", &format!("echo pwned > /out/reports/{marker}.txt"));
        let s = Scratch::new(&[("rep", &rep)]);
        let choice = match backend {
            "bwrap" => BackendChoice::Bwrap,
            _ => BackendChoice::Docker,
        };
        for target in ["../../secret", "/tmp", "../../secret/new"] {
            let project = Arc::new(Project::load(Some(&s.dir.join("workcell.yaml")), &s.dir).expect("project"));
            let w = project.worker("rep").expect("the grant is accepted while reports/ is missing").clone();
            std::os::unix::fs::symlink(target, s.dir.join("out/reports")).expect("plant the link");
            let runner = BackendRunner::new(project.clone(), choice, ApprovalMode::ApproveAll);
            let err = runner.run_worker(&w, &w.sandbox, "", &[], 1, &["rep".into()]).expect_err("the launch is refused");
            assert!(err.to_string().contains("is a symbolic link or a file, not a directory; links are never followed"), "{target}: {err}");
            assert!(s.secret_is_empty(), "{target}: something was created through the link in secret/");
            assert!(!Path::new("/tmp").join(format!("{marker}.txt")).exists(), "{target}: written through the link into /tmp");
            std::fs::remove_file(s.dir.join("out/reports")).expect("remove the link");
        }
    }
}

/// Nothing is created inside the project's control files, whichever of them exists: a
/// worker of the root form granted `/workers/new` or `/.workcell/new` does not get them.
#[test]
fn nothing_is_created_inside_control_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    let w = |entry: &str| format!("---\nsandbox:\n  allow_write: [{entry}]\n---\n");
    write_project(&dir, "sandbox:\n  root: {root: ., readonly: false}\n", &[("in_workers", &w("/workers/new")), ("in_audit", &w("/.workcell/new"))]);
    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project");
    let me = workcell::plan::UserSpec { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() };
    for name in ["in_workers", "in_audit"] {
        let sandbox = &project.worker(name).expect("accepted at load").sandbox;
        let err = sandbox.materialize(me).expect_err("refused at launch");
        assert!(err.to_string().contains("part of the project's own configuration"), "{name}: {err}");
    }
    assert!(!dir.join("workers/new").exists() && !dir.join(".workcell").exists(), "created inside the control files");
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [creates_its_granted_directory, read_only_grant, a_planted_link_is_not_followed, a_link_planted_after_load_is_not_followed]
);
support::backend_suite!(
    docker,
    "docker",
    [creates_its_granted_directory, read_only_grant, a_planted_link_is_not_followed, a_link_planted_after_load_is_not_followed]
);
