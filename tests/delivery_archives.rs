//! The checker of `delivery: copy` against hostile archives: tar streams built by hand (names
//! that escape, links out, a directory replaced by a link, duplicates, huge sizes, GNU long
//! names) and random ones from a proptest generator, each collected, diffed and published
//! into a temporary zone. Whatever the archive, nothing outside the zone changes, no link is
//! created and no file is written through one. (This is the bounded fuzzing run of CI; its
//! seeds are in `delivery_archives.proptest-regressions`.)

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use workcell::delivery::collect::{collect_tar, Staging};
use workcell::delivery::summary::{FileItem, Listed};
use workcell::delivery::{baseline, publish, DeliveryError, Policy, Reason, Summary};
use workcell::identity::Identity;
use workcell::plan::UserSpec;

/// A zone holding `keep.md`, `sub/k.md` and a link `esc -> ../outside` planted by the host,
/// beside a directory `outside/` holding `s.txt`.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    zone: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(tmp.path()).unwrap();
    let (zone, outside) = (root.join("zone"), root.join("outside"));
    fs::create_dir_all(zone.join("sub")).unwrap();
    fs::create_dir_all(&outside).unwrap();
    fs::write(zone.join("keep.md"), "keep").unwrap();
    fs::write(zone.join("sub/k.md"), "k").unwrap();
    fs::write(outside.join("s.txt"), "outside").unwrap();
    symlink("../outside", zone.join("esc")).unwrap();
    Fixture { _tmp: tmp, root, zone }
}

fn me() -> UserSpec {
    UserSpec { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() }
}

fn policy() -> Policy {
    Policy { suffixes: Some(vec![".md".into()]), max_file_bytes: Some(1000), ..Policy::default() }
}

/// One tar header block with `name` written as it is (no checks), then `data` padded.
fn entry(out: &mut Vec<u8>, name: &[u8], kind: u8, size: u64, data: &[u8], mode: u32, link: &[u8]) {
    let mut h = tar::Header::new_gnu();
    {
        let old = h.as_old_mut();
        let n = name.len().min(100);
        old.name[..n].copy_from_slice(&name[..n]);
        let l = link.len().min(100);
        old.linkname[..l].copy_from_slice(&link[..l]);
    }
    h.set_entry_type(tar::EntryType::new(kind));
    h.set_size(size);
    h.set_mode(mode);
    h.set_mtime(0);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(512), 0);
}

fn file(out: &mut Vec<u8>, name: &str, body: &[u8]) {
    entry(out, name.as_bytes(), b'0', body.len() as u64, body, 0o644, b"");
}

fn end(mut out: Vec<u8>) -> Vec<u8> {
    out.resize(out.len() + 1024, 0);
    out
}

/// Collects `archive` against the fixture's zone and publishes what passes. `Err` when the
/// archive as a whole was refused (nothing published).
fn deliver(f: &Fixture, archive: &[u8]) -> Result<Summary, DeliveryError> {
    let zone = fs::File::open(&f.zone).unwrap();
    let copy = baseline::copy_in(&zone, "zone", me(), &Default::default())?;
    let mut staging = Staging::new().unwrap();
    let collected = collect_tar(archive, &policy(), &mut staging)?;
    let changes = publish::diff("zone", &zone, &copy.baseline, &collected);
    Ok(changes.publish(&zone, &staging, Identity::Own))
}

/// Every entry beneath `dir`, with its kind and content, links not followed.
fn tree(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            if m.file_type().is_symlink() {
                out.push((rel, format!("link -> {}", fs::read_link(&p).unwrap().display())));
            } else if m.is_dir() {
                out.push((rel, "dir".into()));
                stack.push(p);
            } else if m.is_file() {
                out.push((rel, format!("file {:o} nlink {} {:?}", m.permissions().mode(), m.nlink(), fs::read(&p).unwrap())));
            } else {
                out.push((rel, "special".into()));
            }
        }
    }
    out.sort();
    out
}

/// Everything in the fixture's directory but the zone.
fn outside_of(f: &Fixture) -> Vec<(String, String)> {
    tree(&f.root).into_iter().filter(|(p, _)| p != "zone" && !p.starts_with("zone/")).collect()
}

