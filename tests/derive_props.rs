//! Derivation only ever shrinks a sandbox: property tests over random chains of
//! `derive()` / `derive_zones()`, plus seed 003's delegation examples and seed 004's listed
//! tests as plain unit tests.

mod support;

use std::fs;
use std::os::unix::fs::symlink;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use workcell::config::{Project, SandboxDecl};
use workcell::sandbox::{DeriveSpec, Sandbox, ZoneMode, ZoneRequest};

/// Zones a (rw), b (ro), c (rw), each holding `top.txt x/f.txt x/y/g.txt z/h.txt` and a
/// symlink `out -> ../outside`.
fn fixture() -> (tempfile::TempDir, std::path::PathBuf, Sandbox) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(dir.join("outside")).unwrap();
    for z in ["a", "b", "c"] {
        fs::create_dir_all(dir.join(z).join("x/y")).unwrap();
        fs::create_dir_all(dir.join(z).join("z")).unwrap();
        for f in ["top.txt", "x/f.txt", "x/y/g.txt", "z/h.txt"] {
            fs::write(dir.join(z).join(f), f).unwrap();
        }
        symlink("../outside", dir.join(z).join("out")).unwrap();
    }
    let yaml = "sandbox:\n  zones:\n    a: {path: ./a, mode: rw}\n    b: {path: ./b, mode: ro}\n    c: {path: ./c, mode: rw}\n";
    let p = Project::from_text(yaml, &dir.join("workcell.yaml"), &dir).unwrap();
    (tmp, dir, p.sandbox)
}

/// Allowlist entries: existing directories and files in every spelling, plus entries that
/// are never inside any sandbox.
const ENTRIES: &[&str] = &[
    "/a",
    "a",
    "/a/x",
    "a/x/y",
    "a:x",
    "/a/x/f.txt",
    "/a/z",
    "a:z/h.txt",
    "/a/top.txt",
    "/b",
    "b",
    "/b/x",
    "/b/x/y/g.txt",
    "b:z",
    "/c",
    "/c/x",
    "/c/x/y",
    "c:z/h.txt",
    // never inside: unknown zone, `..`, home, drive letter, the sandbox root, symlink out
    "/nope",
    "/a/../b",
    "../a",
    "~",
    "C:\\x",
    "/",
    "/a/x/../z",
    "/a/out",
];

/// Paths to probe with can_read / can_write (existing, missing, outside, odd).
const PROBES: &[&str] = &[
    "/a/top.txt",
    "/a/x/f.txt",
    "/a/x/y/g.txt",
    "/a/z/h.txt",
    "/a/x/new.txt",
    "/a/q/r/s.txt",
    "/a/x",
    "/b/top.txt",
    "/b/x/f.txt",
    "/b/x/y/g.txt",
    "/b/z/h.txt",
    "/b/new.txt",
    "/b/x/y",
    "/c/top.txt",
    "/c/x/f.txt",
    "/c/x/y/g.txt",
    "/c/z/h.txt",
    "/c/z/new.txt",
    "c:x/y/new",
    "/a/out/secret",
    "/nope/x",
    "../x",
    "/a/../b/top.txt",
    "a:z",
    "b:x/f.txt",
];

#[derive(Debug, Clone)]
enum Step {
    Derive(DeriveSpec),
    Zones(Vec<ZoneRequest>),
}

fn entries() -> impl Strategy<Value = Option<Vec<String>>> {
    proptest::option::of(proptest::collection::vec(proptest::sample::select(ENTRIES).prop_map(String::from), 0..4))
}

fn step() -> impl Strategy<Value = Step> {
    let derive = (any::<bool>(), entries(), entries(), proptest::option::of(any::<bool>()))
        .prop_map(|(inherit, allow_read, allow_write, readonly)| Step::Derive(DeriveSpec { inherit, allow_read, allow_write, readonly }));
    let zone = (proptest::sample::select(&["a", "b", "c", "d"][..]), any::<bool>())
        .prop_map(|(n, rw)| ZoneRequest { name: n.to_string(), mode: if rw { ZoneMode::Rw } else { ZoneMode::Ro } });
    let zones = proptest::collection::vec(zone, 0..4).prop_map(Step::Zones);
    prop_oneof![3 => derive, 1 => zones]
}

