//! Where each controller lives and whether this process may create a child cgroup there:
//! [`Support::detect`] reads `/proc/self/cgroup` and `/proc/self/mountinfo`; the parsing is
//! pure ([`Support::from_proc`]) and unit-tested.

use std::path::PathBuf;

use super::{limit_file, Controller, Unsupported};
use crate::config::Limits;
use crate::sandbox::mounted::unescape;

/// Where this process can create a child cgroup for a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The parent directory: this process's own cgroup in that hierarchy.
    pub parent: PathBuf,
    /// cgroup v2 (one unified hierarchy) rather than v1.
    pub v2: bool,
}

/// What limits can be enforced here, per controller, and why not when they cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    pub memory: Result<Place, Unsupported>,
    pub pids: Result<Place, Unsupported>,
    pub cpu: Result<Place, Unsupported>,
}

impl Support {
    /// No limit can be enforced, for `reason`.
    pub fn none(reason: &str) -> Support {
        let why = || Err(Unsupported::Other(reason.into()));
        Support { memory: why(), pids: why(), cpu: why() }
    }

    /// This process's support, detected once per process and verified by creating (and
    /// removing) a probe cgroup per controller: what `plan`, `doctor` and `gc` report.
    pub fn detect() -> &'static Support {
        static SUPPORT: std::sync::OnceLock<Support> = std::sync::OnceLock::new();
        SUPPORT.get_or_init(|| Support::located().verified())
    }

    /// Where this process's cgroups are, from `/proc/self`, without the probe: a run tries
    /// its own cgroup directly ([`RunCgroup::create`](super::RunCgroup::create)), which answers the same question for
    /// the price of one mkdir instead of two mkdirs and an rmdir per controller.
    pub fn located() -> Support {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        Support::from_proc(&read("/proc/self/cgroup"), &read("/proc/self/mountinfo"))
    }

    /// Where each controller lives, from `/proc/self/cgroup` and `/proc/self/mountinfo`
    /// (without checking that a child cgroup can really be created there).
    pub fn from_proc(cgroup: &str, mountinfo: &str) -> Support {
        let mounts: Vec<Mount> = mountinfo.lines().filter_map(Mount::parse).collect();
        let place = |c: Controller| -> Result<Place, Unsupported> {
            // A v1 hierarchy carrying the controller wins; else the unified (v2) one.
            for line in cgroup.lines() {
                let mut parts = line.splitn(3, ':');
                let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
                if controllers.split(',').any(|x| x == c.name()) {
                    let m = mounts.iter().find(|m| !m.v2 && m.controllers.iter().any(|x| x == c.name()));
                    return match m {
                        Some(m) => Ok(Place { parent: m.dir_of(path), v2: false }),
                        None => Err(Unsupported::V1NotMounted(c)),
                    };
                }
            }
            for line in cgroup.lines() {
                if let Some(path) = line.strip_prefix("0::") {
                    return match mounts.iter().find(|m| m.v2) {
                        Some(m) => Ok(Place { parent: m.dir_of(path), v2: true }),
                        None => Err(Unsupported::V2NotMounted),
                    };
                }
            }
            Err(Unsupported::NoCgroup(c))
        };
        Support { memory: place(Controller::Memory), pids: place(Controller::Pids), cpu: place(Controller::Cpu) }
    }

    /// Keeps only the places where a child cgroup with the controller can be created, by
    /// creating (and removing) one.
    fn verified(self) -> Support {
        let check = |c: Controller, p: Result<Place, Unsupported>| -> Result<Place, Unsupported> {
            let p = p?;
            let probe = p.parent.join(format!("workcell-probe-{}", std::process::id()));
            std::fs::create_dir(&probe).map_err(|e| cannot_create(&p, &e))?;
            let ok = probe.join(limit_file(c, p.v2)).exists();
            let _ = std::fs::remove_dir(&probe);
            if ok {
                Ok(p)
            } else {
                Err(Unsupported::NotEnabled { controller: c, parent: p.parent })
            }
        };
        Support { memory: check(Controller::Memory, self.memory), pids: check(Controller::Pids, self.pids), cpu: check(Controller::Cpu, self.cpu) }
    }

    pub(super) fn get(&self, c: Controller) -> &Result<Place, Unsupported> {
        match c {
            Controller::Memory => &self.memory,
            Controller::Pids => &self.pids,
            Controller::Cpu => &self.cpu,
        }
    }

    pub(super) fn get_mut(&mut self, c: Controller) -> &mut Result<Place, Unsupported> {
        match c {
            Controller::Memory => &mut self.memory,
            Controller::Pids => &mut self.pids,
            Controller::Cpu => &mut self.cpu,
        }
    }

    /// Why `c` cannot be enforced, or `None` when it can.
    pub fn missing(&self, c: Controller) -> Option<&Unsupported> {
        self.get(c).as_ref().err()
    }

    /// One line for `plan` and `doctor`.
    pub fn summary(&self) -> String {
        let on: Vec<String> = Controller::ALL
            .iter()
            .filter_map(|&c| self.get(c).as_ref().ok().map(|p| format!("{} (cgroup {})", c.name(), if p.v2 { "v2" } else { "v1" })))
            .collect();
        if on.is_empty() {
            "no limits enforced".to_string()
        } else {
            format!("enforced with a cgroup per run: {}", on.join(", "))
        }
    }
}

