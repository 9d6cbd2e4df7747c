//! Copy-in and the walk within the entry budget, at the library level with small bounds
//! set through the policy (issue 25 findings 6 and 9): a directory of many names is not read
//! whole before the limit applies; a zone over its entry or byte bound is refused without a
//! copy left behind; a file over `max_file_bytes` is recorded, not copied.

use std::fs;

use workcell::delivery::baseline::{self, NotCopied};
use workcell::delivery::collect::Staging;
use workcell::delivery::{walk, DeliveryError, Policy};
use workcell::plan::UserSpec;

fn me() -> UserSpec {
    UserSpec { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() }
}

fn policy(max_entries: u64, max_total_bytes: u64, max_file_bytes: Option<u64>) -> Policy {
    Policy { max_entries, max_total_bytes, max_file_bytes, ..Policy::default() }
}

/// A zone holding `many/` with `n` empty files.
fn zone_of(n: usize) -> tempfile::TempDir {
    let zone = tempfile::tempdir().unwrap();
    fs::create_dir(zone.path().join("many")).unwrap();
    for i in 0..n {
        fs::File::create(zone.path().join("many").join(i.to_string())).unwrap();
    }
    zone
}

/// The walk of the worker's tree stops at the entry budget: the archive ends with the limit
/// (as [`walk::TooManyNames`]) after at most that many entries, and the delivery says so.
#[test]
fn the_walk_stops_at_the_entry_budget() {
    let zone = zone_of(5_000);
    let dir = fs::File::open(zone.path()).unwrap();
    let mut tar = Vec::new();
    let e = walk::archive(&dir, &mut tar, u64::MAX, 100).expect_err("over the budget");
    assert_eq!(walk::TooManyNames::of(&e), Some(100), "{e}");
    assert!(e.to_string().contains("more than 100 entries"), "{e}");
    // Nothing of `many/` was archived: the walk stopped while listing it.
    assert!(tar.len() < 4 << 10, "{} bytes archived", tar.len());
    let mut staging = Staging::new().unwrap();
    match walk::collect_dir(&dir, &policy(100, 1 << 30, None), &mut staging) {
        Err(DeliveryError::TooManyEntries { max: 100 }) => {}
        other => panic!("{other:?}"),
    }
}

/// Copy-in counts entries across the zone and stops at the limit; nothing is left in the
/// temporary directory.
#[test]
fn copy_in_refuses_a_zone_over_the_entry_limit() {
    let zone = zone_of(1_000);
    let dir = fs::File::open(zone.path()).unwrap();
    match baseline::copy_in(&dir, "docs", me(), &policy(500, 1 << 30, None)) {
        Err(e @ DeliveryError::ZoneTooManyEntries { max: 500, .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("zone docs holds more than 500 entries") && msg.contains("smaller directory"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    let within = baseline::copy_in(&dir, "docs", me(), &policy(1_001, 1 << 30, None)).expect("1,001 entries fit");
    assert_eq!(within.baseline.files.len(), 1_000);
}

/// Bytes count the apparent size of the files to copy (a sparse one's full length); files
/// over `max_file_bytes` are not copied and do not count.
#[test]
fn copy_in_bounds_bytes_and_file_sizes() {
    let zone = tempfile::tempdir().unwrap();
    fs::write(zone.path().join("a.md"), vec![b'a'; 600]).unwrap();
    fs::write(zone.path().join("b.md"), vec![b'b'; 600]).unwrap();
    fs::File::create(zone.path().join("sparse.img")).unwrap().set_len(1 << 40).unwrap();
    let dir = fs::File::open(zone.path()).unwrap();
    match baseline::copy_in(&dir, "docs", me(), &policy(100, 1_000, Some(1_000))) {
        Err(e @ DeliveryError::ZoneTooManyBytes { max: 1_000, found: 1_200, .. }) => {
            assert!(e.to_string().contains("zone docs holds 1200 bytes in files to copy, more than the 1000"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let copy = baseline::copy_in(&dir, "docs", me(), &policy(100, 2_000, Some(1_000))).expect("within the bounds");
    let key = vec!["sparse.img".to_string()];
    assert_eq!(copy.baseline.not_copied.get(&key), Some(&NotCopied::TooLarge { size: 1 << 40, max: 1_000 }));
    assert!(!copy.path().join("sparse.img").exists());
    assert_eq!(copy.baseline.too_large_names().shown(), ["sparse.img"]);
    // Without max_file_bytes the 1 TiB sparse file counts its full size: over the total.
    match baseline::copy_in(&dir, "docs", me(), &policy(100, 4 << 30, None)) {
        Err(DeliveryError::ZoneTooManyBytes { found, .. }) => assert_eq!(found, (1 << 40) + 1_200),
        other => panic!("{other:?}"),
    }
}
