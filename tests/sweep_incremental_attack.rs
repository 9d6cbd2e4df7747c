//! More attacks on the walks that list only the directories that changed (issue 38,
//! `hostrun::looked`), beyond tests/sweep_incremental.rs: ways a worker could try to change a
//! directory's names while its (device, inode, ctime) stays what a record says, or to reach the
//! records themselves. Each runs as separate `workcell run`s and as calls of one `workcell mcp`
//! session, on bwrap and on docker (`image: host`), against a tree left alone for [`SETTLE`]
//! and then looked at once, so that the attack meets records that are trusted.
//!
//! - `renameat2(RENAME_EXCHANGE)`: a directory holding `run.sh` (protected by nothing where it
//!   lies) swapped with a recorded `tools/` (where `protect: [tools/run.sh]` protects it): both
//!   are the same objects as before, at each other's paths;
//! - `O_TMPFILE` + `linkat`: a file made with no name at all, then given the name `.envrc` in a
//!   recorded leaf (no `creat` in that directory ever);
//! - inode reuse: a recorded, empty directory removed, and a new one made at the same path with
//!   the same inode number (files are made until one gets the old number, which is then freed
//!   for the directory): a walk that keyed records by path and inode alone would trust it;
//! - the clock: the worker cannot set it (`date -s`), so it cannot give a change an old ctime;
//! - the records: a worker whose zone is the project directory can neither write, replace nor
//!   move `.workcell/looked/` (nor `.workcell/`), and the file workcell keeps there is its own.
//!
//! Every plant's file and directories get their times set back to [`OLD`] afterwards, as a
//! worker covering its tracks would; each must be moved aside before workcell returns.

mod support;

use std::path::PathBuf;

use serde_json::Value;

use support::sweep::{Scratch, Step, Way, Worker, OLD, SETTLE};

/// `d0`..`d3` / `d0`..`d3`, a `README.md` in each, `reuse/x` empty, `tools/readme.txt`
/// (the protected `tools/run.sh` missing) and `stage/run.sh` (a script nothing protects
/// where it is); the worker's, times set back, then left alone for [`SETTLE`].
fn tree(s: &Scratch) {
    s.leaves(2, 4);
    let out = s.out();
    std::fs::create_dir_all(out.join("reuse/x")).expect("mkdir");
    std::fs::create_dir_all(out.join("tools")).expect("mkdir");
    std::fs::write(out.join("tools/readme.txt"), "tools\n").expect("write");
    std::fs::create_dir_all(out.join("stage")).expect("mkdir");
    std::fs::write(out.join("stage/run.sh"), "#!/bin/sh\necho exchanged-run-sh\n").expect("write");
    s.settle_tree();
}

/// [`Scratch::assert_moved_aside`], and the text names `rel` itself as moved aside.
fn assert_moved_aside(s: &Scratch, rel: &str, marker: &str, step: &Step) {
    s.assert_moved_aside(rel, marker, step);
    assert!(step.notes.contains(&format!("moved aside {rel}")), "what was moved aside is told: {step}");
}

/// A command that changes nothing in the zone: the run or call whose walks record the tree.
const HARMLESS: &str = "cd /out && ls -R >/dev/null && echo looked";

/// The attack, in one command: the three plants (python3 is the host's, `image: host`), the
/// clock tried, every time set back.
fn attack() -> String {
    let python = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
# RENAME_EXCHANGE (2): stage/ and tools/ swap places, each the same object as before.
r = libc.renameat2(-100, b"stage", -100, b"tools", 2)
print("EXCHANGED" if r == 0 else "EXCHANGE-FAILED %d" % ctypes.get_errno())
# O_TMPFILE, then linkat(AT_SYMLINK_FOLLOW) through /proc: a name given to a file made nameless.
d = os.open("d2/d1", os.O_RDONLY | os.O_DIRECTORY)
fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o755, dir_fd=d)
os.write(fd, b"echo tmpfile-envrc\n")
os.link("/proc/self/fd/%d" % fd, ".envrc", dst_dir_fd=d, follow_symlinks=True)
print("LINKED")
# The same inode number for a new directory at a recorded path: files are made until one
# gets the old number, which is freed just before the directory is made.
old = os.stat("reuse/x").st_ino
same = False
for attempt in range(20):
    os.rmdir("reuse/x")
    made = []
    for i in range(256):
        n = "reuse/f%d-%d" % (attempt, i)
        open(n, "w").close()
        if os.stat(n).st_ino == old:
            os.unlink(n)
            break
        made.append(n)
    os.mkdir("reuse/x")
    for n in made:
        os.unlink(n)
    if os.stat("reuse/x").st_ino == old:
        same = True
        break
