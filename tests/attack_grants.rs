//! Attacks on grants of directories that do not exist yet (`allow_write: [/out/reports]`
//! before `reports/` is there): what a hostile worker sharing the zone can do while
//! workcell creates the directory at launch.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use support::{give_to_worker, worker_uid, write_project};
use workcell::config::Project;
use workcell::plan::UserSpec;

const CONFIG: &str = "sandbox:\n  zones:\n    out: {path: ./out, mode: rw}\n";

fn project(workers: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
    std::fs::create_dir_all(dir.join("out")).expect("mkdir out");
    write_project(&dir, CONFIG, workers);
    give_to_worker(&dir);
    (tmp, dir)
}

/// A worker sharing `out/` swaps the directory workcell has just made with a directory of
/// the zone it may rename but not change (root's, with a file in it), in a loop. Whatever
/// the interleaving, workcell never gives that directory (or its file) to the worker: the
/// directory it hands over is one it made and found empty, or the launch is refused.
#[test]
fn an_exchanged_directory_is_never_given_to_the_worker() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root (ownership is the boundary under test)");
        return;
    }
    let (_tmp, dir) = project(&[("w", "---\nsandbox:\n  allow_write: [/out/reports]\ncommand: [true]\n---\n")]);
    let out = dir.join("out");
    let rootdir = out.join("rootdir");
    std::fs::create_dir(&rootdir).expect("mkdir rootdir");
    std::fs::write(rootdir.join("keep"), "root's").expect("write keep");
    std::os::unix::fs::chown(&rootdir, Some(0), Some(0)).expect("chown");
    std::os::unix::fs::chown(rootdir.join("keep"), Some(0), Some(0)).expect("chown");
    let ino = std::fs::metadata(&rootdir).expect("stat").ino();

    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project");
    let sandbox = project.worker("w").expect("accepted at load").sandbox.clone();
    let user = UserSpec { uid: worker_uid(), gid: worker_uid() };

    // The exchanger holds the read side while it swaps; the test takes the write side to
    // put things back between launches.
    let gate = Arc::new(RwLock::new(()));
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = {
        let (gate, stop, out) = (gate.clone(), stop.clone(), out.clone());
        std::thread::spawn(move || {
            let dirfd = rustix::fs::open(&out, rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY, rustix::fs::Mode::empty()).expect("open out");
            let mut swapped = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _g = gate.read().expect("gate");
                if rustix::fs::renameat_with(&dirfd, "reports", &dirfd, "rootdir", rustix::fs::RenameFlags::EXCHANGE).is_ok() {
                    swapped += 1;
                }
            }
            swapped
        })
    };

    let where_is = |ino: u64| -> PathBuf {
        ["rootdir", "reports"].iter().map(|n| out.join(n)).find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.ino() == ino)).expect("root's directory")
    };
    let mut refused = 0;
    let mut result = Ok(());
    for round in 0..2000 {
        if sandbox.materialize(user).is_err() {
            refused += 1;
        }
        let _g = gate.write().expect("gate");
        let now = where_is(ino);
        let m = std::fs::symlink_metadata(&now).expect("stat");
        let keep = std::fs::symlink_metadata(now.join("keep")).expect("stat keep");
        if (m.uid(), m.gid(), keep.uid()) != (0, 0, 0) {
            result = Err(format!("round {round}: root's directory {} now belongs to {}:{} (file {})", now.display(), m.uid(), m.gid(), keep.uid()));
            break;
        }
        // Back to the start: root's directory at rootdir, no reports.
        if now != rootdir {
            std::fs::rename(&now, &rootdir).expect("put back");
        }
        let _ = std::fs::remove_dir(out.join("reports"));
        assert!(!out.join("reports").exists(), "round {round}: reports left");
    }
    stop.store(true, Ordering::Relaxed);
    let swapped = swaps.join().expect("exchanger");
    eprintln!("exchanges: {swapped}, launches refused: {refused}");
    if let Err(e) = result {
        panic!("{e}");
    }
}

