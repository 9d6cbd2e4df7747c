//! Renderer snapshots (bwrap argv, Seatbelt profile) for several plans, and `auto` backend
//! selection through the `workcell` binary.
//!
//! Plans are built with `LaunchPlan::build` from temporary projects; the host-dependent
//! parts (system layout, user, run id, temp paths) are fixed or redacted so the snapshots
//! are the same on every machine.

use std::path::{Path, PathBuf};

use workcell::backend::{bwrap, seatbelt};
use workcell::config::Project;
use workcell::plan::{LaunchPlan, Overrides, SystemEntry, UserSpec};

/// A temporary project directory with `in/` and `out/`, a config and optional workers.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new(config: &str, workers: &[(&str, &str)]) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        for d in ["in", "out", "workers"] {
            std::fs::create_dir_all(dir.path().join(d)).expect("mkdir");
        }
        std::fs::write(dir.path().join("workcell.yaml"), config).expect("write config");
        for (name, text) in workers {
            std::fs::write(dir.path().join("workers").join(format!("{name}.worker")), text).expect("write worker");
        }
        Fixture { dir }
    }

    fn root(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).expect("canonical tempdir")
    }

    fn plan(&self, worker: Option<&str>, ov: Overrides) -> LaunchPlan {
        let root = self.root();
        let text = std::fs::read_to_string(root.join("workcell.yaml")).expect("read config");
        let project = Project::from_text(&text, &root.join("workcell.yaml"), &root).expect("valid project");
        let worker = worker.map(|w| project.worker(w).expect("worker exists"));
        let sandbox = worker.map(|w| w.sandbox.clone()).unwrap_or_else(|| project.sandbox.clone());
        let ov = Overrides { command: Some(vec!["sh".into(), "-c".into(), "ls /".into()]), ..ov };
        let mut plan = LaunchPlan::build(&project, worker, &sandbox, &ov).expect("plan");
        normalise(&mut plan);
        plan
    }

    /// Replaces the temp dir in `text` so snapshots do not depend on it.
    fn redact(&self, text: &str) -> String {
        text.replace(&self.root().display().to_string(), "[PROJECT]")
    }
}

/// Fixes the host-dependent parts of a plan.
fn normalise(plan: &mut LaunchPlan) {
    let run_id = plan.run_id.clone();
    plan.run_id = "RUNID".into();
    for v in plan.env.values_mut() {
        *v = v.replace(&run_id, "RUNID");
    }
    for v in plan.labels.values_mut() {
        *v = v.replace(&run_id, "RUNID");
    }
    plan.user = UserSpec { uid: 1000, gid: 1000 };
    plan.system = vec![
        SystemEntry::Bind { path: "/usr".into() },
        SystemEntry::Symlink { path: "/bin".into(), target: "usr/bin".into() },
        SystemEntry::Symlink { path: "/lib".into(), target: "usr/lib".into() },
        SystemEntry::Bind { path: "/etc/ssl".into() },
    ];
}

const ZONES: &str = r#"
sandbox:
  zones:
    in:
      path: ./in
      mode: ro
    out:
      path: ./out
      mode: rw
      approval:
        write: preApproved
        delete: preApproved
"#;

const ROOT_FORM: &str = r#"
sandbox:
  root:
    root: .
    readonly: false
"#;

const CHILD_WORKER: &str = r#"---
description: reads only
sandbox:
  zones:
    - name: in
      mode: ro
command: ["cat", "/in/a.txt"]
---
Read the input.
"#;

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

