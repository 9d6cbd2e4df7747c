//! Red team for "one identity per worker" (issue 23), as root on bwrap and docker: each body
//! tries to make workcell act for the worker with more than the worker's rights, and asserts
//! that it held.

mod support;

use std::process::{Command, Output};

use support::{give_to_worker, write_project};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn show(what: &str, out: &Output) -> String {
    format!("{what} -> {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

mod body {
    use super::*;

    /// `4294967295` is no uid: it is the kernel's "leave it unchanged" (-1) for
    /// `setresuid`/`setresgid`/`chown`, so a worker "running as" it would keep root's ids
    /// wherever the value is passed on. As `--user` or `defaults.user`, in either place, it
    /// must be refused before anything runs (exit 2, no panic), like uid 0.
    pub fn user_minus_one_is_refused(backend: &str) {
        if !is_root() {
            return;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path();
        std::fs::create_dir(dir.join("out")).expect("mkdir");
        give_to_worker(&dir.join("out"));
        let zone = format!("out={}:rw", dir.join("out").display());
        let script = "id > /out/ran";
        for user in ["4294967295", "1000:4294967295", "4294967295:1000"] {
            let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
                .current_dir(dir)
                .args(["run", "--backend", backend, "--user", user, "--zone", &zone, "--", "sh", "-c", script])
                .output()
                .expect("run");
            let shown = show(&format!("--user {user}"), &out);
            assert_eq!(out.status.code(), Some(2), "{shown}");
            assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "{shown}");
            assert!(!dir.join("out/ran").exists(), "the worker ran: {shown}");
        }
        let proj = dir.join("proj");
        std::fs::create_dir(&proj).expect("mkdir");
        std::fs::create_dir(proj.join("out")).expect("mkdir");
        give_to_worker(&proj.join("out"));
        write_project(
            &proj,
            &format!("defaults:\n  user: \"4294967295\"\n  backend: {backend}\nsandbox:\n  zones:\n    out: {{path: ./out, mode: rw}}\n"),
            &[],
        );
        let out = Command::new(env!("CARGO_BIN_EXE_workcell")).current_dir(&proj).args(["run", "--", "sh", "-c", script]).output().expect("run");
        let shown = show("defaults.user 4294967295", &out);
        assert_eq!(out.status.code(), Some(2), "{shown}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "{shown}");
        assert!(!proj.join("out/ran").exists(), "the worker ran: {shown}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("4294967295"), "the refusal names the value: {shown}");
    }

    /// A zone below a root-only directory (0700) whose ACL lets the worker's uid search it:
    /// the worker reaches it (the kernel honours the ACL), so the pre-flight and the backend
    /// must both let the run go, and not ask to open the directory to everyone (`o+x`).
    pub fn acl_searchable_parent_is_not_refused(backend: &str) {
        if !is_root() {
            return;
        }
        if Command::new("setfacl").arg("--version").output().is_err() {
            eprintln!("no setfacl here: skipped");
            return;
        }
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod");
        let uid = support::TEST_WORKER_UID;
        let st = Command::new("setfacl").args(["-m", &format!("u:{uid}:x")]).arg(&dir).status().expect("setfacl");
        assert!(st.success());
        std::fs::create_dir(dir.join("z")).expect("mkdir");
        give_to_worker(&dir.join("z"));
        let zone = format!("z={}:rw", dir.join("z").display());
        let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
            .current_dir(&dir)
            .args(["run", "--backend", backend, "--user", &format!("{uid}:{uid}"), "--zone", &zone, "--", "sh", "-c", "echo hi > /z/ran"])
            .output()
            .expect("run");
        let shown = show("zone below an ACL-searchable 0700 directory", &out);
        assert_eq!(out.status.code(), Some(0), "{shown}");
        assert_eq!(std::fs::read_to_string(dir.join("z/ran")).unwrap_or_default(), "hi\n", "{shown}");
    }

    /// `network: false` (the default) after localhost was made to resolve (docker now says
    /// `network_mode: none`): the worker has the loopback interface only, no IPv4 route, and
    /// `localhost` is loopback.
    pub fn no_network_is_loopback_only(backend: &str) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        std::fs::create_dir(dir.join("z")).expect("mkdir");
        let zone = format!("z={}:ro", dir.join("z").display());
        let script =
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; echo ROUTES; tail -n +2 /proc/net/route; echo HOSTS; getent ahosts localhost | head -1";
        let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
            .current_dir(&dir)
            .args(["run", "--backend", backend, "--zone", &zone, "--", "sh", "-c", script])
            .output()
            .expect("run");
        let shown = show("network: false", &out);
        assert_eq!(out.status.code(), Some(0), "{shown}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let (ifaces, rest) = stdout.split_once("ROUTES\n").expect("sections");
        let (routes, hosts) = rest.split_once("HOSTS\n").expect("sections");
        assert_eq!(ifaces.lines().collect::<Vec<_>>(), vec!["lo"], "only loopback: {shown}");
        assert_eq!(routes.trim(), "", "no IPv4 route: {shown}");
        assert!(hosts.starts_with("127.0.0.1"), "localhost is loopback: {shown}");
    }
}

macro_rules! backend_suite {
    ($module:ident, $backend:literal) => {
        mod $module {
            use super::*;
            #[test]
            fn user_minus_one_is_refused() {
                if support::backend_ready($backend) {
                    body::user_minus_one_is_refused($backend);
                }
            }
            #[test]
            fn acl_searchable_parent_is_not_refused() {
                if support::backend_ready($backend) {
                    body::acl_searchable_parent_is_not_refused($backend);
                }
            }
            #[test]
            fn no_network_is_loopback_only() {
                if support::backend_ready($backend) {
                    body::no_network_is_loopback_only($backend);
                }
            }
        }
    };
}

backend_suite!(bwrap, "bwrap");
backend_suite!(docker, "docker");
