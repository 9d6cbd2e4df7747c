//! `defaults.env`: project-wide variables for every worker. Names are checked where they are
//! written; a run applies `defaults.env`, then the worker's `env:`, then `--env`, each
//! overriding the last, and `NAME:` alone passes the host's value through.

mod support;

use std::fs;

use workcell::config::Project;
use workcell::plan::{LaunchPlan, Overrides};

fn load(yaml: &str) -> Result<Project, workcell::config::ConfigError> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("out")).unwrap();
    Project::from_text(yaml, &dir.join("workcell.yaml"), &dir)
}

const ZONE: &str = "sandbox:\n  zones:\n    out: {mode: rw}\n";

#[test]
fn a_bad_name_is_refused_where_it_is_written() {
    for bad in ["1ABC", "A-B", "\"A B\"", "\"A=B\""] {
        let e = load(&format!("{ZONE}defaults:\n  env:\n    OK: 1\n    {bad}: x\n")).expect_err(bad);
        assert_eq!((e.line, e.column), (7, 5), "{e}");
        assert!(e.message.contains("is not an environment variable name"), "{e}");
        assert!(e.to_string().contains("workcell.yaml:7:5: "), "{e}");
    }
}

#[test]
fn a_nul_in_a_value_is_refused() {
    let e = load(&format!("{ZONE}defaults:\n  env:\n    X: \"a\\0b\"\n")).expect_err("NUL");
    assert_eq!((e.line, e.column), (6, 5), "{e}");
    assert!(e.message.contains("NUL"), "{e}");
}

#[test]
fn a_duplicate_name_is_refused() {
    let e = load(&format!("{ZONE}defaults:\n  env:\n    X: a\n    X: b\n")).expect_err("duplicate");
    assert_eq!(e.line, 7, "{e}");
    assert!(e.message.contains("appears twice"), "{e}");
}

#[test]
fn values_and_pass_through_are_kept_in_order() {
    let p = load(&format!("{ZONE}defaults:\n  env:\n    B: two\n    A:\n")).expect("loads");
    let got: Vec<(&str, Option<&str>)> = p.defaults.env.iter().map(|(k, v)| (k.as_str(), v.as_deref())).collect();
    assert_eq!(got, [("B", Some("two")), ("A", None)]);
}

/// The plan of a worker: `defaults.env` < worker `env:` < `--env`, and `NAME:` takes the
/// host's value (absent on the host: not set at all).
#[test]
fn precedence_in_the_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("out")).unwrap();
    // Names no other test or the host uses: this test sets the host side in its own process.
    let config = format!(
        "{ZONE}defaults:\n  env:\n    ONLY_DEFAULT: d\n    BY_WORKER: d\n    BY_CLI: d\n    WC_DEFAULTS_ENV_FROM_HOST:\n    WC_DEFAULTS_ENV_NOT_ON_HOST:\n    PATH: /opt/tool/bin:/usr/bin:/bin\n"
    );
    let worker = "---\nname: w\ncommand: [\"true\"]\nsandbox:\n  zones: [{name: out, mode: rw}]\nenv:\n  BY_WORKER: w\n  BY_CLI: w\n---\n";
    support::write_project(&dir, &config, &[("w", worker)]);
    support::give_to_worker(&dir);
    std::env::set_var("WC_DEFAULTS_ENV_FROM_HOST", "host value");
    std::env::remove_var("WC_DEFAULTS_ENV_NOT_ON_HOST");
    let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("loads");
    let worker = project.worker("w").expect("worker");
    let ov = Overrides { env: vec!["BY_CLI=c".into()], ..Overrides::default() };
    let env = LaunchPlan::build(&project, Some(worker), &worker.sandbox, &ov).expect("plan").env;
    assert_eq!(env.get("ONLY_DEFAULT").map(String::as_str), Some("d"), "{env:?}");
    assert_eq!(env.get("BY_WORKER").map(String::as_str), Some("w"), "{env:?}");
    assert_eq!(env.get("BY_CLI").map(String::as_str), Some("c"), "{env:?}");
    assert_eq!(env.get("WC_DEFAULTS_ENV_FROM_HOST").map(String::as_str), Some("host value"), "{env:?}");
    assert!(!env.contains_key("WC_DEFAULTS_ENV_NOT_ON_HOST"), "{env:?}");
    assert_eq!(env.get("PATH").map(String::as_str), Some("/opt/tool/bin:/usr/bin:/bin"), "{env:?}");
}

/// An ad-hoc command (no worker) gets `defaults.env` too.
#[test]
fn an_ad_hoc_command_gets_the_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("out")).unwrap();
    support::write_project(&dir, &format!("{ZONE}defaults:\n  env:\n    PYTHONDONTWRITEBYTECODE: \"1\"\n"), &[]);
    support::give_to_worker(&dir);
    let out = support::workcell_in(&dir).args(["plan", "--json", "--", "true"]).output().expect("plan");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(plan["env"]["PYTHONDONTWRITEBYTECODE"], "1");
}

/// A worker's own `env:` is checked like `defaults.env`: a bad name is refused at its line in
/// the worker file (the worker is then broken, the others still load), and a NUL in a value
/// likewise.
#[test]
fn a_workers_bad_name_is_refused_at_its_line() {
    for (bad, what) in [("A-B: x", "is not an environment variable name"), ("\"1X\": x", "is not an environment variable name"), ("X: \"a\\0b\"", "NUL")] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(dir.join("out")).unwrap();
        let worker = format!("---\nname: w\ncommand: [\"true\"]\nenv:\n  OK: 1\n  {bad}\n---\n");
        support::write_project(&dir, ZONE, &[("w", &worker), ("fine", "---\nname: fine\ncommand: [\"true\"]\n---\n")]);
        let project = Project::load(Some(&dir.join("workcell.yaml")), &dir).expect("the project loads");
        assert!(project.worker("fine").is_ok(), "{bad}: the other worker still loads");
        let e = project.broken.get("w").unwrap_or_else(|| panic!("{bad}: the worker is refused"));
        assert_eq!(e.line, 6, "{bad}: {e}");
        assert!(e.message.contains(what), "{bad}: {e}");
        assert!(e.to_string().contains("w.worker:6:"), "{bad}: {e}");
    }
}
