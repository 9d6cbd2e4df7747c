//! The tool service never writes or deletes a file the host runs (`hostrun`): git hooks and
//! config, `.envrc`, editor settings, at any depth, whatever name the worker uses for it (an
//! in-zone link, a renamed git directory, a link to `.git/hooks`). Each refusal leaves the
//! host file as it was, says which entry protects it and how a person allows it; reads stay
//! allowed. The service is host-side: these calls are the ones the broker and MCP make.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};
use workcell::audit::AuditLog;
use workcell::config::{BackendChoice, Project};
use workcell::run::runner::BackendRunner;
use workcell::tools::approval::{ApprovalMode, Approver};
use workcell::tools::service::{Caller, ToolError, ToolService};

const CONFIG: &str = "sandbox:\n  protect: ['build/*.sh']\n  zones:\n    repo: {path: ./repo, mode: rw, approval: {write: preApproved, delete: preApproved}}\n";
const CONFIG_TEXT: &str = "[core]\n\trepositoryformatversion = 0\n";
const HOOK_TEXT: &str = "#!/bin/sh\nexit 0\n";

/// `repo/` with a git directory (`HEAD`, `objects/`, `refs/`, `config`, `hooks/`), a nested
/// repository `sub/.git`, `.envrc` and `.vscode/settings.json`.
fn setup() -> (tempfile::TempDir, Arc<ToolService>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("repo");
    for git in [repo.join(".git"), repo.join("sub/.git")] {
        for d in ["objects", "refs/heads", "hooks"] {
            std::fs::create_dir_all(git.join(d)).expect("mkdir");
        }
        std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").expect("write");
        std::fs::write(git.join("config"), CONFIG_TEXT).expect("write");
    }
    std::fs::write(repo.join(".git/hooks/pre-commit"), HOOK_TEXT).expect("write");
    std::fs::set_permissions(repo.join(".git/hooks/pre-commit"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::write(repo.join(".envrc"), "export A=1\n").expect("write");
    std::fs::create_dir_all(repo.join(".vscode")).expect("mkdir");
    std::fs::write(repo.join(".vscode/settings.json"), "{}\n").expect("write");
    std::fs::write(repo.join("README.md"), "hello\n").expect("write");
    let project = Arc::new(Project::from_text(CONFIG, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project"));
    let service = service_for(&project, project.sandbox.clone());
    (tmp, service)
}

fn service_for(project: &Arc<Project>, sandbox: workcell::sandbox::Sandbox) -> Arc<ToolService> {
    let mode = ApprovalMode::ApproveAll;
    let runner = Arc::new(BackendRunner::new(project.clone(), BackendChoice::None, mode));
    Arc::new(ToolService::new(project.clone(), Caller::default(), sandbox, Approver::new(mode, None), AuditLog::new(&project.dir, "test-run"), runner))
}

/// Every file beneath `dir` with its content and mode, to compare before and after.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            let meta = std::fs::symlink_metadata(&p).expect("meta");
            let rel = p.strip_prefix(dir).expect("inside").to_string_lossy().into_owned();
            if meta.is_dir() {
                out.push((format!("{rel}/"), Vec::new(), meta.mode()));
                stack.push(p);
            } else if meta.is_symlink() {
                out.push((rel, std::fs::read_link(&p).expect("link").to_string_lossy().into_owned().into_bytes(), 0));
            } else {
                out.push((rel, std::fs::read(&p).expect("read"), meta.mode()));
            }
        }
    }
    out.sort();
    out
}

/// `tool` with `args` is refused as a protected file covered by `entry`, and nothing on the
/// host changed.
fn assert_refused(service: &ToolService, repo: &Path, tool: &str, args: Value, entry: &str) {
    let before = snapshot(repo);
    let err = service.call(tool, args.clone()).expect_err(&format!("{tool} {args} must be refused"));
    let text = err.to_string();
    assert!(matches!(err, ToolError::Sandbox(_)), "{text}");
    assert_eq!(err.kind(), "protected", "{tool} {args}: {text}");
    assert!(text.contains(&format!("protected by the entry '{entry}'")), "{tool} {args}: {text}");
    assert!(text.contains(&format!("unprotect: ['{entry}']")) && text.contains("workcell.yaml"), "says how to allow it: {text}");
    assert!(text.contains("git runs hooks and config"), "says why: {text}");
    assert_eq!(snapshot(repo), before, "{tool} {args} changed nothing on the host");
}

#[test]
fn protected_paths_are_refused_at_any_depth() {
    let (tmp, service) = setup();
    let repo = tmp.path().join("repo");
    for (path, entry) in [
        ("/repo/.git/config", ".git/config"),
        ("/repo/.git/hooks/pre-commit", ".git/hooks"),
        ("/repo/.git/hooks/post-checkout", ".git/hooks"),
        ("/repo/sub/.git/config", ".git/config"),
        ("/repo/sub/.git/hooks/pre-commit", ".git/hooks"),
        ("/repo/.envrc", ".envrc"),
        ("/repo/deep/er/.envrc", ".envrc"),
        ("/repo/.vscode/settings.json", ".vscode"),
        ("/repo/.vscode/tasks.json", ".vscode"),
        ("/repo/new/.vscode/tasks.json", ".vscode"),
        ("/repo/new/.git/config", ".git/config"),
        ("/repo/home/.bashrc", ".bashrc"),
        ("/repo/sub/.git2/x/.git", ".git"),
        // Entries with wildcards (matched by globs, not by names), a user's among them.
        ("/repo/.git/modules/s/hooks/pre-commit", ".git/modules/**/hooks"),
        ("/repo/sub/.git/modules/s/t/config", ".git/modules/**/config"),
        ("/repo/.git/worktrees/w/commondir", ".git/worktrees/*/commondir"),
        ("/repo/deep/build/run.sh", "build/*.sh"),
        ("/repo/a/b/.bashrc", ".bashrc"),
        // A case-insensitive file system (macOS) takes these for `.git/config`, `.vscode`.
        ("/repo/.git/CONFIG", ".git/config"),
        ("/repo/.Git/Hooks/pre-commit", ".git/hooks"),
        ("/repo/.VSCode/tasks.json", ".vscode"),
        ("/repo/.Git/Modules/S/Hooks/x", ".git/modules/**/hooks"),
        ("/repo/.GIT/worktrees/W/COMMONDIR", ".git/worktrees/*/commondir"),
    ] {
        assert_refused(&service, &repo, "write_file", json!({"path": path, "content": "[core]\n\tfsmonitor = touch /tmp/pwned\n"}), entry);
    }
    // Nothing was created on the way: no `new/`, `deep/`, `home/`.
    for p in ["new", "deep", "home", "sub/.git2", "a", ".git/modules", ".git/worktrees", "sub/.git/modules"] {
        assert!(!repo.join(p).exists(), "{p} was not created");
    }
    assert_refused(&service, &repo, "edit_file", json!({"path": "/repo/.git/config", "old_text": "= 0", "new_text": "= 0\n\tfsmonitor = x"}), ".git/config");
    assert_refused(&service, &repo, "delete_file", json!({"path": "/repo/.git/hooks/pre-commit"}), ".git/hooks");
    assert_refused(&service, &repo, "delete_file", json!({"path": "/repo/.git/config"}), ".git/config");
    assert_refused(&service, &repo, "delete_file", json!({"path": "/repo/.envrc"}), ".envrc");
    // `.git/hooks` is a directory: delete_file never removes one.
    assert!(service.call("delete_file", json!({"path": "/repo/.git/hooks"})).is_err());
    assert!(repo.join(".git/hooks/pre-commit").exists());
}

#[test]
fn reads_and_the_rest_of_the_repository_stay_usable() {
    let (tmp, service) = setup();
    let repo = tmp.path().join("repo");
    let r = service.call("read_file", json!({"path": "/repo/.git/config"})).expect("reading is allowed");
    assert_eq!(r["content"], CONFIG_TEXT);
    service.call("read_file", json!({"path": "/repo/.git/hooks/pre-commit"})).expect("reading a hook is allowed");
    for path in
        ["/repo/README.md", "/repo/src/main.rs", "/repo/.git/refs/heads/main", "/repo/.git/description", "/repo/config", "/repo/hooks/x", "/repo/.gitignore"]
    {
        service.call("write_file", json!({"path": path, "content": "ok\n"})).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    service.call("delete_file", json!({"path": "/repo/hooks/x"})).expect("an ordinary file");
    assert_eq!(std::fs::read_to_string(repo.join(".git/refs/heads/main")).expect("written"), "ok\n");
}

#[test]
fn other_names_for_a_protected_path_are_refused_too() {
    let (tmp, service) = setup();
    let repo = tmp.path().join("repo");
    std::os::unix::fs::symlink(".git", repo.join("foo")).expect("symlink");
    std::os::unix::fs::symlink(".git/hooks", repo.join("h")).expect("symlink");
    std::os::unix::fs::symlink("../.vscode", repo.join("sub/v")).expect("symlink");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/foo/config", "content": "x"}), ".git/config");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/foo/hooks/pre-commit", "content": "x"}), ".git/hooks");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/h/post-checkout", "content": "x"}), ".git/hooks");
    assert_refused(&service, &repo, "delete_file", json!({"path": "/repo/h/pre-commit"}), ".git/hooks");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/sub/v/tasks.json", "content": "x"}), ".vscode");
    // The refusal names where the file really is.
    let err = service.call("write_file", json!({"path": "/repo/h/post-checkout", "content": "x"})).expect_err("refused");
    assert!(err.to_string().contains("it is '.git/hooks/post-checkout' in zone repo"), "{err}");
    // A link to the config file itself: the write replaces the link, never writes through it.
    std::os::unix::fs::symlink(".git/config", repo.join("cfg")).expect("symlink");
    service.call("edit_file", json!({"path": "/repo/cfg", "old_text": "= 0", "new_text": "= 0\n\tfsmonitor = x"})).expect("the link's own name");
    assert_eq!(std::fs::read_to_string(repo.join(".git/config")).expect("read"), CONFIG_TEXT);
    assert!(std::fs::symlink_metadata(repo.join("cfg")).expect("meta").is_file(), "the link was replaced by a file");
    // Removing the link itself is fine: it is not the hooks directory.
    service.call("delete_file", json!({"path": "/repo/h"})).expect("a link is deleted itself");
    assert!(repo.join(".git/hooks/pre-commit").exists());
}

