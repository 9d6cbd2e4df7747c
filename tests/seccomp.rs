//! The bwrap seccomp filter, loaded by a real `bwrap --seccomp FD`: each refused call gets
//! EPERM (clone3: ENOSYS), terminal injection is refused, foreign ABIs are killed, and
//! ordinary programs still run. A control run without the filter shows the probe can fail.
//!
//! Gate: `support::backend_ready("bwrap")`: without bwrap these tests skip with a note, unless
//! `WORKCELL_REQUIRE_BWRAP=1`.
#![cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

use workcell::backend::seccomp;

mod support;

const EPERM: i64 = libc::EPERM as i64;

/// Runs `argv` under bwrap, with the filter on descriptor 3 when `filtered`.
fn sandboxed(filtered: bool, argv: &[&str]) -> Output {
    // The bwrap the gate probed (`WORKCELL_BWRAP` or the one on PATH).
    let mut cmd = Command::new(workcell::backend::bwrap::probe().expect("bwrap, checked by the gate"));
    cmd.args(["--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534", "--die-with-parent", "--new-session"]);
    cmd.args(["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"]);
    cmd.args(["--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin", "--proc", "/proc", "--dev", "/dev"]);
    let fd: Option<OwnedFd> = filtered.then(|| seccomp::filter_fd().expect("filter fd"));
    if let Some(fd) = &fd {
        cmd.args(["--seccomp", "3"]);
        let raw = fd.as_raw_fd();
        // SAFETY: dup2 and fcntl are async-signal-safe. dup2 onto itself keeps FD_CLOEXEC,
        // so when the memfd already is descriptor 3 the flag is cleared instead.
        unsafe {
            cmd.pre_exec(move || {
                let ok = if raw == 3 { libc::fcntl(3, libc::F_SETFD, 0) == 0 } else { libc::dup2(raw, 3) == 3 };
                if ok {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    cmd.arg("--").args(argv);
    cmd.output().expect("spawn bwrap")
}

/// Python that calls each `(name, nr, args)` with `syscall(2)` and prints `name errno`.
fn probe_script(calls: &[(&str, i64, &[i64])]) -> String {
    let list: Vec<String> = calls.iter().map(|(n, nr, a)| format!("({n:?}, {nr}, {a:?})")).collect();
    format!(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n\
         for name, nr, args in [{}]:\n    ctypes.set_errno(0)\n    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])\n    \
         print(name, ctypes.get_errno() if r == -1 else 0, flush=True)\n",
        list.join(", ")
    )
}

/// Runs the probe for `calls` and returns each call's errno (0: it succeeded).
fn probe(filtered: bool, calls: &[(&str, i64, &[i64])]) -> Vec<(String, i64)> {
    let out = sandboxed(filtered, &["/usr/bin/python3", "-c", &probe_script(calls)]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "probe failed: {:?}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(|l| l.split_once(' ').map(|(n, e)| (n.to_string(), e.parse().unwrap())).unwrap()).collect()
}

/// Every call the filter refuses with EPERM, with harmless arguments (a call that got
/// through would fail on them, or do nothing).
fn refused_calls() -> Vec<(&'static str, i64, &'static [i64])> {
    use libc::*;
    // CLONE_THREAD without CLONE_SIGHAND: the kernel would answer EINVAL, never fork.
    let clone = |flag: i64| -> &'static [i64] { Box::leak(vec![flag | 0x10000, 0, 0, 0, 0].into_boxed_slice()) };
    vec![
        ("unshare", SYS_unshare, &[0]),
        ("setns", SYS_setns, &[-1, 0]),
        ("clone_newns", SYS_clone, clone(0x20000)),
        ("clone_newcgroup", SYS_clone, clone(0x0200_0000)),
        ("clone_newuts", SYS_clone, clone(0x0400_0000)),
        ("clone_newipc", SYS_clone, clone(0x0800_0000)),
        ("clone_newuser", SYS_clone, clone(0x1000_0000)),
        ("clone_newpid", SYS_clone, clone(0x2000_0000)),
        ("clone_newnet", SYS_clone, clone(0x4000_0000)),
        ("keyctl", SYS_keyctl, &[0, -3, 0]),
        ("add_key", SYS_add_key, &[0, 0, 0, 0, 0]),
        ("request_key", SYS_request_key, &[0, 0, 0, 0]),
        ("bpf", SYS_bpf, &[-1, 0, 0]),
        ("perf_event_open", SYS_perf_event_open, &[0, 0, -1, -1, 0]),
        ("userfaultfd", SYS_userfaultfd, &[0]),
        ("io_uring_setup", SYS_io_uring_setup, &[1, 0]),
        ("io_uring_enter", SYS_io_uring_enter, &[-1, 0, 0, 0, 0, 0]),
        ("io_uring_register", SYS_io_uring_register, &[-1, 0, 0, 0]),
        ("kexec_load", SYS_kexec_load, &[0, 0, 0, 0]),
        ("kexec_file_load", SYS_kexec_file_load, &[-1, -1, 0, 0, 0]),
        ("init_module", SYS_init_module, &[0, 0, 0]),
        ("finit_module", SYS_finit_module, &[-1, 0, 0]),
        ("delete_module", SYS_delete_module, &[0, 0]),
        ("mount", SYS_mount, &[0, 0, 0, 0, 0]),
        ("umount2", SYS_umount2, &[0, 0]),
        ("pivot_root", SYS_pivot_root, &[0, 0]),
        ("move_mount", SYS_move_mount, &[-1, 0, -1, 0, 0]),
        ("open_tree", SYS_open_tree, &[-1, 0, 0]),
        ("fsopen", SYS_fsopen, &[0, 0]),
        ("fsconfig", SYS_fsconfig, &[-1, 0, 0, 0, 0]),
        ("fsmount", SYS_fsmount, &[-1, 0, 0]),
        ("fspick", SYS_fspick, &[-1, 0, 0]),
        ("mount_setattr", SYS_mount_setattr, &[-1, 0, 0, 0, 0]),
        ("open_by_handle_at", SYS_open_by_handle_at, &[-1, 0, 0]),
        ("acct", SYS_acct, &[0]),
        ("swapon", SYS_swapon, &[0, 0]),
        ("swapoff", SYS_swapoff, &[0]),
        ("reboot", SYS_reboot, &[0, 0, 0, 0]),
        ("syslog", SYS_syslog, &[10, 0, 0]),
        ("settimeofday", SYS_settimeofday, &[0, 0]),
        ("clock_settime", SYS_clock_settime, &[0, 0]),
        ("clock_adjtime", SYS_clock_adjtime, &[0, 0]),
        ("lookup_dcookie", SYS_lookup_dcookie, &[0, 0, 0]),
        ("quotactl", SYS_quotactl, &[0, 0, 0, 0]),
        ("quotactl_fd", SYS_quotactl_fd, &[-1, 0, 0, 0]),
        ("personality_no_aslr", SYS_personality, &[0x0040000]),
        ("personality_read_implies_exec", SYS_personality, &[0x0400000]),
    ]
}

#[test]
fn every_listed_call_is_refused_with_eperm() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let calls = refused_calls();
    let got = probe(true, &calls);
    let names: Vec<&str> = calls.iter().map(|c| c.0).collect();
    assert_eq!(got.iter().map(|g| g.0.as_str()).collect::<Vec<_>>(), names, "the probe answered every call");
    let wrong: Vec<_> = got.iter().filter(|(_, e)| *e != EPERM).collect();
    assert!(wrong.is_empty(), "not refused with EPERM: {wrong:?}");
}

#[test]
fn clone3_gets_enosys_and_allowed_variants_pass() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let calls: [(&str, i64, &[i64]); 5] = [
        ("clone3", libc::SYS_clone3, &[0, 0]),
        // No namespace flag: the filter lets it through, the kernel refuses the flags.
        ("clone_plain", libc::SYS_clone, &[0x10000, 0, 0, 0, 0]),
        ("personality_query", libc::SYS_personality, &[0xffff_ffff]),
        ("personality_linux", libc::SYS_personality, &[0]),
        ("name_to_handle_at", libc::SYS_name_to_handle_at, &[-1, 0, 0, 0, 0]),
    ];
    let got = probe(true, &calls);
    assert_eq!(got[0], ("clone3".into(), libc::ENOSYS as i64));
    assert_eq!(got[1], ("clone_plain".into(), libc::EINVAL as i64));
    assert_eq!(&got[2..4], &[("personality_query".into(), 0), ("personality_linux".into(), 0)]);
    assert_ne!(got[4].1, EPERM, "name_to_handle_at stays allowed, as under Docker");
}

#[test]
fn the_probe_sees_calls_succeed_without_the_filter() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let calls: [(&str, i64, &[i64]); 3] =
        [("keyctl", libc::SYS_keyctl, &[0, -3, 0]), ("io_uring_setup", libc::SYS_io_uring_setup, &[1, 0]), ("unshare", libc::SYS_unshare, &[0])];
    let got = probe(false, &calls);
    assert!(got.iter().all(|(_, e)| *e != EPERM), "without the filter these calls are not refused: {got:?}");
    assert!(probe(true, &calls).iter().all(|(_, e)| *e == EPERM));
}

/// Makes a new pty the controlling terminal, then pushes input with TIOCSTI (also with the
/// request's upper 32 bits set, which the kernel ignores) and calls TIOCLINUX.
const TTY_PROBE: &str = r#"
import ctypes, os, termios, fcntl
libc = ctypes.CDLL(None, use_errno=True)
m, s = os.openpty()
try: os.setsid()
except OSError: pass
fcntl.ioctl(s, termios.TIOCSCTTY, 0)
for name, req, arg in [("tiocsti", 0x5412, b"x"), ("tiocsti_high_bits", 0x1_0000_5412, b"x"), ("tioclinux", 0x541C, b"\x0b")]:
    r = libc.ioctl(ctypes.c_int(s), ctypes.c_ulong(req), ctypes.c_char_p(arg))
    print(name, ctypes.get_errno() if r == -1 else 0, flush=True)
"#;

fn tty_probe(filtered: bool) -> Vec<(String, i64)> {
    let out = sandboxed(filtered, &["/usr/bin/python3", "-c", TTY_PROBE]);
    assert!(out.status.success(), "tty probe failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().map(|l| l.split_once(' ').map(|(n, e)| (n.to_string(), e.parse().unwrap())).unwrap()).collect()
}

#[test]
fn terminal_injection_is_refused() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let got = tty_probe(true);
    assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), [EPERM; 3], "{got:?}");
    // Without the filter TIOCSTI works on our own controlling terminal (when the kernel still
    // allows it at all: dev.tty.legacy_tiocsti=0 makes it EIO), so EPERM above is the filter.
    let legacy = std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").map(|s| s.trim() == "1").unwrap_or(false);
    let unfiltered = tty_probe(false);
    assert_eq!(unfiltered[0].1, if legacy { 0 } else { libc::EIO as i64 }, "{unfiltered:?}");
}

