//! Invalid configurations are refused before anything runs, with file, line, column and the
//! allowed values. Each test states the exact location and the wording.

use std::fs;
use std::path::{Path, PathBuf};

use workcell::config::{ConfigError, Project};

struct Dir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

/// A project directory holding `data/`, `data/sub/`, `out/` and the given worker files.
fn dir_with(workers: &[(&str, &str)]) -> Dir {
    let tmp = tempfile::tempdir().unwrap();
    let path = fs::canonicalize(tmp.path()).unwrap();
    fs::create_dir_all(path.join("data/sub")).unwrap();
    fs::create_dir_all(path.join("out")).unwrap();
    if !workers.is_empty() {
        fs::create_dir_all(path.join("workers")).unwrap();
    }
    for (name, text) in workers {
        fs::write(path.join("workers").join(format!("{name}.worker")), text).unwrap();
    }
    Dir { _tmp: tmp, path }
}

fn load_err(yaml: &str, workers: &[(&str, &str)]) -> (ConfigError, PathBuf) {
    let d = dir_with(workers);
    let file = d.path.join("workcell.yaml");
    // A refused worker file does not stop the project: its refusal is kept for the commands
    // that use that worker.
    let e = match Project::from_text(yaml, &file, &d.path) {
        Err(e) => e,
        Ok(p) => p.broken.into_values().next().expect("config must be refused"),
    };
    (e, d.path)
}

/// Asserts the error's file name, line, column and that its message contains `wording`.
#[track_caller]
fn expect(e: &ConfigError, file: &str, line: u64, column: u64, wording: &str) {
    let shown = e.to_string();
    assert_eq!(e.file.file_name().and_then(|f| f.to_str()), Some(file), "{shown}");
    assert_eq!((e.line, e.column), (line, column), "{shown}");
    assert!(e.message.contains(wording), "message {:?} lacks {wording:?}", e.message);
    assert!(shown.contains(&format!("{file}:{line}:{column}: ")), "{shown}");
}

const ZONES: &str = "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {path: ./out, mode: rw}\n";

fn worker_err(worker: &str) -> ConfigError {
    load_err(ZONES, &[("w", worker)]).0
}

#[test]
fn unknown_key() {
    let (e, _) = load_err("sandbox:\n  zonez:\n    data: {path: ./data}\n", &[]);
    expect(&e, "workcell.yaml", 2, 3, "unknown field `zonez`");
    assert!(e.message.contains("zones"), "the allowed keys are named: {}", e.message);
}

#[test]
fn bad_mode() {
    let (e, _) = load_err("sandbox:\n  zones:\n    data:\n      path: ./data\n      mode: rx\n", &[]);
    expect(&e, "workcell.yaml", 5, 13, "unknown variant `rx`");
    assert!(e.message.contains("expected one of ro, rw"), "{}", e.message);
}

#[test]
fn bad_approval_value() {
    let (e, _) = load_err("sandbox:\n  zones:\n    out:\n      path: ./out\n      mode: rw\n      approval: {write: maybe}\n", &[]);
    expect(&e, "workcell.yaml", 6, 25, "unknown variant `maybe`");
    assert!(e.message.contains("preApproved") && e.message.contains("ask") && e.message.contains("blocked"), "{}", e.message);
}

#[test]
fn duplicate_mount_points() {
    let (e, _) = load_err("sandbox:\n  mounts:\n    - {host: ./data, at: /data}\n    - {host: ./out, at: /data}\n", &[]);
    expect(&e, "workcell.yaml", 4, 25, "duplicate mount point '/data'");
}

#[test]
fn overlapping_host_paths() {
    let (e, _) = load_err("sandbox:\n  zones:\n    data: {path: ./data}\n    sub: {path: ./data/sub}\n", &[]);
    expect(&e, "workcell.yaml", 4, 17, "host directory of '/sub' overlaps the one of '/data' (line 3)");
}

