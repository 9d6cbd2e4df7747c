//! The base of the delivery tests' scratch projects (tests/delivery.rs,
//! tests/delivery_review.rs): `tmp/proj` with its zone directories and its config, and the
//! look at `out/`. Each test file wraps it in its own `Scratch` (derefs to [`Project`]) with
//! its zones, config and ways to run workcell on top.

use std::path::PathBuf;

use super::write_project;

/// `tmp/proj` (canonical) holding the directories `dirs` and `workcell.yaml` = `config`, no
/// workers; dropped with the temp dir.
pub struct Project {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
}

impl Project {
    pub fn new(dirs: &[&str], config: &str) -> Project {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
        for d in dirs {
            std::fs::create_dir_all(dir.join(d)).unwrap_or_else(|e| panic!("mkdir {d}: {e}"));
        }
        write_project(&dir, config, &[]);
        Project { _tmp: tmp, dir }
    }

    /// `out/NAME` in the project.
    pub fn out(&self, name: &str) -> PathBuf {
        self.dir.join("out").join(name)
    }

    /// The names in `out/`, sorted.
    pub fn listing(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.join("out")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }
}
