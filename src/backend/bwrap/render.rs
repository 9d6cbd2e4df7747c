//! The pure half of the bwrap backend: a [`LaunchPlan`] rendered as a `bwrap` argv. No I/O
//! here, so the whole sandbox layout is snapshot-tested without running bwrap.

use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use crate::backend::egress;
use crate::plan::{LaunchPlan, Network, SystemEntry};

/// Optional bwrap options, which older releases lack. Detected from `bwrap --help`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwrapFeatures {
    /// `--size BYTES` before `--tmpfs` (caps the private `/tmp`).
    pub tmpfs_size: bool,
    /// `--disable-userns` (no nested user namespaces inside the sandbox; bubblewrap ≥ 0.8).
    pub disable_userns: bool,
    /// `--perms OCTAL` before `--file` (bubblewrap ≥ 0.5).
    pub perms: bool,
}

impl Default for BwrapFeatures {
    /// What current bubblewrap releases support.
    fn default() -> Self {
        BwrapFeatures { tmpfs_size: true, disable_userns: true, perms: true }
    }
}

impl BwrapFeatures {
    /// Features named in bwrap's usage text (`bwrap --help`, or the binary containing it).
    pub fn from_usage(usage: &[u8]) -> BwrapFeatures {
        BwrapFeatures { tmpfs_size: contains(usage, b"--size"), disable_userns: contains(usage, b"--disable-userns"), perms: contains(usage, b"--perms") }
    }
}

/// Environment variables that must not appear on bwrap's command line: the broker token.
fn is_secret(key: &str) -> bool {
    key == "WORKCELL_TOKEN"
}

/// The secret variables of `plan`, handed to bwrap through its own environment (readable
/// only by its user), from where the worker inherits them.
pub(super) fn secret_env(plan: &LaunchPlan) -> impl Iterator<Item = (&String, &String)> {
    plan.env.iter().filter(|(k, _)| is_secret(k))
}

/// The bwrap argv for `plan` (argv\[0\] is `bwrap`), assuming a current bubblewrap.
/// Pure: the same plan always renders the same argv.
pub fn render_argv(plan: &LaunchPlan, bwrap: &Path) -> Vec<OsString> {
    render_argv_with(plan, bwrap, BwrapFeatures::default())
}

/// [`render_argv`] for a bwrap with the given optional features.
pub fn render_argv_with(plan: &LaunchPlan, bwrap: &Path, features: BwrapFeatures) -> Vec<OsString> {
    render_argv_passed(plan, bwrap, features, &Passed::default())
}

/// Descriptors a run hands to bwrap: the held handle of each plan mount that has one (bound
/// with `--bind-fd`/`--ro-bind-fd`, so the object checked is the object bound) and the
/// seccomp filter. Without them (`workcell plan`, snapshots) mounts render as paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Passed {
    /// One entry per `plan.mounts` entry: the descriptor number bwrap inherits, if any.
    pub mounts: Vec<Option<i32>>,
    /// The compiled seccomp filter (`--seccomp FD`).
    pub seccomp: Option<i32>,
    /// The worker's `/etc/passwd` and `/etc/group` (`--file FD`), the same text as
    /// in Docker's host base image ([`crate::plan::accounts`]).
    pub accounts: Option<[i32; 2]>,
    /// The worker's `/etc/hosts` and `/etc/nsswitch.conf` (`--file FD`): `localhost`
    /// resolves with or without network ([`crate::plan::accounts::hosts_text`]).
    pub names: Option<[i32; 2]>,
}

