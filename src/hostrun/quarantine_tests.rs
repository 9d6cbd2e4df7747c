use std::fs;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::Path;

use super::*;
use crate::held::Held;
use crate::hostrun::area::{BoundPath, ProtectedArea};
use crate::hostrun::Protection;

fn area(dir: &Path) -> ProtectedArea {
    ProtectedArea::of("/work", Held(std::sync::Arc::new(fs::File::open(dir).unwrap().into())), Protection::default())
}

fn write(root: &Path, rel: &str) {
    let p = root.join(rel);
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, "planted").unwrap();
}

/// A chain of `depth` directories named `d` beneath `root`, made relative to handles (a
/// path that long could not be named), with `leaf` written at the bottom.
fn chain(root: &Path, depth: usize, leaf: &str) {
    let mut fd = rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    for _ in 0..depth {
        rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
        fd = rustix::fs::openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    }
    drop(rustix::fs::openat(&fd, leaf, OFlags::WRONLY | OFlags::CREATE, Mode::from_raw_mode(0o644)).unwrap());
}

fn quarantined(root: &Path, run: &str) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(root.join(DIR).join(run)).map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
    v.sort();
    v
}

#[test]
fn planted_paths_are_moved_aside_and_the_repository_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    for rel in
        [".envrc", ".vscode/tasks.json", "sub/.git/config", "sub/.git/hooks/post-checkout", "home/.bashrc", ".git/objects/ab/cd", ".git/HEAD", "src/main.rs"]
    {
        write(r, rel);
    }
    fs::create_dir_all(r.join("p")).unwrap();
    fs::write(r.join("p/.git"), "gitdir: ../hidden/g\n").unwrap();
    symlink("/etc/passwd", r.join("sub/.git/config.worktree")).unwrap();
    let report = sweep(&area(r), "RUN1");
    assert_eq!(report.total, 7, "{report:#?}");
    assert_eq!(report.left, 0);
    for gone in [".envrc", ".vscode", "sub/.git/config", "sub/.git/hooks", "home/.bashrc", "p/.git", "sub/.git/config.worktree"] {
        assert!(r.join(gone).symlink_metadata().is_err(), "{gone} stayed");
    }
    for kept in [".git/objects/ab/cd", ".git/HEAD", "src/main.rs", "sub/.git"] {
        assert!(r.join(kept).exists(), "{kept} went");
    }
    let q = quarantined(r, "RUN1");
    assert_eq!(q.len(), 7, "{q:?}");
    assert!(q.iter().any(|n| n.ends_with("-sub%2F.git%2Fhooks")), "{q:?}");
    // The link was moved, not followed.
    assert!(Path::new("/etc/passwd").exists());
    // Nothing in the quarantine is protected any more: a second sweep finds nothing.
    assert!(sweep(&area(r), "RUN2").is_empty());
}

#[test]
fn a_bound_path_with_its_identity_stays_and_a_swapped_one_goes() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    write(r, ".git/config");
    write(r, ".envrc");
    let m = fs::symlink_metadata(r.join(".git/config")).unwrap();
    let mut a = area(r);
    a.bound = vec![
        BoundPath { path: ".git/config".into(), entry: ".git/config".into(), identity: (m.dev(), m.ino()) },
        BoundPath { path: ".envrc".into(), entry: ".envrc".into(), identity: (0, 0) },
    ];
    let report = sweep(&a, "RUN");
    assert_eq!(report.total, 1, "{report:#?}");
    assert!(r.join(".git/config").exists());
    assert!(!r.join(".envrc").exists());
}

/// A bound path is recognised by its identity, so one beneath a directory whose name is not
/// UTF-8 stays too (a person's repository is not taken apart after every run).
#[test]
fn a_bound_path_under_a_name_that_is_not_utf8_stays() {
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
    fs::create_dir_all(r.join(odd).join(".git")).unwrap();
    fs::write(r.join(odd).join(".git/config"), "x").unwrap();
    let m = fs::symlink_metadata(r.join(odd).join(".git/config")).unwrap();
    let mut a = area(r);
    a.bound = vec![BoundPath { path: "caf\u{fffd}/.git/config".into(), entry: ".git/config".into(), identity: (m.dev(), m.ino()) }];
    assert!(sweep(&a, "RUN").is_empty());
    assert!(r.join(odd).join(".git/config").exists());
}