#[test]
fn mount_point_with_dotdot() {
    let (e, _) = load_err("sandbox:\n  mounts:\n    - host: ./data\n      at: /data/../etc\n", &[]);
    expect(&e, "workcell.yaml", 4, 11, "mount point '/data/../etc' may not contain '.' or '..' components");
}

#[test]
fn nul_in_mount_point() {
    let (e, _) = load_err("sandbox:\n  mounts:\n    - host: ./data\n      at: \"/da\\0ta\"\n", &[]);
    expect(&e, "workcell.yaml", 4, 11, "contains the control character U+0000 (NUL)");
    let (e, _) = load_err("sandbox:\n  zones:\n    data: {path: \"./da\\0ta\"}\n", &[]);
    expect(&e, "workcell.yaml", 3, 18, "the host path contains the control character U+0000 (NUL)");
}

#[test]
fn control_characters_are_refused_where_they_are_written() {
    let (e, _) = load_err("sandbox:\n  zones:\n    data: {path: \"./da\\eta\"}\n", &[]);
    expect(&e, "workcell.yaml", 3, 18, "the host path contains the control character U+001B (escape)");
    let (e, _) = load_err("sandbox:\n  mounts:\n    - host: ./data\n      at: \"/da\\nta\"\n", &[]);
    expect(&e, "workcell.yaml", 4, 11, "contains the control character U+000A (newline)");
    let (e, _) = load_err("sandbox:\n  mode: sandboxed\n  root: \"box\\r\"\n  zones:\n    data: {}\n", &[]);
    expect(&e, "workcell.yaml", 3, 9, "the sandbox folder contains the control character U+000D (carriage return)");
    let (e, _) = load_err("defaults:\n  image: \"host\\e[2J\"\n", &[]);
    expect(&e, "workcell.yaml", 2, 10, "the image name contains the control character U+001B (escape)");
    // Worker files: what a prompt or a plan shows.
    let e = worker_err("---\ndescription: \"fine\\nthen \\e[31mred\"\n---\n");
    expect(&e, "w.worker", 2, 14, "the description contains the control character U+001B (escape)");
    let e = worker_err("---\nworkdir: \"/out\\e]0;x\"\n---\n");
    expect(&e, "w.worker", 2, 10, "workdir contains the control character U+001B (escape)");
    let e = worker_err("---\nworkers: [ok, \"b\\u202Ead\"]\n---\n");
    expect(&e, "w.worker", 2, 15, "contains the control character U+202E (a bidirectional text control)");
    let e = worker_err("---\nsandbox:\n  allow_read: [\"/data/\\x07\"]\n---\n");
    expect(&e, "w.worker", 3, 16, "the path contains the control character U+0007 (bell)");
    // Multi-line prose stays fine.
    let d = dir_with(&[("w", "---\ndescription: |\n  two\n  lines\n---\n")]);
    Project::from_text(ZONES, &d.path.join("workcell.yaml"), &d.path).expect("newlines in a description are fine");
}

#[test]
fn mount_points_that_would_make_workcell_zones_ambiguous() {
    for (at, c) in [("/a,b", ','), ("/a:rw", ':')] {
        let (e, _) = load_err(&format!("sandbox:\n  mounts:\n    - host: ./data\n      at: \"{at}\"\n"), &[]);
        expect(&e, "workcell.yaml", 4, 11, &format!("mount point '{at}' contains '{c}', which separates the entries of WORKCELL_ZONES"));
    }
}