/// The reason a controller is unsupported when mkdir under `p` failed with `e`.
pub(super) fn cannot_create(p: &Place, e: &std::io::Error) -> Unsupported {
    // mkdir's errors carry an errno; EIO stands in for the impossible other case.
    Unsupported::CannotCreate { parent: p.parent.clone(), source: rustix::io::Errno::from_io_error(e).unwrap_or(rustix::io::Errno::IO), v2: p.v2 }
}

/// A cgroup filesystem mount from `/proc/self/mountinfo`.
pub(super) struct Mount {
    root: String,
    pub(super) point: PathBuf,
    v2: bool,
    controllers: Vec<String>,
}

impl Mount {
    /// `36 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:13 - cgroup cgroup rw,memory`
    pub(super) fn parse(line: &str) -> Option<Mount> {
        // Fields split on single spaces (a char pattern: memchr, not a substring search,
        // which made this parse cost 80 k instructions per run).
        let mut fields = line.split(' ');
        let (root, point) = (fields.nth(3)?, fields.next()?);
        // Optional fields end at a lone `-`; then fstype, source, super options.
        let mut r = fields.skip_while(|f| *f != "-").skip(1);
        let fstype = r.next()?;
        let _source = r.next()?;
        let opts = r.next().unwrap_or("");
        let v2 = match fstype {
            "cgroup2" => true,
            "cgroup" => false,
            _ => return None,
        };
        Some(Mount {
            root: unescape(root).to_string_lossy().into_owned(),
            point: unescape(point),
            v2,
            controllers: opts.split(',').map(str::to_string).collect(),
        })
    }

    /// The directory of cgroup `path` (as `/proc/self/cgroup` names it) under this mount.
    fn dir_of(&self, path: &str) -> PathBuf {
        let root = self.root.trim_end_matches('/');
        let rel = path.strip_prefix(root).filter(|r| r.is_empty() || r.starts_with('/')).unwrap_or(path);
        self.point.join(rel.trim_start_matches('/'))
    }
}