/// What must hold after any delivery into the fixture.
fn assert_contained(f: &Fixture, before_outside: &[(String, String)]) {
    assert_eq!(outside_of(f), before_outside, "something outside the zone changed");
    assert_eq!(fs::read_link(f.zone.join("esc")).unwrap(), Path::new("../outside"), "the host's own link was replaced");
    for (path, what) in tree(&f.zone) {
        if path == "esc" {
            continue;
        }
        assert!(what == "dir" || what.starts_with("file "), "{path}: {what}");
        if let Some(rest) = what.strip_prefix("file ") {
            let mode = u32::from_str_radix(rest.split(' ').next().unwrap(), 8).unwrap();
            assert_eq!(mode & 0o7000, 0, "{path} kept a set-uid/set-gid/sticky bit");
            assert!(rest.contains("nlink 1 "), "{path} is a hard link");
            assert!(path.ends_with(".md"), "{path} has a refused suffix");
            assert!(!path.contains(".workcell-publish-"), "{path}: a temporary file was left");
        }
    }
}

fn files(l: &Listed<FileItem>) -> Vec<&str> {
    l.iter().map(|f| f.path.as_str()).collect()
}

fn refused(s: &Summary, path: &str) -> Option<Reason> {
    s.refused.iter().find(|r| r.path == path).map(|r| r.reason.clone())
}

#[test]
fn hand_built_hostile_archives_stay_inside_the_zone() {
    let f = fixture();
    let outside = outside_of(&f);
    let mut a = Vec::new();
    file(&mut a, "ok.md", b"fine");
    file(&mut a, "/abs.md", b"x");
    file(&mut a, "../up.md", b"x");
    file(&mut a, "sub/../../up2.md", b"x");
    // Through the host's planted link, and through links the archive makes itself.
    file(&mut a, "esc/through.md", b"x");
    entry(&mut a, b"out", b'2', 0, b"", 0o777, b"../outside");
    file(&mut a, "out/s.txt", b"x");
    entry(&mut a, b"hard.md", b'1', 0, b"", 0o644, b"../outside/s.txt");
    // A directory, then a link in its place, then a file through that link.
    entry(&mut a, b"d/", b'5', 0, b"", 0o755, b"");
    entry(&mut a, b"d", b'2', 0, b"", 0o777, b"/etc");
    file(&mut a, "d/passwd.md", b"x");
    // Duplicates: the second one wins nothing.
    file(&mut a, "dup.md", b"one");
    file(&mut a, "dup.md", b"two");
    // A GNU long name that escapes, carried in its own entry.
    let long = b"../../long-escape.md\0";
    entry(&mut a, b"././@LongLink", b'L', long.len() as u64, long, 0o644, b"");
    file(&mut a, "short.md", b"x");
    entry(&mut a, b"fifo.md", b'6', 0, b"", 0o644, b"");
    entry(&mut a, b"dev.md", b'3', 0, b"", 0o644, b"");
    entry(&mut a, b"other.md", b'?', 0, b"", 0o644, b"");
    entry(&mut a, b"suid.md", b'0', 1, b"s", 0o4755, b"");
    file(&mut a, "keep.md/inner.md", b"x");
    let s = deliver(&f, &end(a)).unwrap();
    eprintln!("{}", s.text());
    assert_contained(&f, &outside);
    assert_eq!(files(&s.added), ["ok.md", "suid.md"], "{s:?}");
    assert_eq!(fs::read(f.zone.join("ok.md")).unwrap(), b"fine");
    assert!(fs::symlink_metadata(f.zone.join("d")).unwrap().is_dir(), "d is a directory, not a link");
    assert_eq!(s.bits_dropped.shown(), ["suid.md"]);
    for (path, reason) in [
        ("out", Reason::Symlink),
        ("out/s.txt", Reason::BeneathRefused),
        ("hard.md", Reason::HardLink),
        ("d", Reason::TypeClash),
        ("d/passwd.md", Reason::BeneathRefused),
        ("dup.md", Reason::Duplicate),
        ("fifo.md", Reason::Fifo),
        ("dev.md", Reason::Device),
        ("other.md", Reason::Special),
    ] {
        assert_eq!(refused(&s, path), Some(reason), "{path}: {s:?}");
    }
    for bad in ["/abs.md", "../up.md", "sub/../../up2.md", "../../long-escape.md"] {
        assert!(matches!(refused(&s, bad), Some(Reason::BadName { .. })), "{bad}: {s:?}");
    }
    // Through the host's link: the name is fine, the host's link is not followed.
    // Beneath a host file: the host keeps its file.
    for c in ["esc/through.md", "keep.md/inner.md"] {
        assert!(s.conflicts.shown().contains(&c.to_string()), "{c}: {s:?}");
    }
    assert_eq!(fs::read(f.zone.join("keep.md")).unwrap(), b"keep");
    assert!(!f.zone.join("dup.md").exists());
}