#[test]
fn ordinary_programs_still_work() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let out = sandboxed(true, &["/usr/bin/python3", "-c", "import subprocess; print(1); subprocess.run(['true'], check=True)"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n", "{}", String::from_utf8_lossy(&out.stderr));
    let out = sandboxed(true, &["/usr/bin/busybox", "sh", "-c", "ls / | grep -c usr; cat /proc/self/status | grep ^Seccomp:"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\nSeccomp:\t2\n", "{}", String::from_utf8_lossy(&out.stderr));
}

/// Runs `code` (Python) that should be killed by the filter before it prints "alive".
fn assert_killed(code: &str) {
    let out = sandboxed(true, &["/usr/bin/python3", "-c", &format!("{code}\nprint('alive')")]);
    assert!(!out.status.success() && out.stdout.is_empty(), "{out:?}");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn foreign_abis_are_killed() {
    if !support::backend_ready("bwrap") {
        return;
    }
    // x32: native arch, number with bit 30 set (getpid).
    assert_killed("import ctypes; ctypes.CDLL(None).syscall(ctypes.c_long(0x40000000 | 39))");
    // i386 ABI through int 0x80: mov eax, 20 (getpid); int 0x80; ret.
    let i386 = "import ctypes, mmap\nm = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n\
                m.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))\n\
                f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\nprint(f(), flush=True)";
    assert_killed(i386);
    // The same code without the filter returns a pid: the kill above is the filter's.
    let out = sandboxed(false, &["/usr/bin/python3", "-c", i386]);
    assert!(out.status.success() && !out.stdout.is_empty(), "{out:?}");
}
