//! Attacks on a sweep that looks only where something changed (issue 38). After every run and
//! every `workcell mcp` `shell` call the writable zones are swept for files the host runs that
//! the worker planted; a sweep (and a launch walk) that lists only the directories whose
//! (device, inode, ctime) moved since they were last looked at must still find each of these,
//! and so must the full walk before it: these tests pass on both and guard the change.
//!
//! Each case runs as separate `workcell run`s and as calls of one `workcell mcp` session (the
//! official MCP SDK as the client, tests/mcp_session.rs), on bwrap and on docker (`image:
//! host`). The zone is a tree of 8 × 8 × 8 directories (584, a file in each leaf), left alone
//! for [`SETTLE`] before the first run or call that looks at it, so that records of it exist
//! and may be trusted when the attack comes. Every plant is checked twice:
//!
//! - inside the sandbox, in the same command, after the times were set back: the file is there
//!   and it and the directories whose times were set back show the old time (`RESET path`
//!   lines), so the plant was really made and really hidden from anything that reads mtimes.
//!   Some plants set back every directory on their way (which moves those ctimes), others
//!   only what the plant itself changed (an attacker who knows the walk trusts ctimes leaves
//!   the directories above alone);
//! - on the host afterwards: it is no longer where the host's tools look, it is in the zone's
//!   `.workcell/quarantine/RUN_ID/` (found by its unique content, or for hard links by inode),
//!   and the run's stderr (the call's text) says it was moved aside. A file under a name no
//!   entry protects, written beside it in the same command, is still in place (the control:
//!   the worker wrote where the test looks, and the sweep moved only what it had to).
//!
//! The attacks (issue 38, "Acceptance"): a plant deep in the tree whose times are then set
//! back; a directory moved in from elsewhere in the zone, at the top and from a deep sibling,
//! into a place only the path makes protected; a hard link under a protected name made in a
//! later call than its file; a writer that outlives its call or run; and protection that
//! widens between runs (a `protect:` entry, a repository's `core.hooksPath`) over directories
//! that did not change, where the worker then writes in place.

mod support;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use support::sweep::{Scratch, Step, Way, Worker, OLD, SETTLE};

/// The tree: `d0`..`d7` at each of three levels, a `README.md` in each leaf.
const FANOUT: usize = 8;
/// How long the worker's background writer waits before it plants (case "outlives").
const WRITER_DELAY: &str = "0.3";
/// How long the test waits after the writer's call or run before looking (well past the
/// writer's delay; the writer either is gone or has planted by then).
const AFTER_WRITER: Duration = Duration::from_millis(1_500);

/// The zone's tree (and `repos`, each a repository the person made, with no `hooks`
/// directory yet), the worker's, every time set back to [`OLD`]; then left alone for
/// [`SETTLE`].
fn tree(s: &Scratch, repos: &[&str]) {
    s.leaves(3, FANOUT);
    let out = s.out();
    for repo in repos {
        std::fs::create_dir_all(out.join(repo)).expect("mkdir");
        let r = support::host_git(&out.join(repo), &["init", "-q", "."]);
        assert!(r.status.success(), "git init {repo}: {}", String::from_utf8_lossy(&r.stderr));
        std::fs::remove_dir_all(out.join(repo).join(".git/hooks")).expect("no hooks yet");
    }
    s.settle_tree();
}

/// A command that changes nothing in the zone (it only reads it): the run or call whose walks
/// record the tree.
const HARMLESS: &str = "cd /out && ls >/dev/null && echo looked";

/// `rel` and every directory on its way from the zone's root (`.` first).
fn on_the_way(rel: &str) -> Vec<String> {
    let mut out = vec![".".to_string()];
    let mut acc = String::new();
    for part in rel.split('/') {
        if !acc.is_empty() {
            acc.push('/');
        }
        acc.push_str(part);
        out.push(acc.clone());
    }
    out
}

/// The paths a plant changed the times of, to set back: `rel` and each directory on its way
/// (`.` too) when `whole_way`, else `rel` and only the directories named in `changed` (what
/// the plant itself changed: setting an untouched directory's times back would move its
/// ctime, and show a walk that trusts ctimes where to look).
fn to_reset(rel: &str, whole_way: bool, changed: &[&str]) -> Vec<String> {
    let mut paths = if whole_way { on_the_way(rel) } else { vec![rel.to_string()] };
    paths.extend(changed.iter().map(|c| c.to_string()));
    paths
}

