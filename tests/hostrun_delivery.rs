//! `delivery: copy` never publishes a file the host runs: a hostile worker writes an
//! executable `.git/hooks/pre-commit`, adds `core.fsmonitor` to `.git/config`, makes a nested
//! repository's config, a bare repository's hook, `.envrc` and `.vscode/tasks.json`, and
//! deletes a hook; none of it reaches the host, the summary (`--json`, text, audit) names each,
//! and the host's own `git commit` afterwards runs nothing of the worker's. The worker's own
//! commit, made inside the sandbox, is published. The same body runs on bwrap and docker.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

struct Setup {
    _tmp: tempfile::TempDir,
    proj: PathBuf,
    repo: PathBuf,
    marker: PathBuf,
}

use support::host_git as git;

fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    let proj = root.join("proj");
    let repo = proj.join("repo");
    std::fs::create_dir_all(&repo).expect("mkdir");
    assert!(git(&repo, &["init", "-q", "-b", "main"]).status.success());
    std::fs::write(repo.join("README.md"), "hello\n").expect("write");
    assert!(git(&repo, &["add", "README.md"]).status.success());
    assert!(git(&repo, &["commit", "-q", "-m", "first"]).status.success());
    std::fs::write(repo.join(".git/hooks/pre-push"), "#!/bin/sh\nexit 0\n").expect("write");
    support::write_project(
        &proj,
        "sandbox:\n  zones:\n    repo: {path: ./repo, mode: rw, delivery: copy, approval: {write: preApproved, delete: preApproved}}\n",
        &[],
    );
    support::give_to_worker(&proj);
    Setup { marker: root.join("MARKER"), _tmp: tmp, proj, repo }
}

/// What the worker does in its copy of the repository.
fn hostile_script(marker: &Path) -> String {
    let m = marker.display();
    format!(
        r#"set -e; cd /repo
printf '#!/bin/sh\ntouch {m}\n' > .git/hooks/pre-commit; chmod 755 .git/hooks/pre-commit
printf '\tfsmonitor = "touch {m}"\n' >> .git/config
rm .git/hooks/pre-push
mkdir -p sub/.git/objects sub/.git/refs sub/.git/hooks; echo 'ref: refs/heads/main' > sub/.git/HEAD; printf '[core]\n\tfsmonitor = "touch {m}"\n' > sub/.git/config
mkdir -p other.git/objects other.git/refs other.git/hooks; echo 'ref: refs/heads/main' > other.git/HEAD; printf '#!/bin/sh\ntouch {m}\n' > other.git/hooks/post-update; chmod 755 other.git/hooks/post-update
echo 'touch {m}' > .envrc
mkdir -p .vscode; echo '{{"tasks":[{{"label":"x","command":"touch {m}","runOptions":{{"runOn":"folderOpen"}}}}]}}' > .vscode/tasks.json
echo fine > notes.md
git -c user.name=w -c user.email=w@example.invalid -c core.fsmonitor=false commit -q --no-verify --allow-empty -m 'by the worker'
echo WORKER-DONE"#
    )
}