#[test]
fn a_huge_or_truncated_entry_publishes_nothing() {
    // Declared sizes the stream does not hold: one over every limit, one within them.
    for (size, body) in [(1u64 << 40, &b""[..]), (900, &b"short"[..])] {
        let f = fixture();
        let outside = outside_of(&f);
        let before = tree(&f.zone);
        let mut a = Vec::new();
        file(&mut a, "first.md", b"x");
        entry(&mut a, b"huge.md", b'0', size, body, 0o644, b"");
        let r = deliver(&f, &a);
        assert!(r.is_err() || size > 1000, "{size}: {r:?}");
        if let Ok(s) = &r {
            assert!(matches!(refused(s, "huge.md"), Some(Reason::TooLarge { .. })), "{s:?}");
        } else {
            assert_eq!(tree(&f.zone), before, "a refused archive changed the zone");
        }
        assert_contained(&f, &outside);
    }
}

#[test]
fn deletions_and_host_changes() {
    let f = fixture();
    let zone = fs::File::open(&f.zone).unwrap();
    let copy = baseline::copy_in(&zone, "zone", me(), &Default::default()).unwrap();
    // The worker's tree: keep.md changed, sub/k.md deleted.
    let mut a = Vec::new();
    file(&mut a, "keep.md", b"worker");
    entry(&mut a, b"sub/", b'5', 0, b"", 0o755, b"");
    let a = end(a);
    // Meanwhile the host changed keep.md.
    fs::write(f.zone.join("keep.md"), "host edit").unwrap();
    let mut staging = Staging::new().unwrap();
    let collected = collect_tar(&a[..], &policy(), &mut staging).unwrap();
    let s = publish::diff("zone", &zone, &copy.baseline, &collected).publish(&zone, &staging, Identity::Own);
    assert_eq!(s.conflicts.shown(), ["keep.md"], "{s:?}");
    assert_eq!(s.deleted.shown(), ["sub/k.md"], "{s:?}");
    assert_eq!(fs::read_to_string(f.zone.join("keep.md")).unwrap(), "host edit", "a host change was overwritten");
    assert!(!f.zone.join("sub/k.md").exists());
    assert!(f.zone.join("sub").is_dir());
}

/// The host changes the zone between the check and the publish (as during a review): a
/// parent removed, another turned into a link. Those changes are conflicts, one by one; the
/// other deletions and writes still land.
#[test]
fn host_changes_after_the_check_fail_only_their_own_changes() {
    let f = fixture();
    for d in ["a", "b"] {
        fs::create_dir(f.zone.join(d)).unwrap();
        fs::write(f.zone.join(d).join("x.md"), "x").unwrap();
    }
    fs::write(f.zone.join("c.md"), "c").unwrap();
    let zone = fs::File::open(&f.zone).unwrap();
    let copy = baseline::copy_in(&zone, "zone", me(), &Default::default()).unwrap();
    // The worker's tree: keep.md changed; a/x.md, b/x.md, c.md deleted; sub/k.md kept.
    let mut a = Vec::new();
    file(&mut a, "keep.md", b"worker");
    file(&mut a, "sub/k.md", b"k");
    entry(&mut a, b"a/", b'5', 0, b"", 0o755, b"");
    entry(&mut a, b"b/", b'5', 0, b"", 0o755, b"");
    let a = end(a);
    let mut staging = Staging::new().unwrap();
    let collected = collect_tar(&a[..], &policy(), &mut staging).unwrap();
    let changes = publish::diff("zone", &zone, &copy.baseline, &collected);
    fs::remove_dir_all(f.zone.join("a")).unwrap();
    fs::remove_dir_all(f.zone.join("b")).unwrap();
    fs::write(f.root.join("outside/x.md"), "x").unwrap();
    symlink("../outside", f.zone.join("b")).unwrap();
    let s = changes.publish(&zone, &staging, Identity::Own);
    assert_eq!(s.status, workcell::delivery::Status::Published, "{s:?}");
    assert_eq!(s.conflicts.shown(), ["a/x.md", "b/x.md"], "{s:?}");
    assert_eq!(s.deleted.shown(), ["c.md"], "{s:?}");
    assert_eq!(files(&s.changed), ["keep.md"], "{s:?}");
    assert_eq!(fs::read_to_string(f.zone.join("keep.md")).unwrap(), "worker");
    assert!(!f.zone.join("c.md").exists());
    assert_eq!(fs::read_to_string(f.root.join("outside/x.md")).unwrap(), "x", "deleted through the host's link");
}