#[test]
fn a_renamed_git_directory_is_still_a_git_directory() {
    let (tmp, service) = setup();
    let repo = tmp.path().join("repo");
    // The worker moves `.git` aside, asks for a hook, and would move it back afterwards.
    std::fs::rename(repo.join(".git"), repo.join("plain")).expect("rename");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/plain/hooks/pre-commit", "content": "x"}), ".git/hooks");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/plain/config", "content": "x"}), ".git/config");
    // A bare repository anywhere in the zone, too.
    std::fs::rename(repo.join("plain"), repo.join("bare.git")).expect("rename");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/bare.git/hooks/update", "content": "x"}), ".git/hooks");
}

#[test]
fn a_zone_that_is_a_git_directory_protects_its_hooks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let git = tmp.path().join("g");
    for d in ["objects", "refs", "hooks"] {
        std::fs::create_dir_all(git.join(d)).expect("mkdir");
    }
    std::fs::write(git.join("HEAD"), "ref: refs/heads/main\n").expect("write");
    let yaml = "sandbox:\n  zones:\n    g: {path: ./g, mode: rw, approval: {write: preApproved, delete: preApproved}}\n";
    let project = Arc::new(Project::from_text(yaml, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project"));
    let service = service_for(&project, project.sandbox.clone());
    assert_refused(&service, &git, "write_file", json!({"path": "/g/hooks/pre-commit", "content": "x"}), ".git/hooks");
    assert_refused(&service, &git, "write_file", json!({"path": "/g/config", "content": "x"}), ".git/config");
    service.call("write_file", json!({"path": "/g/description", "content": "ok"})).expect("not protected");
}

#[test]
fn paths_pinned_at_launch_are_refused_wherever_they_move() {
    let (tmp, _) = setup();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join(".config/git")).expect("mkdir");
    std::fs::write(repo.join(".config/git/config"), CONFIG_TEXT).expect("write");
    let project = Arc::new(Project::from_text(CONFIG, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project"));
    // What a run pins: the identity of a protected path bound read-only at launch.
    let id = |p: &str| {
        let meta = std::fs::metadata(repo.join(p)).expect("meta");
        (meta.dev(), meta.ino())
    };
    let sandbox = project.sandbox.clone().pinning([
        (id(".config/git"), ".config/git".to_string()),
        (id(".git/config"), ".git/config".to_string()),
        (id(".git/hooks"), ".git/hooks".to_string()),
    ]);
    let service = service_for(&project, sandbox);
    std::fs::rename(repo.join(".config"), repo.join("c")).expect("rename");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/c/git/config", "content": "x"}), ".config/git");
    assert_refused(&service, &repo, "delete_file", json!({"path": "/repo/c/git/config"}), ".config/git");
    // `.git` renamed, and made not to look like a git directory (its `HEAD` and `objects`
    // moved aside), to be put back after the write: the pinned identities still hold.
    std::fs::rename(repo.join(".git"), repo.join("plain")).expect("rename");
    std::fs::rename(repo.join("plain/HEAD"), repo.join("plain/H")).expect("rename");
    std::fs::rename(repo.join("plain/objects"), repo.join("plain/o")).expect("rename");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/plain/config", "content": "x"}), ".git/config");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/plain/hooks/pre-commit", "content": "x"}), ".git/hooks");
}

