//! Table-driven corpus of sandbox path cases across the four config forms (zones, paths,
//! root, mounts) and derived children. Every case states allow/refuse and, for a refusal,
//! the error kind.

mod support;

use support::fixture::{Form, Fx};
use workcell::sandbox::{DeriveSpec, Sandbox, SandboxError};

/// What a case does with its path.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// `resolve` (may it be read?).
    R,
    /// `resolve_for_write` (may it be written?).
    W,
    /// An actual `read`.
    Read,
    /// An actual `write` of a short text.
    Write,
    /// An actual `write` of 2000 bytes.
    WriteBig,
    /// `list(path, pattern)`.
    List(&'static str),
    /// `check_suffix`.
    Suffix,
}

/// Which sandbox a case runs against.
#[derive(Debug, Clone, Copy)]
enum On {
    P(Form),
    /// zones form, child with `allow_read: [/data/sub], allow_write: [/out/reports]`.
    ChildRw,
    /// zones form, child with `inherit: true, readonly: true`.
    ChildRo,
    /// root form, child with `allow_read: [/src]`.
    RootChild,
    /// root form with `readonly: true`.
    RootRo,
}

const OK: &str = "ok";

use Form::*;
use On::*;
use Op::*;

#[rustfmt::skip]
fn cases(fx: &Fx) -> Vec<(On, Op, String, &'static str)> {
    let host_data = fx.host("data/file.txt").display().to_string();
    let host_proj = fx.host("proj/src/main.rs").display().to_string();
    let host_out = fx.host("out/x.txt").display().to_string();
    let s = |x: &str| x.to_string();
    vec![
        // ---- zones form: the brief's named cases ----
        (P(Zones), R, s("/data/../../../etc/passwd"), "outside_sandbox"),
        (P(Zones), R, s("../outside/secret.txt"), "outside_sandbox"),
        (P(Zones), R, s("/data/link_out"), "outside_sandbox"),
        (P(Zones), R, s("/data/link_out/secret.txt"), "outside_sandbox"),
        (P(Zones), Read, s("/data/link_out/secret.txt"), "outside_sandbox"),
        (P(Zones), R, s("/data/link_file_out.txt"), "outside_sandbox"),
        (P(Zones), Read, s("/data/link_file_out.txt"), "outside_sandbox"),
        (P(Zones), R, s("/data/link_in/deep.txt"), OK),
        (P(Zones), Read, s("/data/link_in/deep.txt"), OK),
        (P(Zones), Read, s("/data/link_in_file.txt"), OK),
        // An absolute symlink is refused even when it points inside (RESOLVE_BENEATH).
        (P(Zones), Read, s("/data/abs_in.txt"), "outside_sandbox"),
        (P(Zones), R, s("//special/file.txt"), OK),
        (P(Zones), Read, s("//special/file.txt"), OK),
        (P(Zones), R, s("data/file.txt"), OK),
        (P(Zones), R, s("\\data\\a.txt"), OK),
        (P(Zones), Read, s("\\data\\a.txt"), OK),
        (P(Zones), R, s("data:file.txt"), OK),
        (P(Zones), Read, s("data:sub\\deep.txt"), OK),
        (P(Zones), R, s("data:..\\..\\outside\\secret.txt"), "outside_sandbox"),
        (P(Zones), R, s("data:../../outside/secret.txt"), "outside_sandbox"),
        (P(Zones), R, s("/data/file\0.txt"), "invalid_path"),
        (P(Zones), R, s("~"), "invalid_path"),
        (P(Zones), R, s("~/.ssh/id_rsa"), "invalid_path"),
        (P(Zones), R, s("C:"), "invalid_path"),
        (P(Zones), R, s("C:\\x"), "invalid_path"),
        (P(Zones), R, s("c:/windows/system32"), "invalid_path"),
        (P(Zones), R, host_data.clone(), "invalid_path"),
        (P(Zones), R, s(""), "invalid_path"),
        (P(Zones), R, s("/"), "invalid_path"),
        (P(Zones), R, s("/data/../out/x.txt"), "outside_sandbox"),
        (P(Zones), R, s("/data/sub/../../out/x.txt"), "outside_sandbox"),
        (P(Zones), R, s("/data/sub/../file.txt"), OK),
        (P(Zones), R, s("/data/./sub/./deep.txt"), OK),
        (P(Zones), R, s("/nope/x.txt"), "outside_sandbox"),
        (P(Zones), R, s("nope:x.txt"), "outside_sandbox"),
        (P(Zones), R, s("/etc/passwd"), "outside_sandbox"),
        (P(Zones), List("../*"), s("/data"), "invalid_pattern"),
        (P(Zones), List("/etc/*"), s("/data"), "invalid_pattern"),
        (P(Zones), List("~/*"), s("/data"), "invalid_pattern"),
        (P(Zones), List("sub/../../*"), s("/data"), "invalid_pattern"),
        (P(Zones), List("*"), s("/data"), OK),
        (P(Zones), List("*"), s("/"), OK),
        (P(Zones), List("*"), s("/data/link_out"), "outside_sandbox"),
        (P(Zones), List("*"), s("/data/file.txt"), "wrong_kind"),
        (P(Zones), Read, s("/data/notes.MD"), OK),
        (P(Zones), Read, s("/data/x.PDF"), "suffix_not_allowed"),
        (P(Zones), Suffix, s("/data/report.md"), OK),
        (P(Zones), Suffix, s("/data/report.Txt"), OK),
        (P(Zones), Suffix, s("/data/report.txt.exe"), "suffix_not_allowed"),
        (P(Zones), Suffix, s("/data/.md"), "suffix_not_allowed"),
        (P(Zones), Read, s("/data/big.txt"), "too_large"),
        (P(Zones), Read, s("/data/missing.txt"), "not_found"),
        (P(Zones), Read, s("/data/sub"), "wrong_kind"),
        (P(Zones), W, s("/data/file.txt"), "not_writable"),
        (P(Zones), Write, s("/data/new.txt"), "not_writable"),
        (P(Zones), W, s("/special/new.txt"), "not_writable"),
        (P(Zones), W, s("/out/new.txt"), OK),
        (P(Zones), Write, s("/out/new.txt"), OK),
        (P(Zones), Write, s("out:deeper/dir/new.txt"), OK),
        (P(Zones), Write, s("/out/link_out/evil.txt"), "outside_sandbox"),
        (P(Zones), W, s("/out/link_out/evil.txt"), "outside_sandbox"),
        (P(Zones), W, s("/out/link_out"), "outside_sandbox"),
        (P(Zones), W, s("/out/../data/x.txt"), "outside_sandbox"),
        (P(Zones), W, s("/nope/x.txt"), "outside_sandbox"),
        (P(Zones), WriteBig, s("/out/big.txt"), "too_large"),
        (P(Zones), Write, s("/out"), "wrong_kind"),
        (P(Zones), R, host_out.clone(), "invalid_path"),

        // ---- paths form (seeds 001/002): zone `docs` over the same data dir ----
        (P(Paths), R, s("docs/file.txt"), OK),
        (P(Paths), R, s("docs:file.txt"), OK),
        (P(Paths), R, s("/docs/sub/deep.txt"), OK),
        (P(Paths), R, s("/data/file.txt"), "outside_sandbox"),
        (P(Paths), Read, s("/docs/notes.MD"), OK),
        (P(Paths), Read, s("/docs/x.PDF"), "suffix_not_allowed"),
        (P(Paths), Read, s("/docs/big.txt"), "too_large"),
        (P(Paths), R, s("/docs/../../../etc/passwd"), "outside_sandbox"),
        (P(Paths), R, s("/docs/link_out/secret.txt"), "outside_sandbox"),
        (P(Paths), R, s("/docs/link_in/deep.txt"), OK),
        (P(Paths), R, host_data.clone(), "invalid_path"),
        (P(Paths), W, s("/docs/file.txt"), "not_writable"),
        (P(Paths), Write, s("out/report.txt"), OK),
        (P(Paths), R, s("/docs/../out/x.txt"), "outside_sandbox"),

        // ---- root form (seed 004): proj/ is virtual / ----
        (P(Root), R, s("/src/main.rs"), OK),
        (P(Root), R, s("src/main.rs"), OK),
        (P(Root), R, s("\\src\\main.rs"), OK),
        (P(Root), Read, s("/src/main.rs"), OK),
        (P(Root), R, s("/"), OK),
        (P(Root), List("*"), s("/"), OK),
        (P(Root), R, s("/../outside/secret.txt"), "outside_sandbox"),
        (P(Root), R, s(".."), "outside_sandbox"),
        (P(Root), R, s("src/../../outside/secret.txt"), "outside_sandbox"),
        (P(Root), R, s("/link_out/secret.txt"), "outside_sandbox"),
        (P(Root), Read, s("/link_out/secret.txt"), "outside_sandbox"),
        (P(Root), R, s("/link_in/main.rs"), OK),
        (P(Root), R, host_proj.clone(), "invalid_path"),
        (P(Root), R, s("~/x"), "invalid_path"),
        (P(Root), R, s("C:\\x"), "invalid_path"),
        (P(Root), R, s("/src/\0"), "invalid_path"),
        (P(Root), Read, s("/big.txt"), "too_large"),
        (P(Root), Write, s("/src/new.rs"), OK),
        (P(Root), Write, s("/link_out/evil.txt"), "outside_sandbox"),
        (P(Root), List("../*"), s("/"), "invalid_pattern"),
        (RootRo, W, s("/src/main.rs"), "not_writable"),
        (RootRo, R, s("/src/main.rs"), OK),

        // ---- mounts form: explicit mount points, one nested (/srv/special) ----
        (P(Mounts), R, s("/data/file.txt"), OK),
        (P(Mounts), R, s("data:file.txt"), OK),
        (P(Mounts), R, s("/srv/special/file.txt"), OK),
        (P(Mounts), Read, s("/srv/special/file.txt"), OK),
        (P(Mounts), R, s("/srv/other/file.txt"), "outside_sandbox"),
        (P(Mounts), R, s("/data/../out/x.txt"), "outside_sandbox"),
        (P(Mounts), R, s("/srv/special/../../data/file.txt"), "outside_sandbox"),
        (P(Mounts), R, s("/data/link_out/secret.txt"), "outside_sandbox"),
        (P(Mounts), Read, s("/data/big.txt"), "too_large"),
        (P(Mounts), W, s("/data/file.txt"), "not_writable"),
        (P(Mounts), Write, s("/out/m.txt"), OK),
        (P(Mounts), R, host_data.clone(), "invalid_path"),

        // ---- derived children ----
        (ChildRw, R, s("/data/sub/deep.txt"), OK),
        (ChildRw, R, s("/data/file.txt"), "outside_sandbox"),
        (ChildRw, R, s("/data/sub/../file.txt"), "outside_sandbox"),
        (ChildRw, R, s("/special/file.txt"), "outside_sandbox"),
        (ChildRw, R, s("/out/reports/r.txt"), OK),
        (ChildRw, R, s("/out/x.txt"), "outside_sandbox"),
        (ChildRw, W, s("/out/reports/r.txt"), OK),
        (ChildRw, Write, s("/out/reports/r.txt"), OK),
        (ChildRw, W, s("/out/x.txt"), "outside_sandbox"),
        (ChildRw, W, s("/data/sub/deep.txt"), "not_writable"),
        (ChildRw, List("*"), s("/"), OK),
        (ChildRw, List("*"), s("/data"), "outside_sandbox"),
        (ChildRo, R, s("/out/x.txt"), OK),
        (ChildRo, W, s("/out/x.txt"), "not_writable"),
        (ChildRo, Write, s("/out/x.txt"), "not_writable"),
        (RootChild, R, s("/src/main.rs"), OK),
        (RootChild, R, s("/docs/readme.md"), "outside_sandbox"),
        (RootChild, W, s("/src/main.rs"), "not_writable"),
        (RootChild, R, s("/src/../docs/readme.md"), "outside_sandbox"),
    ]
}

