//! One identity per worker, as root and as a normal user: the README's quick start, the
//! README read top to bottom in one clone, and `workcell init` work as written, a zone the
//! worker's uid cannot use is refused before the run with the fixes (never a silent
//! `Permission denied` inside), and `localhost` resolves in every worker, with and without
//! network. The same bodies run on bwrap and docker.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::TEST_WORKER_UID;

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("workcell")
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn show(what: &str, out: &Output) {
    eprintln!("{what} -> {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

fn chown(path: &Path, uid: u32, gid: u32) {
    let st = Command::new("chown").arg("-R").arg(format!("{uid}:{gid}")).arg(path).status().expect("chown");
    assert!(st.success());
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A fresh copy of `examples/report` in a temp dir (as a clone by whoever runs the test).
fn report_copy() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Where a checkout lives, others may pass (a temp dir is 0700).
    chmod(tmp.path(), 0o755);
    let dir = tmp.path().join("report");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/report");
    let st = Command::new("cp").arg("-r").arg(&src).arg(&dir).status().expect("cp");
    assert!(st.success());
    (tmp, dir)
}

/// The README (`README.md` of the repository).
fn readme() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")
}

/// `PATH` with the directory of the binary under test first: what the quick start's
/// `cargo install` provides (`~/.cargo/bin/workcell`, first on a rustup user's `PATH`).
fn path_with_workcell() -> String {
    format!("{}:{}", bin().parent().expect("bin dir").display(), std::env::var("PATH").unwrap_or_default())
}

/// The quick start's first line, which installs the `workcell` every later command calls.
const INSTALL: &str = "cargo install --path . --locked";

/// The shell lines of the README's quick start (its first `sh` block), without the install
/// and the `cd`; `workcell run` gets the backend chosen.
fn quick_start_lines(backend: &str) -> Vec<String> {
    let lines = support::first_sh_block_lines(&readme());
    assert!(lines.first().is_some_and(|l| l.starts_with(INSTALL)), "the quick start installs workcell first ({INSTALL}): {lines:?}");
    lines
        .into_iter()
        .skip(1)
        .filter(|l| !l.starts_with("cd "))
        .map(|l| match l.strip_prefix("workcell run ") {
            Some(rest) => format!("workcell run --backend {backend} {rest}"),
            None => l,
        })
        .collect()
}

/// `sh -c line` in `dir`, as `as_user` (`None`: as we are) with `HOME` set to `home`, the
/// binary under test as the `workcell` on `PATH`, and `DOCKER_HOST` pointed at nothing when
/// the backend is bwrap (so that `auto` picks it, as where Docker is missing).
fn sh_as(line: &str, dir: &Path, home: &Path, as_user: Option<u32>, backend: &str) -> Output {
    let mut cmd = match as_user {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", &uid.to_string(), "--regid", &uid.to_string(), "--clear-groups", "--", "sh", "-c", line]);
            c
        }
        None => {
            let mut c = Command::new("sh");
            c.args(["-c", line]);
            c
        }
    };
    if backend == "bwrap" {
        cmd.env("DOCKER_HOST", format!("unix://{}/no-docker.sock", home.display()));
    }
    let out = cmd
        .current_dir(dir)
        .env("PATH", path_with_workcell())
        .env("HOME", home)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .output()
        .expect("sh");
    show(line, &out);
    out
}

/// The `workcell` a bare name finds there is the binary under test (not another one on `PATH`).
fn assert_workcell_on_path_is_under_test(dir: &Path, home: &Path, as_user: Option<u32>) {
    let out = sh_as("command -v workcell", dir, home, as_user, "none");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), bin().display().to_string(), "the bare `workcell` is not the binary under test");
}

