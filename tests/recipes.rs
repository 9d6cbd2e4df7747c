//! The recipes in `examples/` (ci-python, ci-rust, documents, egress), each run on bwrap and Docker as
//! its README says: the lines of the README's `sh` block, in a fresh copy of the recipe, with
//! `workcell` the binary under test and `--backend` chosen. Then what the recipe promises:
//! the tests ran and passed inside, the artifact is on the host, the source zone could not be
//! written, the network was off, (documents) only what the checker accepts is published, and
//! (egress) only the allowed server is reached, through the proxy.
//! The blocks it runs are marked `tested-by=tests/recipes.rs` (tests/docs.rs checks the mark):
//! examples/ci-python/README.md, examples/ci-rust/README.md, examples/documents/README.md and
//! examples/egress/README.md.

mod support;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use assert_cmd::Command;

fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("workcell")
}

/// A fresh copy of `examples/NAME` in a temp dir, given to the test worker when we are root
/// (workers run as the project directory's owner, never as root).
fn recipe_copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name);
    let st = std::process::Command::new("cp").arg("-r").arg(&src).arg(&dir).status().expect("cp");
    assert!(st.success(), "cp -r {}", src.display());
    support::give_to_worker(&dir);
    (tmp, dir)
}

/// The lines of the recipe README's `sh` block, without the `cd` into the recipe, with the
/// binary under test for `workcell` and `--backend B` after `workcell run`.
fn documented_lines(dir: &Path, backend: &str) -> Vec<String> {
    let exe = bin().display().to_string();
    support::first_sh_block_lines(&dir.join("README.md"))
        .into_iter()
        .filter(|l| !l.starts_with("cd "))
        .map(|l| match l.strip_prefix("workcell run ") {
            Some(rest) => format!("'{exe}' run --backend {backend} {rest}"),
            None => l.strip_prefix("workcell ").map(|rest| format!("'{exe}' {rest}")).unwrap_or_else(|| l.to_string()),
        })
        .collect()
}

