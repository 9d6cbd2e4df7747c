//! The worker's `/etc/passwd` and `/etc/group`: root, nobody and the run's user, nothing of
//! the host's. Docker's host base image carries them as files; bwrap binds the same text
//! read-only, so `id`, `whoami` and `getpass` answer alike on both backends.

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