#[test]
fn system_directories_are_refused_as_zones() {
    for (path, mode, wording) in [
        ("/", "ro", "zone 'data': / may not be a zone: it is the host's whole file system"),
        ("/proc", "ro", "zone 'data': /proc may not be a zone"),
        ("/proc/self/root", "ro", "zone 'data': / may not be a zone"),
        ("/sys/fs", "ro", "zone 'data': /sys/fs (inside /sys) may not be a zone"),
        ("/dev", "ro", "zone 'data': /dev may not be a zone: it holds the host's devices"),
        ("/run", "ro", "zone 'data': /run may not be a zone: it holds daemons' sockets"),
        ("/etc", "rw", "zone 'data': /etc may not be a read-write zone: a worker could change what the host boots, runs or keeps"),
        ("/usr/lib", "rw", "zone 'data': /usr/lib (inside /usr) may not be a read-write zone"),
        ("/root", "rw", "zone 'data': /root may not be a read-write zone"),
    ] {
        let (e, _) = load_err(&format!("sandbox:\n  zones:\n    data: {{path: {path}, mode: {mode}}}\n"), &[]);
        expect(&e, "workcell.yaml", 3, 18, wording);
    }
    // Read-only, the host's programs and configuration are fine to look at.
    let d = dir_with(&[]);
    Project::from_text("sandbox:\n  zones:\n    data: {path: /etc, mode: ro}\n", &d.path.join("workcell.yaml"), &d.path).expect("/etc read-only");
}

#[test]
fn a_symlink_out_of_the_project_is_refused_unless_the_path_is_absolute() {
    let d = dir_with(&[]);
    let file = d.path.join("workcell.yaml");
    fs::remove_dir_all(d.path.join("data")).unwrap();
    std::os::unix::fs::symlink("/", d.path.join("data")).unwrap();
    let e = Project::from_text("sandbox:\n  zones:\n    data: {path: ./data}\n", &file, &d.path).unwrap_err();
    expect(&e, "workcell.yaml", 3, 18, "zone 'data': ./data resolves to / through a symlink, outside the project; write the absolute path if you mean it");
    // The default path (`./<name>`) is located at the zone's name.
    let e = Project::from_text("sandbox:\n  zones:\n    data: {mode: ro}\n", &file, &d.path).unwrap_err();
    expect(&e, "workcell.yaml", 3, 5, "./data resolves to / through a symlink");
    // Written absolute, the link is still judged by where it leads.
    let e = Project::from_text(&format!("sandbox:\n  zones:\n    data: {{path: {}/data}}\n", d.path.display()), &file, &d.path).unwrap_err();
    expect(&e, "workcell.yaml", 3, 18, "zone 'data': / may not be a zone");
    // A link to an ordinary directory outside: refused relative, fine absolute.
    let outside = tempfile::tempdir().unwrap();
    let outside = fs::canonicalize(outside.path()).unwrap();
    fs::remove_file(d.path.join("data")).unwrap();
    std::os::unix::fs::symlink(&outside, d.path.join("data")).unwrap();
    let e = Project::from_text("sandbox:\n  zones:\n    data: {path: ./data}\n", &file, &d.path).unwrap_err();
    expect(&e, "workcell.yaml", 3, 18, &format!("./data resolves to {} through a symlink, outside the project", outside.display()));
    Project::from_text(&format!("sandbox:\n  zones:\n    data: {{path: {}}}\n", outside.display()), &file, &d.path).expect("absolute is what the person meant");
    // Sandboxed mode: a link planted where the zone is created.
    fs::create_dir_all(d.path.join(".sandbox")).unwrap();
    std::os::unix::fs::symlink("/etc", d.path.join(".sandbox/cache")).unwrap();
    let e = Project::from_text("sandbox:\n  mode: sandboxed\n  zones:\n    cache: {mode: ro}\n", &file, &d.path).unwrap_err();
    assert_eq!(e.line, 4, "{e}");
}

#[test]
fn a_directory_holding_a_container_engine_socket_is_refused() {
    let d = dir_with(&[]);
    let _listener = std::os::unix::net::UnixListener::bind(d.path.join("data/docker.sock")).unwrap();
    let (yaml, file) = ("sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n", d.path.join("workcell.yaml"));
    let e = Project::from_text(yaml, &file, &d.path).unwrap_err();
    expect(&e, "workcell.yaml", 3, 18, &format!("zone 'data': {0}/data holds the container engine socket {0}/data/docker.sock", d.path.display()));
    assert!(e.message.contains("a read-only mount does not stop that"), "{}", e.message);
}