/// The worker's script: `body` in `/out` (`set -e`), then the times of each of `reset` set
/// back to [`OLD`] (one the worker may not touch, bound read-only, is said: `UNTOUCHED
/// path`), then a `RESET path` line for each of them that exists and shows that time.
fn script(body: &str, reset: &[String]) -> String {
    let mut paths: Vec<&str> = Vec::new();
    for p in reset {
        if !paths.contains(&p.as_str()) {
            paths.push(p);
        }
    }
    // Deepest first, so that nothing is touched after its time was set (touch changes no
    // directory's times, but a reader should not have to know that).
    paths.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count() + usize::from(*p != ".")));
    let list = paths.join(" ");
    format!(
        "set -e\ncd /out\n{body}\nfor p in {list}; do touch -h -d @{OLD} \"$p\" || echo \"UNTOUCHED $p\"; done\n\
         for p in {list}; do if [ -e \"$p\" ] && [ \"$(stat -c %Y \"$p\")\" = {OLD} ]; then echo \"RESET $p\"; fi; done\n"
    )
}

/// The plant's command ran, and each of `reset` (the plants among them) was there with its
/// times set back, inside the sandbox.
fn assert_planted(step: &Step, reset: &[String]) {
    assert_eq!(step.code, Some(0), "the worker's script failed: {step}");
    for p in reset {
        assert!(step.stdout.lines().any(|l| l == format!("RESET {p}")), "{p} was not there with its times set back: {step}");
    }
}

mod body {
    use super::*;

    /// Issue 38: "plant a protected file deep in the tree and then reset the times of its
    /// directories". A first run or call records the tree; the next plants, each three levels
    /// down or more, and sets times back:
    ///
    /// - `d3/d5/d7/.envrc` in an existing leaf, the times of the file and of every directory
    ///   on its way set back (an mtime tells nothing);
    /// - `d4/d2/d6/.envrc`, only the file's and the leaf's times set back (the directories
    ///   above keep their ctimes: a walk must still look at each directory beneath one that
    ///   did not change);
    /// - `d6/d1/d2/new/deeper/.envrc` in new directories below a leaf;
    /// - `d1/d4/d6/repo/.git/hooks/pre-commit` in a repository the person made, which had no
    ///   `hooks` directory (its `config` is bound read-only, `.git` itself stays writable).
    pub fn deep_plant_with_times_set_back(backend: &'static str, way: Way) {
        let s = Scratch::new(&[]);
        tree(&s, &["d1/d4/d6/repo"]);
        let Some(mut w) = Worker::start(&s, backend, way) else { return };
        let first = w.step(HARMLESS);
        assert_eq!(first.code, Some(0), "{first}");
        assert!(!first.notes.contains("moved aside"), "the tree as made holds nothing to move: {first}");
        let plants = [
            ("d3/d5/d7/.envrc", "deep-envrc-whole-way"),
            ("d4/d2/d6/.envrc", "deep-envrc-leaf-only"),
            ("d6/d1/d2/new/deeper/.envrc", "deep-envrc-new-dirs"),
            ("d1/d4/d6/repo/.git/hooks/pre-commit", "deep-hook-in-repo"),
        ];
        let body = format!(
            "echo 'echo {m0}' > {p0}\necho 'echo {m1}' > {p1}\nmkdir -p d6/d1/d2/new/deeper\necho 'echo {m2}' > {p2}\n\
             mkdir d1/d4/d6/repo/.git/hooks\nprintf '#!/bin/sh\\necho {m3}\\n' > {p3}\nchmod +x {p3}\n\
             echo control-leaf > d3/d5/d7/notes.txt\necho control-new > d6/d1/d2/new/deeper/notes.txt",
            p0 = plants[0].0,
            m0 = plants[0].1,
            p1 = plants[1].0,
            m1 = plants[1].1,
            p2 = plants[2].0,
            m2 = plants[2].1,
            p3 = plants[3].0,
            m3 = plants[3].1,
        );
        let reset = [
            to_reset(plants[0].0, true, &["d3/d5/d7/notes.txt"]),
            to_reset(plants[1].0, false, &["d4/d2/d6"]),
            to_reset(plants[2].0, false, &["d6/d1/d2/new/deeper/notes.txt", "d6/d1/d2/new/deeper", "d6/d1/d2/new", "d6/d1/d2"]),
            to_reset(plants[3].0, false, &["d1/d4/d6/repo/.git/hooks", "d1/d4/d6/repo/.git"]),
        ]
        .concat();
        let step = w.step(&script(&body, &reset));
        assert_planted(&step, &reset);
        // Right after the call or run that planted them, before anything else runs.
        for (rel, marker) in plants {
            s.assert_moved_aside(rel, marker, &step);
        }
        s.assert_kept("d3/d5/d7/notes.txt", "control-leaf", &step);
        s.assert_kept("d6/d1/d2/new/deeper/notes.txt", "control-new", &step);
        s.assert_kept("d1/d4/d6/repo/.git/HEAD", "ref:", &step);
        w.end();
    }