/// True when the step asks for something `parent` cannot give, by seed 004's and 003's
/// rules. Such a step must fail with permission_escalation.
fn is_escalation(parent: &Sandbox, step: &Step) -> bool {
    match step {
        Step::Derive(spec) => {
            let reads = spec.allow_read.as_ref().or(spec.allow_write.as_ref());
            reads.is_some_and(|l| l.iter().any(|e| !parent.can_read(e)))
                || spec.allow_write.as_ref().is_some_and(|l| l.iter().any(|e| !parent.can_write(e)))
                || (spec.readonly == Some(false) && parent.writable_roots().is_empty())
        }
        Step::Zones(reqs) => reqs.iter().any(|r| {
            let root = format!("/{}", r.name);
            let in_zone = |roots: Vec<String>| roots.iter().any(|p| p == &root || p.starts_with(&format!("{root}/")));
            !in_zone(parent.readable_roots()) || (r.mode == ZoneMode::Rw && !in_zone(parent.writable_roots()))
        }),
    }
}

fn check_chain(project: &Sandbox, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut current = project.clone();
    for (i, step) in steps.iter().enumerate() {
        let escalation = is_escalation(&current, step);
        let result = match step {
            Step::Derive(spec) => current.derive(spec),
            Step::Zones(reqs) => current.derive_zones(reqs),
        };
        match result {
            Ok(child) => {
                prop_assert!(!escalation, "step {i} {step:?} asked for more than the parent has, yet succeeded");
                prop_assert!(child.is_within(&current), "step {i}: child not within parent");
                prop_assert!(child.is_within(project), "step {i}: child not within the project");
                for p in PROBES.iter().chain(ENTRIES) {
                    prop_assert!(!child.can_read(p) || current.can_read(p), "step {i}: child reads {p} the parent cannot");
                    prop_assert!(!child.can_write(p) || current.can_write(p), "step {i}: child writes {p} the parent cannot");
                    prop_assert!(!child.can_write(p) || child.can_read(p), "step {i}: child writes {p} but cannot read it");
                }
                for r in child.readable_roots() {
                    prop_assert!(current.can_read(&r), "step {i}: readable root {r} not readable in parent");
                }
                for w in child.writable_roots() {
                    prop_assert!(current.can_write(&w), "step {i}: writable root {w} not writable in parent");
                }
                if let Step::Derive(DeriveSpec { readonly: Some(true), .. }) = step {
                    prop_assert!(child.writable_roots().is_empty());
                }
                current = child;
            }
            Err(e) => {
                // Every refusal of a derive is an escalation: entries here are existing
                // paths or paths no sandbox contains.
                prop_assert_eq!(e.kind(), "permission_escalation", "step {} {:?}: {}", i, step, e);
                let msg = e.to_string();
                prop_assert!(msg.contains("Child sandboxes may only restrict access"), "{}", msg);
            }
        }
    }
    Ok(())
}

#[test]
fn any_derive_chain_only_shrinks() {
    let (_tmp, _dir, project) = fixture();
    let mut runner = TestRunner::new(Config { cases: 400, failure_persistence: None, ..Config::default() });
    runner.run(&proptest::collection::vec(step(), 1..6), |steps| check_chain(&project, &steps)).unwrap();
}

#[test]
fn escalation_attempts_always_fail_with_permission_escalation() {
    let (_tmp, _dir, project) = fixture();
    let l = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let ro_child = project.derive(&DeriveSpec { inherit: true, readonly: Some(true), ..Default::default() }).unwrap();
    let narrow = project.derive(&DeriveSpec { allow_read: l(&["/a/x"]), allow_write: l(&["/a/x/y"]), ..Default::default() }).unwrap();
    let attempts: Vec<(&Sandbox, Step)> = vec![
        // a path the parent cannot read
        (&narrow, Step::Derive(DeriveSpec { allow_read: l(&["/a/z"]), ..Default::default() })),
        (&narrow, Step::Derive(DeriveSpec { allow_read: l(&["/b"]), ..Default::default() })),
        (&project, Step::Derive(DeriveSpec { allow_read: l(&["/nope"]), ..Default::default() })),
        (&project, Step::Derive(DeriveSpec { allow_read: l(&["/a/out"]), ..Default::default() })),
        // write where the parent is read-only
        (&project, Step::Derive(DeriveSpec { allow_write: l(&["/b/x"]), ..Default::default() })),
        (&narrow, Step::Derive(DeriveSpec { allow_write: l(&["/a/x"]), ..Default::default() })),
        (&ro_child, Step::Derive(DeriveSpec { allow_write: l(&["/a"]), ..Default::default() })),
        // readonly=false on a read-only parent
        (&ro_child, Step::Derive(DeriveSpec { inherit: true, readonly: Some(false), ..Default::default() })),
        // rw zone over ro, and zones the parent lacks
        (&project, Step::Zones(vec![ZoneRequest { name: "b".into(), mode: ZoneMode::Rw }])),
        (&ro_child, Step::Zones(vec![ZoneRequest { name: "a".into(), mode: ZoneMode::Rw }])),
        (&narrow, Step::Zones(vec![ZoneRequest { name: "b".into(), mode: ZoneMode::Ro }])),
        (&project, Step::Zones(vec![ZoneRequest { name: "d".into(), mode: ZoneMode::Ro }])),
    ];
    for (parent, step) in attempts {
        assert!(is_escalation(parent, &step), "{step:?}");
        let r = match &step {
            Step::Derive(s) => parent.derive(s),
            Step::Zones(z) => parent.derive_zones(z),
        };
        let e = r.expect_err(&format!("{step:?} must be refused"));
        assert_eq!(e.kind(), "permission_escalation", "{step:?}: {e}");
        let msg = e.to_string();
        assert!(msg.contains("Parent can read:") && msg.contains("Parent can write:"), "{msg}");
    }
}