/// Runs the quick start in `dir` as `as_user` (`None`: as we are); every line must succeed
/// (`check` exits 1 by design: its second path is refused) and leave its report.
fn quick_start(backend: &str, dir: &Path, as_user: Option<u32>) {
    let lines = quick_start_lines(backend);
    assert!(lines.iter().any(|l| l.contains("run --backend") && l.contains("line-count")), "the quick start runs line-count: {lines:?}");
    assert_workcell_on_path_is_under_test(dir, dir, as_user);
    for line in &lines {
        let out = sh_as(line, dir, dir, as_user, backend);
        let allowed: &[i32] = if line.contains(" check ") { &[0, 1] } else { &[0] };
        assert!(out.status.code().is_some_and(|c| allowed.contains(&c)), "quick start line failed: {line}");
        // The worker's own words (workcell's warnings, e.g. a limit a normal user's bwrap
        // cannot enforce, may name a cgroup it was denied).
        let worker_denied = String::from_utf8_lossy(&out.stderr).lines().any(|l| l.contains("Permission denied") && !l.starts_with("workcell: warning"));
        assert!(!worker_denied, "{line}");
    }
    let report = std::fs::read_to_string(dir.join("out/line-counts.txt")).expect("line-count wrote its report");
    assert!(report.contains("notes.md"), "{report}");
    let n = std::fs::read_to_string(dir.join("out/n.txt")).expect("the ad-hoc line wrote n.txt");
    assert!(n.contains("/in/notes.md"), "{n}");
}

/// The fenced blocks of the README: info string and body lines.
fn readme_blocks() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(readme()).expect("README.md");
    let mut out = Vec::new();
    let mut open: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        match open.take() {
            Some(block) if line.trim_end() == "```" => out.push(block),
            Some((info, mut body)) => {
                body.push(line.to_string());
                open = Some((info, body));
            }
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    open = Some((info.trim().to_string(), Vec::new()));
                }
            }
        }
    }
    out
}

/// The README read top to bottom by a newcomer in a fresh clone (its `examples/`, owned by
/// whoever cloned it): every `sh`/`bash` block that tests/docs.rs runs, and the quick start,
/// one line after the other in the directory the `cd` lines lead to, with `workcell` the
/// binary under test on `PATH` (the quick start's `cargo install` skipped). Each line exits as
/// documented (0, or its `# exit N`); the blocks that run in `examples/NAME` (`run=`) are
/// reached by the README's own `cd`s; and what the runs promise is on disk at the end.
/// tests/docs.rs runs each block alone, in a fresh copy given to the worker: this is what a
/// person meets (a root clone's `out/` and `artifacts/` are root's, the directory is where the
/// previous block left it).
fn readme_top_to_bottom(backend: &str, as_user: Option<u32>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    chmod(tmp.path(), 0o755);
    let clone = tmp.path().join("workcell");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&clone).expect("clone");
    std::fs::create_dir(&home).expect("home");
    let st = Command::new("cp").arg("-r").arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")).arg(&clone).status().expect("cp");
    assert!(st.success());
    if let Some(uid) = as_user {
        chown(tmp.path(), uid, uid);
    }
    assert_workcell_on_path_is_under_test(&clone, &home, as_user);
    let mut cwd = clone.clone();
    let (mut blocks_run, mut first_sh) = (0, true);
    for (info, body) in readme_blocks() {
        let mut words = info.split_whitespace();
        let lang = words.next().unwrap_or("");
        if !["sh", "bash"].contains(&lang) {
            continue;
        }
        let marks: Vec<&str> = words.collect();
        let quick_start = lang == "sh" && std::mem::take(&mut first_sh);
        let run_dir = marks.iter().find_map(|m| m.strip_prefix("run=")).map(|d| clone.join(d));
        let runs = marks.contains(&"run") || run_dir.is_some();
        if quick_start {
            assert_eq!(marks, ["tested-by=tests/as_root.rs"], "the quick start is the first sh block");
        } else if !runs || (marks.contains(&"needs=docker") && backend != "docker") {
            continue;
        }
        blocks_run += 1;
        for line in support::doc_lines::command_lines(&body, false) {
            if line.starts_with(INSTALL) {
                continue;
            }
            if let Some(to) = line.strip_prefix("cd ") {
                let to = to.split_whitespace().next().expect("cd DIR");
                cwd = std::fs::canonicalize(cwd.join(to)).unwrap_or_else(|e| panic!("`{line}` from {}: {e}", cwd.display()));
                continue;
            }
            if let Some(dir) = &run_dir {
                assert_eq!(
                    &cwd,
                    &std::fs::canonicalize(dir).expect("run= dir"),
                    "README: `{line}` runs in {info}, but the README's `cd`s lead to {}",
                    cwd.display()
                );
            }
            let out = sh_as(&line, &cwd, &home, as_user, backend);
            let want = support::doc_lines::expected_status(&line);
            assert_eq!(out.status.code(), Some(want), "README, read top to bottom ({backend}, as {as_user:?}): `{line}` in {}", cwd.display());
        }
    }
    assert!(blocks_run >= 6, "only {blocks_run} README blocks were run");
    // What the runs left, where the README says.
    let ex = clone.join("examples");
    let report = std::fs::read_to_string(ex.join("report/out/line-counts.txt")).expect("line-count's report");
    assert!(report.contains("notes.md"), "{report}");
    let tests = std::fs::read_to_string(ex.join("ci-python/artifacts/unittest.txt")).expect("ci-python's report");
    assert!(tests.trim_end().ends_with("OK"), "{tests}");
    assert!(ex.join("documents/text/notice.html.txt").is_file(), "the documents recipe published its text");
    assert!(home.join(".local/share/man/man1/workcell.1").is_file(), "the man page");
}

