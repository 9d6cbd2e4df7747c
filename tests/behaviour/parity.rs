//! Bodies for what the worker's file system looks like beyond the zones, the same on every
//! backend: a read-only root and workcell's own user database.

use super::*;

/// Everything outside `/tmp`, `/dev` and the rw zones is read-only, even to a worker that
/// tries to remount it; the rw zone and `/tmp` take writes.
pub fn root_is_read_only(backend: &str) {
    let s = Scratch::new();
    let zone = s.mkdir("out");
    let script = "mount -o remount,rw / 2>/dev/null; \
        for p in /etc/f /f /usr/x /etc/passwd /etc/group /etc/hosts /etc/nsswitch.conf /newdir/x; do mkdir -p /newdir 2>/dev/null; if echo x > $p; then echo WROTE:$p; fi; done; \
        for p in /etc/passwd /etc/hosts; do [ -w $p ] && echo WROTE:w$p; chmod 0666 $p 2>/dev/null && echo WROTE:chmod$p; \
          mv $p /etc/moved 2>/dev/null && echo WROTE:mv$p; rm -f $p 2>/dev/null; [ -e $p ] || echo WROTE:rm$p; done; \
        echo tmp > /tmp/x && cat /tmp/x; echo zone > /out/x; exit 0";
    let out = run(backend, &s.root, &["--zone", "out=./out:rw", "--", "sh", "-c", script]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(!text.contains("WROTE:"), "the root file system took a write:\n{text}");
    assert!(text.contains("tmp"), "/tmp must stay writable:\n{text}");
    assert_eq!(std::fs::read_to_string(zone.join("x")).expect("the rw zone took the write"), "zone\n");
}

/// `id` names the worker from workcell's own `/etc/passwd` and `/etc/group` (root, nobody
/// and the worker; nothing of the host's), the same text on every backend.
pub fn user_has_a_name(backend: &str) {
    let s = Scratch::new();
    s.mkdir("in");
    let out = run(
        backend,
        &s.root,
        &["--zone", "in=./in:ro", "--", "sh", "-c", "id -g; id -un; id -gn; getent passwd $(id -u); echo ---; cat /etc/passwd; echo ---; cat /etc/group"],
    );
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let mut parts = text.split("---\n");
    let (head, passwd, group) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let mut lines = head.lines();
    let gid: u32 = lines.next().and_then(|g| g.trim().parse().ok()).unwrap_or_else(|| panic!("no gid in {text}"));
    let uid = support::worker_uid();
    let user = workcell::plan::UserSpec { uid, gid };
    assert_eq!(passwd, workcell::plan::accounts::passwd_text(user), "/etc/passwd");
    assert_eq!(group, workcell::plan::accounts::group_text(user), "/etc/group");
    let name = match uid {
        0 => "root",
        65534 => "nobody",
        _ => "worker",
    };
    let group_name = match gid {
        0 => "root",
        65534 => "nogroup",
        _ => "worker",
    };
    assert_eq!(lines.next(), Some(name), "id -un:\n{text}");
    assert_eq!(lines.next(), Some(group_name), "id -gn:\n{text}");
    assert!(lines.next().is_some_and(|l| l.starts_with(&format!("{name}:x:{uid}:{gid}:"))), "getent passwd:\n{text}");
}