// ---- seed 003: delegation examples ----

fn zone_project(modes: &[(&str, &str)]) -> (tempfile::TempDir, Sandbox) {
    let tmp = tempfile::tempdir().unwrap();
    let mut yaml = String::from("sandbox:\n  zones:\n");
    for (z, m) in modes {
        fs::create_dir_all(tmp.path().join(z)).unwrap();
        yaml.push_str(&format!("    {z}: {{path: ./{z}, mode: {m}}}\n"));
    }
    let p = Project::from_text(&yaml, &tmp.path().join("workcell.yaml"), tmp.path()).unwrap();
    (tmp, p.sandbox)
}

#[test]
fn seed003_child_gets_only_what_it_declares() {
    let (_t, parent) = zone_project(&[("data", "rw"), ("workspace", "rw"), ("cache", "rw")]);
    let child = parent.derive_zones(&[ZoneRequest { name: "data".into(), mode: ZoneMode::Rw }]).unwrap();
    assert_eq!(child.readable_roots(), vec!["/data"]);
    assert_eq!(child.writable_roots(), vec!["/data"]);
    assert!(!child.can_read("/workspace/x"));
    assert!(child.is_within(&parent));
}

#[test]
fn seed003_rw_over_ro_is_an_error() {
    let (_t, parent) = zone_project(&[("data", "ro")]);
    let e = parent.derive_zones(&[ZoneRequest { name: "data".into(), mode: ZoneMode::Rw }]).unwrap_err();
    assert_eq!(e.kind(), "permission_escalation");
    assert!(e.to_string().contains("child requests 'rw' on zone 'data' but the parent only has 'ro'"), "{e}");
}

#[test]
fn seed003_no_declaration_is_a_pure_function() {
    let (_t, parent) = zone_project(&[("data", "rw"), ("workspace", "rw")]);
    let child = SandboxDecl::None.apply(&parent).unwrap();
    assert!(child.readable_roots().is_empty() && child.writable_roots().is_empty());
    assert!(!child.can_read("/data/x") && !child.can_write("/workspace/x"));
    assert_eq!(child.list("/", "*").unwrap().entries, Vec::<String>::new());
}

#[test]
fn seed003_ro_declaration_of_rw_zone_is_read_only() {
    let (_t, parent) = zone_project(&[("data", "rw")]);
    let child = parent.derive_zones(&[ZoneRequest { name: "data".into(), mode: ZoneMode::Ro }]).unwrap();
    assert!(child.can_read("/data/x") && !child.can_write("/data/x"));
}

// ---- seed 004: the listed tests, on a root sandbox over proj/ ----

fn root_project(readonly: bool) -> (support::fixture::Fx, Sandbox) {
    let fx = support::fixture::Fx::new();
    let sb = fx.project_text(&format!("sandbox:\n  root: {{root: ./proj, readonly: {readonly}}}\n")).sandbox;
    (fx, sb)
}

fn list(v: &[&str]) -> Option<Vec<String>> {
    Some(v.iter().map(|s| s.to_string()).collect())
}

#[test]
fn seed004_1_root_resolves_relative_and_absolute() {
    let (fx, sb) = root_project(false);
    assert_eq!(sb.resolve("/src/main.rs").unwrap(), fx.host("proj/src/main.rs"));
    assert_eq!(sb.resolve("src/main.rs").unwrap(), fx.host("proj/src/main.rs"));
    assert!(!sb.can_write("/../tmp/x"));
}

#[test]
fn seed004_2_root_rejects_escapes() {
    let (fx, sb) = root_project(false);
    assert_eq!(sb.resolve("/../outside/secret.txt").unwrap_err().kind(), "outside_sandbox");
    assert_eq!(sb.resolve("/link_out/secret.txt").unwrap_err().kind(), "outside_sandbox");
    let host = fx.host("proj/src/main.rs").display().to_string();
    assert_eq!(sb.resolve(&host).unwrap_err().kind(), "invalid_path");
    let e = sb.resolve("/../x").unwrap_err();
    assert!(e.to_string().contains("Readable paths: /"), "{e}");
}

