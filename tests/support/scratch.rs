//! The bases of the tests' scratch directories: [`Project`], the delivery tests' `tmp/proj`
//! with its zone directories and config and the look at `out/`, and [`Root`], the host-side
//! attacks' temp root given to the worker's user. Each test file wraps one in its own
//! `Scratch` (which derefs to it) with its zones, files and ways to run workcell on top.

use std::path::{Path, PathBuf};

use super::write_project;

/// The delivery tests' project (tests/delivery.rs, tests/delivery_review.rs,
/// tests/delivery_publish.rs): `tmp/proj` (canonical) holding the directories `dirs` and
/// `workcell.yaml` = `config`, no workers; dropped with the temp dir.
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

/// The base of the scratch roots of the host-side attacks and the behaviour tests
/// (tests/attack_hostrun.rs, tests/protected_quarantine.rs, tests/sweep_unfinished.rs,
/// tests/hostrun_home.rs, tests/hostrun_home_husky.rs, tests/hostrun_by_tool.rs,
/// tests/behaviour.rs): a canonical temp dir holding the directories `dirs`, then what `fill`
/// puts there, all given to the worker's user; each file's `Scratch` derefs to it.
pub struct Root {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
}

impl Root {
    pub fn new(dirs: &[&str], fill: impl FnOnce(&Path)) -> Root {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        for d in dirs {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        fill(&root);
        super::give_to_worker(&root);
        Root { _dir: dir, root }
    }
}
