//! Seatbelt backend (macOS `sandbox-exec`): the plan rendered as an SBPL profile.
//!
//! Seatbelt cannot remap paths, so zones appear at their **host** paths here (unlike docker and bwrap); the
//! profile allows reads of the system and the readable zones, writes only to writable zones
//! and a private temp dir, and denies the network unless the plan allows it. Every host path
//! is passed as a `-D NAME=VALUE` parameter and referenced as `(param "NAME")`, never spliced
//! into the profile text, so no path can change the profile's meaning.
//!
//! [`render_profile`] is pure (snapshot-tested on any OS); [`run`] works only on macOS.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::BackendError;
use crate::plan::{LaunchPlan, SystemEntry};

/// The static part of every profile (deny by default; what any process needs to start).
pub const BASE_PROFILE: &str = include_str!("../../policies/seatbelt-base.sbpl");

/// The `sandbox-exec` binary.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// Parameter naming the run's private, writable temp directory.
pub const TMP_PARAM: &str = "WORKCELL_TMP";

/// A rendered Seatbelt profile and the parameters it references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeatbeltProfile {
    /// SBPL text: the base profile plus generated rules.
    pub profile: String,
    /// `(NAME, VALUE)` pairs passed as `sandbox-exec -D NAME=VALUE`.
    pub params: Vec<(String, String)>,
}

/// The run's private temp directory on the host (created by [`run`], removed after it).
pub fn private_tmp(plan: &LaunchPlan) -> PathBuf {
    PathBuf::from(format!("/private/tmp/workcell-{}", plan.run_id))
}

/// Renders `plan` as a Seatbelt profile. Pure.
pub fn render_profile(plan: &LaunchPlan) -> SeatbeltProfile {
    let mut params: Vec<(String, String)> = Vec::new();
    let mut rules = String::new();
    let param = |prefix: &str, value: String, params: &mut Vec<(String, String)>| -> String {
        let name = format!("{prefix}_{}", params.iter().filter(|(n, _)| n.starts_with(&format!("{prefix}_"))).count());
        params.push((name.clone(), value));
        name
    };

    rules.push_str("\n; system paths of the plan (read-only)\n");
    for entry in &plan.system {
        match entry {
            SystemEntry::Bind { path } => {
                for p in with_private_alias(path) {
                    let n = param("SYSTEM", p, &mut params);
                    rules.push_str(&format!("(allow file-read* (subpath (param \"{n}\")))\n"));
                }
            }
            // The link itself must be readable for the kernel to follow it.
            SystemEntry::Symlink { path, .. } => {
                for p in with_private_alias(path) {
                    let n = param("SYSTEM", p, &mut params);
                    rules.push_str(&format!("(allow file-read* (literal (param \"{n}\")))\n"));
                }
            }
        }
    }

    rules.push_str("\n; zones, at their host paths, in mount order (outer first)\n");
    let mut ancestors = BTreeSet::new();
    for m in &plan.mounts {
        let source = m.source.to_string_lossy().into_owned();
        collect_ancestors(&m.source, &mut ancestors);
        let n = param("ZONE", source, &mut params);
        if m.read_only {
            // The explicit deny matters when a read-only zone sits inside a writable one:
            // the last matching rule wins.
            rules.push_str(&format!("(allow file-read* (subpath (param \"{n}\")))\n(deny file-write* (subpath (param \"{n}\")))\n"));
        } else {
            rules.push_str(&format!("(allow file-read* file-write* (subpath (param \"{n}\")))\n"));
        }
    }

    rules.push_str("\n; the run's private temp dir\n");
    let tmp = private_tmp(plan);
    collect_ancestors(&tmp, &mut ancestors);
    params.push((TMP_PARAM.to_string(), tmp.to_string_lossy().into_owned()));
    rules.push_str(&format!("(allow file-read* file-write* (subpath (param \"{TMP_PARAM}\")))\n"));

    rules.push_str("\n; metadata of the directories above zones, so path walks reach them\n");
    for a in ancestors {
        let n = param("PARENT", a, &mut params);
        rules.push_str(&format!("(allow file-read-metadata (literal (param \"{n}\")))\n"));
    }

    rules.push_str("\n; network\n");
    if plan.network.is_open() {
        rules.push_str("(allow network*)\n(allow mach-lookup (global-name \"com.apple.dnssd.service\"))\n");
    } else {
        rules.push_str("(deny network*)\n");
    }
    SeatbeltProfile { profile: format!("{BASE_PROFILE}{rules}"), params }
}

