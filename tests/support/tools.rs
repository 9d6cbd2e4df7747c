//! Host tools a test needs besides its backend: programs (socat, stunnel, sshd, …) and the
//! Python packages of the tests' clients (`mcp`, `pyte`, `kubernetes-validate`).
//! `bash .ci/test` installs all of them (the Debian packages as root; the Python packages into
//! the checkout's `.venv/`). One gate for every one: a missing tool fails the test under `CI`
//! (`.ci/run` sets it: nothing may be skipped there), and elsewhere skips it with a note that
//! names the tool and how to get it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Python that runs the tests' host-side scripts: `$WORKCELL_TEST_PYTHON`, else the
/// checkout's `.venv/` (which `bash .ci/test` makes and fills), else `python3` on `PATH`.
/// (A `python3` run inside a sandbox is the sandbox's own and stays `python3`.)
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("WORKCELL_TEST_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python3");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

/// Whether [`python`] imports every module of `modules` (import names: `mcp`, `pyte`,
/// `kubernetes_validate`, `yaml`, `jsonschema`). Missing: see the module's gate.
pub fn python_ready(modules: &[&str]) -> bool {
    let python = python();
    let imports = Command::new(&python)
        .arg("-c")
        .arg(format!("import {}", modules.join(", ")))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    imports
        || missing(
            &format!("the Python module(s) {} in {}", modules.join(", "), python.display()),
            "`bash .ci/test` installs the tests' Python packages into .venv/ (or set WORKCELL_TEST_PYTHON to a Python that has them)",
        )
}

/// Whether the program `program` (a name on `PATH`, or an absolute path) is here; `package` is
/// the Debian package that has it. Missing: see the module's gate.
pub fn program_ready(program: &str, package: &str) -> bool {
    let found = if program.starts_with('/') {
        Path::new(program).exists()
    } else {
        Command::new("sh").args(["-c", &format!("command -v {program}")]).stdout(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    found || missing(program, &format!("`bash .ci/test` installs it as root, or `apt-get install {package}`"))
}

/// The gate: a failure under `CI`, else a skip with a note. Returns `false` (not ready).
fn missing(what: &str, how: &str) -> bool {
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("CI is set but this test needs {what}, which is missing: {how}");
    }
    eprintln!("note: skipping a test that needs {what}, which is missing: {how}; with CI set this is a failure");
    false
}
