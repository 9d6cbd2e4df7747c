//! The worker's `/etc/passwd` and `/etc/group`: root, nobody and the run's user, nothing of
//! the host's. Docker's host base image carries them as files; bwrap binds the same text
//! read-only, so `id`, `whoami` and `getpass` answer alike on both backends. Also the
//! name-resolution files every worker gets (`hosts_text`, `NSSWITCH_TEXT`).

use super::UserSpec;

/// `/etc/passwd` for a worker running as `u` (named `worker` unless it is root or nobody).
pub fn passwd_text(u: UserSpec) -> String {
    let mut s = String::from("root:x:0:0:root:/tmp:/bin/sh\n");
    if u.uid != 0 && u.uid != 65534 {
        s.push_str(&format!("worker:x:{}:{}:workcell worker:/tmp:/bin/sh\n", u.uid, u.gid));
    }
    s.push_str("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    s
}

/// `/etc/group` for a worker running as `u`.
pub fn group_text(u: UserSpec) -> String {
    let mut s = String::from("root:x:0:\n");
    if u.gid != 0 && u.gid != 65534 {
        s.push_str(&format!("worker:x:{}:\n", u.gid));
    }
    s.push_str("nogroup:x:65534:\n");
    s
}

/// `/etc/hosts` of a worker: `localhost` and the worker's own host name resolve to loopback,
/// with or without network (test suites start servers on `localhost`).
pub fn hosts_text() -> String {
    format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.0.1\t{}\n", super::WORKER_HOSTNAME)
}

/// `/etc/nsswitch.conf` where the worker's image has none: files first. Without one glibc
/// asks DNS first for host names (`dns [!UNAVAIL=return] files`), and with no network the
/// answer "not found" stops it before `/etc/hosts` is read.
pub const NSSWITCH_TEXT: &str = "passwd: files\ngroup: files\nhosts: files dns\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_worker_once() {
        let u = UserSpec { uid: 1000, gid: 1001 };
        assert!(passwd_text(u).contains("worker:x:1000:1001:"));
        assert!(group_text(u).contains("worker:x:1001:"));
        let nobody = UserSpec { uid: 65534, gid: 65534 };
        assert_eq!(passwd_text(nobody).matches(":65534:").count(), 1);
        assert_eq!(group_text(nobody).matches(":65534:").count(), 1);
    }
}