/// `/etc/x` is `/private/etc/x` on macOS, and Seatbelt matches resolved paths.
fn with_private_alias(path: &str) -> Vec<String> {
    let mut out = vec![path.to_string()];
    for top in ["/etc", "/var", "/tmp"] {
        if path == top || path.starts_with(&format!("{top}/")) {
            out.push(format!("/private{path}"));
        }
    }
    out
}

fn collect_ancestors(p: &Path, into: &mut BTreeSet<String>) {
    for a in p.ancestors().skip(1) {
        if a != Path::new("/") && !a.as_os_str().is_empty() {
            into.insert(a.to_string_lossy().into_owned());
        }
    }
}

/// The worker's working directory on the host: zones are at their host paths here.
pub fn host_workdir(plan: &LaunchPlan) -> PathBuf {
    let best = plan
        .mounts
        .iter()
        .filter_map(|m| {
            let rest = plan.workdir.strip_prefix(m.target.trim_end_matches('/'))?;
            (rest.is_empty() || rest.starts_with('/')).then_some((m, rest))
        })
        .max_by_key(|(m, _)| m.target.len());
    match best {
        Some((m, "")) => m.source.clone(),
        Some((m, rest)) => m.source.join(rest.trim_start_matches('/')),
        None => private_tmp(plan),
    }
}

/// The `sandbox-exec` argv for `plan` (argv\[0\] is `sandbox-exec`).
pub fn render_argv(plan: &LaunchPlan) -> Vec<String> {
    let sp = render_profile(plan);
    let mut argv = vec![SANDBOX_EXEC.to_string(), "-p".to_string(), sp.profile];
    for (k, v) in sp.params {
        argv.push("-D".into());
        argv.push(format!("{k}={v}"));
    }
    argv.push("--".into());
    argv.extend(plan.command.iter().cloned());
    argv
}

/// The printable Seatbelt rendering of `plan` for `workcell plan --backend seatbelt`.
pub fn plan_text(plan: &LaunchPlan) -> String {
    let sp = render_profile(plan);
    let mut out = String::from("# Seatbelt profile (zones appear at their host paths)\n");
    out.push_str(&sp.profile);
    out.push_str("\n# parameters (sandbox-exec -D NAME=VALUE)\n");
    for (k, v) in &sp.params {
        out.push_str(&format!("{k}={v}\n"));
    }
    let cmd = shlex::try_join(plan.command.iter().map(String::as_str)).unwrap_or_default();
    out.push_str(&format!("# command, in {}: sandbox-exec -p PROFILE -D ... -- {cmd}\n", host_workdir(plan).display()));
    out
}

/// Whether `sandbox-exec` is usable here.
pub fn probe() -> Result<(), BackendError> {
    #[cfg(target_os = "macos")]
    {
        macos::probe()
    }
    #[cfg(not(target_os = "macos"))]
    {
        Err(BackendError::Unavailable {
            backend: "seatbelt",
            reason: "Seatbelt (sandbox-exec) exists only on macOS".into(),
            fix: "On Linux use the docker or bwrap backend.".into(),
        })
    }
}

/// Runs the plan under `sandbox-exec`; returns the worker's exit status.
pub fn run(plan: &LaunchPlan) -> Result<i32, BackendError> {
    #[cfg(target_os = "macos")]
    {
        macos::run(plan)
    }
    #[cfg(not(target_os = "macos"))]
    {
        let _ = plan;
        probe().map(|_| super::EXIT_INTERNAL)
    }
}

#[cfg(target_os = "macos")]
mod macos {
    use std::os::unix::fs::DirBuilderExt;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::sync::{mpsc, OnceLock};
    use std::time::Instant;

    use super::*;
    use crate::backend::{EXIT_NOT_FOUND, EXIT_TIMEOUT};

