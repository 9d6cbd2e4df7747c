//! The plan-rendering fixture: plans built with `LaunchPlan::build` from temporary projects,
//! with the host-dependent parts (system layout, user, run id, temp paths) fixed or redacted
//! so that renderer snapshots (bwrap argv, Seatbelt profile) are the same on every machine.

use std::path::PathBuf;

use workcell::config::Project;
use workcell::plan::{LaunchPlan, Overrides, SystemEntry, UserSpec};

/// A temporary project directory with `in/` and `out/`, a config and optional workers.
pub struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new(config: &str, workers: &[(&str, &str)]) -> Fixture {
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

    pub fn root(&self) -> PathBuf {
        std::fs::canonicalize(self.dir.path()).expect("canonical tempdir")
    }

    /// The plan of the project (or of `worker`) running `sh -c 'ls /'` unless `ov` names a
    /// command, normalised.
    pub fn plan(&self, worker: Option<&str>, ov: Overrides) -> LaunchPlan {
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
    pub fn redact(&self, text: &str) -> String {
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
    plan.user = UserSpec { uid: 1000, gid: 1000 };
    plan.system = vec![
        SystemEntry::Bind { path: "/usr".into() },
        SystemEntry::Symlink { path: "/bin".into(), target: "usr/bin".into() },
        SystemEntry::Symlink { path: "/lib".into(), target: "usr/lib".into() },
        SystemEntry::Bind { path: "/etc/ssl".into() },
    ];
}

/// Zones `in` (ro) and `out` (rw, writes and deletes pre-approved).
pub const ZONES: &str = r#"
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

/// The whole project directory, writable.
pub const ROOT_FORM: &str = r#"
sandbox:
  root:
    root: .
    readonly: false
"#;

/// A child worker that declares only `in`, read-only.
pub const CHILD_WORKER: &str = r#"---
description: reads only
sandbox:
  zones:
    - name: in
      mode: ro
command: ["cat", "/in/a.txt"]
---
Read the input.
"#;