fn run(dir: &std::path::Path, backend: &str, worker: &str) -> std::process::Output {
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .args(["run", worker, "--backend", backend])
        .output()
        .expect("start workcell");
    eprintln!("workcell run {worker} -> {:?}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    out
}

mod body {
    use super::*;

    /// A launch that is refused creates nothing: not the directories granted for writing
    /// when a read-only grant of the same worker is missing, not when the run fails later
    /// (no command to run).
    pub fn a_refused_launch_leaves_nothing(backend: &str) {
        let (_tmp, dir) = project(&[
            ("mixed", "---\nsandbox:\n  allow_write: [/out/made/deep]\n  allow_read: [/out/made/deep, /out/ghost]\ncommand: [true]\n---\n"),
            ("nocmd", "---\nsandbox:\n  allow_write: [/out/made/deep]\n---\n"),
        ]);
        for w in ["nocmd", "mixed"] {
            let out = run(&dir, backend, w);
            assert_ne!(out.status.code(), Some(0), "{w}: the launch was not refused");
            let left: Vec<_> = std::fs::read_dir(dir.join("out")).expect("read out").map(|e| e.expect("entry").file_name()).collect();
            assert!(left.is_empty(), "{w}: a refused launch left {left:?} in out/");
        }
    }

    /// A worker file refused at load (here: an unknown zone) still names its `build:`
    /// folder; another worker with the project read-write must not rewrite that folder
    /// while the file waits to be fixed (the fixed worker would build from it).
    pub fn a_broken_workers_build_folder_stays_protected(backend: &str) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
        std::fs::create_dir_all(dir.join("img")).expect("mkdir img");
        std::fs::write(dir.join("img/Dockerfile"), "FROM scratch\n").expect("Dockerfile");
        std::fs::create_dir_all(dir.join("img2")).expect("mkdir img2");
        write_project(
            &dir,
            "sandbox:\n  zones:\n    proj: {path: ., mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
            &[
                ("builder", "---\nbuild: ./img\nsandbox:\n  zones: [{name: nosuch, mode: rw}]\ncommand: [true]\n---\n"),
                // Not even YAML.
                ("builder2", "---\nbuild: './img2'\nsandbox: [\n---\n"),
                ("w", "---\nsandbox:\n  zones: [{name: proj, mode: rw}]\ncommand: [sh, -c, 'echo RUN evil >> /proj/img/Dockerfile; echo x > /proj/img/new; echo x > /proj/img2/new; exit 0']\n---\n"),
            ],
        );
        give_to_worker(&dir);
        let out = run(&dir, backend, "w");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(std::fs::read_to_string(dir.join("img/Dockerfile")).expect("read"), "FROM scratch\n", "the build folder was rewritten");
        assert!(!dir.join("img/new").exists(), "a file was added to the build folder");
        assert!(!dir.join("img2/new").exists(), "a file was added to the build folder of a file that is not even YAML");
    }
}

support::backend_suite!(bwrap, "bwrap", [a_refused_launch_leaves_nothing, a_broken_workers_build_folder_stays_protected]);
support::backend_suite!(docker, "docker", [a_refused_launch_leaves_nothing, a_broken_workers_build_folder_stays_protected]);

/// A FIFO in a zone (a worker makes one with `mkfifo`): the file tools refuse it at once
/// instead of waiting for a writer (which would hang the tool service, and `workcell mcp`
/// for the host's agent), and `check` says so rather than "allowed".
#[test]
fn a_fifo_is_refused_not_waited_for() {
    let (_tmp, dir) = project(&[]);
    std::fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, max_file_bytes: 4}\n").expect("config");
    let fifo = dir.join("out/f.txt");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
    let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .args(["check", "/out/f.txt"])
        .output()
        .expect("check");
    assert_eq!(o.status.code(), Some(1), "check allowed a FIFO: {}", String::from_utf8_lossy(&o.stdout));
    assert!(String::from_utf8_lossy(&o.stdout).contains("special file"), "{}", String::from_utf8_lossy(&o.stdout));

    let sandbox = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project").sandbox.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send((sandbox.read("/out/f.txt", 100, 0).map(|r| r.content), sandbox.check_edit("/out/f.txt", "x")));
    });
    // A generous deadline only turns a hang into a failure; then a writer frees the reader.
    let got = rx.recv_timeout(std::time::Duration::from_secs(60));
    if got.is_err() {
        let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
    }
    let (read, edit) = got.expect("the read tool waited on a FIFO");
    for r in [read.map(|_| ()), edit.map(|_| ())] {
        assert!(r.as_ref().is_err_and(|e| e.to_string().contains("special file")), "{r:?}");
    }
}