struct Sandboxes {
    zones: Sandbox,
    paths: Sandbox,
    root: Sandbox,
    mounts: Sandbox,
    child_rw: Sandbox,
    child_ro: Sandbox,
    root_child: Sandbox,
    root_ro: Sandbox,
}

fn sandboxes(fx: &Fx) -> Sandboxes {
    std::fs::create_dir_all(fx.host("out/reports")).unwrap();
    let zones = fx.project(Zones).sandbox;
    let root = fx.project(Root).sandbox;
    let list = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let child_rw =
        zones.derive(&DeriveSpec { inherit: false, allow_read: list(&["/data/sub"]), allow_write: list(&["/out/reports"]), readonly: None }).unwrap();
    let child_ro = zones.derive(&DeriveSpec { inherit: true, readonly: Some(true), ..Default::default() }).unwrap();
    let root_child = root.derive(&DeriveSpec { allow_read: list(&["/src"]), ..Default::default() }).unwrap();
    let root_ro = fx.project_text("sandbox:\n  root: {root: ./proj, readonly: true}\n").sandbox;
    Sandboxes { zones, paths: fx.project(Paths).sandbox, root, mounts: fx.project(Mounts).sandbox, child_rw, child_ro, root_child, root_ro }
}

fn run(sb: &Sandbox, op: Op, path: &str) -> Result<(), SandboxError> {
    match op {
        R => sb.resolve(path).map(drop),
        W => sb.resolve_for_write(path).map(drop),
        Read => sb.read(path, 1000, 0).map(drop),
        Write => sb.write(path, "written by a test"),
        WriteBig => sb.write(path, &"z".repeat(2000)),
        List(pattern) => sb.list(path, pattern).map(drop),
        Suffix => sb.check_suffix(path),
    }
}

