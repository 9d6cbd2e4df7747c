//! The kernel surface a worker reaches, through the real `workcell run`: the system calls
//! that have turned container escapes into host root are refused (bwrap: workcell's seccomp
//! filter; docker: Docker's default profile), and with `-t` the worker cannot push input
//! into the invoking terminal.

mod support;

use std::path::PathBuf;
use std::process::Command;

/// Calls each system call with harmless arguments and prints `name errno` (0 = it ran).
/// Numbers are the kernel's for x86_64 and aarch64.
const PROBE: &str = r#"
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
x86 = platform.machine() == "x86_64"
calls = {
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "userfaultfd": (323, 282), "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "bpf": (321, 280), "perf_event_open": (298, 241),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "mount": (165, 40),
    "umount2": (166, 39), "pivot_root": (155, 41), "unshare": (272, 97), "setns": (308, 268),
    "open_by_handle_at": (304, 265), "fsopen": (430, 430), "open_tree": (428, 428),
    "move_mount": (429, 429),
}
for name, (a, b) in calls.items():
    ctypes.set_errno(0)
    # unshare(CLONE_NEWUSER); everything else gets zeros (or bad pointers: never a success).
    first = 0x10000000 if name == "unshare" else 0
    r = libc.syscall(a if x86 else b, first, 0, 0, 0, 0)
    print(name, 0 if r == 0 else ctypes.get_errno())
"#;

fn workcell() -> Command {
    Command::new(assert_cmd::cargo::cargo_bin("workcell"))
}

/// A project without zones: the probes need none, and a run needs a project.
fn empty_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("workcell.yaml"), "{}\n").expect("workcell.yaml");
    dir
}

/// `name -> errno` for every call of [`PROBE`], run as a worker on `backend`.
fn probe(backend: &str) -> Vec<(String, i32)> {
    let dir = empty_project();
    let out = workcell().current_dir(dir.path()).args(["run", "--backend", backend, "--", "python3", "-c", PROBE]).output().expect("workcell");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "the probe should run");
    stdout.lines().filter_map(|l| l.split_once(' ')).map(|(n, e)| (n.to_string(), e.trim().parse().expect("errno"))).collect()
}

const EPERM: i32 = 1;

#[test]
fn bwrap_refuses_escape_syscalls() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let results = probe("bwrap");
    assert_eq!(results.len(), 23, "{results:?}");
    let allowed: Vec<_> = results.iter().filter(|(_, e)| *e != EPERM).collect();
    assert!(allowed.is_empty(), "calls not refused with EPERM under bwrap: {allowed:?}");
}

#[test]
fn docker_refuses_escape_syscalls() {
    if !support::backend_ready("docker") {
        return;
    }
    let results = probe("docker");
    assert_eq!(results.len(), 23, "{results:?}");
    // Docker's default profile refuses these; io_uring only from Engine 25 on (docs/security.md
    // says so), so it is left out here.
    let allowed: Vec<_> = results.iter().filter(|(n, e)| !n.starts_with("io_uring") && *e != EPERM).collect();
    assert!(allowed.is_empty(), "calls not refused with EPERM under docker: {allowed:?}");
}

/// `workcell run -t` on a pseudo-terminal: the worker shares the terminal (no new session)
/// and tries TIOCSTI, which would type into the user's shell after the run, and TIOCLINUX.
#[test]
fn bwrap_tty_cannot_push_input_into_the_terminal() {
    if !support::backend_ready("bwrap") {
        return;
    }
    // The injected bytes are built at run time, so only a successful injection (echoed by
    // the terminal) can print them.
    let probe = "import fcntl, termios\n\
                 for req, name in ((termios.TIOCSTI, 'TIOCSTI'), (0x541C, 'TIOCLINUX')):\n\
                 \x20   try:\n\
                 \x20       for b in bytes([81, 55, 90]): fcntl.ioctl(0, req, bytes([b]))\n\
                 \x20       print(name, 'ALLOWED')\n\
                 \x20   except OSError as e:\n\
                 \x20       print(name, 'errno', e.errno)\n";
    let dir = empty_project();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pty_run.py");
    let bin = assert_cmd::cargo::cargo_bin("workcell");
    let out = Command::new("python3")
        .current_dir(dir.path())
        .arg(&script)
        .arg("n")
        .arg(&bin)
        .args(["run", "-t", "--backend", "bwrap", "--", "python3", "-c", probe])
        .output()
        .expect("pty_run.py");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("pty_run.py prints JSON");
    let text = report["output"].as_str().unwrap_or_default().to_string();
    eprintln!("{report}");
    assert_eq!(report["exit"], 0, "{text}");
    assert!(text.contains("TIOCSTI errno 1"), "TIOCSTI was not refused: {text}");
    assert!(text.contains("TIOCLINUX errno 1"), "TIOCLINUX was not refused: {text}");
    assert!(!text.contains("Q7Z") && !text.contains("ALLOWED"), "the worker typed into the terminal: {text}");
}
