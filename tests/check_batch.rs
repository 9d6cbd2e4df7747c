//! `check --stdin`'s batch path (`Querier`: cached parent handles, several threads) gives
//! exactly the verdicts of the one-at-a-time path (`Sandbox::verdict`), in input order, on
//! a tree built to trip it: symlinks in, out, up past their parent, dangling, looping and
//! absolute; files as parents, FIFOs, oversize files, missing paths, very long paths,
//! refused forms, and more directories than the handle cache holds.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use workcell::config::Project;
use workcell::sandbox::{Querier, Sandbox, SandboxError, QUERY_HANDLES};

const CONFIG: &str = "sandbox:\n  zones:\n    data: {path: ./data, mode: ro, suffixes: [.txt, .md], max_file_bytes: 10}\n    out: {path: ./out, mode: rw}\n    src: {path: ./src, mode: ro}\n    docs: {path: ./docs, mode: rw, suffixes: [.md]}\n";
/// A worker whose write areas (`/out/sub`, `/docs/w`) are deeper than its read areas.
const NARROW: &str = "---\nsandbox:\n  allow_read: [/out, /data/sub, /docs]\n  allow_write: [/out/sub, /docs/w]\n---\nNarrow.\n";
/// Directories under `data/many`: more than the cache holds.
const MANY: usize = QUERY_HANDLES + 64;

