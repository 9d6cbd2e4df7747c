//! Attacks on the publish of `delivery: copy` (issue 25 review): a host that changes the zone
//! while a checked plan is being published (as during a review), against the promise that
//! a file the worker moved never vanishes because its new name could not be written.

use std::fs;
use std::path::{Path, PathBuf};

use workcell::delivery::collect::{collect_tar, Staging};
use workcell::delivery::{baseline, publish, Policy, Status, Summary};
use workcell::identity::Identity;
use workcell::plan::UserSpec;

struct Zone {
    _tmp: tempfile::TempDir,
    zone: PathBuf,
}

fn zone(files: &[(&str, &str)]) -> Zone {
    let tmp = tempfile::tempdir().unwrap();
    let zone = fs::canonicalize(tmp.path()).unwrap().join("zone");
    fs::create_dir(&zone).unwrap();
    for (p, body) in files {
        let p = zone.join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, body).unwrap();
    }
    Zone { _tmp: tmp, zone }
}

fn me() -> UserSpec {
    UserSpec { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() }
}

/// A tar stream of plain files (directories implied), and directories (named with `/`).
fn archive(files: &[(&str, &str)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (p, body) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(body.len() as u64);
        h.set_mode(if p.ends_with('/') { 0o755 } else { 0o644 });
        h.set_entry_type(if p.ends_with('/') { tar::EntryType::Directory } else { tar::EntryType::Regular });
        b.append_data(&mut h, p, body.as_bytes()).unwrap();
    }
    b.into_inner().unwrap()
}

/// Takes the copy of `z`, checks the worker's tree `worker`, lets `host` change the zone
/// between the check and the publish, then publishes.
fn publish_with(z: &Zone, worker: &[(&str, &str)], host: impl FnOnce(&Path)) -> Summary {
    let handle = fs::File::open(&z.zone).unwrap();
    let copy = baseline::copy_in(&handle, "zone", me(), &Policy::default()).unwrap();
    let mut staging = Staging::new().unwrap();
    let collected = collect_tar(&archive(worker)[..], &Policy::default(), &mut staging).unwrap();
    let changes = publish::diff("zone", &handle, &copy.baseline, &collected);
    host(&z.zone);
    changes.publish(&handle, &staging, Identity::Own)
}

fn failed(s: &Summary) -> Vec<&str> {
    s.failed.iter().map(|f| f.path.as_str()).collect()
}

/// The worker renamed `notes/a.md` to `b.md` (and removed `notes/`); the person saw and
/// accepted "added b.md, deleted notes/a.md, dir gone notes/". While that was published
/// the host made its own `b.md`: the worker's `b.md` is a conflict, so the document must not
/// also lose its old name (it would then be nowhere), and the summary names every deletion
/// held back, directories included.
#[test]
fn a_moved_file_whose_new_name_conflicts_at_publish_keeps_its_old_name() {
    let z = zone(&[("notes/a.md", "the only copy"), ("c.md", "c")]);
    let s = publish_with(&z, &[("b.md", "the only copy"), ("c.md", "c2")], |zone| fs::write(zone.join("b.md"), "host's own b").unwrap());
    eprintln!("{}", s.text());
    assert_eq!(fs::read_to_string(z.zone.join("b.md")).unwrap(), "host's own b", "the host's new file was overwritten");
    assert_eq!(s.conflicts.shown(), ["b.md"], "{s:?}");
    assert_eq!(fs::read_to_string(z.zone.join("notes/a.md")).unwrap(), "the only copy", "the moved file vanished: {s:?}");
    assert!(s.deleted.is_empty() && s.dirs_deleted.is_empty(), "{s:?}");
    assert_eq!(failed(&s), ["notes/a.md", "notes/"], "every held deletion is named: {s:?}");
    assert_eq!(fs::read_to_string(z.zone.join("c.md")).unwrap(), "c2", "an unrelated change still lands");
    assert_eq!(s.status, Status::Partial, "{s:?}");
}

/// The same hold for a changed file: the worker moved `a.md` to `b.md`, which it also found
/// there (so it is a change of `b.md`), and the host edited `b.md` during the publish.
#[test]
fn a_moved_file_over_a_changed_name_that_conflicts_keeps_its_old_name() {
    let z = zone(&[("a.md", "moved text"), ("b.md", "old b")]);
    let s = publish_with(&z, &[("b.md", "moved text")], |zone| fs::write(zone.join("b.md"), "host edit of b").unwrap());
    assert_eq!(fs::read_to_string(z.zone.join("b.md")).unwrap(), "host edit of b");
    assert_eq!(s.conflicts.shown(), ["b.md"], "{s:?}");
    assert_eq!(fs::read_to_string(z.zone.join("a.md")).unwrap(), "moved text", "the moved file vanished: {s:?}");
    assert_eq!(failed(&s), ["a.md"], "{s:?}");
    assert_eq!(s.status, Status::Withheld, "nothing landed: {s:?}");
}

