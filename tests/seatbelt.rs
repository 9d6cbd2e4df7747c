//! The Seatbelt (macOS) renderer, checked on any host: profile, parameter and environment
//! snapshots for several plans, paths passed as parameters rather than profile text, no
//! broad rule in any rendering (read back as s-expressions), and `workcell plan --backend
//! seatbelt`. Plans come from `support::render::Fixture` (host-dependent parts fixed).

mod support;

use std::path::{Path, PathBuf};

use support::render::{Fixture, CHILD_WORKER, ROOT_FORM, ZONES};
use workcell::backend::seatbelt::{self, audit::Broad};
use workcell::plan::{LaunchPlan, Network, Overrides};

/// The whole project directory writable, with a worker built from `images/tool` (its build
/// folder is a control entry too).
const ROOT_RW: &str = "sandbox:\n  root: {root: ., readonly: false, approval: {write: preApproved, delete: preApproved}}\n";
const TOOL_WORKER: &str = "---\ndescription: built from the project\nbuild: images/tool\ncommand: [true]\n---\nbuilt\n";

/// The generated rules (the base profile is the same for every plan), the parameters, and
/// the environment the worker starts with.
fn profile_text(f: &Fixture, plan: &LaunchPlan) -> String {
    let p = seatbelt::render_profile(plan);
    let generated = p.profile.strip_prefix(seatbelt::BASE_PROFILE).expect("profile starts with the base profile");
    let params: Vec<String> = p.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let env = seatbelt::env::worker_env(plan).expect("environment");
    // TERM is the host's own (a -t run passes it on).
    let env: Vec<String> = env.iter().map(|(k, v)| if k == "TERM" { "TERM=[TERM]".to_string() } else { format!("{k}={v}") }).collect();
    assert_no_broad_rules(&p.profile);
    let text = format!("{generated}\n; params\n{}\n\n; environment\n{}\n", params.join("\n"), env.join("\n"));
    // The project as Seatbelt names it (a temp dir under /tmp is /private/tmp on macOS).
    let private = seatbelt::render::private_path(&f.root()).display().to_string();
    f.redact(&text.replace(&private, &f.root().display().to_string()))
}

