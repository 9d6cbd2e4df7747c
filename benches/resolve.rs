//! Sandbox-core micro-benchmarks: `parse`, `can_read`, `resolve` and a derived child's
//! `can_read` on a realistic tree (3 zones, ~5k files, depth 6). Run with
//! `cargo bench --bench resolve`; figures are in BENCHMARKS.md ("Sandbox core").

use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use workcell::config::Project;
use workcell::sandbox::{DeriveSpec, Sandbox};

fn main() {
    divan::main();
}

struct Fixture {
    _tmp: tempfile::TempDir,
    sandbox: Sandbox,
    child: Sandbox,
    /// Existing files, deepest first spread across zones.
    files: Vec<String>,
    /// A mix of refusals: `..` escapes, unknown zones, NUL, host-looking paths.
    refused: Vec<String>,
}

/// Builds `zone/d0/d1/d2/d3/d4/fNN.txt`: 3 zones × 4 × 4 × 4 × 2 × 2 dirs... sized so the
/// whole tree holds about 5,000 files at depth up to 6.
fn build(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for zone in ["src", "docs", "out"] {
        for a in 0..4 {
            for b in 0..4 {
                for c in 0..3 {
                    let dir = format!("{zone}/a{a}/b{b}/c{c}/d/e");
                    fs::create_dir_all(root.join(&dir)).unwrap();
                    for f in 0..35 {
                        let rel = format!("{dir}/file{f}.txt");
                        fs::write(root.join(&rel), "x").unwrap();
                        files.push(format!("/{rel}"));
                    }
                }
            }
        }
    }
    files
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let files = build(tmp.path());
        let yaml = "sandbox:\n  zones:\n    src: {path: ./src, mode: ro}\n    docs: {path: ./docs, mode: ro}\n    out: {path: ./out, mode: rw}\n";
        let p = Project::from_text(yaml, &tmp.path().join("workcell.yaml"), tmp.path()).unwrap();
        let child =
            p.sandbox.derive(&DeriveSpec { allow_read: Some(vec!["/src/a1".into(), "/docs".into()]), allow_write: None, ..Default::default() }).unwrap();
        let refused =
            vec!["/src/a0/../../../etc/passwd".to_string(), "/nope/x.txt".into(), "/src/a\0b".into(), "~/x".into(), "C:\\x".into(), "/src/../out/x".into()];
        eprintln!("fixture: {} files", files.len());
        Fixture { _tmp: tmp, sandbox: p.sandbox, child, files, refused }
    })
}

/// Deterministically spread picks over the file list.
fn pick(files: &[String], i: usize) -> &str {
    &files[(i * 7919) % files.len()]
}

#[divan::bench]
fn parse_allowed(bencher: divan::Bencher) {
    let f = fixture();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        divan::black_box(f.sandbox.parse(divan::black_box(pick(&f.files, i)))).is_ok()
    });
}

#[divan::bench]
fn parse_refused(bencher: divan::Bencher) {
    let f = fixture();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        divan::black_box(f.sandbox.parse(divan::black_box(&f.refused[i % f.refused.len()]))).is_err()
    });
}

#[divan::bench]
fn can_read_existing(bencher: divan::Bencher) {
    let f = fixture();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        f.sandbox.can_read(divan::black_box(pick(&f.files, i)))
    });
}

#[divan::bench]
fn can_read_missing(bencher: divan::Bencher) {
    let f = fixture();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        let p = format!("{}.missing/x", pick(&f.files, i));
        f.sandbox.can_read(divan::black_box(&p))
    });
}

#[divan::bench]
fn resolve_existing(bencher: divan::Bencher) {
    let f = fixture();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        divan::black_box(f.sandbox.resolve(divan::black_box(pick(&f.files, i)))).is_ok()
    });
}

#[divan::bench]
fn can_write_existing(bencher: divan::Bencher) {
    let f = fixture();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        f.sandbox.can_write(divan::black_box(pick(&f.files, i)))
    });
}

#[divan::bench]
fn child_can_read_mixed(bencher: divan::Bencher) {
    let f = fixture();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        f.child.can_read(divan::black_box(pick(&f.files, i)))
    });
}

#[divan::bench]
fn refused_with_message(bencher: divan::Bencher) {
    let f = fixture();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        f.sandbox.resolve(divan::black_box(&f.refused[i % f.refused.len()])).map_err(|e| e.to_string()).is_err()
    });
}