/// `workcell run --backend B ARGS` in `cwd`; `docker+runsc` is docker under gVisor.
fn run(backend: &str, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    cmd.current_dir(cwd).arg("run");
    match backend.split_once('+') {
        Some((backend, runtime)) => cmd.args(["--backend", backend, "--runtime", runtime]),
        None => cmd.args(["--backend", backend]),
    };
    let out = cmd.args(args).output().expect("workcell");
    show(&format!("run {args:?}"), &out);
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch project for ad-hoc zones: a temp dir given to the test worker, as root.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    support::give_to_worker(&dir);
    (tmp, dir)
}

const USER: &str = "--user=1000:1000";

mod body {
    pub(super) use super::installed::mcp_session_from_a_root_only_install;
    use super::*;

    pub fn readme_quick_start_as_root(backend: &str) {
        let (_tmp, dir) = report_copy();
        quick_start(backend, &dir, None);
    }

    pub fn readme_top_to_bottom_as_root(backend: &str) {
        readme_top_to_bottom(backend, None);
    }

    pub fn readme_top_to_bottom_as_a_normal_user(backend: &str) {
        // As in the quick start below: docker needs its socket, which a normal user may not have.
        if !is_root() || backend != "bwrap" {
            eprintln!("note: the README as a normal user runs as root on bwrap only");
            return;
        }
        readme_top_to_bottom(backend, Some(TEST_WORKER_UID));
    }

    pub fn readme_quick_start_as_a_normal_user(backend: &str) {
        // Only root can become another user here; docker needs its socket, which a normal
        // user may not have.
        if !is_root() || backend != "bwrap" {
            eprintln!("note: the quick start as a normal user runs as root on bwrap only");
            return;
        }
        let (tmp, dir) = report_copy();
        chown(tmp.path(), TEST_WORKER_UID, TEST_WORKER_UID);
        quick_start(backend, &dir, Some(TEST_WORKER_UID));
        assert_eq!(std::fs::metadata(dir.join("out/n.txt")).expect("n.txt").uid(), TEST_WORKER_UID);
    }