    /// The entries the rename cases protect: a hooks directory (a repository's
    /// `core.hooksPath`) and one script the person runs (`make deploy` calls it), each only by
    /// the path it lies at.
    const BY_PATH: &[&str] = &["tools/git/hooks", "tools/ci/build.sh"];

    /// Issue 38: "move a directory holding one in from elsewhere in the zone". With
    /// [`BY_PATH`], `tmp/staging/git/hooks/pre-commit` and `tmp/staging/ci/build.sh` are
    /// protected by nothing: a run or call makes them and they stay, so the walks after it
    /// record `tmp/staging`, `git`, `hooks` and `ci` as holding nothing protected (`build.sh`
    /// only counted). Left alone, then recorded again; then `mv tmp/staging tools`, times set
    /// back: `git`, `hooks` and `ci` are the same directories with the same ctimes, now at
    /// protected paths (a walk that knew a directory by its identity alone would trust
    /// `tools/ci` and never judge `build.sh` again).
    pub fn directory_renamed_in_at_the_top(backend: &'static str, way: Way) {
        let s = Scratch::new(BY_PATH);
        tree(&s, &[]);
        let Some(mut w) = Worker::start(&s, backend, way) else { return };
        let made = w.step(
            "set -e\ncd /out\nmkdir -p tmp/staging/git/hooks tmp/staging/ci\nprintf '#!/bin/sh\\necho renamed-top-hook\\n' > tmp/staging/git/hooks/pre-commit\n\
             chmod +x tmp/staging/git/hooks/pre-commit\nprintf '#!/bin/sh\\necho renamed-top-script\\n' > tmp/staging/ci/build.sh\n\
             echo control > tmp/staging/git/notes.txt\necho made",
        );
        assert_eq!(made.code, Some(0), "{made}");
        assert!(!made.notes.contains("moved aside"), "nothing protected was made yet: {made}");
        std::thread::sleep(SETTLE);
        let looked = w.step(HARMLESS);
        assert!(!looked.notes.contains("moved aside"), "{looked}");
        s.assert_kept("tmp/staging/git/hooks/pre-commit", "renamed-top-hook", &looked);
        s.assert_kept("tmp/staging/ci/build.sh", "renamed-top-script", &looked);
        let plants = [("tools/git/hooks/pre-commit", "renamed-top-hook"), ("tools/ci/build.sh", "renamed-top-script")];
        let planted: Vec<&str> = plants.iter().map(|(p, _)| *p).collect();
        // What the move changed: the zone's top (a name gone, one new) and the moved
        // directory itself; `git`, `hooks` and `ci` below it are untouched.
        let reset: Vec<String> = [&planted[..], &[".", "tools"]].concat().into_iter().map(String::from).collect();
        let step = w.step(&script("mv tmp/staging tools\nrmdir tmp", &reset));
        assert_planted(&step, &reset);
        for (rel, marker) in plants {
            s.assert_moved_aside(rel, marker, &step);
        }
        assert!(step.notes.contains("moved aside tools/git/hooks") && step.notes.contains("moved aside tools/ci/build.sh"), "{step}");
        s.assert_kept("tools/git/notes.txt", "control", &step);
        assert!(!s.in_place("tmp"), "the worker's rmdir tmp ran");
        w.end();
    }

