//! The bwrap renderer, no bwrap needed: argv snapshots for several plans, no host path
//! beyond the plan's own, limits a host cannot enforce named, and `workcell plan --backend
//! bwrap`. Plans come from `support::render::Fixture` (host-dependent parts fixed).

mod support;

use std::path::Path;

use support::render::{Fixture, CHILD_WORKER, ROOT_FORM, ZONES};
use workcell::backend::bwrap;
use workcell::plan::{LaunchPlan, Overrides};

fn argv_text(f: &Fixture, plan: &LaunchPlan, features: bwrap::BwrapFeatures) -> String {
    let argv = bwrap::render_argv_with(plan, Path::new("/usr/bin/bwrap"), features);
    // One option per line reads better in a snapshot than one long line.
    let mut out = String::new();
    for w in argv {
        let w = w.to_string_lossy().into_owned();
        if w.starts_with("--") && !out.is_empty() {
            out.push('\n');
        } else if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&shlex::try_quote(&w).map(|c| c.into_owned()).unwrap_or(w));
    }
    f.redact(&out)
}

#[test]
fn bwrap_argv_zones_network_off() {
    let f = Fixture::new(ZONES, &[]);
    let plan = f.plan(None, Overrides::default());
    insta::assert_snapshot!(argv_text(&f, &plan, Default::default()));
}

#[test]
fn bwrap_argv_zones_network_on() {
    let f = Fixture::new(ZONES, &[]);
    let plan = f.plan(None, Overrides { network: Some(true), ..Overrides::default() });
    insta::assert_snapshot!(argv_text(&f, &plan, Default::default()));
}

