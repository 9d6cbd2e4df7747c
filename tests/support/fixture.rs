//! The sandbox-core fixture: one host tree in a tempdir, and a project over it in each of
//! the four config forms (used by the tests that call `Sandbox` directly, no backend).
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use workcell::config::Project;

/// Which config form a fixture project uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Zones,
    Paths,
    Root,
    Mounts,
}

pub struct Fx {
    pub tmp: tempfile::TempDir,
    /// Canonical tempdir path (host paths the sandbox sees are canonical).
    pub dir: PathBuf,
}

fn write(p: &Path, s: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, s).unwrap();
}

impl Fx {
    /// The host tree:
    ///
    /// ```text
    /// outside/secret.txt           never reachable
    /// data/ file.txt a.txt notes.MD x.PDF big.txt sub/deep.txt
    ///       link_out -> ../outside            (dir symlink leaving the mount)
    ///       link_file_out.txt -> ../outside/secret.txt
    ///       link_in -> sub                    (relative, stays inside)
    ///       link_in_file.txt -> file.txt
    ///       abs_in.txt -> <abs>/data/file.txt (absolute, even though it points inside)
    /// out/  x.txt link_out -> ../outside
    /// special/ file.txt
    /// proj/ src/main.rs docs/readme.md big.txt link_out -> ../outside link_in -> src
    /// ```
    pub fn new() -> Fx {
        let tmp = tempfile::tempdir().unwrap();
        let dir = fs::canonicalize(tmp.path()).unwrap();
        let d = |p: &str| dir.join(p);
        write(&d("outside/secret.txt"), "TOP SECRET");
        write(&d("data/file.txt"), "hello from data");
        write(&d("data/a.txt"), "a");
        write(&d("data/notes.MD"), "# notes");
        write(&d("data/x.PDF"), "%PDF");
        write(&d("data/big.txt"), &"x".repeat(500));
        write(&d("data/sub/deep.txt"), "deep");
        symlink("../outside", d("data/link_out")).unwrap();
        symlink("../outside/secret.txt", d("data/link_file_out.txt")).unwrap();
        symlink("sub", d("data/link_in")).unwrap();
        symlink("file.txt", d("data/link_in_file.txt")).unwrap();
        symlink(d("data/file.txt"), d("data/abs_in.txt")).unwrap();
        write(&d("out/x.txt"), "x");
        symlink("../outside", d("out/link_out")).unwrap();
        write(&d("special/file.txt"), "special");
        write(&d("proj/src/main.rs"), "fn main() {}");
        write(&d("proj/docs/readme.md"), "readme");
        write(&d("proj/big.txt"), &"y".repeat(500));
        symlink("../outside", d("proj/link_out")).unwrap();
        symlink("src", d("proj/link_in")).unwrap();
        Fx { tmp, dir }
    }

    pub fn host(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    pub fn yaml(form: Form) -> &'static str {
        match form {
            Form::Zones => {
                "sandbox:\n  zones:\n    data:\n      path: ./data\n      mode: ro\n      suffixes: [.txt, .MD]\n      max_file_bytes: 100\n    out:\n      path: ./out\n      mode: rw\n      max_file_bytes: 1000\n      approval: {write: preApproved, delete: preApproved}\n    special:\n      path: ./special\n"
            }
            Form::Paths => {
                "sandbox:\n  paths:\n    docs:\n      root: ./data\n      mode: ro\n      suffixes: [txt, md]\n      max_file_bytes: 100\n    out:\n      root: ./out\n      mode: rw\n      write_approval: false\n"
            }
            Form::Root => "sandbox:\n  root:\n    root: ./proj\n    readonly: false\n    max_file_bytes: 100\n",
            Form::Mounts => {
                "sandbox:\n  mounts:\n    - {host: ./data, at: /data, mode: ro, max_file_bytes: 100}\n    - {host: ./out, at: /out, mode: rw}\n    - {host: ./special, at: /srv/special, mode: ro}\n"
            }
        }
    }

    pub fn project_text(&self, text: &str) -> Project {
        Project::from_text(text, &self.dir.join("workcell.yaml"), &self.dir).unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn project(&self, form: Form) -> Project {
        self.project_text(Self::yaml(form))
    }
}

/// Replaces the fixture's host directory in `s` with `[TMP]`.
pub fn redact(s: &str, dir: &Path) -> String {
    s.replace(&dir.display().to_string(), "[TMP]")
}