/// The same hold when the new name lies in a new directory and the host put a file where
/// that directory goes.
#[test]
fn a_moved_file_whose_new_directory_conflicts_keeps_its_old_name() {
    let z = zone(&[("a.md", "moved text")]);
    let s = publish_with(&z, &[("new/b.md", "moved text")], |zone| fs::write(zone.join("new"), "host file").unwrap());
    assert_eq!(fs::read_to_string(z.zone.join("new")).unwrap(), "host file");
    assert_eq!(fs::read_to_string(z.zone.join("a.md")).unwrap(), "moved text", "the moved file vanished: {s:?}");
    assert_eq!(failed(&s), ["a.md"], "{s:?}");
}

/// Invisible format characters beyond the bidirectional and zero-width ones (a soft hyphen,
/// a tag character, the deprecated shaping controls, an interlinear annotation anchor, the
/// Mongolian vowel separator, a Hangul filler) make one name read as another in a review
/// ("added README.md" beside "changed README.md"): refused as names, never shown raw.
#[test]
fn invisible_format_characters_are_refused_and_never_shown_raw() {
    let tricks = ["rep\u{ad}ort.md", "README.md\u{e0020}", "a\u{206a}b.md", "c\u{fff9}d.md", "e\u{180e}f.md", "g\u{3164}h.md", "i\u{115f}j.md"];
    let z = zone(&[("README.md", "old")]);
    let worker: Vec<(&str, &str)> = tricks.iter().map(|n| (*n, "x")).chain([("README.md", "new")]).collect();
    let s = publish_with(&z, &worker, |_| {});
    let text = s.text();
    let json = serde_json::to_string(&s).unwrap();
    for t in tricks {
        assert!(!z.zone.join(t).exists(), "{t:?} was published: {text}");
        let c = t.chars().find(|c| !c.is_ascii()).unwrap();
        assert!(!text.contains(c) && !json.contains(c), "{c:?} shown raw: {text}");
    }
    assert_eq!(s.refused.total(), tricks.len(), "{text}");
}

/// Names that differ from another only by spacing read the same in a summary ("changed
/// README.md" and "added README.md " with a trailing space, or a no-break space inside):
/// spacing a reader cannot see is shown as an escape.
#[test]
fn names_that_differ_only_by_invisible_spacing_read_differently() {
    use workcell::delivery::summary::display;
    for (spoof, real) in
        [("README.md ", "README.md"), (" README.md", "README.md"), ("READ\u{a0}ME.md", "READ ME.md"), ("docs /a.md", "docs/a.md"), ("a\u{3000}b", "a b")]
    {
        let shown = display(spoof);
        assert_ne!(shown.trim(), real, "{spoof:?} reads as {real:?}");
        assert!(shown.chars().all(|c| c == ' ' || !c.is_whitespace()), "{spoof:?} shown with raw spacing: {shown:?}");
        assert!(!shown.starts_with(' ') && !shown.ends_with(' ') && !shown.contains(" /"), "{spoof:?}: {shown:?}");
    }
    assert_eq!(display("my notes/a b.md"), "my notes/a b.md", "ordinary spaces inside a name stay");
}