fn assert_no_broad_rules(profile: &str) {
    let broad = seatbelt::audit::broad_rules(profile).expect("the profile reads as s-expressions");
    assert!(broad.is_empty(), "broad rules in the rendered profile: {broad:?}");
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
    assert_eq!(plan.network, Network::Open);
    let text = profile_text(&f, &plan);
    assert!(!text.contains("(allow network*)") && !text.contains("(deny network*)"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn seatbelt_profile_root_form() {
    let f = Fixture::new(ROOT_FORM, &[]);
    let plan = f.plan(None, Overrides::default());
    insta::assert_snapshot!(profile_text(&f, &plan));
}

#[test]
fn seatbelt_profile_root_form_writable_keeps_control_files() {
    let f = Fixture::new(ROOT_RW, &[("tool", TOOL_WORKER)]);
    let plan = f.plan(None, Overrides::default());
    let text = profile_text(&f, &plan);
    // Every control entry is carved out of the zone's writes, and the folder above the build
    // folder cannot be renamed away.
    for entry in ["workcell.yaml", "workers", ".workcell", "images/tool"] {
        assert!(text.contains(&format!("=[PROJECT]/{entry}\n")), "{entry} kept: {text}");
    }
    assert!(text.contains("(require-not (subpath (param \"ZONE_0_KEEP_0\")))"), "{text}");
    assert!(text.contains("(deny file-write-unlink (literal (param \"ZONE_0_PIN_"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn seatbelt_profile_derived_child() {
    let f = Fixture::new(ZONES, &[("child", CHILD_WORKER)]);
    let plan = f.plan(Some("child"), Overrides { command: None, ..Overrides::default() });
    insta::assert_snapshot!(profile_text(&f, &plan));
}

#[test]
fn seatbelt_profile_tty_with_broker() {
    let f = Fixture::new(ZONES, &[]);
    let mut plan = f.plan(None, Overrides { tty: true, interactive: true, ..Overrides::default() });
    // A broker directory under the user's $TMPDIR, as macOS names it (`/var` is a link).
    plan.attach_broker(Path::new("/var/folders/ab/xyz/T/workcell-broker-RUNID"), "TOKEN");
    let text = profile_text(&f, &plan);
    assert!(text.contains("BROKER_SOCKET=/private/var/folders/ab/xyz/T/workcell-broker-RUNID/broker.sock"), "{text}");
    assert!(text.contains("WORKCELL_BROKER=/private/var/folders/ab/xyz/T/workcell-broker-RUNID/broker.sock"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn seatbelt_environment_names_host_paths() {
    let f = Fixture::new(ZONES, &[]);
    let plan = f.plan(None, Overrides::default());
    let env = seatbelt::env::worker_env(&plan).expect("environment");
    let root = seatbelt::render::private_path(&f.root());
    assert_eq!(env["WORKCELL_ZONES"], format!("{}:ro,{}:rw", root.join("in").display(), root.join("out").display()));
    assert_eq!(env["HOME"], "/private/tmp/workcell-RUNID/home");
    assert_eq!(env["TMPDIR"], "/private/tmp/workcell-RUNID/tmp");
    // HOME and TMPDIR are inside the one writable place that is not a zone.
    let p = seatbelt::render_profile(&plan);
    assert!(p.params.contains(&(seatbelt::TMP_PARAM.to_string(), "/private/tmp/workcell-RUNID".to_string())));
}

#[test]
fn seatbelt_refuses_a_zone_path_that_would_forge_zone_entries() {
    let f = Fixture::new(ZONES, &[]);
    let mut plan = f.plan(None, Overrides::default());
    plan.mounts[0].source = PathBuf::from("/Users/me/in,/:rw");
    let err = seatbelt::env::worker_env(&plan).expect_err("an ambiguous host path");
    assert!(err.to_string().contains("WORKCELL_ZONES"), "{err}");
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

/// Rules a review found in the profile before: each must be caught by the audit.
const OLD_RULES: &[(&str, Broad)] = &[
    ("(allow sysctl-read)", Broad::SysctlUnfiltered),
    ("(allow file-read* file-write-data file-ioctl (regex #\"^/dev/ttys[0-9]+$\"))", Broad::TtyOpenByPath),
    ("(allow network*)", Broad::NetworkAdmitsUnixSockets),
    // And variants a later edit could bring.
    ("(allow sysctl-read (sysctl-name-prefix \"kern.\"))", Broad::SysctlUnfiltered),
    ("(allow file-write* (require-all (regex #\"^/dev/ttys\") (vnode-type CHARACTER-DEVICE)))", Broad::TtyOpenByPath),
    ("(allow network-outbound (remote unix-socket))", Broad::NetworkAdmitsUnixSockets),
    ("(allow network* (subpath \"/\"))", Broad::NetworkAdmitsUnixSockets),
    ("(allow network-bind (local ip \"*:*\"))", Broad::ListensBeyondLoopback),
    ("(allow default)", Broad::AllowDefault),
    ("(allow file-read* (subpath \"/dev\"))", Broad::TtyOpenByPath),
    // Text tricks do not hide a rule: it is read as s-expressions.
    ("(allow ; a comment (deny network*)\n  network*\n)", Broad::NetworkAdmitsUnixSockets),
];

#[test]
fn audit_catches_the_old_broad_rules() {
    for (rule, expected) in OLD_RULES {
        let found = seatbelt::audit::broad_rules(&format!("(version 1)\n(deny default)\n{rule}\n")).expect("reads");
        assert!(found.iter().any(|(b, _)| b == expected), "{rule} must be reported as {expected:?}, got {found:?}");
    }
    // The whole old base profile, as it was (its network rule was generated, above), fails twice.
    let old = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/seatbelt_old_base.sbpl")).expect("old profile");
    let found: Vec<Broad> = seatbelt::audit::broad_rules(&old).expect("reads").into_iter().map(|(b, _)| b).collect();
    assert_eq!(found, vec![Broad::SysctlUnfiltered, Broad::TtyOpenByPath], "{found:?}");
}

#[test]
fn audit_accepts_the_narrow_forms() {
    let narrow = "(allow sysctl-read (sysctl-name \"hw.ncpu\"))\n\
                  (allow file-read* file-write* (require-all (regex #\"^/dev/ttys[0-9]+$\") (extension \"com.apple.sandbox.pty\")))\n\
                  (allow file-ioctl (regex #\"^/dev/ttys[0-9]+$\"))\n\
                  (allow network-outbound (remote unix-socket (path-literal (param \"BROKER_SOCKET\"))))\n\
                  (allow network-bind network-inbound (local ip \"localhost:*\"))\n\
                  (allow network-outbound (remote ip \"*:*\"))\n";
    assert_eq!(seatbelt::audit::broad_rules(narrow).expect("reads"), vec![]);
}

#[test]
fn plan_prints_the_seatbelt_profile() {
    let f = Fixture::new(ZONES, &[]);
    let mut cmd = assert_cmd::Command::cargo_bin("workcell").expect("workcell binary");
    let out = cmd.current_dir(f.root()).args(["plan", "--backend", "seatbelt", "--", "true"]).output().expect("plan");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("(deny default)") && text.contains("; -D ZONE_0="), "{text}");
    assert!(text.contains("; not enforced by seatbelt: memory limit") && text.contains("setsid()"), "{text}");
    // The printout is itself a profile (sandbox-exec -f reads it as it is).
    let forms = seatbelt::sexp::parse(&text).expect("the printout reads as SBPL");
    assert!(forms.iter().any(|f| f.form("deny").is_some()));
}

#[test]
fn doctor_names_what_seatbelt_does_not_enforce() {
    let f = Fixture::new(ZONES, &[]);
    let mut cmd = assert_cmd::Command::cargo_bin("workcell").expect("workcell binary");
    let out = cmd.current_dir(f.root()).args(["doctor", "--json"]).output().expect("doctor");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON");
    let gaps = v["seatbelt"]["not_enforced"].as_array().expect("seatbelt.not_enforced");
    let text: Vec<&str> = gaps.iter().filter_map(|g| g.as_str()).collect();
    assert!(text.iter().any(|g| g.contains("memory")) && text.iter().any(|g| g.contains("setsid()")), "{text:?}");
}

#[test]
fn printed_profile_keeps_a_line_break_in_a_path_inside_its_comment() {
    // The printout is fed to `sandbox-exec -f` by the procedure in docs/backends.md: a path must not
    // end the `; -D` comment and add rules of its own.
    let f = Fixture::new(ZONES, &[]);
    let mut plan = f.plan(None, Overrides::default());
    plan.mounts[0].source = PathBuf::from("/tmp/x\n(allow default)\n");
    let text = seatbelt::plan_text(&plan);
    assert_no_broad_rules(&text);
    assert!(text.contains("(allow default)"), "the path is still shown, escaped: {text}");
}

#[test]
fn nested_zones_carve_and_reopen_in_order() {
    // rw /p, ro /p/a inside it, rw /p/a/b inside that: /p's writes exclude /p/a, /p/a's deny
    // comes after, and /p/a/b's own allow comes last (the last matching rule wins).
    let f = Fixture::new(ZONES, &[]);
    let mut plan = f.plan(None, Overrides::default());
    let mount = |source: &str, target: &str, read_only| workcell::plan::PlanMount { source: source.into(), target: target.into(), read_only, held: None };
    plan.mounts = vec![mount("/p", "/p", false), mount("/p/a", "/p/a", true), mount("/p/a/b", "/p/a/b", false)];
    let p = seatbelt::render_profile(&plan);
    let param = |v: &str| p.params.iter().find(|(_, pv)| pv == v).map(|(k, _)| k.clone()).unwrap_or_default();
    assert_eq!(param("/p"), "ZONE_0");
    assert!(p.params.contains(&("ZONE_0_KEEP_0".into(), "/p/a".into())), "{:?}", p.params);
    assert!(p.params.contains(&("ZONE_0_PIN_0".into(), "/p".into())), "the zone above a kept area cannot be renamed: {:?}", p.params);
    let deny_a = p.profile.find("(deny file-write* (subpath (param \"ZONE_1\")))").expect("deny of the read-only zone");
    let allow_b = p.profile.find("(allow file-write* (subpath (param \"ZONE_2\")))").expect("allow of the inner writable zone");
    assert!(deny_a < allow_b, "{}", p.profile);
    assert_no_broad_rules(&p.profile);
}

/// Files the host runs in a writable zone are carved out of its writes like the control
/// files, and the directories above them cannot be renamed or removed.
#[test]
fn seatbelt_profile_keeps_files_the_host_runs() {
    let f = Fixture::new(ZONES, &[]);
    let out = f.root().join("out");
    std::fs::create_dir_all(out.join(".git/hooks")).expect("mkdir");
    std::fs::write(out.join(".git/config"), "[core]\n").expect("write");
    std::fs::create_dir_all(out.join("sub/.vscode")).expect("mkdir");
    let plan = f.plan(None, Overrides::default());
    let text = profile_text(&f, &plan);
    for entry in ["out/.git/config", "out/.git/hooks", "out/sub/.vscode"] {
        assert!(text.contains(&format!("_KEEP_0=[PROJECT]/{entry}\n")) || text.contains(&format!("=[PROJECT]/{entry}\n")), "{entry} kept: {text}");
    }
    let out_zone = text.lines().find(|l| l.ends_with("=[PROJECT]/out")).and_then(|l| l.split('=').next()).expect("the out zone").to_string();
    assert!(text.contains(&format!("(require-not (subpath (param \"{out_zone}_KEEP_")), "{text}");
    assert!(text.contains(&format!("{out_zone}_PIN_0=[PROJECT]/out/.git\n")) || text.contains("_PIN_0=[PROJECT]/out/.git\n"), "{text}");
    insta::assert_snapshot!(text);
}