print("REUSED" if same else "NOT-REUSED")
with open("reuse/x/.envrc", "w") as f:
    f.write("echo reused-envrc\n")
"#;
    format!(
        "set -e\ncd /out\npython3 - <<'PY'\n{python}\nPY\n\
         if date -s @{OLD} >/dev/null 2>&1; then echo CLOCK-SET; else echo CLOCK-REFUSED; fi\n\
         for p in tools/run.sh tools stage d2/d1/.envrc d2/d1 d2 reuse/x/.envrc reuse/x reuse .; do touch -h -d @{OLD} \"$p\"; done\n\
         for p in tools/run.sh d2/d1/.envrc reuse/x/.envrc; do [ -e \"$p\" ] && echo \"PLANTED $p\"; done; true"
    )
}

fn attacks(backend: &'static str, way: Way) {
    let s = Scratch::new(&["tools/run.sh"]);
    tree(&s);
    let Some(mut w) = Worker::start(&s, backend, way) else { return };
    let looked = w.step(HARMLESS);
    assert_eq!(looked.code, Some(0), "{looked}");
    assert!(!looked.notes.contains("moved aside"), "the tree as made holds nothing to move: {looked}");
    assert!(s.in_place("stage/run.sh"), "nothing protects stage/run.sh: {looked}");
    let step = w.step(&attack());
    assert_eq!(step.code, Some(0), "{step}");
    for line in ["EXCHANGED", "LINKED", "CLOCK-REFUSED", "PLANTED tools/run.sh", "PLANTED d2/d1/.envrc", "PLANTED reuse/x/.envrc"] {
        assert!(step.stdout.lines().any(|l| l == line), "{line} missing: {step}");
    }
    if !step.stdout.contains("REUSED") || step.stdout.contains("NOT-REUSED") {
        eprintln!("note: the file system gave the new directory another inode number; the case ran as a plain re-made directory");
    }
    assert_moved_aside(&s, "tools/run.sh", "exchanged-run-sh", &step);
    assert_moved_aside(&s, "d2/d1/.envrc", "tmpfile-envrc", &step);
    assert_moved_aside(&s, "reuse/x/.envrc", "reused-envrc", &step);
    w.end();
}

/// The records are out of the worker's reach even when its zone is the project directory.
fn records_out_of_reach(backend: &'static str) {
    let s = Scratch::whole(&[]);
    std::fs::create_dir_all(s.proj().join("d/e")).expect("mkdir");
    support::give_to_worker(&s.root);
    std::thread::sleep(SETTLE);
    let first = support::workcell_sh(&s.proj(), backend, &[], "true").output().expect("run");
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let dir = s.proj().join(".workcell/looked");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir).expect("records kept").flatten().map(|e| e.path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    let script = format!(
        "cd /w; for t in \\\n\
         'printf {{}} > .workcell/looked/{name}' \\\n\
         'rm -f .workcell/looked/{name}' \\\n\
         'mkdir -p .workcell/looked2' \\\n\
         'mv .workcell/looked .workcell/l2' \\\n\
         'mv .workcell .wc2' \\\n\
         'ln -s /tmp .workcell/x'; do if sh -c \"$t\" 2>/dev/null; then echo \"DID $t\"; fi; done; echo tried"
    );
    let o = support::workcell_sh(&s.proj(), backend, &[], &script).output().expect("run");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("tried") && !stdout.contains("DID"), "{stdout}\n{}", String::from_utf8_lossy(&o.stderr));
    let after = std::fs::read(&files[0]).expect("still there");
    let v: Value = serde_json::from_slice(&after).expect("workcell's own records");
    assert!(v["looks"].as_array().is_some_and(|l| !l.is_empty()), "{v}");
}

support::sweep::sweep_cases!([bwrap = "bwrap", docker = "docker"] {
    exchange_tmpfile_inode_reuse_across_runs: attacks(Way::Runs);
    exchange_tmpfile_inode_reuse_in_a_session: attacks(Way::Session);
    records_are_out_of_the_workers_reach: records_out_of_reach();
});