#[test]
fn bwrap_argv_zones_network_proxied() {
    let f = Fixture::new(ZONES, &[]);
    let mut plan = f.plan(None, Overrides::default());
    plan.network = workcell::plan::Network::Proxied;
    // A plan's own proxy variable is replaced: the proxy on the worker's loopback is its only way out.
    plan.env.insert("HTTP_PROXY".into(), "http://elsewhere:8080".into());
    let text = argv_text(&f, &plan, Default::default());
    assert!(!text.contains("--share-net") && !text.contains("elsewhere"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn bwrap_argv_root_form() {
    let f = Fixture::new(ROOT_FORM, &[]);
    let plan = f.plan(None, Overrides::default());
    insta::assert_snapshot!(argv_text(&f, &plan, Default::default()));
}

#[test]
fn bwrap_argv_derived_child() {
    let f = Fixture::new(ZONES, &[("child", CHILD_WORKER)]);
    let plan = f.plan(Some("child"), Overrides { command: None, ..Overrides::default() });
    let text = argv_text(&f, &plan, Default::default());
    assert!(!text.contains("/out"), "the child declared only `in`; no other zone may be mounted:\n{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn bwrap_argv_tty_and_old_bwrap() {
    let f = Fixture::new(ZONES, &[]);
    let plan = f.plan(None, Overrides { tty: true, interactive: true, ..Overrides::default() });
    let text = argv_text(&f, &plan, bwrap::BwrapFeatures { tmpfs_size: false, disable_userns: false, perms: false });
    assert!(!text.contains("--new-session"), "a TTY run keeps the terminal as controlling terminal");
    insta::assert_snapshot!(text);
}

#[test]
fn bwrap_argv_has_no_other_host_paths() {
    let f = Fixture::new(ZONES, &[]);
    let plan = f.plan(None, Overrides::default());
    let argv = bwrap::render_argv(&plan, Path::new("/usr/bin/bwrap"));
    // Every host path bound must be a system entry or a zone source.
    let allowed: Vec<String> = ["/usr", "/etc/ssl"].iter().map(|s| s.to_string()).chain(plan.mounts.iter().map(|m| m.source.display().to_string())).collect();
    for pair in argv.windows(2) {
        let opt = pair[0].to_string_lossy();
        if ["--bind", "--ro-bind", "--ro-bind-try", "--dev-bind", "--bind-try"].contains(&opt.as_ref()) {
            let src = pair[1].to_string_lossy().into_owned();
            assert!(allowed.contains(&src), "unexpected host path bound: {src}");
        }
    }
    for bad in ["/home", "/root", "docker.sock", "--dev-bind", "--share-net"] {
        assert!(!argv.iter().any(|w| w.to_string_lossy().contains(bad)), "argv mentions {bad}");
    }
}

/// The root is made read-only last: every mount point (zones, `/tmp`, the worker's
/// `/etc/passwd` and `/etc/group`) is created on it before, and nothing is mounted after.
#[test]
fn bwrap_argv_remounts_root_read_only_after_every_mount() {
    let f = Fixture::new(ZONES, &[]);
    let plan = f.plan(None, Overrides::default());
    let passed = bwrap::Passed { mounts: vec![None; plan.mounts.len()], seccomp: Some(9), accounts: Some([7, 8]), names: Some([10, 11]) };
    let argv: Vec<String> =
        bwrap::render_argv_passed(&plan, Path::new("/usr/bin/bwrap"), Default::default(), &passed).iter().map(|w| w.to_string_lossy().into_owned()).collect();
    let at = |words: &[&str]| argv.windows(words.len()).position(|w| w == words).unwrap_or_else(|| panic!("{words:?} missing in {argv:?}"));
    let remount = at(&["--remount-ro", "/"]);
    for (fd, path) in [("7", "/etc/passwd"), ("8", "/etc/group"), ("10", "/etc/hosts"), ("11", "/etc/nsswitch.conf")] {
        assert!(at(&["--perms", "0644", "--file", fd, path]) < remount);
    }
    let mounting = ["--bind", "--ro-bind", "--ro-bind-try", "--bind-fd", "--ro-bind-fd", "--tmpfs", "--symlink", "--proc", "--dev", "--dir", "--file"];
    assert!(!argv[remount + 2..].iter().any(|w| mounting.contains(&w.as_str())), "a mount after the remount: {argv:?}");
}

#[test]
fn unenforced_limits_are_named() {
    let f = Fixture::new(ZONES, &[]);
    let mut plan = f.plan(None, Overrides::default());
    plan.limits.cpus = Some(1.5);
    let none = workcell::backend::cgroup::Support::none("no writable cgroup here");
    let lines = bwrap::unenforced_limits_with(&plan, &none);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines.iter().any(|l| l.starts_with("memory limit") && l.contains("no writable cgroup here")));
    assert!(lines.iter().any(|l| l.starts_with("cpu limit")));
    assert!(lines.iter().any(|l| l.starts_with("process limit") && l.contains("RLIMIT_NPROC")));
    let place = Ok(workcell::backend::cgroup::Place { parent: "/sys/fs/cgroup/x".into(), v2: true });
    let all = workcell::backend::cgroup::Support { memory: place.clone(), pids: place.clone(), cpu: place };
    assert_eq!(bwrap::unenforced_limits_with(&plan, &all), Vec::<String>::new());
}

/// A run says what it does not enforce in one short line, every run; the reasons in full
/// are `plan`'s and `doctor`'s (above).
#[test]
fn a_run_names_its_unenforced_limits_in_one_short_line() {
    use workcell::backend::cgroup::{Support, Unsupported};
    use workcell::config::Limits;
    let denied = Err(Unsupported::CannotCreate { parent: "/sys/fs/cgroup/memory/user.slice".into(), source: rustix::io::Errno::ACCESS, v2: false });
    let v1_user = Support { memory: denied.clone(), pids: denied.clone(), cpu: denied };
    let limits = Limits { memory_bytes: Some(1 << 30), pids: Some(256), ..Limits::default() };
    let note = bwrap::unenforced_note(&limits, &v1_user).expect("named");
    assert_eq!(
        note,
        "not enforced by the bwrap backend: the memory limit and the process limit (cgroup v1 gives cgroups to root only); --backend docker enforces them"
    );
    let cpu = Limits { cpus: Some(1.5), ..Limits::default() };
    assert!(bwrap::unenforced_note(&cpu, &v1_user).unwrap().contains(": the cpu limit (cgroup v1"), "one limit");
    // workcell's own defaults are not the person's: not said on every run.
    let defaults = Limits { memory_bytes: Some(workcell::plan::DEFAULT_MEMORY), pids: Some(workcell::plan::DEFAULT_PIDS), ..Limits::default() };
    assert_eq!(bwrap::unenforced_note(&defaults, &v1_user), None);
    let place = Ok(workcell::backend::cgroup::Place { parent: "/sys/fs/cgroup/x".into(), v2: true });
    let all = Support { memory: place.clone(), pids: place.clone(), cpu: place };
    assert_eq!(bwrap::unenforced_note(&limits, &all), None);
}

#[test]
fn plan_prints_the_bwrap_argv() {
    let f = Fixture::new(ZONES, &[]);
    // As root the worker is the project's owner: its rw zone must be its (else `plan` refuses).
    support::give_to_worker(&f.root());
    let mut cmd = assert_cmd::Command::cargo_bin("workcell").expect("workcell binary");
    let out = cmd.current_dir(f.root()).args(["plan", "--backend", "bwrap", "--", "true"]).output().expect("plan");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("--unshare-all") && text.contains("--ro-bind") && text.contains("-- true"), "{text}");
}