fn shown(o: &Output) -> String {
    format!("status {:?}\nstdout:\n{}\nstderr:\n{}", o.status.code(), String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs the README's lines in `dir`; each must succeed. Returns the `workcell run` line's
/// output.
fn run_documented(dir: &Path, backend: &str) -> Output {
    run_documented_with(dir, backend, &[])
}

fn run_documented_with(dir: &Path, backend: &str, env: &[(&str, &str)]) -> Output {
    let lines = documented_lines(dir, backend);
    assert!(lines.iter().any(|l| l.contains(" run --backend ")), "the README runs the recipe: {lines:?}");
    let mut run = None;
    for line in &lines {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", line]).current_dir(dir).env_remove("RUST_LOG").timeout(Duration::from_secs(600));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("sh");
        assert!(out.status.success(), "`{line}` failed: {}", shown(&out));
        if line.contains(" run --backend ") {
            run = Some(out);
        }
    }
    run.expect("a run line")
}

/// An ad-hoc command in the recipe's project sandbox (every zone, as configured).
fn ad_hoc(dir: &Path, backend: &str, script: &str) -> Output {
    support::workcell_in(dir).args(["run", "--backend", backend, "--", "sh", "-c", script]).timeout(Duration::from_secs(300)).output().expect("run")
}

/// Inside the recipe's sandbox: writing into the read-only `source` mount point fails and the
/// file does not appear on the host in `host_source`; the only network interface is loopback;
/// the run is told its network is off; `defaults.env` reached the worker (`expect_env`).
fn assert_confined(dir: &Path, backend: &str, source: &str, host_source: &Path, expect_env: (&str, &str)) {
    let (var, value) = expect_env;
    let script = format!(
        "if echo x > {source}/pwned 2>/dev/null; then echo WRITE=ok; else echo WRITE=refused; fi; \
         echo NET=$WORKCELL_NETWORK; echo IFACES=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ,); \
         echo ENV=${var}"
    );
    let out = ad_hoc(dir, backend, &script);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{}", shown(&out));
    assert!(text.contains("WRITE=refused"), "{}", shown(&out));
    assert!(!host_source.join("pwned").exists(), "the write reached the host");
    assert!(text.contains("NET=0"), "{}", shown(&out));
    assert!(text.contains("IFACES=lo,\n"), "only loopback: {}", shown(&out));
    assert!(text.contains(&format!("ENV={value}\n")), "{var} from defaults.env: {}", shown(&out));
}

fn ci_python(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let (_tmp, dir) = recipe_copy("ci-python");
    let out = run_documented(&dir, backend);
    let report = std::fs::read_to_string(dir.join("artifacts/unittest.txt")).expect("the report is on the host");
    assert!(report.contains("Ran 4 tests") && report.trim_end().ends_with("OK"), "{report}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Ran 4 tests"), "{}", shown(&out));
    // PYTHONDONTWRITEBYTECODE: nothing tried to write a cache (and none could appear).
    let caches = walk(&dir.join("src")).into_iter().filter(|p| p.ends_with("__pycache__")).count();
    assert_eq!(caches, 0);
    assert_confined(&dir, backend, "/src", &dir.join("src"), ("PYTHONDONTWRITEBYTECODE", "1"));

    // The run's status is the suite's: a failing test fails the run.
    std::fs::write(
        dir.join("src/tests/test_broken.py"),
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_no(self):\n        self.fail('on purpose')\n",
    )
    .expect("write");
    support::give_to_worker(&dir);
    let failed = support::workcell_in(&dir).args(["run", "--backend", backend, "test"]).output().expect("run");
    assert_eq!(failed.status.code(), Some(1), "{}", shown(&failed));
    let report = std::fs::read_to_string(dir.join("artifacts/unittest.txt")).expect("report");
    assert!(report.contains("FAILED (failures=1)"), "{report}");
}

fn ci_rust(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let (_tmp, dir) = recipe_copy("ci-rust");
    // As root with rustup's toolchain under /root (0700), a bwrap worker (not root) cannot
    // pass /root: the README's way out, a hard-linked copy of the sysroot elsewhere.
    let sysroot = String::from_utf8(std::process::Command::new("rustc").args(["--print", "sysroot"]).output().expect("rustc").stdout).expect("utf-8");
    let mut sysroot = sysroot.trim().to_string();
    if backend == "bwrap" && rustix::process::geteuid().is_root() && sysroot.starts_with("/root/") {
        let copy = dir.join("sysroot-copy");
        let st = std::process::Command::new("cp").arg("-al").arg(&sysroot).arg(&copy).status().expect("cp -al");
        assert!(st.success(), "cp -al {sysroot}");
        sysroot = copy.display().to_string();
    }
    let out = run_documented_with(&dir, backend, &[("RUST_SYSROOT", &sysroot)]);
    let config = std::fs::read_to_string(dir.join("workcell.yaml")).expect("config");
    assert!(!config.contains("@RUST_SYSROOT@"), "the README's sed filled in the toolchain");
    let log = std::fs::read_to_string(dir.join("artifacts/cargo-test.txt")).expect("the test log is on the host");
    assert!(log.contains("test result: ok. 2 passed"), "{log}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("test result: ok. 2 passed"), "{}", shown(&out));
    assert!(dir.join("artifacts/target/debug").is_dir(), "CARGO_TARGET_DIR is in the artifacts zone");
    assert!(!dir.join("crate/target").exists(), "nothing was built in the source");
    assert_confined(&dir, backend, "/src", &dir.join("crate"), ("CARGO_TARGET_DIR", "/artifacts/target"));
}

fn documents(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let (_tmp, dir) = recipe_copy("documents");
    let out = run_documented(&dir, backend);
    assert!(String::from_utf8_lossy(&out.stdout).contains("converted 'notice.html'"), "{}", shown(&out));
    let notice = std::fs::read_to_string(dir.join("text/notice.html.txt")).expect("published");
    assert!(notice.contains("Quarterly notice") && notice.contains("Revenue grew by 4 % & costs fell."), "{notice}");
    assert!(!notice.contains("attacker") && !notice.contains('<'), "scripts and tags are dropped: {notice}");
    let minutes = std::fs::read_to_string(dir.join("text/minutes.md.txt")).expect("published");
    assert!(minutes.contains("Decision: ship the recipe on Friday."), "{minutes}");
    assert!(dir.join("text/readme.txt.txt").is_file());
    assert_confined(&dir, backend, "/inbox", &dir.join("inbox"), ("PYTHONDONTWRITEBYTECODE", "1"));

    // What a converter fooled by a document might leave: only the plain .txt within the
    // bound reaches the host; the run says so with exit 3.
    let hostile = "printf '#!/bin/sh\\n' > /text/evil.sh; head -c 1100000 /dev/zero | tr '\\0' a > /text/big.txt; \
                   ln -s /etc/passwd /text/link.txt; echo fine > /text/ok.txt";
    let out = ad_hoc(&dir, backend, hostile);
    assert_eq!(out.status.code(), Some(3), "{}", shown(&out));
    assert_eq!(std::fs::read_to_string(dir.join("text/ok.txt")).ok().as_deref(), Some("fine\n"), "{}", shown(&out));
    for refused in ["evil.sh", "big.txt", "link.txt"] {
        assert!(std::fs::symlink_metadata(dir.join("text").join(refused)).is_err(), "{refused} was published: {}", shown(&out));
    }
}

/// `docker-compose down` of the recipe's servers when the test ends, however it ends.
struct ComposeDown {
    compose: String,
    env: Vec<(String, String)>,
}

impl Drop for ComposeDown {
    fn drop(&mut self) {
        let _ = std::process::Command::new("sh")
            .args(["-c", &format!("{} down --remove-orphans", self.compose)])
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::null())
            .output();
    }
}

/// The egress recipe: the README's lines, with the repository's `docker-compose.yml` started
/// under a project name and ports of this test's own (parallel tests each start theirs; the
/// copy's rules and worker name those ports instead of 18080 and 18081).
fn egress(backend: &str) {
    // The servers are docker-compose's, whichever backend runs the worker.
    if !support::backend_ready(backend) || !support::backend_ready("docker") {
        return;
    }
    let (_tmp, dir) = recipe_copy("egress");
    let (allowed, refused) = (support::compose::free_port(), support::compose::free_port());
    for file in ["workcell.yaml", "workers/fetch.worker"] {
        let text = std::fs::read_to_string(dir.join(file)).expect(file);
        std::fs::write(dir.join(file), text.replace("18080", &allowed.to_string()).replace("18081", &refused.to_string())).expect(file);
    }
    let compose_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("docker-compose.yml");
    let compose = format!("docker-compose -f '{}' -p wcrecipe{backend}{}", compose_file.display(), support::unique());
    let env = vec![("WORKCELL_DEMO_ALLOWED_PORT".to_string(), allowed.to_string()), ("WORKCELL_DEMO_REFUSED_PORT".to_string(), refused.to_string())];
    let _down = ComposeDown { compose: compose.clone(), env: env.clone() };
    let lines = documented_lines(&dir, backend);
    assert!(lines.first().is_some_and(|l| l.starts_with("docker-compose up")), "the README starts the servers first: {lines:?}");
    assert!(lines.last().is_some_and(|l| l.starts_with("docker-compose down")), "and stops them last: {lines:?}");
    let (mut run, mut audit) = (None, None);
    for line in &lines {
        let line = match line.strip_prefix("docker-compose ") {
            Some(rest) => format!("{compose} {rest}"),
            None => line.clone(),
        };
        let out = Command::new("sh")
            .args(["-c", &line])
            .current_dir(&dir)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("RUST_LOG")
            .timeout(Duration::from_secs(600))
            .output()
            .expect("sh");
        assert!(out.status.success(), "`{line}` failed: {}", shown(&out));
        if line.contains(" up ") {
            support::compose::wait_until_serving(allowed);
            support::compose::wait_until_serving(refused);
        } else if line.contains(" run --backend ") {
            run = Some(out);
        } else if line.contains(" audit ") {
            audit = Some(out);
        }
    }
    let out = run.expect("a run line");
    let said = shown(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("http://allowed.test:{allowed}/ -> allowed: you reached the allowed server")), "{said}");
    assert!(stdout.contains(&format!("http://refused.test:{refused}/ -> 403 workcell egress proxy refused refused.test:{refused}")), "{said}");
    assert!(!said.contains("you should never see this"), "the refused server's page reached the worker: {said}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("refused.test:{refused}")), "the refusal is told when the run ends: {said}");
    let audit = String::from_utf8_lossy(&audit.expect("an audit line").stdout).into_owned();
    assert!(audit.contains(&format!("allowed.test:{allowed}")) && audit.contains(&format!("refused.test:{refused}")), "{audit}");
}

/// Every path below `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn ci_python_on_bwrap() {
    ci_python("bwrap");
}

#[test]
fn ci_python_on_docker() {
    ci_python("docker");
}

#[test]
fn ci_rust_on_bwrap() {
    ci_rust("bwrap");
}

#[test]
fn ci_rust_on_docker() {
    ci_rust("docker");
}

#[test]
fn documents_on_bwrap() {
    documents("bwrap");
}

#[test]
fn documents_on_docker() {
    documents("docker");
}

#[test]
fn egress_on_bwrap() {
    egress("bwrap");
}

#[test]
fn egress_on_docker() {
    egress("docker");
}
