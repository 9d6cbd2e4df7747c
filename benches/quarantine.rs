//! The sweep for files the host runs (`hostrun::quarantine`) on a zone of 100,000 files:
//! 1,000 directories × 100 files, plus a git repository (its `.git` is walked too), with
//! nothing to move, page cache warm. Run with `cargo bench --bench quarantine`; figures are
//! in BENCHMARKS.md ("Files the host runs").

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, OnceLock};

use workcell::hostrun::{quarantine, Protection};
use workcell::plan::{Held, ProtectedArea};

fn main() {
    divan::main();
}

struct Fixture {
    _tmp: tempfile::TempDir,
    area: ProtectedArea,
}

fn build(root: &Path) {
    for d in 0..1000 {
        let dir = root.join(format!("d{:02}/e{d:04}", d / 100));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            fs::write(dir.join(format!("f{f:03}.txt")), "x").unwrap();
        }
    }
    let repo = root.join("repo");
    fs::create_dir_all(&repo).unwrap();
    for f in 0..50 {
        fs::write(repo.join(format!("src{f}.rs")), format!("// {f}\n")).unwrap();
    }
    let git = |args: &[&str]| {
        let ok = Command::new("git").current_dir(&repo).args(["-c", "user.name=b", "-c", "user.email=b@x"]).args(args).status().unwrap().success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "."]);
    git(&["commit", "-qm", "one"]);
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        build(tmp.path());
        let held = Held(Arc::new(fs::File::open(tmp.path()).unwrap().into()));
        let mut area = ProtectedArea::of("/work", held, Protection::default());
        // What exists before a run (the repository's config and hooks) stays; the cache is
        // warm after this walk.
        area.bound = quarantine::existing(&area);
        assert!(quarantine::sweep(&area, "warm").is_empty());
        // Records trusted only once the tree has been still for the margin (`hostrun::looked`).
        std::thread::sleep(std::time::Duration::from_nanos(workcell::hostrun::looked::MARGIN_NS as u64 + 100_000_000));
        assert!(quarantine::sweep(&area, "warm").is_empty());
        Fixture { _tmp: tmp, area }
    })
}

/// The walk before a run: the protected paths that exist, with their identities.
#[divan::bench(sample_count = 20)]
fn existing_100k_files() -> Vec<workcell::plan::BoundPath> {
    quarantine::existing(&fixture().area)
}

/// One sweep of the whole zone (100,000 files, 1,011 directories, a git repository), every
/// directory listed: no records (the first run in a checkout).
#[divan::bench(sample_count = 20)]
fn sweep_100k_files() -> quarantine::Report {
    let area = ProtectedArea { looked: Default::default(), ..fixture().area.clone() };
    quarantine::sweep(&area, "bench")
}

/// The same sweep with the records of the one before (`hostrun::looked`): nothing changed,
/// so no directory is listed, each is only opened and its status read.
#[divan::bench(sample_count = 20)]
fn sweep_100k_files_unchanged() -> quarantine::Report {
    quarantine::sweep(&fixture().area, "bench")
}
