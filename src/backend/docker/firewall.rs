//! Host firewall rules for a proxied docker run.
//!
//! An internal Docker network has no route out, but the host itself still answers on the
//! network's bridge: a server on the host listening on `0.0.0.0` (or `::`) is reachable from
//! the container through the gateway address, docker0's address, or any other address of the
//! host, since the container's default route points at the gateway. So the run's bridge gets
//! rules in the host's `INPUT` chain (IPv4 and IPv6), inserted at the top:
//!
//! - from the bridge to the gateway's proxy port: accepted (the worker's way out);
//! - anything else from the bridge: rejected (so a tool that ignores the proxy fails at once);
//! - the proxy port on the gateway from anywhere else (another container, the host): rejected.
//!
//! and one at the top of `FORWARD`: anything routed from the bridge is rejected. Docker's own
//! isolation of internal networks already drops it; the rule makes a tool that tries fail at
//! once instead of hanging. It is not a second wall: Docker re-inserts its own `FORWARD` jumps
//! above it whenever a network is created later, so what keeps routed traffic in is Docker's
//! isolation of internal networks.
//!
//! Every rule carries the comment `workcell:NAME@PID` (NAME is the run's container and
//! network, PID the workcell process that set it), by which the run, its watchdog and
//! `workcell gc` find and remove them. The rules are the host's, shared by every engine on it,
//! while networks are each engine's own: `gc` against Docker must not take a rule of a live
//! run on Podman for an orphan because Docker has no such network, hence the owner. Changing the
//! firewall needs root; as any other user a proxied docker run is refused before anything is
//! created.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The comment on a run's rules, without its owner (rules of older workcells carry only this).
pub fn tag(name: &str) -> String {
    format!("{TAG_PREFIX}{name}")
}

/// Whether a rule's comment belongs to run `name` (with or without an owner).
fn is_of(comment: &str, name: &str) -> bool {
    parse_tag(comment).is_some_and(|(n, _)| n == name)
}

/// A comment read back: the run's name and, when recorded, its owner's pid.
fn parse_tag(comment: &str) -> Option<(&str, Option<u32>)> {
    let rest = comment.strip_prefix(TAG_PREFIX)?;
    Some(match rest.rsplit_once('@') {
        Some((name, pid)) if pid.parse::<u32>().is_ok() => (name, pid.parse().ok()),
        _ => (rest, None),
    })
}

/// A run that has rules: its name and the pid of the workcell that set them, if recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tagged {
    pub name: String,
    pub owner: Option<u32>,
}

const TAG_PREFIX: &str = "workcell:";

/// Why the rules could not be set or removed.
#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    #[error(
        "a proxied network on the docker backend is enforced with host firewall rules (iptables), which only root may set, and workcell runs as uid {uid}; run workcell as root, or use --backend bwrap, which confines the worker to its proxy without root"
    )]
    NotRoot { uid: u32 },
    #[error("cannot find {tool} (looked in /usr/sbin, /sbin and PATH); the docker backend needs it to confine a proxied worker: install iptables, or use --backend bwrap")]
    Missing { tool: &'static str },
    #[error("cannot run {}: {source}", tool.display())]
    Spawn {
        tool: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed: {detail}")]
    Failed { command: String, detail: String },
}

/// The two tables: IPv4 always; IPv6 when the kernel has it (without it, nothing on the
/// host speaks IPv6 to the container either).
fn tools() -> Vec<&'static str> {
    let mut t = vec!["iptables"];
    if Path::new("/proc/sys/net/ipv6").exists() {
        t.push("ip6tables");
    }
    t
}

/// Checks, before anything of a run is created, that the rules can be set here.
pub fn check() -> Result<(), FirewallError> {
    let uid = rustix::process::geteuid().as_raw();
    if uid != 0 {
        return Err(FirewallError::NotRoot { uid });
    }
    for tool in tools() {
        locate(tool)?;
    }
    Ok(())
}