#[test]
fn relative_mount_point() {
    let (e, _) = load_err("sandbox:\n  mounts:\n    - host: ./data\n      at: data\n", &[]);
    expect(&e, "workcell.yaml", 4, 11, "mount point 'data' must be absolute, like '/data'");
}

#[test]
fn reserved_mount_point() {
    let (e, _) = load_err("sandbox:\n  mounts:\n    - host: ./data\n      at: /proc\n", &[]);
    expect(&e, "workcell.yaml", 4, 11, "mount point '/proc' is inside the system directory '/proc'");
    let (e, _) = load_err("sandbox:\n  zones:\n    etc: {path: ./data}\n", &[]);
    expect(&e, "workcell.yaml", 3, 5, "reserved");
}

#[test]
fn two_forms_at_once() {
    let (e, _) = load_err("sandbox:\n  zones:\n    data: {path: ./data}\n  paths:\n    out: {root: ./out}\n", &[]);
    // Located at the second form's content (its first entry), the part to remove.
    expect(&e, "workcell.yaml", 5, 5, "sandbox declares zones and paths; use exactly one of zones, paths, root (mapping) or mounts");
}

#[test]
fn missing_host_dir() {
    let (e, dir) = load_err("sandbox:\n  zones:\n    data: {path: ./nope}\n", &[]);
    expect(&e, "workcell.yaml", 3, 18, "does not exist; create it, or use `sandbox.mode: sandboxed`");
    // Config errors may name host paths: they are for the person configuring, not a worker.
    assert!(e.message.contains(&format!("host directory '{}/./nope'", dir.display())), "{}", e.message);
}

#[test]
fn bad_timeout() {
    let (e, _) = load_err("defaults:\n  limits:\n    timeout: soon\n", &[]);
    expect(&e, "workcell.yaml", 3, 14, "invalid timeout 'soon'");
    assert!(e.message.contains("use a duration such as 30s, 5m or 1h"), "{}", e.message);
}

#[test]
fn bad_memory_and_cpus() {
    let (e, _) = load_err("defaults:\n  limits:\n    memory: 5x\n", &[]);
    expect(&e, "workcell.yaml", 3, 13, "invalid memory '5x': unknown unit 'x'");
    let (e, _) = load_err("defaults:\n  limits:\n    cpus: -1\n", &[]);
    expect(&e, "workcell.yaml", 3, 11, "invalid cpus '-1': must be at least 0.01");
}

#[test]
fn oversized_numbers_say_what_is_allowed() {
    // Was "must be at least 1 byte" (an overflow read as zero) and "invalid u64".
    let (e, _) = load_err("sandbox:\n  zones:\n    data: {path: ./data, max_file_bytes: 99999999999999999999999}\n", &[]);
    expect(&e, "workcell.yaml", 3, 42, "invalid max_file_bytes '99999999999999999999999': must be at most 16 EiB");
    let (e, _) = load_err("sandbox:\n  zones:\n    data: {path: ./data, max_file_bytes: -1}\n", &[]);
    expect(&e, "workcell.yaml", 3, 42, "invalid max_file_bytes '-1': not a size; use a size such as 512m or 2g");
    let (e, _) = load_err("defaults:\n  limits:\n    pids: 99999999999999999999999\n", &[]);
    expect(&e, "workcell.yaml", 3, 11, "invalid pids '99999999999999999999999': must be at most 4194304");
    let e = worker_err("---\nattachment_policy:\n  max_attachments: -3\n---\n");
    expect(&e, "w.worker", 3, 20, "invalid max_attachments '-3': must be at least 0");
    // Sizes take units wherever a size is asked for.
    let d = dir_with(&[]);
    let p = Project::from_text("sandbox:\n  zones:\n    data: {path: ./data, max_file_bytes: 10m}\n", &d.path.join("workcell.yaml"), &d.path).unwrap();
    assert_eq!(p.sandbox.mounts()[0].max_file_bytes, Some(10 << 20));
}