    pub fn probe() -> Result<(), BackendError> {
        // The reason sandbox-exec cannot be used, found once per process (`None`: it works).
        static PROBED: OnceLock<Option<String>> = OnceLock::new();
        let unusable =
            PROBED.get_or_init(|| match Command::new(SANDBOX_EXEC).args(["-p", "(version 1)(allow default)", "/usr/bin/true"]).stdin(Stdio::null()).output() {
                Err(e) => Some(format!("cannot run {SANDBOX_EXEC}: {e}")),
                Ok(out) if out.status.success() => None,
                Ok(out) => Some(format!("{SANDBOX_EXEC} failed: {}", String::from_utf8_lossy(&out.stderr).trim())),
            });
        match unusable {
            None => Ok(()),
            Some(reason) => Err(BackendError::Unavailable {
                backend: "seatbelt",
                reason: reason.clone(),
                fix: "sandbox-exec ships with macOS; if it is refused (e.g. already inside a sandbox), use the docker backend.".into(),
            }),
        }
    }

    enum Event {
        Exited(std::io::Result<std::process::ExitStatus>),
        Signal(i32),
    }

    pub fn run(plan: &LaunchPlan) -> Result<i32, BackendError> {
        probe()?;
        let Some(prog) = plan.command.first() else {
            return Err(BackendError::Failed("the plan has no command".into()));
        };
        let path = plan.env.get("PATH").cloned().unwrap_or_default();
        let found = prog.contains('/') || path.split(':').any(|d| Path::new(d).join(prog).is_file());
        if !found {
            eprintln!("workcell: {}: command not found (PATH={})", crate::term::escape(prog), crate::term::escape(&path));
            return Ok(EXIT_NOT_FOUND);
        }
        let tmp = private_tmp(plan);
        // create (not create_all): fails if anything, including a planted symlink, is there.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&tmp)
            .map_err(|e| BackendError::Failed(format!("cannot create the private temp dir {}: {e}", tmp.display())))?;
        let argv = render_argv(plan);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..]).env_clear().envs(&plan.env).env("TMPDIR", &tmp).current_dir(host_workdir(plan));
        if !(plan.interactive || plan.tty) {
            cmd.stdin(Stdio::null());
        }
        let own_group = !plan.tty;
        if own_group {
            cmd.process_group(0);
        }
        let signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP])
            .map_err(|e| BackendError::Failed(format!("cannot install signal handlers: {e}")))?;
        let handle = signals.handle();
        let mut child = cmd.spawn().map_err(|e| BackendError::Failed(format!("cannot start {SANDBOX_EXEC}: {e}")))?;
        let pid = child.id() as i32;
        let (tx, rx) = mpsc::channel();
        let tx2 = tx.clone();
        std::thread::spawn(move || {
            let mut signals = signals;
            for s in signals.forever() {
                if tx2.send(Event::Signal(s)).is_err() {
                    break;
                }
            }
        });
        std::thread::spawn(move || {
            let _ = tx.send(Event::Exited(child.wait()));
        });
        // Seatbelt has no pid namespace: the process group is the sandbox's extent.
        let kill = |sig: rustix::process::Signal| {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = if own_group { rustix::process::kill_process_group(p, sig) } else { rustix::process::kill_process(p, sig) };
            }
        };
        let deadline = plan.timeout().map(|t| Instant::now() + t);
        let mut timed_out = false;
        let status = loop {
            let ev = match deadline.filter(|_| !timed_out) {
                Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                    Ok(e) => e,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        timed_out = true;
                        kill(rustix::process::Signal::KILL);
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break None,
                },
                None => match rx.recv() {
                    Ok(e) => e,
                    Err(_) => break None,
                },
            };
            match ev {
                Event::Exited(s) => break Some(s),
                Event::Signal(s) => {
                    if let Some(sig) = rustix::process::Signal::from_named_raw(s) {
                        kill(sig);
                    }
                }
            }
        };
        handle.close();
        // Leftover background processes of the group go with the run.
        if own_group {
            kill(rustix::process::Signal::KILL);
        }
        let _ = std::fs::remove_dir_all(&tmp);
        if timed_out {
            eprintln!("workcell: the worker did not finish in time; it was stopped (exit {EXIT_TIMEOUT})");
            return Ok(EXIT_TIMEOUT);
        }
        match status {
            Some(Ok(s)) => Ok(crate::backend::none::exit_code_of(s)),
            Some(Err(e)) => Err(BackendError::Failed(format!("cannot wait for sandbox-exec: {e}"))),
            None => Err(BackendError::Failed("lost track of sandbox-exec".into())),
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
    }
}