/// [`render_argv_with`] binding the descriptors in `passed`.
pub fn render_argv_passed(plan: &LaunchPlan, bwrap: &Path, features: BwrapFeatures, passed: &Passed) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec![bwrap.into()];
    let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));

    // Namespaces: everything, then the network back only when open. A proxied worker keeps
    // its own network namespace, with only loopback, as with no network.
    push(&["--unshare-all"]);
    if plan.network.is_open() {
        push(&["--share-net"]);
    }
    // An explicit user namespace with the invoking ids: inside == outside, so files written
    // to rw zones belong to the invoking user, and it works the same as root and as a
    // normal user (as root without it bwrap would keep real root's privileges for setup
    // but `--uid/--gid` need a user namespace).
    let (uid, gid) = (plan.user.uid.to_string(), plan.user.gid.to_string());
    push(&["--unshare-user", "--uid", &uid, "--gid", &gid]);
    if features.disable_userns {
        push(&["--disable-userns"]);
    }
    push(&["--hostname", crate::plan::WORKER_HOSTNAME, "--die-with-parent"]);
    // A new session stops the worker from pushing input into workcell's terminal
    // (TIOCSTI); with a TTY the worker needs the terminal as its controlling one.
    if !plan.tty {
        push(&["--new-session"]);
    }
    // The worker's environment is bwrap's own (set by the launcher to exactly the secret
    // variables, see `secret_env`) plus these: no `--clearenv`, which would drop the secrets,
    // and no secret on this command line, which any local user can read in /proc/PID/cmdline.
    push(&["--cap-drop", "ALL"]);
    // A proxied worker's only way out is the proxy on its own loopback (see `netns`): its
    // variables replace any the plan has.
    let proxy = match plan.network {
        Network::Proxied => egress::proxy_env(SocketAddr::from((Ipv4Addr::LOCALHOST, egress::PROXY_PORT))),
        Network::Off | Network::Open => Vec::new(),
    };
    for (k, v) in plan.env.iter().filter(|(k, _)| !is_secret(k) && !proxy.iter().any(|(p, _)| p == *k)) {
        push(&["--setenv", k, v]);
    }
    for (k, v) in &proxy {
        push(&["--setenv", k, v]);
    }

    // Filesystem, on bwrap's empty tmpfs root. System entries come from the host layout;
    // `-try` because the layout is best effort (an entry may vanish between planning and
    // running, and a missing system path must not stop the run).
    for entry in &plan.system {
        match entry {
            SystemEntry::Bind { path } => push(&["--ro-bind-try", path, path]),
            SystemEntry::Symlink { path, target } => push(&["--symlink", target, path]),
        }
    }
    if plan.network.is_open() {
        // Name resolution needs this once the network is on (`/etc/hosts` is the worker's
        // own, below, with the host's entries after it).
        push(&["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]);
    }
    push(&["--proc", "/proc", "--dev", "/dev"]);
    for t in &plan.tmpfs {
        if features.tmpfs_size {
            let size = t.size_bytes.to_string();
            push(&["--size", &size]);
        }
        push(&["--tmpfs", &t.target]);
    }
    // Zones last, in plan order (outer before nested), so they are not hidden by anything
    // above; their sources must exist, hence no `-try`.
    for (i, m) in plan.mounts.iter().enumerate() {
        match passed.mounts.get(i).copied().flatten() {
            Some(fd) => {
                a.push(if m.read_only { "--ro-bind-fd" } else { "--bind-fd" }.into());
                a.push(fd.to_string().into());
            }
            None => {
                a.push(if m.read_only { "--ro-bind" } else { "--bind" }.into());
                a.push(m.source.clone().into_os_string());
            }
        }
        a.push(m.target.clone().into());
    }
    // Plain files on the root tmpfs, read-only with it below: a bind mount each
    // (`--ro-bind-data`) made bwrap re-read its mount table four more times, ≈ 0.5 ms a launch.
    let files = passed.accounts.into_iter().flat_map(|[passwd, group]| [(passwd, "/etc/passwd"), (group, "/etc/group")]);
    let files = files.chain(passed.names.into_iter().flat_map(|[hosts, nsswitch]| [(hosts, "/etc/hosts"), (nsswitch, "/etc/nsswitch.conf")]));
    for (fd, path) in files {
        if features.perms {
            a.extend(["--perms".into(), "0644".into()]);
        }
        a.extend(["--file".into(), fd.to_string().into(), OsString::from(path)]);
    }
    // The root tmpfs read-only, as Docker's `read-only /`, once every mount point on it has
    // been made. Not recursive: the mounts on it (`/tmp`, `/dev`, rw zones) keep their mode.
    a.extend(["--remount-ro".into(), "/".into()]);
    // Last, so that bwrap's own setup is not filtered, only the worker.
    if let Some(fd) = passed.seccomp {
        a.push("--seccomp".into());
        a.push(fd.to_string().into());
    }
    a.push("--chdir".into());
    a.push(plan.workdir.clone().into());
    a.push("--".into());
    a.extend(plan.command.iter().map(OsString::from));
    a
}

/// `argv` as one shell-quoted line, for `workcell plan` and for copying into a terminal.
pub fn shell_line(argv: &[OsString]) -> String {
    let words: Vec<String> = argv.iter().map(|w| w.to_string_lossy().into_owned()).collect();
    shlex::try_join(words.iter().map(String::as_str)).unwrap_or_else(|_| words.join(" "))
}

/// Substring search; memchr's SIMD search keeps scanning the binary to tens of µs (a
/// byte-window scan cost a fifth of a millisecond on every run).
pub(super) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_from_help() {
        assert_eq!(BwrapFeatures::from_usage(b"--size BYTES\n--tmpfs"), BwrapFeatures { tmpfs_size: true, disable_userns: false, perms: false });
    }
}