#[test]
fn duplicate_key() {
    let (e, _) = load_err("sandbox:\n  zones:\n    data: {path: ./data}\n    data: {path: ./out}\n", &[]);
    expect(&e, "workcell.yaml", 4, 5, "the key 'data' appears twice in the same mapping; each key may appear once");
    assert!(!e.message.contains("DuplicateKeyPolicy"), "no library internals: {}", e.message);
}

#[test]
fn worker_declares_undefined_zone() {
    let e = worker_err("---\ndescription: x\nsandbox:\n  zones:\n    - name: cache\n      mode: ro\n---\nbody\n");
    expect(&e, "w.worker", 5, 13, "worker declares zone 'cache', which the project does not define; defined zones: data, out");
}

#[test]
fn worker_rw_over_ro_zone() {
    let e = worker_err("---\nsandbox:\n  zones:\n    - name: data\n      mode: rw\n---\n");
    expect(&e, "w.worker", 5, 13, "worker requests 'rw' on zone 'data' but the project only has 'ro'; use mode: ro");
}

#[test]
fn worker_name_mismatch() {
    let e = worker_err("---\nname: other\n---\n");
    expect(&e, "w.worker", 2, 7, "worker name 'other' differs from its file name 'w.worker'; they must match");
}

#[test]
fn unknown_key_in_worker_file() {
    // Front matter starts on line 2: its first key is reported on line 2, not 1.
    let e = worker_err("---\nsandbx: {}\n---\n");
    expect(&e, "w.worker", 2, 1, "unknown field `sandbx`");
    let e = worker_err("---\ndescription: fine\nlimits:\n  timeout: 5m\n  memroy: 1g\n---\n");
    expect(&e, "w.worker", 5, 3, "unknown field `memroy`");
}

#[test]
fn worker_allowlist_outside_the_project() {
    let e = worker_err("---\nsandbox:\n  allow_read: [/data, /nope]\n---\n");
    expect(&e, "w.worker", 3, 23, "allow_read='/nope'");
    let e = worker_err("---\nsandbox:\n  allow_write:\n    - /data\n---\n");
    expect(&e, "w.worker", 4, 7, "'/data' is read-only in the parent sandbox");
}

#[test]
fn worker_file_without_front_matter() {
    let e = worker_err("name: w\n");
    expect(&e, "w.worker", 1, 1, "a worker file starts with a '---' line");
}

#[test]
fn load_reports_the_real_file() {
    let d = dir_with(&[]);
    let file = d.path.join("workcell.yaml");
    fs::write(&file, "sandbox:\n  network: maybe\n").unwrap();
    let e = Project::load(Some(Path::new("workcell.yaml")), &d.path).unwrap_err();
    assert_eq!(e.file, file);
    assert_eq!(e.line, 2, "{e}");
}

/// `mounts:` entries take `host_path` / `mount_point` as other names for `host` / `at`; one
/// name of each pair, never both.
#[test]
fn mount_aliases() {
    let d = dir_with(&[]);
    let file = d.path.join("workcell.yaml");
    let short = Project::from_text("sandbox:\n  mounts:\n    - {host: ./data, at: /data, mode: ro}\n", &file, &d.path).unwrap();
    let long = Project::from_text("sandbox:\n  mounts:\n    - {host_path: ./data, mount_point: /data, mode: ro}\n", &file, &d.path).unwrap();
    assert_eq!(long.sandbox.mounts(), short.sandbox.mounts());
    assert_eq!(long.sandbox.mounts()[0].mount_point, "/data");
    let (e, _) = load_err("sandbox:\n  mounts:\n    - {host: ./data, host_path: ./out, at: /data}\n", &[]);
    expect(&e, "workcell.yaml", 3, 7, "duplicate field `host`: `host` and `host_path` are two names for the same setting; give one of them");
    let (e, _) = load_err("sandbox:\n  mounts:\n    - {host: ./data}\n", &[]);
    expect(&e, "workcell.yaml", 3, 8, "missing field `at` (or `mount_point`)");
}

