//! One identity per worker, in the sandbox core and the tool service: a root workcell
//! acting for a worker (uid 1000 here) reads, writes, lists, deletes, creates grants, opens
//! attachments and requested directories exactly as that worker's own commands could, and
//! what it creates is the worker's. Each test first shows that workcell's own (root's)
//! rights would have done it, so the refusal is the identity's doing. Only as root (as CI
//! runs): a normal user cannot make the root-owned fixtures.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use workcell::audit::AuditLog;
use workcell::config::{BackendChoice, Project};
use workcell::plan::UserSpec;
use workcell::run::runner::BackendRunner;
use workcell::sandbox::{DeriveSpec, Sandbox};
use workcell::tools::approval::{ApprovalMode, Approver};
use workcell::tools::service::{Caller, ToolService};

const WORKER: UserSpec = UserSpec { uid: support::TEST_WORKER_UID, gid: support::TEST_WORKER_UID };

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).expect("chown");
}

fn mode(path: &Path, m: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(m)).expect("chmod");
}

/// A file owned by `uid:gid` with mode `m`.
fn file(path: &Path, text: &str, uid: u32, gid: u32, m: u32) {
    std::fs::write(path, text).expect("write");
    chown(path, uid, gid);
    mode(path, m);
}

/// A project whose zone `z` (rw, pre-approved) is the worker's, holding root's files:
/// `secret.txt` (0600), `group.txt` (root:worker 0640), `link.txt` → `secret.txt`,
/// `hard.txt` (a hard link to `secret.txt`), `rootdir/` (0755, with `f.txt` 0644),
/// `private/` (0700, with `f.txt`), `passage/` (0711, with `pub.txt` 0644), and the
/// worker's `own.txt` (0600).
fn project(extra: &str) -> (tempfile::TempDir, Arc<Project>) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let z = tmp.path().join("z");
    for d in ["z", "z/rootdir", "z/private", "z/passage"] {
        std::fs::create_dir(tmp.path().join(d)).expect("mkdir");
    }
    file(&z.join("secret.txt"), "ROOT-ONLY-SECRET", 0, 0, 0o600);
    file(&z.join("group.txt"), "for the worker's group", 0, WORKER.gid, 0o640);
    std::os::unix::fs::symlink("secret.txt", z.join("link.txt")).expect("symlink");
    std::fs::hard_link(z.join("secret.txt"), z.join("hard.txt")).expect("hard link");
    file(&z.join("rootdir/f.txt"), "root's", 0, 0, 0o644);
    file(&z.join("private/f.txt"), "private", 0, 0, 0o644);
    file(&z.join("passage/pub.txt"), "public", 0, 0, 0o644);
    file(&z.join("own.txt"), "the worker's", WORKER.uid, WORKER.gid, 0o600);
    mode(&z.join("private"), 0o700);
    mode(&z.join("passage"), 0o711);
    chown(&z, WORKER.uid, WORKER.gid);
    let yaml = format!("sandbox:\n{extra}  zones:\n    z: {{path: ./z, mode: rw, approval: {{write: preApproved, delete: preApproved}}}}\n");
    let project = Arc::new(Project::from_text(&yaml, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project"));
    (tmp, project)
}

fn as_worker(p: &Project) -> Sandbox {
    p.sandbox.clone().acting_as(WORKER)
}

#[test]
fn reads_and_listings_are_the_workers() {
    if !is_root() {
        return eprintln!("skipped: needs root");
    }
    let (_tmp, p) = project("");
    let root = p.sandbox.clone();
    assert_eq!(root.read("/z/secret.txt", 100, 0).expect("root reads it").content, "ROOT-ONLY-SECRET");
    let sb = as_worker(&p);
    for path in ["/z/secret.txt", "/z/link.txt", "/z/hard.txt", "/z/private/f.txt"] {
        let e = sb.read(path, 100, 0).expect_err(path);
        assert_eq!(e.kind(), "permission_denied", "{path}: {e}");
        assert!(e.to_string().contains("(1000:1000)") && !e.to_string().contains("SECRET"), "{e}");
        assert_eq!(sb.open_file(path).expect_err(path).kind(), "permission_denied", "attachments are opened as the worker: {path}");
    }
    assert_eq!(sb.check_edit("/z/secret.txt", "ROOT").expect_err("edit").kind(), "permission_denied");
    assert_eq!(sb.stat("/z/private/f.txt").expect_err("stat").kind(), "permission_denied");
    // What the worker may read, it reads: its own file, its group's, a known name in 0711.
    assert_eq!(sb.read("/z/own.txt", 100, 0).expect("own").content, "the worker's");
    assert_eq!(sb.read("/z/group.txt", 100, 0).expect("group").content, "for the worker's group");
    assert_eq!(sb.read("/z/passage/pub.txt", 100, 0).expect("0711").content, "public");
    // Directories it may not list are named, not listed.
    let l = sb.list("/z", "**").expect("list");
    assert!(!l.entries.iter().any(|e| e.contains("private/f.txt") || e.contains("passage/pub.txt")), "{l:?}");
    assert!(l.unreadable.iter().any(|u| u.starts_with("/z/private/")) && l.unreadable.iter().any(|u| u.starts_with("/z/passage/")), "{l:?}");
    assert!(root.list("/z", "**").expect("root lists").entries.iter().any(|e| e == "/z/private/f.txt"));
}

#[test]
fn writes_deletes_and_their_files_are_the_workers() {
    if !is_root() {
        return eprintln!("skipped: needs root");
    }
    let (tmp, p) = project("");
    let z = tmp.path().join("z");
    let sb = as_worker(&p);
    sb.write("/z/new/deeper/n.txt", "made").expect("write");
    for made in ["new", "new/deeper", "new/deeper/n.txt"] {
        let m = std::fs::metadata(z.join(made)).expect(made);
        assert_eq!((m.uid(), m.gid()), (WORKER.uid, WORKER.gid), "{made}");
    }
    // Replaced through a temporary file and a rename: still the worker's, no temporary left.
    sb.edit("/z/new/deeper/n.txt", "made", "edited").expect("edit");
    let m = std::fs::metadata(z.join("new/deeper/n.txt")).expect("edited");
    assert_eq!((m.uid(), std::fs::read_to_string(z.join("new/deeper/n.txt")).expect("read")), (WORKER.uid, "edited".to_string()));
    // A directory the worker may write and search but not list (0300) takes a file, as
    // from its own `echo >`.
    std::fs::create_dir(z.join("drop")).expect("mkdir");
    chown(&z.join("drop"), WORKER.uid, WORKER.gid);
    mode(&z.join("drop"), 0o300);
    sb.write("/z/drop/in.txt", "dropped").expect("write into 0300");
    sb.prepare_delete("/z/drop/in.txt").expect("checked").remove().expect("delete in 0300");
    // A root-owned directory in a writable zone: refused, as the worker's `echo >` would be.
    let e = sb.write("/z/rootdir/x.txt", "x").expect_err("root's directory");
    assert_eq!(e.kind(), "permission_denied", "{e}");
    assert_eq!(std::fs::read_dir(z.join("rootdir")).expect("ls").count(), 1, "nothing created there, no temporary file");
    assert_eq!(sb.write("/z/rootdir/f.txt", "x").expect_err("root's file in root's directory").kind(), "permission_denied");
    assert_eq!(sb.prepare_delete("/z/rootdir/f.txt").expect("checked").remove().expect_err("delete").kind(), "permission_denied");
    assert!(z.join("rootdir/f.txt").exists());
    // Root's own rights would have done all of it.
    p.sandbox.write("/z/rootdir/x.txt", "x").expect("root writes there");
    assert_eq!(std::fs::metadata(z.join("rootdir/x.txt")).expect("x").uid(), 0);
}

#[test]
fn granted_directories_are_created_by_the_worker_or_refused() {
    if !is_root() {
        return eprintln!("skipped: needs root");
    }
    let (tmp, p) = project("");
    let l = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let child = p.sandbox.derive(&DeriveSpec { allow_write: l(&["/z/reports/2026", "/z/rootdir/sub"]), ..Default::default() }).expect("derive");
    let e = child.materialize(WORKER).expect_err("root's directory");
    let msg = e.to_string();
    assert!(msg.contains("may not create it") && msg.contains("owner 0:0, mode 755") && msg.contains("chown 1000:1000"), "{msg}");
    assert!(!tmp.path().join("z/rootdir/sub").exists());
    assert!(!tmp.path().join("z/reports").exists(), "a refused launch leaves nothing it created");
    let ok = p.sandbox.derive(&DeriveSpec { allow_write: l(&["/z/reports/2026"]), ..Default::default() }).expect("derive");
    let made = ok.materialize(WORKER).expect("created");
    for d in ["z/reports", "z/reports/2026"] {
        let m = std::fs::metadata(tmp.path().join(d)).expect(d);
        assert_eq!((m.uid(), m.gid()), (WORKER.uid, WORKER.gid), "{d}");
    }
    assert!(made.writable_roots().contains(&"/z/reports/2026".to_string()));
}

#[test]
fn the_tool_service_refuses_like_the_worker() {
    if !is_root() {
        return eprintln!("skipped: needs root");
    }
    let outside = tempfile::tempdir().expect("outside");
    let closed = outside.path().join("closed");
    let open = outside.path().join("open");
    std::fs::create_dir(&closed).expect("mkdir");
    std::fs::create_dir(&open).expect("mkdir");
    file(&closed.join("key.txt"), "root's key", 0, 0, 0o644);
    file(&open.join("notes.txt"), "open notes", 0, 0, 0o644);
    mode(&closed, 0o700);
    mode(outside.path(), 0o755);
    let (tmp, p) = project("  dynamic: true\n");
    let runner = Arc::new(BackendRunner::new(p.clone(), BackendChoice::None, ApprovalMode::ApproveAll));
    let service =
        ToolService::new(p.clone(), Caller::default(), as_worker(&p), Approver::new(ApprovalMode::ApproveAll, None), AuditLog::new(tmp.path(), "r"), runner);
    let e = service.call("read_file", serde_json::json!({"path": "/z/secret.txt"})).expect_err("refused");
    assert_eq!(e.kind(), "permission_denied", "{e}");
    let e = service.call("write_file", serde_json::json!({"path": "/z/rootdir/w.txt", "content": "x"})).expect_err("refused");
    assert_eq!(e.kind(), "permission_denied", "{e}");
    // request_access: a directory the worker's user cannot enter is not granted through us.
    let e = service.call("request_access", serde_json::json!({"path": closed.join("key.txt"), "mode": "ro"})).expect_err("refused");
    assert!(e.to_string().contains("ermission denied"), "{e}");
    let granted = service.call("request_access", serde_json::json!({"path": open, "mode": "ro"})).expect("granted");
    let zone = granted["granted"].as_str().expect("zone").to_string();
    let read = service.call("read_file", serde_json::json!({"path": format!("{zone}/notes.txt")})).expect("readable");
    assert_eq!(read["content"], "open notes");
}

/// Variants a hostile worker (or a careless fixture) could try: a zone whose own directory
/// the worker may not search, a root file in a sticky directory the worker may write, and a
/// copy of a directory it may list but not search (0744), which once stopped the whole copy.
#[test]
fn variants_that_do_not_get_through() {
    if !is_root() {
        return eprintln!("skipped: needs root");
    }
    let (tmp, p) = project("");
    let z = tmp.path().join("z");
    // A sticky directory the worker may write: it may not delete (or replace) root's file.
    std::fs::create_dir(z.join("shared")).expect("mkdir");
    file(&z.join("shared/root.txt"), "root's", 0, 0, 0o644);
    mode(&z.join("shared"), 0o1777);
    let sb = as_worker(&p);
    assert_eq!(sb.prepare_delete("/z/shared/root.txt").expect("checked").remove().expect_err("sticky").kind(), "permission_denied");
    assert_eq!(sb.write("/z/shared/root.txt", "mine").expect_err("sticky rename").kind(), "permission_denied");
    assert_eq!(std::fs::read_to_string(z.join("shared/root.txt")).expect("kept"), "root's");
    sb.write("/z/shared/mine.txt", "mine").expect("a new name is fine");

    // A zone whose directory is root's 0700: held open by root since load, still closed to
    // the worker.
    let closed = tmp.path().join("closed");
    std::fs::create_dir(&closed).expect("mkdir");
    file(&closed.join("f.txt"), "inside", 0, 0, 0o644);
    mode(&closed, 0o700);
    let yaml = "sandbox:\n  zones:\n    c: {path: ./closed, mode: rw}\n";
    let cp = Project::from_text(yaml, &tmp.path().join("workcell.yaml"), tmp.path()).expect("project");
    let csb = cp.sandbox.clone().acting_as(WORKER);
    assert_eq!(csb.read("/c/f.txt", 100, 0).expect_err("closed zone").kind(), "permission_denied");
    assert_eq!(csb.list("/c", "*").expect_err("closed zone").kind(), "permission_denied");
    assert_eq!(csb.write("/c/g.txt", "x").expect_err("closed zone").kind(), "permission_denied");
    assert_eq!(cp.sandbox.read("/c/f.txt", 100, 0).expect("root reads it").content, "inside");

    // Copy delivery of a directory the worker may list but not search (0744): nothing in it
    // can be read, so it is not copied, and named so.
    std::fs::create_dir(z.join("listonly")).expect("mkdir");
    file(&z.join("listonly/a.txt"), "a", 0, 0, 0o644);
    mode(&z.join("listonly"), 0o744);
    let zone = std::fs::File::open(&z).expect("open zone");
    let copy = workcell::delivery::baseline::copy_in(&zone, "z", WORKER, &Default::default()).expect("copy");
    let b = &copy.baseline;
    let key = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
    for (p, dir) in [("secret.txt", false), ("hard.txt", false), ("private", true), ("passage", true), ("listonly", true)] {
        assert_eq!(b.not_copied.get(&key(p)), Some(&workcell::delivery::baseline::NotCopied::Unreadable { dir }), "{p}: {:?}", b.not_copied);
    }
    assert!(b.files.contains_key(&key("group.txt")) && b.files.contains_key(&key("own.txt")), "{:?}", b.files.keys());
    assert!(!copy.path().join("secret.txt").exists() && !copy.path().join("listonly/a.txt").exists());
    let m = std::fs::metadata(copy.path().join("group.txt")).expect("copied");
    assert_eq!((m.uid(), m.gid()), (WORKER.uid, WORKER.gid));
}

/// The control files' check walks up from the directory a write lands in with workcell's
/// rights: a zone outside the project, behind a directory the worker may not search, takes
/// the worker's writes (it is not mistaken for a control file), and the project's own
/// control files stay refused to a worker that owns them.
#[test]
fn the_control_files_check_sees_beyond_the_worker() {
    if !is_root() {
        return eprintln!("skipped: needs root");
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let proj = tmp.path().join("proj");
    let zone = tmp.path().join("outer/zone");
    std::fs::create_dir_all(&zone).expect("mkdir");
    std::fs::create_dir_all(proj.join("workers")).expect("mkdir");
    chown(&zone, WORKER.uid, WORKER.gid);
    mode(&tmp.path().join("outer"), 0o700);
    let yaml = "sandbox:\n  zones:\n    z: {path: ../outer/zone, mode: rw}\n    p: {path: ., mode: rw}\n";
    std::fs::write(proj.join("workcell.yaml"), yaml).expect("write");
    support::give_to_worker(&proj);
    let p = Project::load(Some(&proj.join("workcell.yaml")), &proj).expect("project");
    let sb = p.sandbox.clone().acting_as(WORKER);
    sb.write("/z/x.txt", "x").expect("a zone behind a directory the worker cannot search");
    assert_eq!(std::fs::metadata(zone.join("x.txt")).expect("written").uid(), WORKER.uid);
    for path in ["/p/workcell.yaml", "/p/workers/w.worker"] {
        let e = sb.write(path, "x").expect_err(path);
        assert_eq!(e.kind(), "not_writable", "{path}: {e}");
    }
}
