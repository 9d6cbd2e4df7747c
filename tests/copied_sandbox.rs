//! `Sandbox::on_copies`, without a backend: the sandbox a run's tool service and nested runs
//! get when a zone is copy-delivered. Reads, writes and deletions act on the copy, never on
//! the host's zone; a derived (child) sandbox keeps the copy; a plan made from it binds the
//! copy read-write as it is and takes no copy of its own (so it publishes nothing itself).

use std::os::fd::AsFd;
use std::path::Path;

use workcell::config::Project;
use workcell::plan::{LaunchPlan, Overrides};
use workcell::sandbox::{CopiedArea, DeriveSpec, Sandbox};

struct Fx {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    copy: std::fs::File,
}

fn fx() -> (Fx, Project) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonical");
    for (p, s) in [("out/x.txt", "host"), ("data/d.txt", "data"), ("copy/x.txt", "copy")] {
        std::fs::create_dir_all(dir.join(p).parent().expect("parent")).expect("mkdir");
        std::fs::write(dir.join(p), s).expect("write");
    }
    let yaml = "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, delivery: copy, approval: {write: preApproved, delete: preApproved}}\n    data: {path: ./data, mode: ro}\n";
    let project = Project::from_text(yaml, &dir.join("workcell.yaml"), &dir).expect("project");
    let copy = std::fs::File::open(dir.join("copy")).expect("open copy");
    (Fx { _tmp: tmp, dir, copy }, project)
}

fn on_copy(sb: &Sandbox, fx: &Fx) -> Sandbox {
    sb.on_copies(&[CopiedArea { sandbox_path: "/out".into(), root: fx.copy.as_fd() }]).expect("on_copies")
}

fn read(sb: &Sandbox, path: &str) -> String {
    sb.read(path, 1000, 0).expect("read").content
}

fn file(dir: &Path, rel: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(rel)).ok()
}

#[test]
fn file_tools_act_on_the_copy() {
    let (fx, project) = fx();
    let sb = on_copy(&project.sandbox, &fx);
    assert!(sb.is_copied("out") && !sb.is_copied("data") && !project.sandbox.is_copied("out"));
    assert_eq!(read(&sb, "/out/x.txt"), "copy");
    assert_eq!(read(&sb, "/data/d.txt"), "data", "other zones stay as they are");
    sb.write("/out/new/w.txt", "written").expect("write");
    sb.edit("/out/x.txt", "copy", "edited").expect("edit");
    assert_eq!(file(&fx.dir, "copy/new/w.txt").as_deref(), Some("written"));
    assert_eq!(file(&fx.dir, "copy/x.txt").as_deref(), Some("edited"));
    sb.delete("/out/x.txt").expect("delete");
    assert_eq!(file(&fx.dir, "copy/x.txt"), None);
    assert_eq!(file(&fx.dir, "out/x.txt").as_deref(), Some("host"), "the host's zone is untouched");
    assert_eq!(file(&fx.dir, "out/new/w.txt"), None);
    // A file the host runs is refused in the copy as in the zone.
    let err = sb.write("/out/.git/hooks/pre-commit", "#!/bin/sh\n").expect_err("protected");
    assert_eq!(err.kind(), "protected", "{err}");
}

#[test]
fn a_child_and_a_plan_keep_the_copy() {
    let (fx, project) = fx();
    let sb = on_copy(&project.sandbox, &fx);
    std::fs::create_dir(fx.dir.join("copy/new")).expect("mkdir");
    let child = sb.derive(&DeriveSpec { allow_write: Some(vec!["/out/new".into()]), ..DeriveSpec::default() }).expect("derive");
    child.write("/out/new/c.txt", "child").expect("child write");
    assert_eq!(file(&fx.dir, "copy/new/c.txt").as_deref(), Some("child"));
    assert_eq!(file(&fx.dir, "out/new/c.txt"), None);
    assert!(child.is_copied("out"));
    // A run in the copied sandbox (a shell command's, a child worker's): no copy of its own,
    // the run's copy bound read-write.
    let ov = Overrides { command: Some(vec!["true".into()]), ..Overrides::default() };
    let plan = LaunchPlan::build(&project, None, &sb, &ov).expect("plan");
    assert!(plan.copies.is_empty(), "{:?}", plan.copies);
    let out = plan.mounts.iter().find(|m| m.target == "/out").expect("/out mounted");
    assert!(!out.read_only && out.source == fx.dir.join("copy"), "{out:?}");
    // The same plan from the host's sandbox copies the zone.
    let plan = LaunchPlan::build(&project, None, &project.sandbox, &ov).expect("plan");
    assert_eq!(plan.copies.len(), 1, "{:?}", plan.copies);
}