struct Tree {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

fn tree() -> Tree {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = std::fs::canonicalize(tmp.path()).expect("canonical");
    let dir = root.join("proj");
    let d = |rel: &str| dir.join(rel);
    for rel in ["data/sub/deep/e/f", "data/dir.txt", "out/sub", "src/s", "docs/w/x", "workers"] {
        std::fs::create_dir_all(d(rel)).expect("mkdir");
    }
    std::fs::create_dir_all(root.join("outside")).expect("mkdir");
    std::fs::write(root.join("outside/secret.txt"), "SECRET").expect("write");
    for (rel, text) in [("data/a.txt", "a"), ("data/big.txt", "0123456789abcdef"), ("data/x.pdf", "%"), ("data/sub/b.md", "b")] {
        std::fs::write(d(rel), text).expect("write");
    }
    for (rel, text) in [("data/sub/deep/e/f/g.txt", "g"), ("out/a.txt", "a"), ("out/sub/c.txt", "c"), ("src/s/main.rs", "fn")] {
        std::fs::write(d(rel), text).expect("write");
    }
    rustix::fs::mkfifoat(rustix::fs::CWD, d("data/fifo.txt"), rustix::fs::Mode::from_raw_mode(0o600)).expect("mkfifo");
    for (link, target) in [
        ("data/link_in", "sub"),
        ("data/link_file.txt", "a.txt"),
        ("data/sub/link_up.txt", "../a.txt"),
        ("data/sub/link_updir", "../sub"),
        ("data/link_out", "../../outside"),
        ("data/link_abs", "/etc"),
        ("data/link_etc", "/etc/passwd"),
        ("data/dangling", "nothere.txt"),
        ("data/dangling_out", "../../nothere"),
        ("data/loop", "loop"),
        ("data/out.txt", "../../outside/secret.txt"),
        ("data/abs.txt", "/etc/hostname"),
        ("data/sub/up_out.txt", "../../../outside/secret.txt"),
        ("data/magic", "/proc/self/root"),
        ("out/sub/link_up.txt", "../a.txt"),
        ("out/link_data", "../data/a.txt"),
    ] {
        symlink(target, d(link)).expect("symlink");
    }
    for i in 0..MANY {
        std::fs::create_dir_all(d(&format!("data/many/d{i}"))).expect("mkdir");
        std::fs::write(d(&format!("data/many/d{i}/f.txt")), "f").expect("write");
    }
    // A chain 40 directories deep, and beside it paths longer than PATH_MAX.
    std::fs::create_dir_all(d(&format!("data/long/{}", "a/".repeat(40)))).expect("mkdir");
    std::fs::write(d(&format!("data/long/{}f.txt", "a/".repeat(40))), "f").expect("write");
    std::fs::write(d("workcell.yaml"), CONFIG).expect("config");
    std::fs::write(d("workers/narrow.worker"), NARROW).expect("worker");
    Tree { _tmp: tmp, dir }
}

/// Paths of every kind, each zone and addressing form, in a fixed shuffled order.
fn paths(dir: &Path) -> Vec<String> {
    let rels = [
        "a.txt",
        "big.txt",
        "x.pdf",
        "sub",
        "sub/b.md",
        "sub/deep/e/f/g.txt",
        "dir.txt",
        "fifo.txt",
        "link_in/b.md",
        "link_in",
        "link_file.txt",
        "sub/link_up.txt",
        "sub/link_updir/b.md",
        "link_out/secret.txt",
        "link_out",
        "link_abs/passwd",
        "link_etc",
        "dangling",
        "dangling_out",
        "loop",
        "loop/x.txt",
        "magic/etc/passwd",
        "missing.txt",
        "missing/dir/x.txt",
        "a.txt/x.txt",
        "fifo.txt/x.txt",
        "sub/../a.txt",
        "sub/./b.md",
        "../data/a.txt",
        "../../etc/passwd",
        "sub/../../out/a.txt",
        "many/d7/f.txt",
        "many/d7/nope/x.txt",
        "many/d7/../d8/f.txt",
        "link_data",
        "sub/c.txt",
        "sub/link_up.txt/x.txt",
        "s/main.rs",
        "ünï/çødé.txt",
        "back\\slash.txt",
        "sub\\b.md",
        "..\\..\\etc",
        "sub/",
        "out.txt",
        "abs.txt",
        "sub/up_out.txt",
    ];
    let long_name = format!("{}.txt", "x".repeat(300));
    let deep = format!("long/{}f.txt", "a/".repeat(40));
    let too_long = format!("{}x.txt", "a/".repeat(2100));
    let missing_deep = format!("long/{}nope/x.txt", "a/".repeat(40));
    let mut all = Vec::new();
    for zone in ["data", "out", "src", "nope"] {
        for rel in rels.iter().copied().chain([long_name.as_str(), deep.as_str(), too_long.as_str(), missing_deep.as_str()]) {
            all.extend([format!("/{zone}/{rel}"), format!("{zone}/{rel}"), format!("{zone}:{rel}")]);
        }
    }
    all.extend((0..MANY).map(|i| format!("/data/many/d{i}/f.txt")));
    all.extend((0..MANY).step_by(3).map(|i| format!("data/many/d{i}/gone/f.txt")));
    let specials = ["/", " ", "~", "~/x", "C:\\x", "/data", "data:", "/out/a\u{1b}[2Jb", "//data//sub//b.md", "/data/sub/", "/out", "/out/new/dir/x"];
    all.extend(specials.iter().map(|s| s.to_string()));
    all.push(format!("{}/data/a.txt", dir.display()));
    // Three rounds in different orders: handles evicted in one round are met again later.
    let mut rounds = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..3 {
        let mut round = all.clone();
        for i in (1..round.len()).rev() {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            round.swap(i, (seed >> 33) as usize % (i + 1));
        }
        rounds.extend(round);
    }
    rounds
}

fn project(dir: &Path) -> Project {
    Project::load(Some(&dir.join("workcell.yaml")), dir).expect("project loads")
}

/// The batch verdicts of `paths`, from `threads` threads sharing one querier.
fn batch(q: &Querier<'_>, paths: &[&str], threads: usize) -> Vec<Result<(), SandboxError>> {
    let per = paths.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = paths.chunks(per).map(|part| s.spawn(move || q.verdicts(part))).collect();
        handles.into_iter().flat_map(|h| h.join().expect("thread")).collect()
    })
}

fn assert_same(sandbox: &Sandbox, what: &str, paths: &[&str], write: bool) {
    let expected: Vec<_> = paths.iter().map(|p| sandbox.verdict(p, write)).collect();
    for (capacity, threads) in [(3, 4), (QUERY_HANDLES, 2), (QUERY_HANDLES, 1)] {
        let q = Querier::with_capacity(sandbox, write, capacity);
        let got = batch(&q, paths, threads);
        assert_eq!(got.len(), expected.len());
        for ((p, e), g) in paths.iter().zip(&expected).zip(&got) {
            assert_eq!(g, e, "{what}, write {write}, {capacity} handles, {threads} threads: {p:?}");
        }
        assert!(q.handles_held() <= capacity, "{what}: {} handles held, at most {capacity}", q.handles_held());
    }
}

