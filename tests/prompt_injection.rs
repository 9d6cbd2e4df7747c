//! Text a worker chooses (directory names) printed for a person to act on: the expansion
//! summary's `zones:` lines must say what was granted, whatever the directory is called.

use std::sync::Arc;

use workcell::config::{BackendChoice, Project};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::ApprovalMode;
use workcell::tools::service::Caller;

#[test]
fn the_expansion_summary_cannot_be_made_to_grant_more_than_was_granted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    std::fs::create_dir(root.join("out")).expect("mkdir");
    // A directory the worker created in its own zone, named so that the pasted line, read as
    // YAML, would end the mapping and turn the rest into a comment: `{path: …/d, mode: rw} #`.
    let crafted = root.join("out/d, mode: rw} #");
    std::fs::create_dir(&crafted).expect("mkdir");
    std::fs::create_dir(root.join("out/d")).expect("mkdir");
    let yaml = "sandbox:\n  dynamic: true\n  zones:\n    out: {path: ./out, mode: rw}\n";
    let project = Arc::new(Project::from_text(yaml, &root.join("workcell.yaml"), &root).expect("project"));
    // The tool service as a run makes it (approvals per mode, the project's audit log).
    let service =
        BackendRunner::new(project.clone(), BackendChoice::None, ApprovalMode::ApproveAll).service_for(Caller::default(), project.sandbox.clone(), "r");
    service.request_access(&crafted.to_string_lossy(), "ro").expect("granted");
    let summary = service.expansion_summary().expect("summary");
    let lines: String = summary.lines().filter(|l| l.starts_with("    ")).map(|l| format!("{l}\n")).collect();
    let pasted = Project::from_text(&format!("sandbox:\n  zones:\n{lines}"), &root.join("workcell.yaml"), &root).expect("the pasted lines parse");
    assert!(pasted.sandbox.resolve("/granted-1").is_ok(), "{summary}");
    assert!(pasted.sandbox.resolve_for_write("/granted-1/new.txt").is_err(), "the pasted line grants write access: {summary}");
    std::fs::write(crafted.join("inside.txt"), "x").expect("write");
    assert!(pasted.sandbox.resolve("/granted-1/inside.txt").is_ok(), "the pasted line names another directory: {summary}");
}

/// `find out | workcell check --stdin`: the names come from files a worker created, and each
/// verdict line quotes its path back.
#[test]
fn check_never_echoes_a_path_with_control_characters() {
    use std::io::Write;
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(tmp.path().join("out")).expect("mkdir");
    std::fs::write(tmp.path().join("workcell.yaml"), "sandbox:\n  zones:\n    out: {path: ./out, mode: rw}\n").expect("write");
    for args in
        [&["check", "--stdin"][..], &["check", "--write", "--stdin"], &["check", "--json", "--stdin"], &["check", "/out/a\u{1b}[2Jb", "/out/ok\u{202e}txt"]]
    {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_workcell"))
            .args(args)
            .current_dir(tmp.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("workcell");
        child.stdin.take().expect("stdin").write_all("/out/a\u{1b}[2Jb\n/out/ok\u{202e}txt\n/out/x\u{7}\n".as_bytes()).expect("write");
        let out = child.wait_with_output().expect("wait");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}') && !text.contains('\u{7}'), "{args:?}: {text:?}");
        assert!(text.contains("\\e[2J") || text.contains("\\u{202e}") || text.contains("\\u202e"), "{args:?}: {text:?}");
    }
}