/// `check` on a path inside a granted directory that does not exist yet says so, instead of
/// "outside the sandbox" with "Readable paths: none".
#[test]
fn check_on_a_pending_path_says_it_is_granted_but_missing() {
    let (_tmp, dir) = project(&[("w", "---\nsandbox:\n  allow_write: [/out/reports/2026]\n  allow_read: [/out/ro]\ncommand: [true]\n---\n")]);
    let check = |args: &[&str]| {
        let o = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
            .current_dir(&dir)
            .stdin(std::process::Stdio::null())
            .args(["check", "--worker", "w"])
            .args(args)
            .output()
            .expect("check");
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for args in [&["/out/reports/2026/a.txt"][..], &["--write", "/out/reports/2026/a.txt"]] {
        let out = check(args);
        assert!(
            out.contains("no such file or directory. It lies in '/out/reports/2026', granted for writing but missing when this sandbox was made"),
            "{args:?}: {out}"
        );
    }
    let out = check(&["/out/ro/x"]);
    assert!(out.contains("It lies in '/out/ro', granted for reading but missing when this sandbox was made: create it before a run"), "{out}");
    // Beside the grant: still outside.
    assert!(check(&["/out/other"]).contains("outside the sandbox"));
    assert!(!dir.join("out/reports").exists() && !dir.join("out/ro").exists(), "check created something");
}

/// `check --stdin` holds at most one bounded line: an endless line (paths piped in may come
/// from a worker) is refused instead of read into memory to the end.
#[test]
fn check_stdin_refuses_an_endless_line() {
    use std::io::Write;
    let (_tmp, dir) = project(&[]);
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
        .current_dir(&dir)
        .args(["check", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("check");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(b"/out/a\n");
        // 1 MiB without a newline; the writer stops when workcell closes the pipe.
        let chunk = vec![b'a'; 64 * 1024];
        for _ in 0..16 {
            if stdin.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let o = child.wait_with_output().expect("wait");
    writer.join().expect("writer");
    let (stdout, stderr) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.status.code(), Some(2), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.starts_with("allowed\t/out/a\n") || stdout.starts_with("refused\t/out/a"), "{stdout}");
    assert!(stderr.contains("longer than 65536 bytes"), "{stderr}");
}

/// A granted path that reaches a control directory through a link inside the zone (planted
/// by an earlier run) creates nothing there: judged on the directory reached, not the name.
#[test]
fn nothing_is_created_in_control_files_through_a_link() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    let w = |entry: &str| format!("---\nsandbox:\n  allow_write: [{entry}]\n---\n");
    write_project(&dir, "sandbox:\n  root: {root: ., readonly: false}\n", &[("via_workers", &w("/lw/new/deeper")), ("via_audit", &w("/la/new"))]);
    std::fs::create_dir_all(dir.join(".workcell")).expect("mkdir .workcell");
    std::os::unix::fs::symlink("workers", dir.join("lw")).expect("link");
    std::os::unix::fs::symlink(".workcell", dir.join("la")).expect("link");
    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("project");
    let me = UserSpec { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() };
    for name in ["via_workers", "via_audit"] {
        let sandbox = &project.worker(name).expect("accepted at load").sandbox;
        let err = sandbox.materialize(me).expect_err("refused at launch");
        assert!(err.to_string().contains("part of the project's own configuration"), "{name}: {err}");
    }
    assert!(!dir.join("workers/new").exists() && !dir.join(".workcell/new").exists(), "created inside the control files");
}