#[test]
fn batch_verdicts_equal_one_at_a_time() {
    let t = tree();
    let owned = paths(&t.dir);
    let paths: Vec<&str> = owned.iter().map(String::as_str).collect();
    let project = project(&t.dir);
    let sb = &project.sandbox;
    // The one-at-a-time path says what this test relies on: each kind of case is present.
    let kind = |p: &str, write: bool| sb.verdict(p, write).err().map(|e| e.kind());
    assert_eq!(kind("/data/a.txt", false), None);
    assert_eq!(kind("/data/sub/link_up.txt", false), None, "a link up past its parent, inside the zone");
    assert_eq!(kind("/data/sub/link_updir/b.md", false), None);
    assert_eq!(kind("/data/link_out/secret.txt", false), Some("outside_sandbox"));
    assert_eq!(kind("/data/link_etc", false), Some("outside_sandbox"));
    assert_eq!(kind("/data/out.txt", false), Some("outside_sandbox"));
    assert_eq!(kind("/data/sub/up_out.txt", false), Some("outside_sandbox"));
    assert_eq!(kind("/data/big.txt", false), Some("too_large"));
    assert_eq!(kind("/data/fifo.txt", false), Some("wrong_kind"));
    assert_eq!(kind("/data/x.pdf", false), Some("suffix_not_allowed"));
    assert_eq!(kind("/data/dir.txt", false), None);
    assert_eq!(kind("/data/missing/dir/x.txt", false), None);
    assert_eq!(kind("/out/sub/link_up.txt", true), None);
    assert_eq!(kind("/out/link_data", false), Some("outside_sandbox"));
    for write in [false, true] {
        assert_same(sb, "project", &paths, write);
    }
    let narrow = &project.worker("narrow").expect("worker").sandbox;
    assert_eq!(narrow.verdict("/out/sub/link_up.txt", true).err().map(|e| e.kind()), Some("outside_sandbox"), "out of the write area");
    for write in [false, true] {
        assert_same(narrow, "worker narrow", &paths, write);
    }
}

/// The write check and `stat` look beneath different handles when the write area is deeper
/// than the read area; after the write area's directory is replaced by another, the batch
/// path still says what the one-at-a-time path says (it defers to it there).
#[test]
fn batch_verdicts_equal_one_at_a_time_after_a_write_area_is_replaced() {
    let t = tree();
    std::fs::write(t.dir.join("docs/w/a.md"), "a").expect("write");
    let project = project(&t.dir);
    let narrow = &project.worker("narrow").expect("worker").sandbox;
    // The handle of /docs/w now leads to docs/old; the name docs/w to a new, empty directory.
    std::fs::rename(t.dir.join("docs/w"), t.dir.join("docs/old")).expect("rename");
    std::fs::create_dir(t.dir.join("docs/w")).expect("mkdir");
    let paths = ["/docs/w/x", "/docs/w/a.md", "/docs/w/x/n.md", "/docs/w/new.md", "/docs/w/x/sub", "/docs/old/x"];
    assert_eq!(narrow.verdict("/docs/w/x", true).err().map(|e| e.kind()), Some("suffix_not_allowed"), "x is no directory by its name");
    for write in [false, true] {
        let expected: Vec<_> = paths.iter().map(|p| narrow.verdict(p, write)).collect();
        assert_eq!(Querier::new(narrow, write).verdicts(&paths), expected, "write {write}");
    }
}

