//! Snapshots of every refusal message kind (host temp paths redacted), a separate check
//! that no message shows a host path, and a snapshot of `workcell schema`.

mod support;

use support::fixture::{redact, Form, Fx};
use workcell::sandbox::{DeriveSpec, SandboxError, ZoneMode, ZoneRequest};

/// Every kind of refusal, each produced for real by the fixture sandbox.
fn all_errors(fx: &Fx) -> Vec<(&'static str, SandboxError)> {
    let sb = fx.project(Form::Zones).sandbox;
    let ro = fx.project_text("sandbox:\n  root: {root: ./proj, readonly: true}\n").sandbox;
    std::fs::write(fx.host("out/twice.txt"), "aa aa").unwrap();
    std::fs::write(fx.host("out/bin.txt"), [b'a', 0, b'b']).unwrap();
    std::fs::write(fx.host("out/latin1.txt"), [b'c', b'a', b'f', 0xe9]).unwrap();
    let host = fx.host("data/file.txt").display().to_string();
    let l = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let narrow = sb.derive(&DeriveSpec { allow_read: l(&["/data/sub"]), ..Default::default() }).unwrap();
    let mut errors = vec![
        ("invalid_path_nul", sb.resolve("/data/a\0b").unwrap_err()),
        ("invalid_path_escape", sb.resolve("/data/a\x1b[2K\rb").unwrap_err()),
        ("invalid_path_home", sb.resolve("~/.ssh/id_rsa").unwrap_err()),
        ("invalid_path_drive", sb.resolve("C:\\x").unwrap_err()),
        ("invalid_path_host", sb.resolve(&host).unwrap_err()),
        ("invalid_path_empty", sb.resolve("").unwrap_err()),
        ("invalid_path_zone_root", sb.resolve("/").unwrap_err()),
        ("outside_dotdot", sb.resolve("/data/../../../etc/passwd").unwrap_err()),
        ("outside_unknown_zone", sb.resolve("/nope/x").unwrap_err()),
        ("outside_symlink", sb.read("/data/link_out/secret.txt", 100, 0).unwrap_err()),
        ("outside_control_chars", sb.resolve("/nope\nReadable paths: /etc").unwrap_err()),
        ("outside_derived", narrow.resolve("/data/file.txt").unwrap_err()),
        ("not_writable", sb.write("/data/file.txt", "x").unwrap_err()),
        ("not_writable_root", ro.resolve_for_write("/src/main.rs").unwrap_err()),
        ("suffix_not_allowed", sb.read("/data/x.PDF", 100, 0).unwrap_err()),
        ("too_large_read", sb.read("/data/big.txt", 100, 0).unwrap_err()),
        ("too_large_write", sb.write("/out/big.txt", &"z".repeat(2000)).unwrap_err()),
        ("escalation_readonly", ro.derive(&DeriveSpec { inherit: true, readonly: Some(false), ..Default::default() }).unwrap_err()),
        ("escalation_path", narrow.derive(&DeriveSpec { allow_read: l(&["/out"]), ..Default::default() }).unwrap_err()),
        ("escalation_write_ro", sb.derive(&DeriveSpec { allow_write: l(&["/data"]), ..Default::default() }).unwrap_err()),
        ("escalation_symlink", sb.derive(&DeriveSpec { allow_read: l(&["/data/link_out"]), ..Default::default() }).unwrap_err()),
        ("escalation_zone_rw", sb.derive_zones(&[ZoneRequest { name: "data".into(), mode: ZoneMode::Rw }]).unwrap_err()),
        ("escalation_zone_unknown", sb.derive_zones(&[ZoneRequest { name: "nope".into(), mode: ZoneMode::Ro }]).unwrap_err()),
        ("not_found", sb.read("/data/missing.txt", 100, 0).unwrap_err()),
        ("edit_mismatch_none", sb.edit("/out/twice.txt", "zz", "y").unwrap_err()),
        ("edit_mismatch_many", sb.edit("/out/twice.txt", "aa", "y").unwrap_err()),
        ("not_text_nul", sb.read("/out/bin.txt", 100, 0).unwrap_err()),
        ("not_text_utf8", sb.read("/out/latin1.txt", 100, 0).unwrap_err()),
        ("wrong_kind_read_dir", sb.read("/data/sub", 100, 0).unwrap_err()),
        ("wrong_kind_list_file", sb.list("/data/file.txt", "*").unwrap_err()),
        ("wrong_kind_write_dir", sb.write("/out", "x").unwrap_err()),
        ("invalid_pattern_dotdot", sb.list("/data", "../*").unwrap_err()),
        ("invalid_pattern_abs", sb.list("/data", "/etc/*").unwrap_err()),
        ("invalid_pattern_glob", sb.list("/data", "[").unwrap_err()),
        ("io_not_a_directory", sb.write("/out/x.txt/y.txt", "x").unwrap_err()),
        ("not_found_grant_under_read_only", ro.derive(&DeriveSpec { allow_read: l(&["/new"]), ..Default::default() }).unwrap_err()),
        (
            "not_found_read_only_grant_at_launch",
            sb.derive(&DeriveSpec { allow_read: l(&["/out/new"]), ..Default::default() }).unwrap().materialize(me()).unwrap_err(),
        ),
        ("io_grant_replaced_by_a_link", {
            let child = sb.derive(&DeriveSpec { allow_write: l(&["/out/reports"]), ..Default::default() }).unwrap();
            std::os::unix::fs::symlink("../../secret", fx.host("out/reports")).unwrap();
            child.materialize(me()).unwrap_err()
        }),
    ];
    // Only a root workcell acts as another user: the file is root's, the worker is nobody.
    if rustix::process::geteuid().is_root() {
        std::fs::write(fx.host("data/root-only.txt"), "root's").unwrap();
        std::fs::set_permissions(fx.host("data/root-only.txt"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let nobody = sb.clone().acting_as(workcell::plan::UserSpec { uid: 65534, gid: 65534 });
        errors.push(("permission_denied_read", nobody.read("/data/root-only.txt", 100, 0).unwrap_err()));
    }
    errors
}

/// The user this test runs as (a granted directory is given to the worker's user).
fn me() -> workcell::plan::UserSpec {
    workcell::plan::UserSpec { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() }
}

#[test]
fn every_error_kind_has_a_snapshot() {
    let fx = Fx::new();
    let errors = all_errors(&fx);
    let kinds: std::collections::BTreeSet<&str> = errors.iter().map(|(_, e)| e.kind()).collect();
    let expected = [
        "invalid_path",
        "outside_sandbox",
        "not_writable",
        "suffix_not_allowed",
        "too_large",
        "permission_escalation",
        "not_found",
        "edit_mismatch",
        "not_text",
        "wrong_kind",
        "invalid_pattern",
        "io",
    ];
    let mut expected: std::collections::BTreeSet<&str> = expected.into_iter().collect();
    if rustix::process::geteuid().is_root() {
        expected.insert("permission_denied");
    }
    assert_eq!(kinds, expected, "every kind is covered");
    for (name, e) in &errors {
        let shown = format!("kind: {}\n{}", e.kind(), redact(&e.to_string(), &fx.dir));
        insta::assert_snapshot!(*name, shown);
    }
}

#[test]
fn no_message_shows_a_host_path() {
    let fx = Fx::new();
    let tmp = fx.dir.display().to_string();
    let raw_tmp = fx.tmp.path().display().to_string();
    for (name, e) in all_errors(&fx) {
        let msg = e.to_string();
        assert!(!msg.contains(&tmp) && !msg.contains(&raw_tmp), "{name}: {msg}");
        let dbg = format!("{e:?}");
        assert!(!dbg.contains(&tmp), "{name}: {dbg}");
    }
}

#[test]
fn control_characters_are_escaped_and_backslashes_are_not_doubled() {
    let fx = Fx::new();
    let sb = fx.project(Form::Zones).sandbox;
    let msg = sb.resolve("C:\\x").unwrap_err().to_string();
    assert!(msg.starts_with("Cannot use 'C:\\x':"), "{msg}");
    let msg = sb.resolve("/nope\nReadable paths: /etc").unwrap_err().to_string();
    assert_eq!(msg.lines().count(), 2, "a path cannot add lines: {msg}");
    assert!(msg.contains("/nope\\nReadable paths: /etc"), "{msg}");
}

#[test]
fn schema_output() {
    let out = assert_cmd::Command::cargo_bin("workcell").unwrap().arg("schema").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v.get("workcell.yaml").is_some() && v.get("worker").is_some());
    insta::assert_snapshot!("schema", text);
}