const NAMES: &[&str] = &[
    "a.md",
    "b.md",
    "d",
    "d/c.md",
    "d/e/f.md",
    "../up.md",
    "/abs.md",
    "esc",
    "esc/x.md",
    "a.md/x.md",
    "./dot.md",
    "d//g.md",
    "d/../h.md",
    "bell\x07.md",
    "x.exe",
    "keep.md",
    "keep.md/x.md",
    "sub",
    "sub/k.md",
    "sub/n.md",
    "link",
    "link/z.md",
    "..",
    ".",
    "",
    "/",
    "d/e",
];
const TARGETS: &[&str] = &["../outside", "/etc/passwd", "keep.md", "../outside/s.txt", "sub", "/"];
const KINDS: &[u8] = b"00000555221163S7L?";

fn hostile_archive() -> impl Strategy<Value = Vec<u8>> {
    let one = (0..NAMES.len(), 0..KINDS.len(), 0..TARGETS.len(), prop_oneof![0u64..40, 990u64..1010, Just(1u64 << 33)], 0u32..0o10000);
    (proptest::collection::vec(one, 0..14), any::<bool>()).prop_map(|(entries, finish)| {
        let mut a = Vec::new();
        for (n, k, t, size, mode) in entries {
            let kind = KINDS[k];
            let data: Vec<u8> = match kind {
                b'L' => format!("{}\0", NAMES[n]).into_bytes(),
                b'0' | b'7' if size < 2000 => vec![b'x'; size as usize],
                _ => Vec::new(),
            };
            let declared = if kind == b'0' || kind == b'7' { size } else { data.len() as u64 };
            entry(&mut a, NAMES[n].as_bytes(), kind, declared, &data, mode, TARGETS[t].as_bytes());
        }
        if finish {
            a = end(a);
        }
        a
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_archive_writes_outside_the_zone_or_through_a_link(archive in hostile_archive()) {
        let f = fixture();
        let outside = outside_of(&f);
        let before = tree(&f.zone);
        match deliver(&f, &archive) {
            Ok(s) => {
                for p in s.added.iter().chain(s.changed.iter()).map(|f| &f.path) {
                    prop_assert!(f.zone.join(p).is_file(), "{p} reported published but is not a file");
                }
            }
            Err(_) => prop_assert_eq!(tree(&f.zone), before),
        }
        assert_contained(&f, &outside);
    }
}

/// The walker of a worker's copy: links, hard links and fifos reach the checker as what they
/// are, and a file over the zone's size is refused by its size (sent without its content).
#[test]
fn the_walker_reports_what_each_entry_is() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    fs::write(d.join("ok.md"), "ok").unwrap();
    fs::write(d.join("h.md"), "h").unwrap();
    fs::hard_link(d.join("h.md"), d.join("hard.md")).unwrap();
    symlink("/etc/passwd", d.join("link.md")).unwrap();
    rustix::fs::mkfifoat(rustix::fs::CWD, d.join("fifo.md"), rustix::fs::Mode::from_raw_mode(0o644)).unwrap();
    fs::create_dir(d.join("sub")).unwrap();
    fs::File::create(d.join("sub/huge.md")).unwrap().set_len(5000).unwrap();
    let dir = fs::File::open(d).unwrap();
    let mut staging = Staging::new().unwrap();
    let c = workcell::delivery::walk::collect_dir(&dir, &policy(), &mut staging).unwrap();
    let refused: Vec<(String, Reason)> = c.refusals().iter().map(|r| (r.path.clone(), r.reason.clone())).collect();
    assert_eq!(
        refused,
        [
            ("fifo.md".to_string(), Reason::Fifo),
            ("h.md".to_string(), Reason::HardLink),
            ("hard.md".to_string(), Reason::HardLink),
            ("link.md".to_string(), Reason::Symlink),
            ("sub/huge.md".to_string(), Reason::TooLarge { size: 5000, max: 1000 }),
        ]
    );
    assert_eq!(c.files.keys().cloned().collect::<Vec<_>>(), [vec!["ok.md".to_string()]]);
}