#[test]
fn readonly_false_over_a_parent_without_writes_is_located() {
    let ro = "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n";
    let (e, _) = load_err(ro, &[("w", "---\nsandbox:\n  inherit: true\n  readonly: false\n---\n")]);
    expect(&e, "w.worker", 4, 13, "Cannot create child sandbox with readonly=false: parent sandbox is readonly");
}

#[test]
fn a_mount_at_root_beside_others_is_refused_at_its_place() {
    let yaml = "sandbox:\n  mounts:\n    - {host: ./data, at: /, mode: ro}\n    - {host: ./out, at: /special, mode: rw}\n";
    let (e, _) = load_err(yaml, &[]);
    expect(&e, "workcell.yaml", 3, 26, "a mount at '/' must be the only mount (it is the root form");
}

/// A grant of a directory that does not exist yet is accepted where the parent can write
/// (it is created at launch); where the parent cannot, it is refused at its entry.
#[test]
fn grants_of_missing_directories() {
    let d = dir_with(&[("w", "---\nsandbox:\n  allow_write: [/out/reports/2026]\n  allow_read: [/out/cache]\n---\n")]);
    let p = Project::from_text(ZONES, &d.path.join("workcell.yaml"), &d.path).expect("project");
    assert!(p.broken.is_empty(), "{:?}", p.broken);
    let w = p.worker("w").expect("worker loads");
    assert_eq!(w.sandbox.pending_roots(), vec![("/out/cache".to_string(), false), ("/out/reports/2026".to_string(), true)]);
    assert!(!d.path.join("out/reports").exists(), "nothing is created at load");

    let e = worker_err("---\nsandbox:\n  allow_read: [/data, /data/new]\n---\n");
    expect(
        &e,
        "w.worker",
        3,
        23,
        "Cannot access '/data/new': no such file or directory. A directory that does not exist yet can be granted only where the parent sandbox can write",
    );
}

/// A worker file that is refused leaves the other workers and the project usable.
#[test]
fn a_broken_worker_does_not_stop_the_others() {
    let d = dir_with(&[("good", "---\nsandbox:\n  allow_read: [/data]\n---\n"), ("bad", "---\nsandbox:\n  allow_read: [/nope]\n---\n")]);
    let p = Project::from_text(ZONES, &d.path.join("workcell.yaml"), &d.path).expect("the project loads");
    assert!(p.worker("good").is_ok());
    let e = p.worker("bad").expect_err("the broken worker is refused");
    assert!(e.to_string().contains("bad.worker:3:16: Cannot create child sandbox with allow_read='/nope'"), "{e}");
    assert_eq!(p.broken.keys().collect::<Vec<_>>(), ["bad"]);
}

