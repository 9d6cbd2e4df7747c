//! The plan as an SBPL profile (pure). Every host path is a `-D` parameter referenced as
//! `(param "NAME")`, never profile text, so no path can change the profile's meaning.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{private_tmp, SeatbeltProfile, BASE_PROFILE, TMP_PARAM};
use crate::plan::{LaunchPlan, PlanMount, SystemEntry, BROKER_MOUNT_POINT};

/// Parameter naming the broker's directory, and its socket.
pub const BROKER_DIR_PARAM: &str = "BROKER_DIR";
pub const BROKER_SOCKET_PARAM: &str = "BROKER_SOCKET";

/// What the worker needs of `/usr`: `/usr/local` (Homebrew on Intel Macs, the user's own
/// installs and their configuration) is left out.
const USR_DIRS: &[&str] = &["/usr/bin", "/usr/sbin", "/usr/lib", "/usr/libexec", "/usr/share"];

/// `-D` parameters, named `PREFIX_N` in the order they are added.
#[derive(Default)]
struct Params(Vec<(String, String)>);

impl Params {
    fn add(&mut self, prefix: &str, value: impl Into<String>) -> String {
        let n = self.0.iter().filter(|(k, _)| k.strip_prefix(prefix).is_some_and(|r| r.starts_with('_') && r[1..].parse::<u32>().is_ok())).count();
        let name = format!("{prefix}_{n}");
        self.0.push((name.clone(), value.into()));
        name
    }
}

/// Renders `plan` as a Seatbelt profile. Pure.
pub fn render_profile(plan: &LaunchPlan) -> SeatbeltProfile {
    let mut params = Params::default();
    let mut rules = String::new();

    rules.push_str("\n; system paths of the plan (read-only)\n");
    for entry in &plan.system {
        match entry {
            SystemEntry::Bind { path } if path == "/usr" => {
                for dir in USR_DIRS {
                    let n = params.add("SYSTEM", *dir);
                    rules.push_str(&format!("(allow file-read* (subpath (param \"{n}\")))\n"));
                }
            }
            SystemEntry::Bind { path } => {
                for p in with_private_alias(path) {
                    let n = params.add("SYSTEM", p);
                    rules.push_str(&format!("(allow file-read* (subpath (param \"{n}\")))\n"));
                }
            }
            // The link itself must be readable for the kernel to follow it.
            SystemEntry::Symlink { path, .. } => {
                for p in with_private_alias(path) {
                    let n = params.add("SYSTEM", p);
                    rules.push_str(&format!("(allow file-read* (literal (param \"{n}\")))\n"));
                }
            }
        }
    }

    rules.push_str("\n; zones, at their host paths, in mount order (outer first)\n");
    let zones: Vec<&PlanMount> = plan.mounts.iter().filter(|m| m.target != BROKER_MOUNT_POINT).collect();
    let mut ancestors = BTreeSet::new();
    for m in &zones {
        let source = private_path(&m.source);
        // Directories inside another zone are readable already.
        if !zones.iter().any(|o| private_path(&o.source) != source && source.starts_with(private_path(&o.source))) {
            collect_ancestors(&source, &mut ancestors);
        }
        let n = params.add("ZONE", source.to_string_lossy());
        if m.read_only {
            // The deny matters when a read-only zone sits inside a writable one: the last
            // matching rule wins.
            rules.push_str(&format!("(allow file-read* (subpath (param \"{n}\")))\n(deny file-write* (subpath (param \"{n}\")))\n"));
            continue;
        }
        rules.push_str(&format!("(allow file-read* (subpath (param \"{n}\")))\n"));
        // Read-only mounts inside this writable one (the project's control files, read-only
        // zones) are carved out of its writes, and the directories from the zone down to
        // each of them cannot be renamed or removed (which would move them away).
        let kept: Vec<PathBuf> =
            zones.iter().filter(|o| o.read_only).map(|o| private_path(&o.source)).filter(|o| o != &source && o.starts_with(&source)).collect();
        if kept.is_empty() {
            rules.push_str(&format!("(allow file-write* (subpath (param \"{n}\")))\n"));
            continue;
        }
        rules.push_str(&format!("(allow file-write*\n  (require-all\n    (subpath (param \"{n}\"))"));
        let mut pinned = BTreeSet::new();
        for k in &kept {
            let kn = params.add(&format!("{n}_KEEP"), k.to_string_lossy());
            rules.push_str(&format!("\n    (require-not (subpath (param \"{kn}\")))"));
            pinned.extend(k.ancestors().skip(1).take_while(|a| a.starts_with(&source)).map(Path::to_path_buf));
        }
        rules.push_str("))\n");
        for p in pinned {
            let pn = params.add(&format!("{n}_PIN"), p.to_string_lossy());
            rules.push_str(&format!("(deny file-write-unlink (literal (param \"{pn}\")))\n"));
        }
    }

    rules.push_str("\n; the run's private temp dir (HOME and TMPDIR are inside)\n");
    let tmp = private_tmp(plan);
    collect_ancestors(&tmp, &mut ancestors);
    params.0.push((TMP_PARAM.to_string(), tmp.to_string_lossy().into_owned()));
    rules.push_str(&format!("(allow file-read* file-write* (subpath (param \"{TMP_PARAM}\")))\n"));

    let broker = plan.mounts.iter().find(|m| m.target == BROKER_MOUNT_POINT).map(|m| private_path(&m.source));
    if let Some(dir) = &broker {
        collect_ancestors(dir, &mut ancestors);
    }

    rules.push_str("\n; metadata of the directories above zones, so path walks reach them\n");
    for a in ancestors {
        let n = params.add("PARENT", a);
        rules.push_str(&format!("(allow file-read-metadata (literal (param \"{n}\")))\n"));
    }

    rules.push_str("\n; network: no rule admits Unix sockets beyond the broker's\n");
    if plan.network.is_open() {
        // Outbound to any address; listening only on loopback. DNS goes through
        // mDNSResponder, by Mach service and by its socket.
        rules.push_str(concat!(
            "(allow network-outbound (remote ip \"*:*\"))\n",
            "(allow network-bind network-inbound (local ip \"localhost:*\"))\n",
            "(allow network-outbound (remote unix-socket (path-literal \"/private/var/run/mDNSResponder\")))\n",
            "(allow mach-lookup (global-name \"com.apple.dnssd.service\"))\n",
        ));
    } else {
        rules.push_str("(deny network*)\n");
    }
    if let Some(dir) = broker {
        rules.push_str("\n; the broker: its directory read-only, and a connection to its socket\n");
        params.0.push((BROKER_DIR_PARAM.into(), dir.to_string_lossy().into_owned()));
        params.0.push((BROKER_SOCKET_PARAM.into(), dir.join("broker.sock").to_string_lossy().into_owned()));
        rules.push_str(&format!(
            "(allow file-read* (subpath (param \"{BROKER_DIR_PARAM}\")))\n(allow network-outbound (remote unix-socket (path-literal (param \"{BROKER_SOCKET_PARAM}\"))))\n"
        ));
    }
    SeatbeltProfile { profile: format!("{BASE_PROFILE}{rules}"), params: params.0 }
}