    /// The same from deep inside the tree, into a sibling deep elsewhere: `d1/d2/d3/staging`
    /// becomes `d6/d5/d4/tools` ([`BY_PATH`]), `d1/d2/d3/stash` holding `hooks/post-checkout`
    /// becomes `d6/d5/d4/.git` (the default `.git/hooks`), and a file `d7/d0/d1/envrc.txt`
    /// becomes `d0/d7/d6/.envrc` (the default `.envrc`).
    pub fn directory_moved_in_from_a_deep_sibling(backend: &'static str, way: Way) {
        let s = Scratch::new(BY_PATH);
        tree(&s, &[]);
        let Some(mut w) = Worker::start(&s, backend, way) else { return };
        let made = w.step(
            "set -e\ncd /out\nmkdir -p d1/d2/d3/staging/git/hooks d1/d2/d3/staging/ci d1/d2/d3/stash/hooks\n\
             printf '#!/bin/sh\\necho sibling-hook\\n' > d1/d2/d3/staging/git/hooks/pre-commit\n\
             printf '#!/bin/sh\\necho sibling-script\\n' > d1/d2/d3/staging/ci/build.sh\n\
             printf '#!/bin/sh\\necho sibling-git\\n' > d1/d2/d3/stash/hooks/post-checkout\n\
             echo 'echo sibling-envrc' > d7/d0/d1/envrc.txt\necho control > d1/d2/d3/staging/git/notes.txt\necho made",
        );
        assert_eq!(made.code, Some(0), "{made}");
        assert!(!made.notes.contains("moved aside"), "nothing protected was made yet: {made}");
        std::thread::sleep(SETTLE);
        let looked = w.step(HARMLESS);
        assert!(!looked.notes.contains("moved aside"), "{looked}");
        for (rel, m) in [
            ("d1/d2/d3/staging/git/hooks/pre-commit", "sibling-hook"),
            ("d1/d2/d3/staging/ci/build.sh", "sibling-script"),
            ("d1/d2/d3/stash/hooks/post-checkout", "sibling-git"),
            ("d7/d0/d1/envrc.txt", "sibling-envrc"),
        ] {
            s.assert_kept(rel, m, &looked);
        }
        let plants = [
            ("d6/d5/d4/tools/git/hooks/pre-commit", "sibling-hook"),
            ("d6/d5/d4/tools/ci/build.sh", "sibling-script"),
            ("d6/d5/d4/.git/hooks/post-checkout", "sibling-git"),
            ("d0/d7/d6/.envrc", "sibling-envrc"),
        ];
        let planted: Vec<&str> = plants.iter().map(|(p, _)| *p).collect();
        // What the moves changed: both ends of each (the directories left and entered) and
        // the moved directories themselves; nothing below them, nothing above.
        let changed = ["d1/d2/d3", "d6/d5/d4", "d6/d5/d4/tools", "d6/d5/d4/.git", "d7/d0/d1", "d0/d7/d6"];
        let reset: Vec<String> = [&planted[..], &changed[..]].concat().into_iter().map(String::from).collect();
        let step = w.step(&script("mv d1/d2/d3/staging d6/d5/d4/tools\nmv d1/d2/d3/stash d6/d5/d4/.git\nmv d7/d0/d1/envrc.txt d0/d7/d6/.envrc", &reset));
        assert_planted(&step, &reset);
        for (rel, marker) in plants {
            s.assert_moved_aside(rel, marker, &step);
        }
        s.assert_kept("d6/d5/d4/tools/git/notes.txt", "control", &step);
        w.end();
    }

    /// Issue 38: "works through hard links". A file made in one run or call (under a name
    /// nothing protects, so it stays) is linked under protected names in a later one, after
    /// the tree was recorded again: `.envrc` in an untouched leaf, `.git/hooks/post-checkout`
    /// in a new `.git` of another; the times of what the links changed set back (the leaves,
    /// the new directories, the file: a link moves its ctime, not its mtime).
    pub fn hard_link_made_in_a_later_call(backend: &'static str, way: Way) {
        let s = Scratch::new(&[]);
        tree(&s, &[]);
        let Some(mut w) = Worker::start(&s, backend, way) else { return };
        let made = w.step("set -e\ncd /out\nprintf '#!/bin/sh\\necho linked-payload\\n' > d1/d1/d1/payload\nchmod +x d1/d1/d1/payload\necho made");
        assert_eq!(made.code, Some(0), "{made}");
        s.assert_kept("d1/d1/d1/payload", "linked-payload", &made);
        std::thread::sleep(SETTLE);
        let looked = w.step(HARMLESS);
        assert!(!looked.notes.contains("moved aside"), "{looked}");
        let plants = ["d6/d6/d6/.envrc", "d2/d2/d2/.git/hooks/post-checkout"];
        let changed = ["d6/d6/d6", "d2/d2/d2", "d2/d2/d2/.git", "d2/d2/d2/.git/hooks", "d1/d1/d1/payload"];
        let reset: Vec<String> = [&plants[..], &changed[..]].concat().into_iter().map(String::from).collect();
        let step = w.step(&script(
            "ln d1/d1/d1/payload d6/d6/d6/.envrc\nmkdir -p d2/d2/d2/.git/hooks\nln d1/d1/d1/payload d2/d2/d2/.git/hooks/post-checkout\n\
             stat -c 'LINKS %h' d1/d1/d1/payload",
            &reset,
        ));
        assert_planted(&step, &reset);
        assert!(step.stdout.contains("LINKS 3"), "the links were made: {step}");
        for rel in plants {
            assert!(!s.in_place(rel), "{rel} stayed in place: {step}");
        }
        assert!(step.notes.contains("moved aside"), "{step}");
        // Both names are in the quarantine, as the payload's own inode; the payload stays.
        s.assert_kept("d1/d1/d1/payload", "linked-payload", &step);
        let ino = s.out().join("d1/d1/d1/payload").symlink_metadata().expect("payload").ino();
        let linked = s.quarantine().into_iter().filter(|(_, md)| md.ino() == ino).count();
        assert_eq!(linked, 2, "both links are in .workcell/quarantine: {:?}", s.quarantine());
        w.end();
    }

