//! A bwrap worker cannot leave a set-uid or set-gid file in a zone (the seccomp filter
//! refuses a mode with S_ISUID or S_ISGID wherever one is set): `chmod u+s`, `chmod g+s`,
//! `os.open(..., O_CREAT, 0o4755)`, `install -m 4755`, `os.mknod`, O_TMPFILE and
//! `fchmodat2` all fail, `openat2` answers ENOSYS, and an ordinary `chmod 755` works. The
//! same script run directly on the host is the control: there it does leave such files, so
//! the probe can fail.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

const SCRIPT: &str = r#"cd "$1" || exit 99
echo x > a; chmod u+s a; echo "chmod-u+s $?"
echo x > b; chmod g+s b; echo "chmod-g+s $?"
install -m 4755 a e; echo "install $?"
echo x > f; chmod 755 f; echo "chmod-755 $?"
mkdir g; chmod g+s g; echo "dir-g+s $?"
python3 - <<'PY'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def attempt(name, f):
    try:
        f()
        print(name, 0)
    except OSError as e:
        print(name, e.errno)
attempt("open-4755", lambda: os.close(os.open("c", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("open-2755", lambda: os.close(os.open("d", os.O_CREAT | os.O_WRONLY, 0o2755)))
attempt("chmod-4755", lambda: os.chmod("f", 0o4755))
attempt("mknod-4755", lambda: os.mknod("h", 0o104755))
attempt("tmpfile-4755", lambda: os.close(os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o4755)))
def raw(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    print(name, ctypes.get_errno() if r == -1 else 0)
# fchmodat2(AT_FDCWD, "f", 04755, 0)
raw("fchmodat2-4755", 452, -100, ctypes.c_char_p(b"f"), 0o4755, 0)
# openat2(AT_FDCWD, "i", &how, sizeof how): the filter cannot read `how`, so it says ENOSYS
how = (ctypes.c_uint64 * 3)(os.O_CREAT | os.O_WRONLY, 0o4755, 0)
raw("openat2", 437, -100, ctypes.c_char_p(b"i"), ctypes.cast(how, ctypes.c_void_p), 24)
PY
echo DONE"#;

fn run(proj: &Path, backend: &str) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
        .current_dir(proj)
        .env_remove("RUST_LOG")
        .args(["run", "--backend", backend, "--", "sh", "-c", SCRIPT, "sh", "/out"])
        .output()
        .expect("workcell");
    eprintln!("{backend}: exit {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

/// Files and directories in `dir` with a set-uid or set-gid bit.
fn set_id_files(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry"))
        .filter(|e| e.metadata().expect("meta").mode() & 0o6000 != 0)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

fn project() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let proj = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
    std::fs::create_dir_all(proj.join("out")).expect("mkdir");
    support::write_project(&proj, "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n", &[]);
    support::give_to_worker(&proj);
    (tmp, proj)
}

fn answers(out: &Output) -> Vec<(String, String)> {
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_once(' ')).map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

#[test]
fn a_bwrap_worker_leaves_no_set_id_file() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let (_tmp, proj) = project();
    let out = run(&proj, "bwrap");
    assert!(String::from_utf8_lossy(&out.stdout).contains("DONE"));
    let got = answers(&out);
    let eperm = libc::EPERM.to_string();
    for name in ["open-4755", "open-2755", "chmod-4755", "mknod-4755", "tmpfile-4755", "fchmodat2-4755"] {
        assert!(got.contains(&(name.to_string(), eperm.clone())), "{name} refused with EPERM: {got:?}");
    }
    assert!(got.contains(&("openat2".to_string(), libc::ENOSYS.to_string())), "{got:?}");
    for name in ["chmod-u+s", "chmod-g+s", "install", "dir-g+s"] {
        assert!(got.iter().any(|(n, code)| n == name && code != "0"), "{name} failed: {got:?}");
    }
    assert!(got.contains(&("chmod-755".to_string(), "0".to_string())), "{got:?}");
    assert_eq!(set_id_files(&proj.join("out")), Vec::<String>::new(), "no set-uid/set-gid file in the zone");
    assert_eq!(std::fs::metadata(proj.join("out/f")).expect("f").mode() & 0o7777, 0o755, "an ordinary chmod works");
}

/// Control: without the filter (the same script, run directly on the host) it does leave
/// set-id files.
#[test]
fn control_without_the_filter_the_script_makes_set_id_files() {
    let (_tmp, proj) = project();
    let out = Command::new("sh").args(["-c", SCRIPT, "sh"]).arg(proj.join("out")).output().expect("sh");
    assert!(String::from_utf8_lossy(&out.stdout).contains("DONE"), "{}", String::from_utf8_lossy(&out.stderr));
    let found = set_id_files(&proj.join("out"));
    for f in ["a", "b", "c", "d", "e", "g"] {
        assert!(found.contains(&f.to_string()), "{f} is set-id without the filter: {found:?}");
    }
}