#[test]
fn path_corpus() {
    let fx = Fx::new();
    let sbs = sandboxes(&fx);
    let all = cases(&fx);
    assert!(all.len() >= 60, "corpus has {} cases", all.len());
    let mut failures = Vec::new();
    for (on, op, path, expect) in &all {
        let sb = match on {
            P(Zones) => &sbs.zones,
            P(Paths) => &sbs.paths,
            P(Root) => &sbs.root,
            P(Mounts) => &sbs.mounts,
            ChildRw => &sbs.child_rw,
            ChildRo => &sbs.child_ro,
            RootChild => &sbs.root_child,
            RootRo => &sbs.root_ro,
        };
        let got = run(sb, *op, path);
        let got_kind = match &got {
            Ok(()) => OK,
            Err(e) => e.kind(),
        };
        if got_kind != *expect {
            failures.push(format!("{on:?} {op:?} {path:?}: expected {expect}, got {got:?}"));
        }
        if let Err(e) = &got {
            let msg = e.to_string();
            if msg.contains(&fx.dir.display().to_string()) {
                failures.push(format!("{on:?} {op:?} {path:?}: message reveals a host path: {msg}"));
            }
        }
    }
    // Nothing may have landed outside.
    let outside: Vec<_> = std::fs::read_dir(fx.host("outside")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(outside, vec![std::ffi::OsString::from("secret.txt")]);
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), all.len(), failures.join("\n"));
}

