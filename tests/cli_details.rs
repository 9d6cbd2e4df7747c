//! Small things of the command line a newcomer meets first: `--zone` errors that name the
//! bad part, `plan` with nothing to run showing the project's sandbox, `doctor` without
//! another platform's caveats, `--version` with the commit, and completions without the
//! internal subcommands.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A project with a read-only zone `data`, a writable zone `out` whose writes ask, and a
/// worker.
fn project() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    for d in ["data", "out", "workers"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    fs::write(
        dir.join("workcell.yaml"),
        "sandbox:\n  network: false\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw, approval: {write: ask, delete: blocked}}\n\
         defaults:\n  backend: none\n  limits: {timeout: 30s, memory: 512MiB}\n",
    )
    .unwrap();
    fs::write(dir.join("workers/reader.worker"), "---\nsandbox:\n  zones:\n    - {name: data, mode: ro}\n---\nRead.\n").unwrap();
    (tmp, dir)
}

fn workcell(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env("HOME", dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!("{args:?} -> {:?}\n{}", out.status.code(), String::from_utf8_lossy(&out.stderr));
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn plan_without_worker_or_command_shows_the_project_sandbox() {
    let (_t, dir) = project();
    let out = workcell(&dir, &["plan"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains(&format!("project:  {}", dir.join("workcell.yaml").display())), "{text}");
    let data = text.lines().find(|l| l.trim_start().starts_with("/data")).unwrap_or_else(|| panic!("{text}"));
    assert!(data.contains(&format!("ro <- {}", dir.join("data").display())) && data.contains("reads pre-approved"), "{data}");
    let out_zone = text.lines().find(|l| l.trim_start().starts_with("/out")).unwrap_or_else(|| panic!("{text}"));
    assert!(out_zone.contains("rw <- ") && out_zone.contains("writes ask") && out_zone.contains("deletes blocked"), "{out_zone}");
    assert!(text.contains("network:  off"), "{text}");
    assert!(text.contains("limits:   timeout 30s, memory 512 MiB"), "{text}");
    assert!(text.contains("workers:  reader"), "{text}");
    assert!(!text.contains("command:"), "no stand-in command is shown: {text}");

    let out = workcell(&dir, &["plan", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let zones = v["zones"].as_array().unwrap();
    assert_eq!(zones.len(), 2, "{v}");
    assert!(zones.iter().any(|z| z["mount_point"] == "/out" && z["mode"] == "rw"), "{v}");
    assert_eq!(v["network"], "off", "{v}");

    // A rendering is of a run: it still needs a command.
    let out = workcell(&dir, &["plan", "--backend", "bwrap"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nothing to run"), "{}", stderr(&out));
}
