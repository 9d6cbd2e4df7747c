//! What is mounted in and under a zone: every backend binds a zone recursively (bwrap's
//! binds, Docker's `rbind`), so a file system mounted inside the zone's directory (a bind of
//! `/`, a procfs for a chroot, a cgroup hierarchy) reaches the worker with it; and a zone can
//! itself be a fresh mount of a kernel file system, which has an identity of its own (a new
//! procfs is not `/proc` by device and inode, yet shows every process of the host).

use std::path::{Path, PathBuf};

/// Kernel file systems by `statfs` magic, with their names in `/proc/self/mountinfo`.
/// (`devtmpfs` is one instance everywhere: [`super::hostdir`] recognises it as `/dev`.)
const KERNEL_FS: &[(i64, &str)] = &[
    (0x9fa0, "proc"),
    (0x6265_6572, "sysfs"),
    (0x1cd1, "devpts"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
    (0x7363_6673, "securityfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0xcafe_4a11, "bpf"),
    (0x6265_6570, "configfs"),
    (0xde5e_81e4, "efivarfs"),
    (0x6165_676c, "pstore"),
    (0x4249_4e4d, "binfmt_misc"),
    (0x6573_5543, "fusectl"),
];

/// The kernel file system the directory `dir` is on, if it is one.
pub(super) fn kernel_fs_of(dir: std::os::fd::BorrowedFd<'_>) -> Option<&'static str> {
    let st = rustix::fs::fstatfs(dir).ok()?;
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets.
    let magic = st.f_type as i64;
    KERNEL_FS.iter().find(|(m, _)| *m == magic).map(|(_, name)| *name)
}

/// Whether `fstype` (as mountinfo names it) is a kernel file system.
pub(super) fn is_kernel_fs(fstype: &str) -> bool {
    KERNEL_FS.iter().any(|(_, name)| *name == fstype) || fstype == "devtmpfs"
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MountEntry {
    /// `major:minor` of the file system.
    pub device: String,
    /// The directory of that file system the mount shows (`/` unless it is a bind of a
    /// directory inside it).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fstype: String,
}

/// The mounts of this process's namespace (empty when they cannot be read).
pub(super) fn mounts() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo").map(|t| t.lines().filter_map(parse_line).collect()).unwrap_or_default()
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let (before, after) = line.split_once(" - ")?;
    let mut f = before.split(' ');
    let (_id, _parent, device, root, mount_point) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    let fstype = after.split(' ').next()?;
    Some(MountEntry { device: device.into(), root: unescape(root), mount_point: unescape(mount_point), fstype: unescape(fstype).to_string_lossy().into() })
}

/// mountinfo writes space, tab, newline and backslash as `\040`, `\011`, `\012`, `\134`.
pub(crate) fn unescape(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// A mount strictly inside `zone_path`, and where on the host what it shows lives: the
/// places (outside the zone) where the same file system's directory `root` is mounted too,
/// so that the rules can be applied to the real directory (a bind of `/etc/cron.d` is
/// judged as `/etc/cron.d`, inside `/etc`).
pub(super) struct Inside {
    pub entry: MountEntry,
    pub sources: Vec<PathBuf>,
}

pub(super) fn inside(zone_path: &Path, all: &[MountEntry]) -> Vec<Inside> {
    let under = |p: &Path| p != zone_path && p.starts_with(zone_path);
    all.iter()
        .filter(|e| under(&e.mount_point))
        .map(|e| {
            let sources = all
                .iter()
                .filter(|o| o.device == e.device && !under(&o.mount_point) && o.mount_point != e.mount_point)
                .filter_map(|o| {
                    e.root.strip_prefix(&o.root).ok().map(|rest| if rest.as_os_str().is_empty() { o.mount_point.clone() } else { o.mount_point.join(rest) })
                })
                .collect();
            Inside { entry: e.clone(), sources }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mountinfo_lines() {
        let e = parse_line("36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw,errors=continue").unwrap();
        assert_eq!(e, MountEntry { device: "98:0".into(), root: "/mnt1".into(), mount_point: "/mnt/with space".into(), fstype: "ext3".into() });
    }

    #[test]
    fn finds_where_a_bind_comes_from() {
        let m =
            |device: &str, root: &str, mp: &str, fs: &str| MountEntry { device: device.into(), root: root.into(), mount_point: mp.into(), fstype: fs.into() };
        let all =
            vec![m("8:1", "/", "/", "ext4"), m("8:1", "/etc/cron.d", "/p/z/x", "ext4"), m("0:5", "/", "/p/z/proc", "proc"), m("8:1", "/", "/p/other", "ext4")];
        let found = inside(Path::new("/p/z"), &all);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].sources, vec![PathBuf::from("/etc/cron.d"), PathBuf::from("/p/other/etc/cron.d")]);
        assert!(found[1].sources.is_empty() && is_kernel_fs(&found[1].entry.fstype));
        assert!(inside(Path::new("/p/zz"), &all).is_empty());
    }
}