    pub fn init_then_run_as_root(backend: &str) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("proj");
        let out = Command::new(bin()).arg("init").arg(&dir).output().expect("init");
        show("init", &out);
        assert!(out.status.success());
        let yaml = std::fs::read_to_string(dir.join("workcell.yaml")).expect("yaml");
        if is_root() {
            // The new directory is root's: workers run as nobody, who owns the zones made.
            assert!(yaml.contains("user: \"65534:65534\""), "{yaml}");
            for d in ["data", "out"] {
                assert_eq!(std::fs::metadata(dir.join(d)).expect(d).uid(), 65534, "{d}");
            }
            // The control files stay root's.
            assert_eq!(std::fs::metadata(dir.join("workers")).expect("workers").uid(), 0);
        } else {
            assert!(!yaml.contains("\n  user:"), "{yaml}");
        }
        // Nothing in data/ yet: wc fails, and so does the starter worker.
        let out = run(backend, &dir, &["line-count"]);
        assert_ne!(out.status.code(), Some(0), "the starter worker hid wc's failure");
        std::fs::write(dir.join("data/a.txt"), "1\n2\n").expect("data");
        let out = run(backend, &dir, &["line-count"]);
        assert_eq!(out.status.code(), Some(0));
        assert!(std::fs::read_to_string(dir.join("out/line-counts.txt")).expect("report").contains("2 /data/a.txt"));
    }

    pub fn init_keeps_the_owner_of_what_exists(backend: &str) {
        if !is_root() {
            return;
        }
        // A directory owned by a person: they are the worker, and what was there keeps its owner.
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("proj");
        std::fs::create_dir_all(dir.join("data")).expect("data");
        std::fs::write(dir.join("data/a.txt"), "x\n").expect("a");
        chown(&dir, TEST_WORKER_UID, TEST_WORKER_UID);
        chown(&dir.join("data"), 0, 0);
        let out = Command::new(bin()).arg("init").arg(&dir).output().expect("init");
        assert!(out.status.success());
        let yaml = std::fs::read_to_string(dir.join("workcell.yaml")).expect("yaml");
        assert!(yaml.contains(&format!("user: \"{TEST_WORKER_UID}:{TEST_WORKER_UID}\"")), "{yaml}");
        assert_eq!(std::fs::metadata(dir.join("data")).expect("data").uid(), 0, "init changed the owner of a directory it did not make");
        assert_eq!(std::fs::metadata(dir.join("out")).expect("out").uid(), TEST_WORKER_UID);
        let out = run(backend, &dir, &["line-count"]);
        assert_eq!(out.status.code(), Some(0));
    }

    pub fn root_owned_rw_zone_is_refused_with_the_fixes(backend: &str) {
        if !is_root() {
            return;
        }
        let (_tmp, dir) = scratch();
        let out_dir = dir.join("out");
        std::fs::create_dir(&out_dir).expect("out");
        chown(&out_dir, 0, 0);
        chmod(&out_dir, 0o755);
        let out = run(backend, &dir, &[USER, "--zone", "out=./out:rw", "--", "sh", "-c", "echo ran > /tmp/x; touch /out/x"]);
        assert_eq!(out.status.code(), Some(2));
        let err = stderr(&out);
        for part in [
            "zone 'out'",
            &out_dir.display().to_string(),
            "owner 0:0, mode 0755",
            "1000:1000",
            "chown -R 1000:1000",
            "defaults.user",
            "--user UID[:GID]",
            "delivery: copy",
        ] {
            assert!(err.contains(part), "'{part}' missing from the refusal");
        }
        assert!(!out_dir.join("x").exists());
        // The same zone read-only is fine: the worker can read it.
        let out = run(backend, &dir, &[USER, "--zone", "out=./out:ro", "--", "ls", "/out"]);
        assert_eq!(out.status.code(), Some(0));
    }

    pub fn unreadable_ro_zone_is_refused(backend: &str) {
        if !is_root() {
            return;
        }
        let (_tmp, dir) = scratch();
        let secret = dir.join("in");
        std::fs::create_dir(&secret).expect("in");
        chown(&secret, 0, 0);
        chmod(&secret, 0o700);
        let out = run(backend, &dir, &[USER, "--zone", "in=./in:ro", "--", "ls", "/in"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("cannot read zone 'in'"), "{}", stderr(&out));
    }

    pub fn ro_zone_with_a_private_file_runs(backend: &str) {
        if !is_root() {
            return;
        }
        // The zone is readable; one file in it is not: the run goes ahead and the kernel
        // refuses that file to the worker, as it would anywhere.
        let (_tmp, dir) = scratch();
        let zone = dir.join("in");
        std::fs::create_dir(&zone).expect("in");
        std::fs::write(zone.join("private"), "ROOT-ONLY").expect("file");
        chown(&zone, 0, 0);
        chmod(&zone.join("private"), 0o600);
        let out = run(backend, &dir, &[USER, "--zone", "in=./in:ro", "--", "sh", "-c", "ls /in; cat /in/private"]);
        assert_ne!(out.status.code(), Some(2), "refused before the run");
        assert!(String::from_utf8_lossy(&out.stdout).contains("private"));
        assert!(!String::from_utf8_lossy(&out.stdout).contains("ROOT-ONLY"));
    }

    pub fn group_and_acl_writable_zones_run(backend: &str) {
        if !is_root() {
            return;
        }
        let (_tmp, dir) = scratch();
        // Writable through the group owner.
        let by_group = dir.join("group");
        std::fs::create_dir(&by_group).expect("dir");
        chown(&by_group, 0, 2345);
        chmod(&by_group, 0o775);
        let out = run(backend, &dir, &["--user=1000:2345", "--zone", "out=./group:rw", "--", "touch", "/out/x"]);
        assert_eq!(out.status.code(), Some(0));
        // Writable only through a POSIX ACL naming the worker's group.
        let acl = dir.join("acl");
        std::fs::create_dir(&acl).expect("dir");
        chown(&acl, 0, 0);
        chmod(&acl, 0o755);
        let st = Command::new("setfacl").args(["-m", "g:2345:rwx"]).arg(&acl).status();
        if !st.is_ok_and(|s| s.success()) {
            eprintln!("note: setfacl unavailable or ACLs unsupported here; the ACL case is skipped");
            return;
        }
        let out = run(backend, &dir, &["--user=1000:2345", "--zone", "out=./acl:rw", "--", "touch", "/out/x"]);
        assert_eq!(out.status.code(), Some(0), "a group ACL lets the worker write: not refused");
        assert!(acl.join("x").exists());
        // The same ACL does not cover another group.
        let out = run(backend, &dir, &[USER, "--zone", "out=./acl:rw", "--", "touch", "/out/y"]);
        assert_eq!(out.status.code(), Some(2));
    }

    pub fn private_parent_directory(backend: &str) {
        if !is_root() {
            return;
        }
        // bwrap walks the path as the worker: a 0700 root directory above the zone stops it,
        // and is named. Docker binds the handle: it runs.
        let (_tmp, dir) = scratch();
        let private = dir.join("private");
        let zone = private.join("out");
        std::fs::create_dir_all(&zone).expect("dirs");
        chown(&private, 0, 0);
        chmod(&private, 0o700);
        chown(&zone, 1000, 1000);
        let out = run(backend, &dir, &[USER, "--zone", "out=./private/out:rw", "--", "touch", "/out/x"]);
        if backend == "bwrap" {
            assert_eq!(out.status.code(), Some(2));
            let err = stderr(&out);
            assert!(err.contains("cannot reach zone 'out'") && err.contains(&private.display().to_string()) && err.contains("chmod o+x"), "{err}");
        } else {
            assert_eq!(out.status.code(), Some(0));
            assert!(zone.join("x").exists());
        }
    }

    pub fn grant_under_a_root_owned_zone(backend: &str) {
        if !is_root() {
            return;
        }
        // The zone is root's; the worker is granted only a directory inside it that does not
        // exist yet. workcell creates it as the worker, so nothing the worker could not have
        // made itself: refused with the fix, and nothing is left behind.
        let tmp = tempfile::tempdir().expect("tempdir");
        chmod(tmp.path(), 0o755);
        let dir = tmp.path().join("proj");
        std::fs::create_dir_all(dir.join("out")).expect("out");
        std::fs::create_dir_all(dir.join("workers")).expect("workers");
        std::fs::write(
            dir.join("workcell.yaml"),
            "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n",
        )
        .expect("yaml");
        std::fs::write(dir.join("workers/g.worker"), "---\nsandbox:\n  allow_write: [/out/new]\ncommand: [sh, -c, \"touch /out/new/x\"]\n---\n")
            .expect("worker");
        let out = run(backend, &dir, &["g"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("may not create it in its parent directory") && stderr(&out).contains("chown 65534:65534"), "{}", stderr(&out));
        assert!(!dir.join("out/new").exists(), "the refused run left its grant behind");
        // The fix it names works: the grant is created, the worker's.
        std::os::unix::fs::chown(dir.join("out"), Some(65534), Some(65534)).expect("chown");
        let out = run(backend, &dir, &["g"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert_eq!(std::fs::metadata(dir.join("out/new")).expect("new").uid(), 65534);
        assert_eq!(std::fs::metadata(dir.join("out/new/x")).expect("x").uid(), 65534);
    }

    pub fn user_flag(backend: &str) {
        let (_tmp, dir) = scratch();
        std::fs::create_dir(dir.join("out")).expect("out");
        support::give_to_worker(&dir.join("out"));
        let out = run(backend, &dir, &["--user", "0", "--zone", "out=./out:rw", "--", "true"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(stderr(&out).contains("never run as root"), "{}", stderr(&out));
        if is_root() {
            let out = run(backend, &dir, &["--user", "1000:1000", "--zone", "out=./out:rw", "--", "sh", "-c", "id -u > /out/id"]);
            assert_eq!(out.status.code(), Some(0));
            assert_eq!(std::fs::read_to_string(dir.join("out/id")).expect("id").trim(), "1000");
        } else {
            let out = run(backend, &dir, &["--user", "4321", "--zone", "out=./out:rw", "--", "true"]);
            assert_eq!(out.status.code(), Some(2));
            assert!(stderr(&out).contains("as a normal user"), "{}", stderr(&out));
        }
    }

    /// `localhost` and the worker's own name resolve, and a server on `localhost` is
    /// reached from a client in the same worker.
    pub fn localhost_resolves(backend: &str) {
        let (_tmp, dir) = scratch();
        std::fs::create_dir(dir.join("in")).expect("in");
        support::give_to_worker(&dir.join("in"));
        let script = r#"
import socket
print("localhost", socket.getaddrinfo("localhost", 80)[0][4][0])
print("self", socket.getaddrinfo(socket.gethostname(), 80)[0][4][0])
s = socket.socket(); s.bind(("localhost", 0)); s.listen(1)
c = socket.create_connection(("localhost", s.getsockname()[1]), timeout=5)
a, _ = s.accept(); c.sendall(b"ping"); print("got", a.recv(4).decode())
"#;
        for net in [&[][..], &["--network"][..]] {
            let mut args: Vec<&str> = net.to_vec();
            args.extend(["--zone", "in=./in:ro", "--", "python3", "-c", script]);
            let out = run(backend, &dir, &args);
            assert_eq!(out.status.code(), Some(0), "network {net:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("localhost 127.0.0.1") || text.contains("localhost ::1"), "{text}");
            assert!(text.contains("self "), "{text}");
            assert!(text.contains("got ping"), "{text}");
        }
    }
}

mod installed {
    use super::*;

    /// An MCP session works with workcell installed where only root may look (root's `cargo
    /// install`: `/root/.cargo/bin`, under a 0700 home): the exec agent is this binary, and
    /// bwrap, running as the worker, must reach the file it binds (so it is copied into the
    /// agent's own directory first).
    pub fn mcp_session_from_a_root_only_install(backend: &str) {
        if !is_root() {
            return;
        }
        // Under root's own home, as `cargo install` puts it.
        let home = tempfile::tempdir_in(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).expect("tempdir");
        chmod(home.path(), 0o700);
        let installed = home.path().join(".cargo/bin/workcell");
        std::fs::create_dir_all(installed.parent().expect("bin")).expect("mkdir");
        std::fs::copy(bin(), &installed).expect("install");
        let (_t, dir) = report_copy();
        chown(&dir, TEST_WORKER_UID, TEST_WORKER_UID);
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"sh","version":"0"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"shell","arguments":{"command":"wc -l /data/notes.md; id -u"}}}"#,
        ];
        let mut child = Command::new(&installed)
            .current_dir(&dir)
            .args(["mcp", "--backend", backend, "--approve", "shell"])
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("workcell mcp");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all((lines.join("\n") + "\n").as_bytes()).expect("write");
        }
        let out = child.wait_with_output().expect("wait");
        show("workcell mcp", &out);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let answer = stdout.lines().find(|l| l.contains(r#""id":2"#)).expect("an answer to the shell call");
        assert!(answer.contains("/data/notes.md") && answer.contains(&TEST_WORKER_UID.to_string()) && !answer.contains(r#""isError":true"#), "{answer}");
    }
}

macro_rules! both {
    ($($test:ident),* $(,)?) => {
        support::backend_suite!(bwrap, "bwrap", [$($test),*]);
        support::backend_suite!(docker, "docker", [$($test),*]);
    };
}

both!(
    readme_quick_start_as_root,
    readme_quick_start_as_a_normal_user,
    readme_top_to_bottom_as_root,
    readme_top_to_bottom_as_a_normal_user,
    init_then_run_as_root,
    init_keeps_the_owner_of_what_exists,
    root_owned_rw_zone_is_refused_with_the_fixes,
    unreadable_ro_zone_is_refused,
    ro_zone_with_a_private_file_runs,
    group_and_acl_writable_zones_run,
    private_parent_directory,
    grant_under_a_root_owned_zone,
    user_flag,
    localhost_resolves,
    mcp_session_from_a_root_only_install,
);

// gVisor has a network stack and name resolution of its own to get right.
support::backend_suite!(runsc, "docker+runsc", [localhost_resolves]);

/// `doctor` in a project names what `run` would refuse, and still exits 0.
#[test]
fn doctor_lists_the_zones_the_worker_cannot_use() {
    if !is_root() {
        return;
    }
    let (_tmp, dir) = report_copy();
    let out = Command::new(bin()).current_dir(&dir).arg("doctor").output().expect("doctor");
    show("doctor", &out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("cannot write zone 'out'") && text.contains("chown -R 65534:65534"), "{text}");
    if support::backend_ready("docker") || support::backend_ready("bwrap") {
        assert_eq!(out.status.code(), Some(0));
    }
    chown(&dir.join("out"), 65534, 65534);
    let out = Command::new(bin()).current_dir(&dir).arg("doctor").output().expect("doctor");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("cannot write zone"));
}

/// `mcp` refuses before serving, as a run would: its tools act for the worker.
#[test]
fn mcp_refuses_a_zone_the_worker_cannot_write() {
    if !is_root() {
        return;
    }
    let (_tmp, dir) = report_copy();
    let out = Command::new(bin()).current_dir(&dir).arg("mcp").stdin(std::process::Stdio::null()).output().expect("mcp");
    show("mcp", &out);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("cannot write zone 'out'"), "{}", stderr(&out));
    let out = Command::new(bin()).current_dir(&dir).args(["plan", "line-count"]).output().expect("plan");
    show("plan", &out);
    assert_eq!(out.status.code(), Some(2), "plan shows the plan, then refuses");
    assert!(String::from_utf8_lossy(&out.stdout).contains("user:     65534:65534"));
    assert!(stderr(&out).contains("chown -R 65534:65534"));
}

/// Root's own runtime directory (`XDG_RUNTIME_DIR`, 0700 root: a root login's
/// `/run/user/0`) is not where a root workcell puts a worker's broker socket: the worker runs
/// as another uid and could not reach it (every bwrap run with a broker failed with 125).
#[test]
fn a_root_runtime_directory_is_not_used_for_the_broker() {
    if !is_root() || !support::backend_ready("bwrap") {
        return;
    }
    let (_tmp, dir) = scratch();
    std::fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    here: {path: ., mode: ro}\n").expect("config");
    let runtime = tempfile::tempdir().expect("runtime dir");
    chmod(runtime.path(), 0o700);
    let out = Command::new(bin())
        .current_dir(&dir)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .args(["run", "--backend", "bwrap", "--", "sh", "-c", "test -S \"$WORKCELL_BROKER\" && echo broker-reachable"])
        .output()
        .expect("workcell");
    show("run with XDG_RUNTIME_DIR", &out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "broker-reachable\n");
    assert_eq!(std::fs::read_dir(runtime.path()).expect("runtime dir").count(), 0, "nothing of workcell's in root's runtime directory");
}

/// One `workcell` everywhere: the quick start installs it (`cargo install`, into
/// `~/.cargo/bin`, under the name of the package's binary), and every later command in the
/// docs calls that one by its bare name, never a path into `target/`; the MCP client
/// snippets start it by name too, and the README gives the full path as the alternative.
#[test]
fn later_blocks_call_the_workcell_the_quick_start_installs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    assert!(manifest.contains("[[bin]]\nname = \"workcell\""), "cargo install puts the package's binary `workcell` on PATH");
    let quick = support::first_sh_block_lines(&readme());
    assert!(quick[0].starts_with(INSTALL) && quick[0].contains("~/.cargo/bin"), "{quick:?}");
    assert!(quick.iter().filter(|l| l.starts_with("workcell ")).count() >= 4, "{quick:?}");
    let mut docs = vec![readme()];
    for dir in ["docs", "examples"] {
        for e in std::fs::read_dir(root.join(dir)).expect(dir).flatten() {
            let p = e.path();
            docs.push(if p.is_dir() { p.join("README.md") } else { p });
        }
    }
    let mut bare = 0;
    for doc in docs.iter().filter(|p| p.extension().is_some_and(|e| e == "md") && p.is_file()) {
        let text = std::fs::read_to_string(doc).expect("doc");
        for form in ["target/release/workcell", "target/debug/workcell", "./workcell "] {
            assert!(!text.contains(form), "{}: calls `{form}`; the docs call the `workcell` the README's quick start installs", doc.display());
        }
        bare += text.lines().filter(|l| l.trim_start().starts_with("workcell ") || l.contains("| workcell ")).count();
        // MCP client configurations start the same workcell, by name.
        let mut in_json = false;
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with("```") {
                in_json = !in_json && t == "```json";
                continue;
            }
            if let Some(rest) = t.strip_prefix("\"command\": \"").filter(|_| in_json) {
                assert!(rest.starts_with("workcell\""), "{}: an MCP client starts `{t}`, not the `workcell` on PATH", doc.display());
            }
        }
    }
    assert!(bare >= 20, "only {bare} lines call a bare `workcell`: is the doc list right?");
    let text = std::fs::read_to_string(readme()).expect("README.md");
    assert!(text.contains("\"command\": \"workcell\""), "README's MCP snippet");
    assert!(
        text.contains("command -v workcell") && text.contains("\"command\": \"/home/me/.cargo/bin/workcell\""),
        "README says how to give an MCP client the full path"
    );
}

/// The README's requirements name the Rust that builds workcell: `rust-version` in
/// Cargo.toml, which is no older than what any locked dependency declares (1.88 was written
/// there while serde-saphyr and uuid needed 1.89, and cargo 1.88 refused the build).
#[test]
fn the_readme_names_the_rust_the_build_needs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let ours = manifest.lines().find_map(|l| l.strip_prefix("rust-version = \"")?.strip_suffix('"')).expect("rust-version in Cargo.toml");
    let version = |v: &str| -> Vec<u32> { v.split('.').map(|n| n.parse().expect("a version number")).chain([0, 0]).take(3).collect() };
    let text = std::fs::read_to_string(readme()).expect("README.md");
    assert!(text.contains(&format!("**Rust {ours}** or newer")), "README's requirements name Rust {ours} (Cargo.toml's rust-version)");
    // The packages built here (a fresh machine has fetched only these).
    let rustc = Command::new("rustc").arg("-vV").output().expect("rustc -vV");
    let host = String::from_utf8_lossy(&rustc.stdout).lines().find_map(|l| l.strip_prefix("host: ").map(str::to_string)).expect("rustc's host");
    let out = Command::new(env!("CARGO"))
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--locked", "--filter-platform", &host])
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let newer: Vec<String> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter_map(|p| Some((p["name"].as_str()?, p["rust_version"].as_str()?)))
        .filter(|(_, v)| version(v) > version(ours))
        .map(|(name, v)| format!("{name} needs {v}"))
        .collect();
    assert!(newer.is_empty(), "rust-version = {ours}, but {newer:?}: raise it (and the README's requirements)");
}