/// Takes the copy of `z`, checks the worker's tree `worker`, lets a reviewer keep only
/// what `keep` says yes to, then publishes.
fn publish_declining(z: &Zone, worker: &[(&str, &str)], keep: impl FnMut(&publish::Entry<'_>) -> bool) -> Summary {
    let handle = fs::File::open(&z.zone).unwrap();
    let copy = baseline::copy_in(&handle, "zone", me(), &Policy::default()).unwrap();
    let mut staging = Staging::new().unwrap();
    let collected = collect_tar(&archive(worker)[..], &Policy::default(), &mut staging).unwrap();
    let mut changes = publish::diff("zone", &handle, &copy.baseline, &collected);
    changes.decline(keep);
    changes.publish(&handle, &staging, Identity::Own)
}

/// A reviewer who says no to every file of a new directory (and yes to the rest) does not
/// get the directory made anyway, empty, for files that never come; a new directory that
/// keeps a file, or that the worker left empty, is still made.
#[test]
fn declining_every_file_of_a_new_directory_does_not_make_it() {
    let z = zone(&[("keep.md", "k")]);
    let worker = [("keep.md", "k"), ("new/deep/a.md", "a"), ("new/b.md", "b"), ("half/no.md", "n"), ("half/yes.md", "y"), ("empty/", ""), ("nest/inner/", "")];
    let s = publish_declining(&z, &worker, |e| !matches!(e.path.last().map(String::as_str), Some("a.md" | "b.md" | "no.md")));
    eprintln!("{}", s.text());
    assert!(!z.zone.join("new").exists(), "a new directory was made for declined files only: {s:?}");
    assert!(z.zone.join("half/yes.md").is_file() && !z.zone.join("half/no.md").exists());
    let declined: Vec<&str> = s.declined.iter().map(String::as_str).collect();
    for d in ["new/", "new/deep/", "new/deep/a.md", "new/b.md", "half/no.md"] {
        assert!(declined.contains(&d), "{d} not named as declined: {s:?}");
    }
    assert_eq!(s.dirs_added.shown(), ["empty/", "half/", "nest/", "nest/inner/"], "{s:?}");
    assert!(z.zone.join("empty").is_dir() && z.zone.join("nest/inner").is_dir(), "the worker's own empty directories are made");
}

/// A git directory assembled over two runs: the first published `evil/config` and
/// `evil/hooks/pre-commit` (no `HEAD` yet, so not a git directory, nothing protected); the
/// second adds what makes `evil` a (bare) git directory, which git then uses when anyone
/// runs it inside `evil` (a shell prompt does): its config and hooks run on the host. What
/// turns a directory with host config or hooks into a git directory is withheld, and nothing
/// beneath a withheld `objects/` is written.
#[test]
fn what_turns_a_directory_with_config_into_a_git_directory_is_withheld() {
    let z = zone(&[("evil/config", "[core]\n\tfsmonitor = touch /tmp/pwned\n"), ("evil/hooks/pre-commit", "#!/bin/sh\n"), ("evil/refs/heads/x", "")]);
    let worker = [
        ("evil/config", "[core]\n\tfsmonitor = touch /tmp/pwned\n"),
        ("evil/hooks/pre-commit", "#!/bin/sh\n"),
        ("evil/refs/heads/x", ""),
        ("evil/HEAD", "ref: refs/heads/x\n"),
        ("evil/objects/info/packs", ""),
        ("evil/commondir", "."),
        ("fine/HEAD", "a file called HEAD in a directory without git internals"),
    ];
    let handle = fs::File::open(&z.zone).unwrap();
    let copy = baseline::copy_in(&handle, "zone", me(), &Policy::default()).unwrap();
    let mut staging = Staging::new().unwrap();
    let collected = collect_tar(&archive(&worker)[..], &Policy::default(), &mut staging).unwrap();
    let mut changes = publish::diff("zone", &handle, &copy.baseline, &collected);
    changes.withhold_hostrun(&collected, &workcell::hostrun::Protection::default());
    let s = changes.publish(&handle, &staging, Identity::Own);
    eprintln!("{}", s.text());
    for made in ["evil/HEAD", "evil/objects", "evil/commondir"] {
        assert!(!z.zone.join(made).exists(), "{made} was published: evil/ is now a git directory with the host's config");
    }
    assert!(z.zone.join("fine/HEAD").is_file(), "an unrelated HEAD file is published");
    let refused: Vec<&str> = s.refused.iter().map(|r| r.path.as_str()).collect();
    for r in ["evil/HEAD", "evil/commondir", "evil/objects/"] {
        assert!(refused.contains(&r), "{r} not named as refused: {refused:?}");
    }
}

/// The worker replaced the directory `d` by a file `d`. The host did not change anything:
/// the summary must not say so ("changed on the host during the run"), and the worker's
/// half-change must not empty the host's directory while its file is not written. It is
/// refused (a file where a directory is), and the host's `d/` stays as it is.
#[test]
fn a_directory_the_worker_replaced_by_a_file_is_refused_not_a_host_conflict() {
    let z = zone(&[("d/x.md", "x"), ("d/sub/y.md", "y"), ("other.md", "o")]);
    let s = publish_with(&z, &[("d", "now a file"), ("other.md", "o2")], |_| {});
    eprintln!("{}", s.text());
    assert!(s.conflicts.is_empty(), "a host change was reported that never happened: {s:?}");
    assert!(s.refused.iter().any(|r| r.path == "d" && r.reason == workcell::delivery::Reason::TypeClash), "{s:?}");
    assert_eq!(fs::read_to_string(z.zone.join("d/x.md")).unwrap(), "x");
    assert_eq!(fs::read_to_string(z.zone.join("d/sub/y.md")).unwrap(), "y");
    assert!(s.deleted.is_empty() && s.dirs_deleted.is_empty(), "{s:?}");
    assert_eq!(fs::read_to_string(z.zone.join("other.md")).unwrap(), "o2");
}