/// The limits of `limits` that `support` cannot enforce, with the reason.
pub fn unenforceable(limits: &Limits, support: &Support) -> Vec<(Controller, Unsupported)> {
    let mut out = Vec::new();
    let wanted = [(Controller::Memory, limits.memory_bytes.is_some()), (Controller::Pids, limits.pids.is_some()), (Controller::Cpu, limits.cpus.is_some())];
    for (c, want) in wanted {
        if let (true, Some(why)) = (want, support.missing(c)) {
            out.push((c, why.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO_V1: &str = "\
30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
36 30 0:31 / /sys/fs/cgroup/memory rw,relatime shared:13 - cgroup cgroup rw,memory
37 30 0:32 / /sys/fs/cgroup/pids rw,relatime shared:14 - cgroup cgroup rw,pids
38 30 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
39 30 0:34 / /sys/fs/cgroup/unified rw,relatime shared:16 - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_controllers_are_found_in_their_hierarchies() {
        let cgroup = "9:pids:/\n4:memory:/process_api/abc\n3:cpu,cpuacct:/x\n0::/\n";
        let s = Support::from_proc(cgroup, MOUNTINFO_V1);
        assert_eq!(s.memory, Ok(Place { parent: "/sys/fs/cgroup/memory/process_api/abc".into(), v2: false }));
        assert_eq!(s.pids, Ok(Place { parent: "/sys/fs/cgroup/pids".into(), v2: false }));
        assert_eq!(s.cpu, Ok(Place { parent: "/sys/fs/cgroup/cpu,cpuacct/x".into(), v2: false }));
    }

    #[test]
    fn v2_only_uses_the_unified_hierarchy() {
        let mountinfo = "29 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        let s = Support::from_proc("0::/user.slice/user-1000.slice/session-2.scope\n", mountinfo);
        let want = Ok(Place { parent: "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope".into(), v2: true });
        assert_eq!(s.memory, want);
        assert_eq!(s.pids, want);
    }

    #[test]
    fn a_mount_rooted_below_the_hierarchy_root_is_followed() {
        // Inside a container: the cgroupfs shows only the container's subtree.
        let mountinfo = "40 30 0:31 /docker/abc /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        let s = Support::from_proc("0::/docker/abc/inner\n", mountinfo);
        assert_eq!(s.memory, Ok(Place { parent: "/sys/fs/cgroup/inner".into(), v2: true }));
    }

    #[test]
    fn no_cgroup_filesystem_means_no_support_with_a_reason() {
        let s = Support::from_proc("4:memory:/a\n", "22 1 0:5 / /proc rw - proc proc rw\n");
        assert!(s.memory.unwrap_err().to_string().contains("not mounted"));
        assert!(s.pids.unwrap_err().to_string().contains("no pids cgroup"));
    }

    #[test]
    fn unenforceable_names_only_wanted_and_missing_limits() {
        let limits = Limits { memory_bytes: Some(1 << 20), pids: Some(10), ..Limits::default() };
        let s = Support {
            memory: Ok(Place { parent: "/x".into(), v2: true }),
            pids: Err(Unsupported::Other("no".into())),
            cpu: Err(Unsupported::Other("no".into())),
        };
        let missing = unenforceable(&limits, &s);
        assert_eq!(missing, vec![(Controller::Pids, Unsupported::Other("no".into()))]);
    }

    #[test]
    fn mountinfo_lines_with_several_or_no_optional_fields_parse() {
        let m = Mount::parse(r"41 30 0:35 /a\040b /sys/fs/cgroup/my\040pids rw shared:17 master:3 - cgroup none rw,pids").unwrap();
        assert_eq!((m.root.as_str(), m.point.to_str().unwrap(), m.v2), ("/a b", "/sys/fs/cgroup/my pids", false));
        assert_eq!(m.controllers, ["rw", "pids"]);
        let m = Mount::parse("42 30 0:36 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw").unwrap();
        assert!(m.v2);
        // A mount point that is literally `-`, and an empty source field.
        let m = Mount::parse("43 30 0:37 / /- rw shared:2 - cgroup  rw,memory").unwrap();
        assert_eq!(m.point.to_str(), Some("/-"));
        assert_eq!(m.controllers, ["rw", "memory"]);
        assert!(Mount::parse("22 1 0:5 / /proc rw - proc proc rw").is_none());
        assert!(Mount::parse("truncated line").is_none());
    }

    #[test]
    fn octal_escapes_are_decoded() {
        assert_eq!(unescape(r"/a\040b"), std::path::Path::new("/a b"));
        assert_eq!(unescape(r"/plain"), std::path::Path::new("/plain"));
    }
}