#[test]
fn a_planted_workcell_link_is_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let (r, outside) = (tmp.path().join("zone"), tmp.path().join("outside"));
    fs::create_dir_all(&r).unwrap();
    fs::create_dir_all(&outside).unwrap();
    symlink(&outside, r.join(".workcell")).unwrap();
    write(&r, ".envrc");
    let report = sweep(&area(&r), "RUN");
    assert_eq!(report.total, 1);
    assert!(matches!(report.items[0].outcome, Outcome::Quarantined { .. }), "{report:#?}");
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    assert!(r.join(".workcell").symlink_metadata().unwrap().is_dir());
    assert_eq!(quarantined(&r, "RUN"), vec!["0001-.envrc".to_string()]);
    // This run's quarantine directory made ahead, as a link: set aside too.
    write(&r, ".envrc");
    symlink(&outside, r.join(".workcell/quarantine/RUN2")).unwrap();
    assert_eq!(sweep(&area(&r), "RUN2").left, 0);
    assert_eq!(fs::read_dir(&outside).unwrap().count(), 0);
    assert_eq!(quarantined(&r, "RUN2"), vec!["0001-.envrc".to_string()]);
}

#[test]
fn odd_names_and_kinds() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    let odd = "a\nb\x1b[31m";
    write(r, &format!("{odd}/.envrc"));
    rustix::fs::mkfifoat(rustix::fs::CWD, r.join(".bashrc"), Mode::from_raw_mode(0o644)).unwrap();
    fs::hard_link(r.join(format!("{odd}/.envrc")), r.join(".profile")).unwrap();
    let report = sweep(&area(r), "RUN");
    assert_eq!(report.total, 3, "{report:#?}");
    let q = quarantined(r, "RUN");
    assert!(q.iter().all(|n| n.bytes().all(|b| b.is_ascii_graphic())), "{q:?}");
    assert!(q.iter().any(|n| n.ends_with("-a%0Ab%1B%5B31m%2F.envrc")), "{q:?}");
}

#[test]
fn a_chain_deeper_than_the_bound_is_moved_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    chain(r, MAX_DEPTH + 50, ".envrc");
    let report = sweep(&area(r), "RUN");
    assert_eq!(report.total, 1, "{report:#?}");
    assert_eq!(report.items[0].why, Why::TooDeep);
    // The chain is cut at the bound: the part above stays, the rest is in the quarantine.
    let q = quarantined(r, "RUN");
    assert_eq!(q.len(), 1);
    assert!(q[0].ends_with('~'), "{q:?}");
}

#[test]
fn removal_handles_any_depth() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    chain(r, 5000, "x");
    let fd = rustix::fs::open(r, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    crate::hostrun::remove::remove_tree(fd.as_fd(), c"d").unwrap();
    assert_eq!(fs::read_dir(r).unwrap().count(), 0);
}

#[test]
fn names_are_bounded_and_plain() {
    let n = item_name(7, &[b'a'; 4000]);
    assert!(n.len() <= NAME_MAX && n.starts_with("0007-"), "{n}");
    assert_eq!(item_name(1, b"sub/.git/config"), "0001-sub%2F.git%2Fconfig");
}

#[test]
fn what_existed_before_the_run_stays() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    write(r, ".git/config");
    write(r, ".git/hooks/pre-commit.sample");
    write(r, "sub/.envrc");
    let mut a = area(r);
    a.bound = existing(&a);
    assert_eq!(a.bound.len(), 3, "{:?}", a.bound);
    // The worker adds one, and swaps one for a new file under the same name.
    write(r, ".envrc");
    fs::remove_file(r.join("sub/.envrc")).unwrap();
    write(r, "sub/.envrc");
    let report = sweep(&a, "RUN");
    let moved: Vec<&str> = report.items.iter().map(|i| i.path.as_str()).collect();
    assert!(moved.contains(&".envrc") && moved.len() <= 2, "{moved:?}");
    assert!(r.join(".git/config").exists() && r.join(".git/hooks/pre-commit.sample").exists());
}