fn run(s: &Setup, backend: &str, json: bool) -> Output {
    let mut c = Command::new("setsid");
    c.arg("-w").arg(env!("CARGO_BIN_EXE_workcell")).current_dir(&s.proj).env_remove("RUST_LOG").args(["run", "--backend", backend]);
    if json {
        c.arg("--json");
    }
    let out = c.args(["--", "sh", "-c", &hostile_script(&s.marker)]).stdin(Stdio::null()).output().expect("workcell");
    eprintln!("exit {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

const REFUSED: &[(&str, &str, &str)] = &[
    (".git/hooks/pre-commit", "protected", ".git/hooks"),
    (".git/config", "protected", ".git/config"),
    (".git/hooks/pre-push", "protected_delete", ".git/hooks"),
    ("sub/.git/config", "protected", ".git/config"),
    ("sub/.git/hooks/", "protected", ".git/hooks"),
    ("other.git/hooks/post-update", "protected", ".git/hooks"),
    (".envrc", "protected", ".envrc"),
    (".vscode/tasks.json", "protected", ".vscode"),
    (".vscode/", "protected", ".vscode"),
];

fn assert_host_untouched(s: &Setup, config_before: &str) {
    assert_eq!(std::fs::read_to_string(s.repo.join(".git/config")).expect("config"), config_before, "host .git/config unchanged");
    assert!(!s.repo.join(".git/hooks/pre-commit").exists(), "no hook published");
    assert!(s.repo.join(".git/hooks/pre-push").exists(), "the deleted hook stays on the host");
    for p in ["sub/.git/config", "other.git/hooks/post-update", ".envrc", ".vscode"] {
        assert!(!s.repo.join(p).exists(), "{p} not published");
    }
    assert_eq!(std::fs::read_to_string(s.repo.join("notes.md")).expect("published"), "fine\n");
    // The worker's commit, made inside the sandbox, reached the host's repository.
    let log = git(&s.repo, &["log", "--format=%s"]);
    assert!(String::from_utf8_lossy(&log.stdout).contains("by the worker"), "{}", String::from_utf8_lossy(&log.stdout));
    // The person's next git commands run nothing of the worker's.
    for args in [&["status"][..], &["checkout", "-q", "-b", "later"], &["add", "notes.md"], &["commit", "-q", "-m", "by the person"]] {
        let out = git(&s.repo, args);
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(!s.marker.exists(), "host git ran something the worker planted");
    // The check can fail: the worker's hook, had it arrived, would have run.
    std::fs::write(s.repo.join(".git/hooks/pre-commit"), format!("#!/bin/sh\ntouch {}\n", s.marker.display())).expect("write");
    assert!(Command::new("chmod").arg("755").arg(s.repo.join(".git/hooks/pre-commit")).status().expect("chmod").success());
    assert!(git(&s.repo, &["commit", "-q", "--allow-empty", "-m", "control"]).status.success());
    assert!(s.marker.exists(), "control: a published hook would have run");
}

fn copy_delivery_withholds_planted_files(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let s = setup();
    let config_before = std::fs::read_to_string(s.repo.join(".git/config")).expect("config");
    let out = run(&s, backend, true);
    // The worker ended well; the withheld files end the run with the held-back status (3).
    assert!(out.status.code() == Some(3) && String::from_utf8_lossy(&out.stdout).contains("WORKER-DONE"));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).unwrap_or_else(|| panic!("no delivery summary in: {err}"));
    let summary = serde_json::from_str::<Value>(line).expect("json")["delivery"].clone();
    let refused = summary["refused"].as_array().expect("refused");
    for (path, reason, entry) in REFUSED {
        let r = refused.iter().find(|r| r["path"] == *path).unwrap_or_else(|| panic!("{path} not named in {summary}"));
        assert_eq!((r["reason"].as_str(), r["entry"].as_str()), (Some(*reason), Some(*entry)), "{r}");
    }
    assert_eq!(summary["published"], true, "{summary}");
    assert!(summary["added"].as_array().expect("added").iter().any(|p| p == "notes.md"), "{summary}");
    for list in ["added", "changed", "deleted", "bits_dropped"] {
        for p in summary[list].as_array().expect("list") {
            let p = p.as_str().unwrap_or("");
            assert!(!REFUSED.iter().any(|(r, _, _)| r.trim_end_matches('/') == p.trim_end_matches('/')), "{p} listed in {list}: {summary}");
        }
    }
    // The audit log records the same refusals.
    let log = std::fs::read_to_string(s.proj.join(".workcell/audit.jsonl")).expect("audit");
    let delivery: Value = log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find(|e| e["event"] == "delivery").expect("delivery event");
    assert_eq!(delivery["summary"]["refused"], summary["refused"]);
    assert_host_untouched(&s, &config_before);
}

#[test]
fn copy_delivery_withholds_planted_files_bwrap() {
    copy_delivery_withholds_planted_files("bwrap");
}

#[test]
fn copy_delivery_withholds_planted_files_docker() {
    copy_delivery_withholds_planted_files("docker");
}

/// The text summary names each withheld file, says why and how to allow it.
#[test]
fn text_summary_names_withheld_files() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let s = setup();
    let out = run(&s, "bwrap", false);
    assert_eq!(out.status.code(), Some(3), "withheld files: the held-back status");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("refused   .git/hooks/pre-commit: a file the host runs (protected by '.git/hooks'"), "{err}");
    assert!(err.contains("unprotect: ['.git/hooks']"), "{err}");
    assert!(err.contains("refused   .git/hooks/pre-push: deleted in the worker's copy"), "{err}");
}

/// A user's entries, with capitals and a wildcard, and the entries in another case: what the
/// worker makes under them in its copy is withheld, by the entry that covers it. A protected
/// manifest's family too (issue 37): `GNUmakefile`, which make reads before the protected
/// `Makefile`, and `web/.npmrc` with a protected `web/package.json` (the npm family holds at any depth).
fn user_entries_in_any_case_are_withheld(backend: &str) {
    if !support::backend_ready(backend) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let proj = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
    std::fs::create_dir_all(proj.join("out")).expect("mkdir");
    support::write_project(
        &proj,
        "sandbox:\n  protect: [Makefile, 'build/*.sh', web/package.json]\n  zones:\n    out: {path: ./out, mode: rw, delivery: copy, approval: {write: preApproved, delete: preApproved}}\n",
        &[],
    );
    support::give_to_worker(&proj);
    let script = "set -e; cd /out; echo evil > MAKEFILE; mkdir -p x/Build .GIT/Hooks; echo evil > x/Build/run.SH; \
                  echo evil > .GIT/Hooks/pre-commit; echo evil > GNUmakefile; mkdir web; echo script-shell=/x > web/.npmrc; \
                  echo fine > notes.md; echo WORKER-DONE";
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .current_dir(&proj)
        .env_remove("RUST_LOG")
        .args(["run", "--backend", backend, "--json", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("workcell");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "withheld files: the held-back status; {err}");
    let line = err.lines().find(|l| l.starts_with("{\"delivery\"")).unwrap_or_else(|| panic!("no delivery summary in: {err}"));
    let summary = serde_json::from_str::<Value>(line).expect("json")["delivery"].clone();
    let refused = summary["refused"].as_array().expect("refused");
    for (path, entry) in
        [("MAKEFILE", "Makefile"), ("x/Build/run.SH", "build/*.sh"), (".GIT/Hooks/", ".git/hooks"), ("GNUmakefile", "GNUmakefile"), ("web/.npmrc", ".npmrc")]
    {
        let r = refused.iter().find(|r| r["path"] == path).unwrap_or_else(|| panic!("{path} not named in {summary}"));
        assert_eq!(r["entry"].as_str(), Some(entry), "{r}");
        assert!(!proj.join("out").join(path).exists(), "{path} published");
    }
    assert_eq!(std::fs::read_to_string(proj.join("out/notes.md")).expect("published"), "fine\n");
}

#[test]
fn user_entries_in_any_case_are_withheld_bwrap() {
    user_entries_in_any_case_are_withheld("bwrap");
}

#[test]
fn user_entries_in_any_case_are_withheld_docker() {
    user_entries_in_any_case_are_withheld("docker");
}