/// `unprotect:` names an entry in force, else it is refused where it is written, naming the
/// entries that can be turned off; a bad entry in `protect:` likewise.
#[test]
fn protected_entries() {
    let (e, _) = load_err("sandbox:\n  zones:\n    out: {path: ./out, mode: rw, unprotect: [.vscode, .nope]}\n", &[]);
    expect(&e, "workcell.yaml", 3, 55, "'.nope' is not a protected entry here");
    assert!(e.message.contains(".git/hooks") && e.message.contains(".bashrc"), "{}", e.message);
    let (e, _) = load_err("sandbox:\n  protect: [Makefile, /etc/profile]\n  zones:\n    out: {path: ./out, mode: rw}\n", &[]);
    expect(&e, "workcell.yaml", 2, 23, "'/etc/profile' is not a relative path");
    let (e, _) = load_err("sandbox:\n  paths:\n    out: {root: ./out, mode: rw, unprotect: [../x]}\n", &[]);
    expect(&e, "workcell.yaml", 3, 46, "not a relative path");
    let (e, _) = load_err("sandbox:\n  root: {root: ., readonly: false, unprotect: [Makefile]}\n", &[]);
    expect(&e, "workcell.yaml", 2, 48, "'Makefile' is not a protected entry here");
    // An added entry can be turned off again in one zone; the other keeps it.
    let d = dir_with(&[]);
    let yaml = "sandbox:\n  protect: [Makefile]\n  mounts:\n    - {host: ./out, at: /out, mode: rw, unprotect: [Makefile, .envrc]}\n    - {host: ./data, at: /data, mode: rw}\n";
    let p = Project::from_text(yaml, &d.path.join("workcell.yaml"), &d.path).expect("config");
    let entries = |point: &str| p.sandbox.mounts().iter().find(|m| m.mount_point == point).expect("mount").protection.entries().to_vec();
    assert!(!entries("/out").iter().any(|e| e == "Makefile" || e == ".envrc"));
    assert!(entries("/data").iter().any(|e| e == "Makefile") && entries("/data").iter().any(|e| e == ".envrc"));
}

/// `zones:` of the project in the list form worker files use: the same zones as the mapping,
/// and a name given twice, a zone without a name or a zones value of neither form refused
/// with its line and what to write.
#[test]
fn zones_may_be_a_list_as_in_worker_files() {
    let d = dir_with(&[]);
    let file = d.path.join("workcell.yaml");
    let list = "sandbox:\n  zones:\n    - {name: data, path: ./data, mode: ro}\n    - name: out\n      mode: rw\n      approval: {write: preApproved}\n";
    let map = "sandbox:\n  zones:\n    data: {path: ./data, mode: ro}\n    out: {mode: rw, approval: {write: preApproved}}\n";
    let shown = |yaml: &str| -> Vec<String> {
        let p = Project::from_text(yaml, &file, &d.path).unwrap_or_else(|e| panic!("{e}"));
        p.sandbox.mounts().iter().map(|m| format!("{} {} {} {:?} {:?}", m.name, m.mount_point, m.host_path.display(), m.mode, m.approval)).collect()
    };
    assert_eq!(shown(list), shown(map));
    assert_eq!(shown(list).len(), 2);

    let e = Project::from_text("sandbox:\n  zones:\n    - {name: data}\n    - {name: data, mode: rw}\n", &file, &d.path).unwrap_err();
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("zone 'data' is given twice"), "{e}");
    let e = Project::from_text("sandbox:\n  zones:\n    - {path: ./data}\n", &file, &d.path).unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("name"), "{e}");
    let e = Project::from_text("sandbox:\n  zones:\n    - {name: data, mod: ro}\n", &file, &d.path).unwrap_err();
    assert!(e.message.contains("unknown field `mod`"), "{e}");
    let e = Project::from_text("sandbox:\n  zones: data\n", &file, &d.path).unwrap_err();
    assert!(e.message.contains("zones by name ({data: {path: ./data, mode: ro}}) or a list of zones each with its name"), "{e}");
}

/// No `workcell.yaml` here or above: refused, naming the directory searched from, and
/// nothing made there (a default project used to create `.sandbox/cache` and `workspace`).
#[test]
fn no_project_file_is_refused_and_nothing_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fs::canonicalize(tmp.path()).unwrap();
    let e = Project::load(None, &dir).unwrap_err();
    assert_eq!(e.file, dir, "{e}");
    assert!(e.to_string().contains("no workcell.yaml here or in any directory above; `workcell init` writes a starter project"), "{e}");
    assert_eq!(fs::read_dir(&dir).unwrap().count(), 0);
}
