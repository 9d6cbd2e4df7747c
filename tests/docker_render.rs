//! The Docker renderer, no daemon needed: `workcell plan --json` snapshots of the container
//! a worker would get (host-dependent parts redacted), and a derived child's plan holding
//! only its own mounts.

mod support;

use support::write_project;

const PROJECT: &str =
    "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n";

fn plan_project() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    std::fs::create_dir_all(dir.join("data")).expect("mkdir");
    std::fs::create_dir_all(dir.join("out")).expect("mkdir");
    // As root the worker is nobody here (the project is root's): its rw zone is its own, or
    // `plan` refuses it.
    if rustix::process::geteuid().is_root() {
        rustix::fs::chown(dir.join("out"), Some(rustix::fs::Uid::from_raw(65534)), Some(rustix::fs::Gid::from_raw(65534))).expect("chown out");
    }
    write_project(
        &dir,
        PROJECT,
        &[
            ("reader", "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\ncommand: [sh, -c, \"ls /data\"]\n---\nbody\n"),
            (
                "writer",
                "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n    - {name: out, mode: rw}\ncommand: [python3, /data/run.py]\nenv: {MODE: fast}\nlimits: {timeout: 30s, memory: 128m, cpus: 0.5, pids: 32}\n---\nbody\n",
            ),
            ("named", "---\nimage: python:3.12-slim\nsandbox:\n  zones:\n    - {name: out, mode: rw}\ncommand: [python3, -V]\n---\n"),
        ],
    );
    (tmp, dir)
}

/// Replaces what differs between machines and runs: temp paths, run id, uid/gid, the host
/// system layout and what is derived from it (base image hash, system binds, init path).
fn redact(v: &mut serde_json::Value, dir: &str, run_id: &str) {
    use serde_json::Value;
    match v {
        Value::String(s) => {
            if s.contains(dir) || s.contains(run_id) {
                *s = s.replace(dir, "[PROJECT]").replace(run_id, "[RUN_ID]");
            }
            if s.starts_with("workcell-host:") {
                *s = "workcell-host:[HASH]".into();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| redact(x, dir, run_id)),
        Value::Object(o) => {
            for k in ["uid", "gid"] {
                if o.contains_key(k) {
                    o.insert(k.into(), "[ID]".into());
                }
            }
            if o.contains_key("system") {
                o.insert("system".into(), "[HOST SYSTEM LAYOUT]".into());
            }
            // Which backend a run would get depends on this machine (is Docker there, may
            // this user use it), not on the plan: tests/docker_group.rs and select.rs check it.
            if let Some(runs_on) = o.get_mut("runs_on") {
                assert!(runs_on["why"].as_str().is_some_and(|w| !w.is_empty()), "{runs_on}");
                *runs_on = "[THIS MACHINE]".into();
            }
            if let Some(u) = o.get_mut("User") {
                *u = "[UID]:[GID]".into();
            }
            if let Some(e) = o.get_mut("Entrypoint") {
                *e = "[HOST INIT]".into();
            }
            if let Some(Value::Array(m)) = o.get_mut("Mounts") {
                // System binds depend on the host; zone binds are what the snapshot is about.
                m.retain(|x| x["Source"].as_str().is_some_and(|s| s.starts_with(dir)));
            }
            o.values_mut().for_each(|x| redact(x, dir, run_id));
        }
        _ => {}
    }
}

fn plan_json(dir: &std::path::Path, worker: &str) -> serde_json::Value {
    let out = assert_cmd::Command::cargo_bin("workcell")
        .expect("bin")
        .current_dir(dir)
        .args(["plan", "--json", worker])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let mut v: serde_json::Value = serde_json::from_slice(&out).expect("plan json");
    let run_id = v["run_id"].as_str().expect("run_id").to_string();
    redact(&mut v, &dir.display().to_string(), &run_id);
    v
}

#[test]
fn plan_json_snapshots() {
    let (_tmp, dir) = plan_project();
    for w in ["reader", "writer", "named"] {
        insta::assert_json_snapshot!(format!("plan_{w}"), plan_json(&dir, w));
    }
}

#[test]
fn derived_child_plan_has_only_its_own_mounts() {
    let (_tmp, dir) = plan_project();
    let v = plan_json(&dir, "reader");
    let targets: Vec<&str> = v["mounts"].as_array().expect("mounts").iter().filter_map(|m| m["target"].as_str()).collect();
    assert_eq!(targets, vec!["/data"]);
    assert_eq!(v["mounts"][0]["read_only"], true);
    let binds: Vec<&str> = v["docker"]["create"]["HostConfig"]["Mounts"].as_array().expect("binds").iter().filter_map(|m| m["Target"].as_str()).collect();
    assert_eq!(binds, vec!["/data"]);
    assert_eq!(v["docker"]["create"]["HostConfig"]["NetworkMode"], "none");
}