/// More directories than the cache holds: the handles held stay bounded, and so do the
/// process's open descriptors.
#[test]
fn batch_handles_stay_bounded() {
    let t = tree();
    let project = project(&t.dir);
    let fds = || std::fs::read_dir("/proc/self/fd").expect("fds").count();
    let owned: Vec<String> = (0..MANY).map(|i| format!("/data/many/d{i}/f.txt")).collect();
    let paths: Vec<&str> = owned.iter().map(String::as_str).collect();
    let before = fds();
    let q = Querier::new(&project.sandbox, false);
    assert!(q.verdicts(&paths).iter().all(Result::is_ok));
    assert_eq!(q.handles_held(), QUERY_HANDLES, "one handle per directory met, up to the bound");
    let during = fds();
    assert!(during <= before + QUERY_HANDLES, "{during} descriptors open, {before} before");
    drop(q);
    assert!(fds() <= before, "the handles are closed with the querier");
}

fn tab_line(sb: &Sandbox, p: &str, write: bool) -> String {
    let shown = workcell::term::escape_quoted(p);
    match sb.verdict(p, write) {
        Ok(()) => format!("allowed\t{shown}\n"),
        Err(e) => format!("refused\t{shown}\t{}\t{}\n", e.kind(), e.to_string().replace('\n', " ")),
    }
}

fn check_stdin(dir: &Path, flags: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_workcell"))
        .current_dir(dir)
        .args(["check", "--stdin"])
        .args(flags)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("workcell");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("wait");
    writer.join().expect("writer").expect("input written");
    out
}

/// The command prints, for several chunks of input judged on several threads, exactly the
/// one-at-a-time verdict of each line, in input order.
#[test]
fn check_stdin_prints_one_at_a_time_verdicts_in_input_order() {
    let t = tree();
    let project = project(&t.dir);
    // Every 5th line is a path of its own, so a line out of place cannot go unnoticed.
    let once = paths(&t.dir);
    let lines: Vec<String> = once
        .iter()
        .cycle()
        .take(12 * once.len())
        .cloned()
        .enumerate()
        .map(|(i, p)| if i % 5 == 0 { format!("/out/n{i}.txt") } else { p })
        .filter(|p| !p.trim().is_empty())
        .collect();
    assert!(lines.len() > 2 * 16384, "more than two chunks: {}", lines.len());
    let input = lines.join("\n") + "\n";
    for write in [false, true] {
        let out = check_stdin(&t.dir, if write { &["--write"] } else { &[] }, input.as_bytes());
        let expected: String = lines.iter().map(|p| tab_line(&project.sandbox, p, write)).collect();
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        let got = String::from_utf8(out.stdout).expect("utf-8");
        assert_eq!(got.lines().count(), lines.len());
        for (i, (g, e)) in got.lines().zip(expected.lines()).enumerate() {
            assert_eq!(g, e, "line {i}, write {write}");
        }
        assert!(got == expected);
    }
    let out = check_stdin(&t.dir, &["--json"], input.as_bytes());
    let got: Vec<serde_json::Value> = out.stdout.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).expect("json")).collect();
    assert_eq!(got.len(), lines.len());
    for (p, v) in lines.iter().zip(&got) {
        let e = project.sandbox.verdict(p, false);
        assert_eq!(v["path"], serde_json::json!(p));
        assert_eq!(v["allowed"], serde_json::json!(e.is_ok()), "{p:?}");
        assert_eq!(v["kind"], e.as_ref().err().map_or(serde_json::Value::Null, |e| serde_json::json!(e.kind())), "{p:?}");
    }
}

/// A line that is not UTF-8 ends the stream (exit 2) after the verdicts of every line
/// before it, in order, though they were judged in chunks.
#[test]
fn check_stdin_stops_at_a_line_that_is_not_utf8() {
    let t = tree();
    let project = project(&t.dir);
    let lines: Vec<String> = (0..5000).map(|i| if i % 2 == 0 { format!("/out/n{i}.txt") } else { format!("/data/many/d{}/f.txt", i % MANY) }).collect();
    let mut input = (lines.join("\n") + "\n").into_bytes();
    input.extend_from_slice(b"/out/\xff\xfe.txt\n/out/after.txt\n");
    let out = check_stdin(&t.dir, &[], &input);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("standard input is not UTF-8 text"), "{}", String::from_utf8_lossy(&out.stderr));
    let expected: String = lines.iter().map(|p| tab_line(&project.sandbox, p, false)).collect();
    assert!(String::from_utf8_lossy(&out.stdout) == expected, "the verdicts before the line, in order");
}