/// `/etc/x` is `/private/etc/x` on macOS, and Seatbelt matches resolved paths.
fn with_private_alias(path: &str) -> Vec<String> {
    let mut out = vec![path.to_string()];
    let private = private_path(Path::new(path));
    if private != Path::new(path) {
        out.push(private.to_string_lossy().into_owned());
    }
    out
}

/// `path` as Seatbelt sees it: `/tmp`, `/var` and `/etc` are links into `/private` on macOS
/// (fixed by the system), and the profile matches resolved paths. Lexical, so pure.
pub fn private_path(path: &Path) -> PathBuf {
    for top in ["/etc", "/var", "/tmp"] {
        if let Ok(rest) = path.strip_prefix(top) {
            return Path::new("/private").join(top.trim_start_matches('/')).join(rest);
        }
    }
    path.to_path_buf()
}

fn collect_ancestors(p: &Path, into: &mut BTreeSet<String>) {
    for a in p.ancestors().skip(1) {
        if a != Path::new("/") && !a.as_os_str().is_empty() {
            into.insert(a.to_string_lossy().into_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_alias_for_etc() {
        assert_eq!(with_private_alias("/etc/ssl"), vec!["/etc/ssl".to_string(), "/private/etc/ssl".to_string()]);
        assert_eq!(with_private_alias("/usr"), vec!["/usr".to_string()]);
        assert_eq!(private_path(Path::new("/var/folders/x/T")), Path::new("/private/var/folders/x/T"));
        assert_eq!(private_path(Path::new("/tmp")), Path::new("/private/tmp"));
        assert_eq!(private_path(Path::new("/tmpfoo")), Path::new("/tmpfoo"));
    }
}