fn profile_text(f: &Fixture, plan: &LaunchPlan) -> String {
    let p = seatbelt::render_profile(plan);
    // The base profile is the same for every plan; snapshot only what is generated.
    let generated = p.profile.strip_prefix(seatbelt::BASE_PROFILE).expect("profile starts with the base profile");
    let params: Vec<String> = p.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    f.redact(&format!("{generated}\n; params\n{}\n", params.join("\n")))
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
    let text = argv_text(&f, &plan, bwrap::BwrapFeatures { tmpfs_size: false, disable_userns: false });
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

#[test]
fn seatbelt_profile_zones_network_off() {
    let f = Fixture::new(ZONES, &[]);
    let plan = f.plan(None, Overrides::default());
    insta::assert_snapshot!(profile_text(&f, &plan));
}

#[test]
fn seatbelt_profile_zones_network_on() {
    let f = Fixture::new(ZONES, &[]);
    let plan = f.plan(None, Overrides { network: Some(true), ..Overrides::default() });
    let text = profile_text(&f, &plan);
    assert!(text.contains("(allow network*)") && !text.contains("(deny network*)"));
    insta::assert_snapshot!(text);
}

#[test]
fn seatbelt_profile_root_form() {
    let f = Fixture::new(ROOT_FORM, &[]);
    let plan = f.plan(None, Overrides::default());
    insta::assert_snapshot!(profile_text(&f, &plan));
}

#[test]
fn seatbelt_profile_derived_child() {
    let f = Fixture::new(ZONES, &[("child", CHILD_WORKER)]);
    let plan = f.plan(Some("child"), Overrides { command: None, ..Overrides::default() });
    insta::assert_snapshot!(profile_text(&f, &plan));
}

#[test]
fn seatbelt_paths_are_parameters_not_text() {
    // A zone path with SBPL syntax in it must not reach the profile text.
    let f = Fixture::new(ZONES, &[]);
    let mut plan = f.plan(None, Overrides::default());
    plan.mounts[0].source = PathBuf::from("/tmp/evil\")) (allow default) ((\"");
    let p = seatbelt::render_profile(&plan);
    assert!(!p.profile.contains("evil"));
    assert!(p.params.iter().any(|(_, v)| v.contains("evil")));
    assert!(p.profile.starts_with(seatbelt::BASE_PROFILE));
    assert!(p.profile.contains("(deny default)"));
}

// ---- `auto` selection, through the binary ----

fn workcell_in(dir: &Path) -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("workcell").expect("workcell binary");
    cmd.current_dir(dir).env_remove("WORKCELL_BWRAP").env("DOCKER_HOST", "unix:///nonexistent.sock");
    cmd
}

fn bwrap_ready() -> bool {
    match bwrap::probe() {
        Ok(_) => true,
        Err(e) if std::env::var("WORKCELL_REQUIRE_BWRAP").as_deref() == Ok("1") => panic!("WORKCELL_REQUIRE_BWRAP=1 but bwrap is unavailable: {e}"),
        Err(e) => {
            eprintln!("note: skipping, bwrap is unavailable here: {e}");
            false
        }
    }
}

#[test]
fn auto_uses_bwrap_when_docker_is_unavailable() {
    if !bwrap_ready() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("in")).expect("mkdir");
    let out = workcell_in(dir.path()).args(["run", "--zone", "in=./in:ro", "--", "sh", "-c", "echo inside"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(stderr.contains("using the bwrap backend"), "stderr: {stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "inside");
}

#[test]
fn auto_without_any_backend_fails_with_125() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("in")).expect("mkdir");
    let out = workcell_in(dir.path()).env("WORKCELL_BWRAP", "/nonexistent").args(["run", "--zone", "in=./in:ro", "--", "true"]).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert!(stderr.contains("no isolation backend works here"), "stderr: {stderr}");
    assert!(stderr.contains("WORKCELL_BWRAP=/nonexistent is not an executable file"), "stderr: {stderr}");
}

#[test]
fn explicit_bwrap_without_binary_fails_with_125() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("in")).expect("mkdir");
    let out = workcell_in(dir.path())
        .env("WORKCELL_BWRAP", "/nonexistent")
        .args(["run", "--backend", "bwrap", "--zone", "in=./in:ro", "--", "true"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert!(stderr.contains("bwrap backend is unavailable"), "stderr: {stderr}");
}

#[test]
fn plan_prints_bwrap_and_seatbelt_renderings() {
    let f = Fixture::new(ZONES, &[]);
    let mut cmd = assert_cmd::Command::cargo_bin("workcell").expect("workcell binary");
    let out = cmd.current_dir(f.root()).args(["plan", "--backend", "bwrap", "--", "true"]).output().expect("plan");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("--unshare-all") && text.contains("--ro-bind") && text.contains("-- true"), "{text}");
    let mut cmd = assert_cmd::Command::cargo_bin("workcell").expect("workcell binary");
    let out = cmd.current_dir(f.root()).args(["plan", "--backend", "seatbelt", "--", "true"]).output().expect("plan");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("(deny default)") && text.contains("ZONE_0="), "{text}");
}