#[test]
fn equivalent_spellings_resolve_to_the_same_host_path() {
    let fx = Fx::new();
    let sb = fx.project(Zones).sandbox;
    let want = fx.host("data/sub/deep.txt");
    for p in [
        "/data/sub/deep.txt",
        "data/sub/deep.txt",
        "data:sub/deep.txt",
        "\\data\\sub\\deep.txt",
        "//data//sub/deep.txt",
        "data:sub\\deep.txt",
        "/data/./sub/x/../deep.txt",
    ] {
        assert_eq!(sb.resolve(p).unwrap(), want, "{p}");
    }
    let root = fx.project(Root).sandbox;
    for p in ["/src/main.rs", "src/main.rs", "\\src\\main.rs", "./src/main.rs"] {
        assert_eq!(root.resolve(p).unwrap(), fx.host("proj/src/main.rs"), "{p}");
    }
}

#[test]
fn list_slash_shows_the_zones_and_globs_stay_in_place() {
    let fx = Fx::new();
    let sb = fx.project(Zones).sandbox;
    assert_eq!(sb.list("/", "*").unwrap().entries, vec!["/data/", "/out/", "/special/"]);
    // `*` does not cross `/`; `**` does; suffix-filtered files are left out (x.PDF);
    // symlinked directories are not descended into.
    let top = sb.list("/data", "*").unwrap().entries;
    assert!(top.contains(&"/data/file.txt".to_string()), "{top:?}");
    assert!(top.contains(&"/data/sub/".to_string()), "{top:?}");
    assert!(!top.iter().any(|p| p.contains("deep")), "{top:?}");
    assert!(!top.iter().any(|p| p.contains("x.PDF")), "{top:?}");
    let deep = sb.list("/data", "**/*.txt").unwrap().entries;
    assert!(deep.contains(&"/data/sub/deep.txt".to_string()), "{deep:?}");
    assert!(!deep.iter().any(|p| p.contains("secret")), "{deep:?}");
    // A child restricted to a subdirectory sees where it can go.
    let child = sb.derive(&DeriveSpec { allow_read: Some(vec!["/data/sub".into()]), ..Default::default() }).unwrap();
    let shown = child.list("/", "*").unwrap().entries;
    assert_eq!(shown, vec!["/data/sub/"]);
    for entry in &shown {
        child.list(entry, "*").unwrap_or_else(|e| panic!("list('/') shows {entry} but listing it fails: {e}"));
    }
}

