//! The example policies in policies/ stay valid configuration.

use std::path::Path;

use workcell::config::Project;

/// The policy `name` loaded over a temp project holding `dirs`; the temp dir is returned with
/// it so that it lives (and is removed) with the test.
fn load(name: &str, dirs: &[&str]) -> (tempfile::TempDir, Project) {
    let tmp = tempfile::tempdir().expect("tempdir");
    for d in dirs {
        std::fs::create_dir_all(tmp.path().join(d)).expect("mkdir");
    }
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies").join(name)).expect("read policy");
    let p = Project::from_text(&text, &tmp.path().join("workcell.yaml"), tmp.path()).unwrap_or_else(|e| panic!("{name}: {e}"));
    (tmp, p)
}

#[test]
fn agent_policy_is_valid() {
    let (_tmp, p) = load("agent.yaml", &["src", "docs", ".agent-scratch"]);
    assert!(p.sandbox.can_write("/src/main.rs"));
    assert!(!p.sandbox.can_write("/docs/readme.md"));
    // Writes to /src ask, so Docker mounts it read-only; only /scratch is bound read-write.
    let rw: Vec<_> = workcell::plan::mounts_for(&p.sandbox).into_iter().filter(|m| !m.read_only).map(|m| m.target).collect();
    assert_eq!(rw, vec!["/scratch".to_string()]);
}

#[test]
fn pdf_pipeline_policy_is_valid() {
    let (_tmp, p) = load("pdf-pipeline.yaml", &["inbox", "results"]);
    assert!(p.sandbox.check_suffix("/inbox/a.PDF").is_ok());
    assert!(p.sandbox.check_suffix("/inbox/a.exe").is_err());
    assert!(!p.sandbox.network());
}

#[test]
fn ci_job_policy_is_valid() {
    let (_tmp, p) = load("ci-job.yaml", &["checkout", "artifacts"]);
    assert_eq!(p.sandbox.writable_roots(), vec!["/artifacts".to_string()]);
    assert!(p.sandbox.network());
}
