//! The Seatbelt (macOS) renderer, checked on any host: profile snapshots for several plans,
//! paths passed as parameters rather than profile text, and `workcell plan --backend
//! seatbelt`. Plans come from `support::render::Fixture` (host-dependent parts fixed).

mod support;

use std::path::PathBuf;

use support::render::{Fixture, CHILD_WORKER, ROOT_FORM, ZONES};
use workcell::backend::seatbelt;
use workcell::plan::{LaunchPlan, Overrides};

fn profile_text(f: &Fixture, plan: &LaunchPlan) -> String {
    let p = seatbelt::render_profile(plan);
    // The base profile is the same for every plan; snapshot only what is generated.
    let generated = p.profile.strip_prefix(seatbelt::BASE_PROFILE).expect("profile starts with the base profile");
    let params: Vec<String> = p.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    f.redact(&format!("{generated}\n; params\n{}\n", params.join("\n")))
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

#[test]
fn plan_prints_the_seatbelt_profile() {
    let f = Fixture::new(ZONES, &[]);
    let mut cmd = assert_cmd::Command::cargo_bin("workcell").expect("workcell binary");
    let out = cmd.current_dir(f.root()).args(["plan", "--backend", "seatbelt", "--", "true"]).output().expect("plan");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(text.contains("(deny default)") && text.contains("ZONE_0="), "{text}");
}