/// Sets the rules of run `name` on `bridge`, whose gateway `gateway` has the proxy on
/// `port`. On failure the rules already set are removed again.
pub fn install(name: &str, bridge: &str, gateway: Ipv4Addr, port: u16) -> Result<(), FirewallError> {
    let tag = format!("{}@{}", tag(name), std::process::id());
    let gw = format!("{gateway}/32");
    let port = port.to_string();
    let comment = ["-m", "comment", "--comment", tag.as_str()];
    let proxy = ["-d", gw.as_str(), "-p", "tcp", "-m", "tcp", "--dport", port.as_str()];
    // Each is inserted at the top, so they end up in reverse: the accept above the rejects.
    let from_bridge = [&["-i", bridge][..], &comment, &["-j", "REJECT"]].concat();
    let v4: Vec<(&str, Vec<&str>)> = vec![
        ("FORWARD", from_bridge.clone()),
        ("INPUT", [&["!", "-i", bridge][..], &proxy, &comment, &["-j", "REJECT"]].concat()),
        ("INPUT", from_bridge.clone()),
        ("INPUT", [&["-i", bridge][..], &proxy, &comment, &["-j", "ACCEPT"]].concat()),
    ];
    let v6: Vec<(&str, Vec<&str>)> = vec![("FORWARD", from_bridge.clone()), ("INPUT", from_bridge)];
    let result = (|| {
        for tool in tools() {
            let rules = if tool == "iptables" { &v4 } else { &v6 };
            for (chain, rule) in rules {
                let args: Vec<&str> = ["-w", "-I", chain, "1"].iter().copied().chain(rule.iter().copied()).collect();
                run(tool, &args)?;
            }
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = remove(name);
    }
    result
}

/// Removes every rule of run `name` (none is fine).
pub fn remove(name: &str) -> Result<(), FirewallError> {
    for tool in tools() {
        let mut failed = None;
        for rule in list(tool)?.into_iter().filter(|r| comment_of(r).is_some_and(|c| is_of(c, name))) {
            // `-A CHAIN spec…` as listed, deleted by the same spec.
            let mut args = vec!["-w".to_string(), "-D".to_string()];
            args.extend(rule.into_iter().skip(1));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            if let Err(e) = run(tool, &args) {
                failed.get_or_insert(e);
            }
        }
        // A rule may have gone meanwhile (the watchdog or `gc` removing the same run): only
        // one still listed is a failure.
        if let Some(e) = failed {
            if list(tool)?.iter().any(|r| comment_of(r).is_some_and(|c| is_of(c, name))) {
                return Err(e);
            }
        }
    }
    Ok(())
}

/// The runs that have rules in the host's `INPUT` or `FORWARD` chain.
pub fn tagged() -> Result<Vec<Tagged>, FirewallError> {
    let mut runs: Vec<Tagged> = Vec::new();
    for tool in tools() {
        for rule in list(tool)? {
            if let Some((name, owner)) = comment_of(&rule).and_then(parse_tag) {
                if !runs.iter().any(|t| t.name == name) {
                    runs.push(Tagged { name: name.to_string(), owner });
                }
            }
        }
    }
    Ok(runs)
}

/// The `INPUT` and `FORWARD` rules as `iptables -S` prints them, split into words.
fn list(tool: &'static str) -> Result<Vec<Vec<String>>, FirewallError> {
    let mut rules = Vec::new();
    for chain in ["INPUT", "FORWARD"] {
        let out = run(tool, &["-w", "-S", chain])?;
        rules.extend(out.lines().filter(|l| l.starts_with("-A ")).filter_map(shlex::split));
    }
    Ok(rules)
}

/// The comment of a listed rule.
fn comment_of(rule: &[String]) -> Option<&str> {
    rule.windows(2).find(|w| w[0] == "--comment").map(|w| w[1].as_str())
}

fn locate(tool: &'static str) -> Result<PathBuf, FirewallError> {
    let path_dirs = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    [PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")]
        .into_iter()
        .chain(path_dirs)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .ok_or(FirewallError::Missing { tool })
}

/// Runs `tool args` and returns its stdout. iptables-nft can fail transiently when several
/// processes change the ruleset at once, so a failure is retried a few times.
fn run(tool: &'static str, args: &[&str]) -> Result<String, FirewallError> {
    let path = locate(tool)?;
    let command = format!("{tool} {}", args.join(" "));
    let mut last = String::new();
    // A delete that fails usually means the rule is gone already: not worth retrying.
    let tries = if args.contains(&"-D") { 1 } else { 4 };
    for attempt in 0..tries {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(50 << attempt));
        }
        let mut cmd = Command::new(&path);
        cmd.args(args).env_clear().stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = crate::backend::spawn_exclusive(|| cmd.spawn()).map_err(|source| FirewallError::Spawn { tool: path.clone(), source })?;
        let out = child.wait_with_output().map_err(|source| FirewallError::Spawn { tool: path.clone(), source })?;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        last = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if last.is_empty() {
            last = out.status.to_string();
        }
    }
    Err(FirewallError::Failed { command, detail: last })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_found_in_listed_rules() {
        let rule = shlex::split(r#"-A INPUT -i wc-0123 -m comment --comment "workcell:workcell-0123" -j REJECT --reject-with icmp-port-unreachable"#).unwrap();
        assert_eq!(comment_of(&rule), Some("workcell:workcell-0123"));
        assert_eq!(comment_of(&shlex::split("-A INPUT -j ACCEPT").unwrap()), None);
    }

    #[test]
    fn tags_name_the_run_and_its_owner() {
        assert_eq!(parse_tag("workcell:workcell-0123@4567"), Some(("workcell-0123", Some(4567))));
        assert_eq!(parse_tag("workcell:workcell-0123"), Some(("workcell-0123", None)));
        assert_eq!(parse_tag("other"), None);
        assert!(is_of("workcell:workcell-0123@1", "workcell-0123") && is_of("workcell:workcell-0123", "workcell-0123"));
        assert!(!is_of("workcell:workcell-01234@1", "workcell-0123"));
    }
}