    /// Issue 38: "write one from a process that outlives its call". A call or run starts a
    /// writer in a session of its own that plants `x/y/.envrc` after a delay, and returns as
    /// soon as the writer has begun. After the delay (and, for a session, a later call),
    /// `x/y/.envrc` is not in the zone: the writer was killed with its call (issue 36) or its
    /// plant was moved aside by a later sweep. `x-late` (nothing protects it), written just
    /// after the plant, tells which.
    pub fn writer_that_outlives_its_call(backend: &'static str, way: Way) {
        let s = Scratch::new(&[]);
        tree(&s, &[]);
        let Some(mut w) = Worker::start(&s, backend, way) else { return };
        let first = w.step(HARMLESS);
        assert_eq!(first.code, Some(0), "{first}");
        let writer = format!(
            "rm -f /tmp/writer-began\n\
             setsid sh -c 'echo began > /tmp/writer-began; sleep {WRITER_DELAY}; mkdir -p /out/x/y; echo \"echo outlived-writer\" > /out/x/y/.envrc; echo late > /out/x-late' </dev/null >/dev/null 2>&1 &\n\
             while [ ! -e /tmp/writer-began ]; do sleep 0.02; done\necho WRITER-BEGAN"
        );
        let started = w.step(&writer);
        assert_eq!(started.code, Some(0), "{started}");
        assert!(started.stdout.contains("WRITER-BEGAN"), "the writer was started and ran: {started}");
        std::thread::sleep(AFTER_WRITER);
        let survived_before = s.in_place("x-late");
        if way == Way::Runs {
            // Between runs nothing sweeps: a plant there now would meet the person's tools.
            assert!(!s.in_place("x/y/.envrc"), "a writer left by a run planted x/y/.envrc after its sweep (x-late: {survived_before})");
        }
        let later = w.step(HARMLESS);
        assert_eq!(later.code, Some(0), "{later}");
        assert!(!s.in_place("x/y/.envrc"), "x/y/.envrc is in place after a later call (the writer survived: {})", s.in_place("x-late"));
        w.end();
        let survived = s.in_place("x-late");
        assert!(!s.in_place("x/y/.envrc"), "x/y/.envrc is in place after the session ended (the writer survived: {survived})");
        if survived {
            // It outlived its call: then its plant must have been moved aside.
            eprintln!("note: the writer outlived its call ({way:?}); its plant was moved aside");
            assert!(!s.quarantined_holding("outlived-writer").is_empty(), "x-late exists, so the writer planted; the plant is not in the quarantine");
        } else {
            eprintln!("note: the writer died with its call ({way:?}): nothing was planted");
        }
    }