#[test]
fn io_roundtrip_edit_delete_exists_stat() {
    let fx = Fx::new();
    let sb = fx.project(Zones).sandbox;
    sb.write("/out/e.txt", "alpha beta gamma").unwrap();
    assert_eq!(std::fs::read_to_string(fx.host("out/e.txt")).unwrap(), "alpha beta gamma");
    sb.edit("/out/e.txt", "beta", "BETA").unwrap();
    assert_eq!(sb.read("/out/e.txt", 100, 0).unwrap().content, "alpha BETA gamma");
    assert_eq!(sb.edit("/out/e.txt", "nope", "x").unwrap_err().kind(), "edit_mismatch");
    sb.write("/out/e.txt", "aa aa").unwrap();
    assert_eq!(sb.edit("/out/e.txt", "aa", "b").unwrap_err().kind(), "edit_mismatch");
    assert_eq!(sb.edit("/data/file.txt", "hello", "bye").unwrap_err().kind(), "not_writable");
    let w = sb.read("/out/e.txt", 2, 1).unwrap();
    assert_eq!((w.content.as_str(), w.total_chars, w.truncated, w.next_offset), ("a ", Some(5), true, Some(3)));
    assert!(sb.exists("/out/e.txt").unwrap());
    assert!(!sb.exists("/out/missing").unwrap());
    assert_eq!(sb.exists("/data/link_out").unwrap_err().kind(), "outside_sandbox");
    let st = sb.stat("out:e.txt").unwrap();
    assert_eq!((st.path.as_str(), st.size, st.writable), ("/out/e.txt", 5, true));
    assert!(!sb.stat("/data/file.txt").unwrap().writable);
    sb.delete("/out/e.txt").unwrap();
    assert!(!fx.host("out/e.txt").exists());
    assert_eq!(sb.delete("/out/e.txt").unwrap_err().kind(), "not_found");
    assert_eq!(sb.delete("/data/file.txt").unwrap_err().kind(), "not_writable");
    // Deleting a symlink that points outside removes the link, never its target.
    sb.delete("/out/link_out").unwrap();
    assert!(fx.host("outside/secret.txt").exists());
    std::fs::write(fx.host("out/bin.txt"), [0u8, 1, 2]).unwrap();
    assert_eq!(sb.read("/out/bin.txt", 10, 0).unwrap_err().kind(), "not_text");
    std::fs::write(fx.host("out/latin1.txt"), [b'a', 0xe9]).unwrap();
    assert_eq!(sb.read("/out/latin1.txt", 10, 0).unwrap_err().kind(), "not_text");
    // No temporary files are left behind by writes.
    let leftovers: Vec<_> =
        std::fs::read_dir(fx.host("out")).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().contains(".workcell-")).collect();
    assert!(leftovers.is_empty());
}

#[test]
fn can_read_and_can_write_agree_with_resolve() {
    let fx = Fx::new();
    let sb = fx.project(Zones).sandbox;
    for (on, op, path, _) in cases(&fx) {
        if !matches!(on, P(Zones)) {
            continue;
        }
        match op {
            R => assert_eq!(sb.can_read(&path), sb.resolve(&path).is_ok(), "{path:?}"),
            W => assert_eq!(sb.can_write(&path), sb.resolve_for_write(&path).is_ok(), "{path:?}"),
            _ => {}
        }
    }
    assert_eq!(sb.readable_roots(), vec!["/data", "/out", "/special"]);
    assert_eq!(sb.writable_roots(), vec!["/out"]);
}

/// A wide tree is listed with few open directories, so running short of descriptors cannot
/// drop entries; a directory that still cannot be opened is named, never skipped silently.
#[test]
fn list_keeps_few_descriptors_and_names_what_it_cannot_read() {
    let fx = Fx::new();
    let sb = fx.project(Zones).sandbox;
    for i in 0..200 {
        std::fs::create_dir_all(fx.host(&format!("data/wide/d{i}/e"))).unwrap();
        std::fs::write(fx.host(&format!("data/wide/d{i}/e/f.txt")), "x").unwrap();
    }
    let full = sb.list("/data/wide", "**/*.txt").unwrap();
    assert_eq!(full.entries.len(), 200, "{full:?}");
    let maximum = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    let set = |n: u64| rustix::process::setrlimit(rustix::process::Resource::Nofile, rustix::process::Rlimit { current: Some(n), maximum }).unwrap();
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    // From no headroom up: every answer is an error, the whole listing, or a listing that
    // names what it could not read.
    let mut named = 0;
    for extra in 0..12 {
        set(open + extra);
        let result = sb.list("/data/wide", "**/*.txt");
        set(open + 1000);
        match result {
            Err(_) => {}
            Ok(l) if l.entries == full.entries => assert!(l.unreadable.is_empty(), "{l:?}"),
            Ok(l) => {
                assert!(!l.unreadable.is_empty(), "with {extra} spare descriptors, entries went missing silently: {l:?}");
                named += 1;
            }
        }
    }
    assert!(named > 0, "some limit must have left a directory unreadable");
    // A little headroom is enough for the whole tree (the old walk held one descriptor per
    // pending directory: 200 here).
    set(open + 8);
    let wide = sb.list("/data/wide", "**/*.txt").unwrap();
    assert_eq!(wide, full);
}