#[test]
fn seed004_3_derive_without_arguments_is_empty() {
    let (_fx, sb) = root_project(false);
    let empty = sb.derive(&DeriveSpec::default()).unwrap();
    assert!(!empty.can_read("/src/main.rs") && !empty.can_write("/src/main.rs"));
    assert!(empty.readable_roots().is_empty());
}

#[test]
fn seed004_4_allow_read_limits_reads_root_and_multi() {
    let (_fx, sb) = root_project(false);
    let analyzer = sb.derive(&DeriveSpec { allow_read: list(&["/src"]), readonly: Some(true), ..Default::default() }).unwrap();
    assert!(analyzer.can_read("/src/main.rs"));
    assert!(!analyzer.can_write("/src/main.rs"));
    assert_eq!(analyzer.resolve("/docs/readme.md").unwrap_err().kind(), "outside_sandbox");
    // Root-mode entries must be sandbox-absolute.
    assert_eq!(sb.derive(&DeriveSpec { allow_read: list(&["src"]), ..Default::default() }).unwrap_err().kind(), "permission_escalation");
    // A file entry stands for its directory.
    let by_file = sb.derive(&DeriveSpec { allow_read: list(&["/src/main.rs"]), ..Default::default() }).unwrap();
    assert_eq!(by_file.readable_roots(), vec!["/src"]);

    let (_t, multi) = zone_project(&[("output", "rw"), ("input", "ro")]);
    fs::create_dir_all(_t.path().join("output/reports")).unwrap();
    for entry in ["output/reports", "output:reports", "/output/reports"] {
        let c = multi.derive(&DeriveSpec { allow_read: list(&[entry]), ..Default::default() }).unwrap();
        assert_eq!(c.readable_roots(), vec!["/output/reports"], "{entry}");
        assert!(c.can_read("/output/reports/r.md") && !c.can_read("/output/x") && !c.can_read("/input/x"));
    }
    let whole = multi.derive(&DeriveSpec { allow_read: list(&["output"]), ..Default::default() }).unwrap();
    assert_eq!(whole.readable_roots(), vec!["/output"]);
}

#[test]
fn seed004_5_read_without_write_and_write_implies_read() {
    let (_fx, sb) = root_project(false);
    let r = sb.derive(&DeriveSpec { allow_read: list(&["/src"]), allow_write: None, ..Default::default() }).unwrap();
    assert!(r.can_read("/src/main.rs") && !r.can_write("/src/main.rs"));
    let w = sb.derive(&DeriveSpec { allow_read: None, allow_write: list(&["/docs"]), ..Default::default() }).unwrap();
    assert!(w.can_write("/docs/new.md") && w.can_read("/docs/readme.md"));
    assert!(!w.can_read("/src/main.rs"));
}

#[test]
fn seed004_6_inherit_gives_parent_access_and_allowlists_restrict() {
    let (_fx, sb) = root_project(false);
    let all = sb.derive(&DeriveSpec { inherit: true, ..Default::default() }).unwrap();
    assert_eq!(all.readable_roots(), sb.readable_roots());
    assert_eq!(all.writable_roots(), sb.writable_roots());
    let some = sb.derive(&DeriveSpec { inherit: true, allow_read: list(&["/src", "/docs"]), allow_write: list(&["/docs"]), ..Default::default() }).unwrap();
    assert!(some.can_read("/src/main.rs") && !some.can_write("/src/main.rs"));
    assert!(some.can_write("/docs/x.md"));
    assert!(!some.can_read("/big.txt"));
}

#[test]
fn seed004_7_readonly_rules() {
    let (_fx, rw) = root_project(false);
    let ro = rw.derive(&DeriveSpec { inherit: true, readonly: Some(true), ..Default::default() }).unwrap();
    assert!(ro.can_read("/src/main.rs") && !ro.can_write("/src/main.rs"));
    let still = rw.derive(&DeriveSpec { inherit: true, readonly: Some(false), ..Default::default() }).unwrap();
    assert!(still.can_write("/src/main.rs"));

    let (_fx2, ro_parent) = root_project(true);
    let e = ro_parent.derive(&DeriveSpec { inherit: true, readonly: Some(false), ..Default::default() }).unwrap_err();
    assert_eq!(e.kind(), "permission_escalation");
    assert!(
        e.to_string().starts_with("Cannot create child sandbox with readonly=false: parent sandbox is readonly. Child sandboxes may only restrict access."),
        "{e}"
    );
    // Multi-path sandboxes are unaffected when not deriving.
    let (_t, multi) = zone_project(&[("output", "rw"), ("input", "ro")]);
    assert!(multi.can_write("/output/x") && multi.can_read("/input/x") && !multi.can_write("/input/x"));
}