    /// Protection that widens between runs over directories that did not change: the records
    /// of the earlier walks were made with the narrower protection and must not serve the
    /// wider one. A first run makes `d5/d5/d5/tools/git/hooks/pre-commit`,
    /// `d5/d5/d5/tools/run.sh` and `d2/d3/d4/repo/.githooks/pre-commit`, protected by nothing
    /// then (they stay); a second records the tree. Then the person adds `protect:
    /// [tools/git/hooks, tools/run.sh]` (a directory entry and a file entry: a record keeps a
    /// directory's subdirectories, but a file nothing protected was only counted) and sets
    /// `core.hooksPath = .githooks` in the repository's config (appended in place: no
    /// directory changes). The next run's worker writes all three in place (no directory
    /// changes either) and sets their times back. For that run they are the person's
    /// protected files: bound read-only (the write fails) or moved aside; either way the
    /// worker's text is not where git and the person's tools look. A file beside them under a
    /// name nothing protects takes the same write (the control).
    pub fn protection_widened_between_runs(backend: &'static str) {
        let s = Scratch::new(&[]);
        tree(&s, &["d2/d3/d4/repo"]);
        let Some(mut w) = Worker::start(&s, backend, Way::Runs) else { return };
        let files = ["d5/d5/d5/tools/git/hooks/pre-commit", "d5/d5/d5/tools/run.sh", "d2/d3/d4/repo/.githooks/pre-commit"];
        let control = "d5/d5/d5/tools/git/notes.txt";
        let list = [&files[..], &[control]].concat().join(" ");
        let made = w.step(&format!(
            "set -e\ncd /out\nmkdir -p d5/d5/d5/tools/git/hooks d2/d3/d4/repo/.githooks\n\
             for f in {list}; do printf '#!/bin/sh\\necho first-version\\n' > $f; chmod +x $f; done\necho made",
        ));
        assert_eq!(made.code, Some(0), "{made}");
        assert!(!made.notes.contains("moved aside"), "nothing protected was made yet: {made}");
        std::thread::sleep(SETTLE);
        let looked = w.step(HARMLESS);
        assert!(!looked.notes.contains("moved aside"), "{looked}");
        for f in files {
            s.assert_kept(f, "first-version", &looked);
        }
        // The person widens the protection: no directory of the zone changes.
        s.configure(&["tools/git/hooks", "tools/run.sh"]);
        let config = s.out().join("d2/d3/d4/repo/.git/config");
        let mut f = std::fs::OpenOptions::new().append(true).open(&config).expect("repository config");
        f.write_all(b"[core]\n\thooksPath = .githooks\n").expect("append");
        drop(f);
        let step = w.step(&script(
            &format!("for f in {list}; do if printf '#!/bin/sh\\necho in-place-write\\n' > $f; then echo \"WROTE $f\"; fi; done"),
            &[&files[..], &[control]].concat().into_iter().map(String::from).collect::<Vec<_>>(),
        ));
        assert_eq!(step.code, Some(0), "{step}");
        assert!(step.stdout.contains(&format!("WROTE {control}")), "the control was written in place: {step}");
        s.assert_kept(control, "in-place-write", &step);
        for f in files {
            match std::fs::read_to_string(s.out().join(f)) {
                Ok(now) => assert!(now.contains("first-version"), "{f} holds the worker's write {now:?} where the person's tools look: {step}"),
                // Moved aside: then it is in the quarantine, whichever text it held.
                Err(_) => {
                    assert!(!s.in_place(f), "{f}: {step}");
                    assert!(!s.quarantine().is_empty(), "{f} is gone but not in the quarantine: {step}");
                }
            }
        }
    }
}

// One test per case and way of running the worker, on bwrap and on docker.
support::sweep::sweep_cases!([bwrap = "bwrap", docker = "docker"] {
    deep_plant_with_times_set_back_across_runs: body::deep_plant_with_times_set_back(Way::Runs);
    deep_plant_with_times_set_back_in_a_session: body::deep_plant_with_times_set_back(Way::Session);
    directory_renamed_into_a_protected_path_across_runs: body::directory_renamed_in_at_the_top(Way::Runs);
    directory_renamed_into_a_protected_path_in_a_session: body::directory_renamed_in_at_the_top(Way::Session);
    directory_moved_in_from_a_deep_sibling_across_runs: body::directory_moved_in_from_a_deep_sibling(Way::Runs);
    directory_moved_in_from_a_deep_sibling_in_a_session: body::directory_moved_in_from_a_deep_sibling(Way::Session);
    hard_link_under_a_protected_name_across_runs: body::hard_link_made_in_a_later_call(Way::Runs);
    hard_link_under_a_protected_name_in_a_session: body::hard_link_made_in_a_later_call(Way::Session);
    writer_outliving_its_run_plants_nothing: body::writer_that_outlives_its_call(Way::Runs);
    writer_outliving_its_call_plants_nothing: body::writer_that_outlives_its_call(Way::Session);
    protection_widened_between_runs_over_unchanged_directories: body::protection_widened_between_runs();
});