#[test]
fn a_hard_link_elsewhere_is_replaced_never_written_through() {
    let (tmp, service) = setup();
    let repo = tmp.path().join("repo");
    std::fs::hard_link(repo.join(".git/config"), repo.join("innocent.txt")).expect("link");
    service
        .call("edit_file", json!({"path": "/repo/innocent.txt", "old_text": "= 0", "new_text": "= 0\n\tfsmonitor = touch /tmp/x"}))
        .expect("an ordinary name");
    assert_eq!(std::fs::read_to_string(repo.join(".git/config")).expect("read"), CONFIG_TEXT, "the write replaced the link, not the shared inode");
    assert!(std::fs::read_to_string(repo.join("innocent.txt")).expect("read").contains("fsmonitor"));
}

#[test]
fn unprotected_entries_are_allowed() {
    let (tmp, _) = setup();
    let repo = tmp.path().join("repo");
    let project = Arc::new(Project::from_text(CONFIG, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project"));
    let mut mounts = project.sandbox.mounts().to_vec();
    // What `unprotect: [.envrc]` on the zone gives its mount.
    mounts[0].protection = mounts[0].protection.without(&[".envrc".to_string()]).expect("a default entry");
    let sandbox = workcell::sandbox::Sandbox::new(mounts, workcell::sandbox::Addressing::Zones, false).expect("sandbox");
    let service = service_for(&project, sandbox);
    service.call("write_file", json!({"path": "/repo/.envrc", "content": "export B=2\n"})).expect("turned off for this zone");
    assert_refused(&service, &repo, "write_file", json!({"path": "/repo/.git/config", "content": "x"}), ".git/config");
}

/// Attack: while the tool service writes, another thread keeps exchanging `.git` with an
/// ordinary directory `plain` (one atomic rename(2) each time), so a check that judged a name
/// could be answered for one directory and the write land in the other. Whatever the
/// interleaving, the git directory's config and hooks never change.
#[test]
fn exchanging_git_with_a_plain_directory_during_writes_plants_nothing() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (tmp, service) = setup();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(repo.join("plain")).expect("mkdir");
    let git_id = std::fs::metadata(repo.join(".git")).expect("meta").ino();
    let hooks_before = snapshot(&repo.join(".git/hooks"));
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let flipper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (a, b) = (repo.join(".git"), repo.join("plain"));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(rustix::fs::CWD, &a, rustix::fs::CWD, &b, rustix::fs::RenameFlags::EXCHANGE).expect("exchange");
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (mut ok, mut refused) = (0, 0);
    let started = std::time::Instant::now();
    for i in 0..3000 {
        if started.elapsed() > std::time::Duration::from_secs(8) {
            break;
        }
        for path in ["/repo/plain/config", "/repo/.git/config", "/repo/plain/hooks/pre-commit", "/repo/.git/hooks/pre-commit"] {
            match service.write_file(path, &format!("planted {i}\n")) {
                Ok(_) => ok += 1,
                Err(_) => refused += 1,
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().expect("flipper");
    let git = if std::fs::metadata(repo.join(".git")).expect("meta").ino() == git_id { repo.join(".git") } else { repo.join("plain") };
    eprintln!("{} swaps; writes ok {ok}, refused {refused}", swaps.load(Ordering::Relaxed));
    assert_eq!(std::fs::read_to_string(git.join("config")).expect("config"), CONFIG_TEXT, "the git directory's config changed");
    assert_eq!(snapshot(&git.join("hooks")), hooks_before, "a hook landed in the git directory");
    assert!(swaps.load(Ordering::Relaxed) > 100, "the flipper barely ran");
    assert!(ok > 0 && refused > 0, "both outcomes happened: ok {ok}, refused {refused}");
}

/// A directory granted during the session (`request_access`) is protected like a zone.
#[test]
fn a_granted_directory_is_protected_too() {
    let (tmp, _) = setup();
    let yaml = "sandbox:\n  dynamic: true\n  zones:\n    repo: {path: ./repo, mode: rw, approval: {write: preApproved, delete: preApproved}}\n";
    let other = tmp.path().join("other");
    std::fs::create_dir_all(other.join(".git/hooks")).expect("mkdir");
    std::fs::write(other.join(".git/config"), CONFIG_TEXT).expect("write");
    let project = Arc::new(Project::from_text(yaml, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project"));
    let service = service_for(&project, project.sandbox.clone());
    let granted = service.call("request_access", json!({"path": other.to_str().expect("utf8"), "mode": "rw"})).expect("approved");
    let zone = granted["granted"].as_str().expect("zone").to_string();
    assert_refused(&service, &other, "write_file", json!({"path": format!("{zone}/.git/config"), "content": "x"}), ".git/config");
    assert_refused(&service, &other, "write_file", json!({"path": format!("{zone}/.envrc"), "content": "x"}), ".envrc");
    service.call("write_file", json!({"path": format!("{zone}/ok.txt"), "content": "ok"})).expect("an ordinary file");
}
