//! `mounts:` entries name their zones after the mount point without its leading `/` (the
//! docs/configuration.md, "Zone names of `mounts:`"): a worker asks for `data/raw`, not `raw`.

use std::fs;

use workcell::config::Project;

fn project(worker_zone: &str) -> Project {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    for d in ["raw", "docs", "workers"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    let config = "sandbox:\n  mounts:\n    - {host: ./raw, at: /data/raw}\n    - {host: ./docs, at: /docs}\n";
    fs::write(dir.join("workers/w.worker"), format!("---\ncommand: [\"true\"]\nsandbox:\n  zones: [{{name: {worker_zone}, mode: ro}}]\n---\n")).unwrap();
    Project::from_text(config, &dir.join("workcell.yaml"), &dir).expect("project loads")
}

#[test]
fn a_mount_point_is_its_zone_name() {
    let p = project("data/raw");
    let names: Vec<&str> = p.sandbox.mounts().iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["data/raw", "docs"]);
    let w = p.worker("w").expect("the worker asking for data/raw loads");
    assert_eq!(w.sandbox.readable_roots(), ["/data/raw"]);
}

#[test]
fn the_host_directory_name_is_not_a_zone_name() {
    let p = project("raw");
    let e = p.worker("w").expect_err("no zone is called raw");
    assert!(e.to_string().contains("defined zones: data/raw, docs"), "{e}");
}
