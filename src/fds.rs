//! Descriptors workcell inherited from whoever started it.
//!
//! Everything workcell starts (bwrap, the Docker watchdog, the shell tool's sandboxes, child
//! workers, the `none` backend) would otherwise inherit every descriptor workcell itself
//! inherited: a worker could read a file its caller had open (`exec 9<secret`), or reach the
//! whole host through an inherited directory descriptor (`/proc/self/fd/N/...`), past every
//! zone. [`mark_inherited_cloexec`] runs first thing in `main`, before any thread exists, and
//! makes every descriptor above 2 close-on-exec; the descriptors workcell passes on on
//! purpose are its own, made inheritable only around their spawn (see
//! `backend::spawn_exclusive`).
//!
//! Marked rather than closed: workcell itself may still use what it was given — a config
//! read from a process substitution (`--config <(...)`, i.e. `/dev/fd/63`), or another
//! `/dev/fd/N` path named on the command line — while no program it runs can.

/// Makes every descriptor above 2 close-on-exec. Call before any thread starts, so that no
/// spawn can run meanwhile and pass one on. Workcell's own descriptors are close-on-exec
/// anyway (std and rustix open them so), so marking them too changes nothing.
pub fn mark_inherited_cloexec() {
    if close_range_cloexec() {
        return;
    }
    let fds = match list_open_fds() {
        Some(fds) => fds,
        // Neither /proc nor /dev/fd: every number up to the descriptor limit.
        None => (3..max_fd()).collect(),
    };
    for fd in fds.into_iter().filter(|fd| *fd > 2) {
        set_cloexec(fd);
    }
}

/// `close_range(3, ~0, CLOSE_RANGE_CLOEXEC)` (Linux 5.11+): one system call for all of them.
#[cfg(target_os = "linux")]
fn close_range_cloexec() -> bool {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on descriptors; it
    // reads and writes no memory of this process.
    let r = unsafe { libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    r == 0
}

#[cfg(not(target_os = "linux"))]
fn close_range_cloexec() -> bool {
    false
}

/// The open descriptors, from `/proc/self/fd` (Linux) or `/dev/fd` (macOS, BSDs). The
/// directory's own descriptor is listed too; it is closed before the caller marks the
/// others, and marking a closed number fails harmlessly.
fn list_open_fds() -> Option<Vec<i32>> {
    for dir in ["/proc/self/fd", "/dev/fd"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            let fds: Vec<i32> = entries.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())).collect();
            if !fds.is_empty() {
                return Some(fds);
            }
        }
    }
    None
}

fn max_fd() -> i32 {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(65536);
    limit.min(1 << 20) as i32
}

fn set_cloexec(fd: i32) {
    // SAFETY: the descriptor is only borrowed for two fcntl calls and not closed; if the
    // number is not open, fcntl fails with EBADF and nothing happens.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    if let Ok(flags) = rustix::io::fcntl_getfd(fd) {
        let _ = rustix::io::fcntl_setfd(fd, flags | rustix::io::FdFlags::CLOEXEC);
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    #[test]
    fn the_fallback_marks_an_inheritable_descriptor() {
        let f = std::fs::File::open("/dev/null").unwrap();
        // A duplicate without CLOEXEC, as an inherited descriptor would be.
        let dup = rustix::io::dup(&f).unwrap();
        rustix::io::fcntl_setfd(&dup, rustix::io::FdFlags::empty()).unwrap();
        let fds = super::list_open_fds().expect("/proc/self/fd or /dev/fd");
        assert!(fds.contains(&dup.as_raw_fd()));
        super::set_cloexec(dup.as_raw_fd());
        assert!(rustix::io::fcntl_getfd(&dup).unwrap().contains(rustix::io::FdFlags::CLOEXEC));
    }
}
