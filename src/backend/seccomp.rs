//! The seccomp filter bwrap loads for the worker (`bwrap --seccomp FD`): everything is
//! allowed except the system calls that let a process leave or attack its sandbox. The list
//! is at least as strict as Docker's default profile for those calls; ordinary programs see
//! no difference.
//!
//! The body is compiled by `seccompiler`. A small hand-written prefix runs first, for what
//! seccompiler cannot express: a second errno (`clone3` and `openat2` get `ENOSYS`) and a
//! check on the syscall number itself (the x32 ABI).
//!
//! Beyond Docker's profile, no set-uid or set-gid file can be made: a mode with those bits
//! is refused in `chmod`, `fchmod`, `fchmodat(2)`, and in `open`, `openat`, `creat`, `mknod`
//! and `mknodat` when they create.

use std::os::fd::OwnedFd;
use std::sync::{Arc, OnceLock};

/// Why no filter could be built or handed over.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SeccompError {
    /// workcell has syscall numbers only for x86_64 and aarch64.
    #[error("workcell has no seccomp filter for the {0} architecture (only x86_64 and aarch64); the worker would run without one")]
    UnsupportedArch(&'static str),
    /// seccompiler refused the rules (a bug in this module: the rules never change).
    #[error("cannot compile the seccomp filter: {0}")]
    Compile(#[source] Arc<seccompiler::BackendError>),
    /// The memfd that carries the filter to bwrap could not be created or written.
    #[error("cannot hand the seccomp filter to bwrap ({what}): {source}")]
    Fd { what: &'static str, source: rustix::io::Errno },
}

/// The filter program; syscall numbers come from `libc` for the target architecture.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod program {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use seccompiler::{BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition, SeccompFilter, SeccompRule};

    use super::SeccompError;

    /// `clone`/`unshare` flags that create namespaces: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
    /// NEWUSER, NEWPID, NEWNET (Docker's mask 0x7E020000). CLONE_NEWTIME (0x80) shares its bit
    /// with the exit signal in `clone`, so it only exists for `clone3` and `unshare`, both
    /// refused whole.
    const CLONE_NEW_FLAGS: [u64; 7] = [0x0002_0000, 0x0200_0000, 0x0400_0000, 0x0800_0000, 0x1000_0000, 0x2000_0000, 0x4000_0000];

    /// `personality` values Docker allows: PER_LINUX, UNAME26, PER_LINUX32, PER_LINUX32|UNAME26
    /// and 0xffffffff (query). Any other (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...) would weaken
    /// ASLR or W^X for what the worker executes next.
    const PERSONALITY_ALLOWED: [u64; 5] = [0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

    /// `ioctl` requests that write into a terminal's input queue (TIOCSTI) or drive the virtual
    /// console (TIOCLINUX): with `workcell run -t` the worker shares the user's terminal and
    /// could type commands into the user's shell after it exits.
    const TTY_INJECT: [u64; 2] = [0x5412, 0x541C];

    /// S_ISUID and S_ISGID: a file with either runs as its owner (or group) for whoever
    /// executes it. A worker that could leave one in a zone, owned by its uid, would lend that
    /// uid to any other local user who runs it.
    const SET_ID: [u64; 2] = [0o4000, 0o2000];

    /// `fchmodat2` (Linux 6.6): the same number on every architecture; not in every `libc`.
    const SYS_FCHMODAT2: i64 = 452;

    /// The `open` flags with which a call creates a file, and so uses its mode: O_CREAT and
    /// O_TMPFILE's own bit (O_TMPFILE includes O_DIRECTORY, which a plain open also uses).
    fn creating() -> [u64; 2] {
        [libc::O_CREAT as u64, (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64]
    }

    /// Calls that set a mode, by (number, mode argument, flags argument when the mode only
    /// counts with a creating flag). `chmod`, `open`, `creat` and `mknod` exist on x86_64 only;
    /// aarch64 has only the `*at` forms.
    fn mode_setters() -> Vec<(i64, u8, Option<u8>)> {
        use libc::*;
        #[allow(unused_mut)]
        let mut calls = vec![(SYS_fchmod, 1, None), (SYS_fchmodat, 2, None), (SYS_FCHMODAT2, 2, None), (SYS_openat, 3, Some(2)), (SYS_mknodat, 2, None)];
        #[cfg(target_arch = "x86_64")]
        calls.extend([(SYS_chmod, 1, None), (SYS_open, 2, Some(1)), (SYS_creat, 1, None), (SYS_mknod, 1, None)]);
        calls
    }

    /// Calls refused outright with EPERM, by group.
    fn refused() -> Vec<i64> {
        use libc::*;
        let mut calls = vec![
            // New namespaces: a fresh user namespace gives full capabilities over new mount,
            // network... namespaces and opens a large kernel attack surface; setns joins others.
            SYS_unshare,
            SYS_setns,
            // Kernel keyrings are not namespaced: keys could be read or planted across the boundary.
            SYS_keyctl,
            SYS_add_key,
            SYS_request_key,
            // Large, frequently exploited kernel interfaces that a worker has no need for.
            SYS_bpf,
            SYS_perf_event_open,
            SYS_userfaultfd,
            SYS_io_uring_setup,
            SYS_io_uring_enter,
            SYS_io_uring_register,
            // Loading kernels or modules: direct kernel code execution.
            SYS_kexec_load,
            SYS_kexec_file_load,
            SYS_init_module,
            SYS_finit_module,
            SYS_delete_module,
            // Changing the mount tree would undo the sandbox's view of the filesystem.
            SYS_mount,
            SYS_umount2,
            SYS_pivot_root,
            SYS_move_mount,
            SYS_open_tree,
            SYS_fsopen,
            SYS_fsconfig,
            SYS_fsmount,
            SYS_fspick,
            SYS_mount_setattr,
            // Opens any inode by handle, bypassing the mount tree (the "shocker" escape).
            SYS_open_by_handle_at,
            // Host-wide state: accounting, swap, reboot, kernel log, clock, quotas.
            SYS_acct,
            SYS_swapon,
            SYS_swapoff,
            SYS_reboot,
            SYS_syslog,
            SYS_settimeofday,
            SYS_clock_settime,
            SYS_clock_adjtime,
            SYS_quotactl,
            SYS_quotactl_fd,
        ];
        // Profiling interface (removed from the kernel in 6.10; the number remains).
        calls.push(SYS_lookup_dcookie);
        calls
    }

    /// A rule that matches when argument `arg` (low 32 bits) compares `op` to `value`.
    fn arg32(arg: u8, op: Op, value: u64) -> Result<SeccompCondition, SeccompError> {
        SeccompCondition::new(arg, Len::Dword, op, value).map_err(compile)
    }

    fn compile(e: seccompiler::BackendError) -> SeccompError {
        SeccompError::Compile(Arc::new(e))
    }

    /// The seccompiler part: default allow, the calls above (and the conditional ones) EPERM.
    fn body(arch: seccompiler::TargetArch) -> Result<BpfProgram, SeccompError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = refused().into_iter().map(|nr| (nr, Vec::new())).collect();
        // Rules of one call are alternatives; conditions of one rule must all hold.
        let clone = CLONE_NEW_FLAGS.iter().map(|&f| SeccompRule::new(vec![arg32(0, Op::MaskedEq(f), f)?]).map_err(compile));
        rules.insert(libc::SYS_clone, clone.collect::<Result<_, _>>()?);
        let ioctl = TTY_INJECT.iter().map(|&req| SeccompRule::new(vec![arg32(1, Op::Eq, req)?]).map_err(compile));
        rules.insert(libc::SYS_ioctl, ioctl.collect::<Result<_, _>>()?);
        // A mode with S_ISUID or S_ISGID is refused wherever a mode is set: chmod and its
        // relatives, and the calls that create a file with a mode (only when creating: without
        // O_CREAT the mode argument is whatever the register held).
        for (nr, mode, flags) in mode_setters() {
            let mut alternatives = Vec::new();
            for bit in SET_ID {
                match flags {
                    None => alternatives.push(SeccompRule::new(vec![arg32(mode, Op::MaskedEq(bit), bit)?]).map_err(compile)?),
                    Some(flags) => {
                        for create in creating() {
                            let rule = vec![arg32(flags, Op::MaskedEq(create), create)?, arg32(mode, Op::MaskedEq(bit), bit)?];
                            alternatives.push(SeccompRule::new(rule).map_err(compile)?);
                        }
                    }
                }
            }
            rules.insert(nr, alternatives);
        }
        let persona = PERSONALITY_ALLOWED.iter().map(|&p| arg32(0, Op::Ne, p)).collect::<Result<_, _>>()?;
        rules.insert(libc::SYS_personality, vec![SeccompRule::new(persona).map_err(compile)?]);
        let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch).map_err(compile)?;
        filter.try_into().map_err(compile)
    }

    // Classic BPF opcodes (linux/bpf_common.h) for the hand-written prefix.
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const JGE_K: u16 = 0x35;
    const RET_K: u16 = 0x06;
    const RET_KILL_PROCESS: u32 = 0x8000_0000;
    const RET_ERRNO: u32 = 0x0005_0000;

    /// Runs before the body: kills a process calling through a foreign ABI (the 32-bit ABI
    /// int 0x80 on x86_64, AArch32 on aarch64: their syscall numbers differ, so the body's list
    /// would not apply), and on x86_64 through the x32 ABI (native arch, numbers with bit 30 set);
    /// answers `clone3` with ENOSYS so glibc falls back to `clone`, whose flags the body can see
    /// (clone3 passes them in memory), as Docker does; and `openat2` the same way, for its mode.
    fn prefix(audit_arch: u32, x32: bool) -> Vec<(u16, u8, u8, u32)> {
        let mut p = vec![
            (LD_W_ABS, 0, 0, 4), // seccomp_data.arch
            (JEQ_K, 1, 0, audit_arch),
            (RET_K, 0, 0, RET_KILL_PROCESS),
            (LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ];
        if x32 {
            p.extend([(JGE_K, 0, 1, 0x4000_0000), (RET_K, 0, 0, RET_KILL_PROCESS)]);
        }
        p.extend([(JEQ_K, 0, 1, libc::SYS_clone3 as u32), (RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32)]);
        // openat2 passes its mode in memory, where the body cannot see it: ENOSYS, and libc
        // and programs fall back to openat.
        p.extend([(JEQ_K, 0, 1, libc::SYS_openat2 as u32), (RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32)]);
        p
    }

    /// This machine's architecture: seccompiler's name, AUDIT_ARCH_*, whether x32 exists.
    #[cfg(target_arch = "x86_64")]
    fn native() -> (seccompiler::TargetArch, u32, bool) {
        (seccompiler::TargetArch::x86_64, 0xC000_003E, true)
    }
    #[cfg(target_arch = "aarch64")]
    fn native() -> (seccompiler::TargetArch, u32, bool) {
        (seccompiler::TargetArch::aarch64, 0xC000_00B7, false)
    }

    pub(super) fn build() -> Result<Vec<u8>, SeccompError> {
        let (arch, audit_arch, x32) = native();
        let body = body(arch)?.into_iter().map(|i| (i.code, i.jt, i.jf, i.k));
        let mut bytes = Vec::new();
        for (code, jt, jf, k) in prefix(audit_arch, x32).into_iter().chain(body) {
            // struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; } in native byte order.
            bytes.extend_from_slice(&code.to_ne_bytes());
            bytes.extend([jt, jf]);
            bytes.extend_from_slice(&k.to_ne_bytes());
        }
        Ok(bytes)
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod program {
    pub(super) fn build() -> Result<Vec<u8>, super::SeccompError> {
        Err(super::SeccompError::UnsupportedArch(std::env::consts::ARCH))
    }
}

/// The filter as raw `struct sock_filter` array, exactly what `bwrap --seccomp FD` reads
/// from its descriptor. Built once per process.
pub fn bwrap_filter() -> Result<&'static [u8], SeccompError> {
    static FILTER: OnceLock<Result<Vec<u8>, SeccompError>> = OnceLock::new();
    FILTER.get_or_init(program::build).as_ref().map(Vec::as_slice).map_err(Clone::clone)
}

/// A sealed memfd holding [`bwrap_filter`], positioned at its start (bwrap reads it with
/// `read()` to EOF from the current offset). It is close-on-exec: the caller makes it
/// inheritable only around bwrap's spawn and passes its number to `--seccomp`.
pub fn filter_fd() -> Result<OwnedFd, SeccompError> {
    use rustix::fs::{fcntl_add_seals, memfd_create, seek, MemfdFlags, SealFlags, SeekFrom};
    let bytes = bwrap_filter()?;
    let err = |what| move |source| SeccompError::Fd { what, source };
    let fd = memfd_create("workcell-seccomp", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).map_err(err("memfd_create"))?;
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = rustix::io::write(&fd, rest).map_err(err("write"))?;
        rest = &rest[n..];
    }
    seek(&fd, SeekFrom::Start(0)).map_err(err("seek"))?;
    // The worker cannot reach this descriptor (bwrap closes it), but the seals make it
    // impossible for anything holding it to change the filter before bwrap reads it.
    let seals = SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL;
    fcntl_add_seals(&fd, seals).map_err(err("seal"))?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_is_whole_instructions_and_cached() {
        let a = bwrap_filter().expect("filter");
        assert!(!a.is_empty() && a.len().is_multiple_of(8) && a.len() / 8 < 4096);
        assert!(std::ptr::eq(a, bwrap_filter().unwrap()));
    }

    #[test]
    fn fd_reads_back_the_filter_from_offset_zero() {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(filter_fd().expect("fd")), &mut buf).unwrap();
        assert_eq!(buf, bwrap_filter().unwrap());
    }
}
