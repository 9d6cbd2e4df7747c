//! Warm starts for `workcell run` on docker: `workcell pool fill` starts containers for a
//! worker's plan ahead of time, each with the exec agent ([`crate::agent`]) waiting as its
//! first process; a run whose plan equals one's claims it, runs its command through the
//! agent, and the container goes at the end of that run like a cold run's. No container
//! serves two runs.
//!
//! An entry is a directory of its own under the pool directory ([`base`]): `agent/` (bound
//! at [`crate::agent::SOCKET_DIR`], holding the FIFO the agent waits on), `broker/` (bound
//! at the broker's mount point when the runs have the tool broker) and `record.json` (what
//! the sandbox was made of). Its name says its state: `ID.filling` while it starts, `ID`
//! when ready, `ID.claimed` once a run took it — the claim is a `rename(2)`, which one run
//! alone can win. The pool directory is the user's own (root's `/run/workcell/pool`, a
//! user's `$XDG_RUNTIME_DIR/workcell-pool`), never inside a zone.
//!
//! A run uses an entry only when the entry's recorded plan ([`fingerprint`]) equals its
//! own: the zones' host objects (device and inode), image, system layout, network, limits,
//! user, working directory, protected paths and workcell binary; else it runs cold, and
//! says why at `RUST_LOG=debug`.

mod entry;
pub mod warm;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::backend::{Output, Selected};
use crate::config::ImageRef;
use crate::plan::{LaunchPlan, Network, BROKER_MOUNT_POINT};
pub use entry::{drain, gc, list, Claimed, Filling, Listed, Record};

/// The label of a pooled container: its entry directory (set where the container is made).
pub use crate::backend::docker::pooled::LABEL_POOL;
/// The FIFO the agent of a pooled sandbox waits on, in its agent directory.
pub const WAKE: &str = "wake";

/// Why the pool cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The plan is of a kind the pool does not hold.
    #[error("this run cannot be pooled: {0}")]
    NotPooled(String),
    #[error("the pool needs a runtime directory of this user's own: {0}")]
    NoBase(String),
    #[error("cannot use the pool directory {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Backend(#[from] crate::backend::BackendError),
}

/// The pool directory of this user (made when missing): root's `/run/workcell/pool`, else
/// `$XDG_RUNTIME_DIR/workcell-pool` when that runtime directory is this user's and closed
/// to others.
pub fn base() -> Result<PathBuf, PoolError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let path = base_path()?;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&path).map_err(|source| PoolError::Dir { path: path.clone(), source })?;
    let meta = std::fs::symlink_metadata(&path).map_err(|source| PoolError::Dir { path: path.clone(), source })?;
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() || meta.mode() & 0o077 != 0 {
        return Err(PoolError::Dir { path, source: std::io::Error::other("not a directory of this user's own, closed to others (mode 0700)") });
    }
    Ok(path)
}

fn base_path() -> Result<PathBuf, PoolError> {
    use std::os::unix::fs::MetadataExt;
    let euid = rustix::process::geteuid().as_raw();
    if euid == 0 {
        return Ok(PathBuf::from("/run/workcell/pool"));
    }
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|p| p.is_absolute());
    let Some(runtime) = runtime else { return Err(PoolError::NoBase("XDG_RUNTIME_DIR is not set".into())) };
    match std::fs::symlink_metadata(&runtime) {
        Ok(m) if m.is_dir() && m.uid() == euid && m.mode() & 0o077 == 0 => Ok(runtime.join("workcell-pool")),
        _ => Err(PoolError::NoBase(format!("{} is not a directory of this user's own with mode 0700", runtime.display()))),
    }
}

/// The pool directory when it exists (nothing is made: a run without a pool pays one
/// `stat`).
fn existing_base() -> Option<PathBuf> {
    base_path().ok().filter(|p| p.is_dir())
}

/// Why a run of `plan` on `selected` cannot use (or fill) the pool; `None` when it can.
pub fn why_not(plan: &LaunchPlan, selected: Selected) -> Option<String> {
    let why = if selected != Selected::Docker {
        format!("the pool holds docker containers; this run uses the {} backend", selected.name())
    } else if plan.image != ImageRef::Host {
        "only `image: host` runs are pooled (the exec agent is this very binary, bound into the sandbox)".to_string()
    } else if let Some(r) = &plan.runtime {
        format!("a run under the Docker runtime '{r}' is not pooled")
    } else if plan.network == Network::Proxied {
        "a run with network rules gets its own network and egress proxy at its start; it is not pooled".to_string()
    } else if !plan.copies.is_empty() {
        "zones with `delivery: copy` are copied at the start of each run; such runs are not pooled".to_string()
    } else if plan.interactive || plan.tty {
        "an interactive run (-i, -t) is not pooled".to_string()
    } else if plan.stdin.is_some() {
        "a run with given input is not pooled".to_string()
    } else {
        return None;
    };
    Some(why)
}

/// Binds the pool entry `entry` into `plan` (`workcell pool fill`): the agent's directory
/// and program, the broker's directory when `broker`, the agent waiting as the command, and
/// an empty environment.
pub fn attach(plan: &mut LaunchPlan, entry: &Path, broker: bool) -> std::io::Result<()> {
    plan.attach_agent(&entry.join(entry::AGENT_DIR))?;
    if broker {
        // The runs that claim it bind their own socket here and set their own token.
        plan.attach_broker(&entry.join(entry::BROKER_DIR), "");
    }
    // Nothing of the runs' environment: each run sends its command its own, and what the
    // filler was given (`--env`, passed-through host variables) must not wait in the
    // container's processes for a run that was not given it.
    plan.env.clear();
    let dir = crate::agent::SOCKET_DIR;
    plan.command =
        vec![crate::agent::PROGRAM.into(), "__agent".into(), "--wake".into(), format!("{dir}/{WAKE}"), format!("{dir}/{}", crate::agent::SOCKET_NAME)];
    Ok(())
}

/// What of `plan` a pooled sandbox is made of: two plans with the same fingerprint give
/// the same container. Left out: what each run sets for its own command (the command, its
/// environment, its timeout) and the mounts of workcell's own services (their presence
/// counts, not their per-run directories); added: the host objects behind the zones and
/// protected paths, and the workcell binary.
pub fn fingerprint(plan: &LaunchPlan) -> Value {
    let own = [BROKER_MOUNT_POINT, crate::agent::SOCKET_DIR, crate::agent::PROGRAM];
    let mounts: Vec<Value> = plan
        .mounts
        .iter()
        .filter(|m| !own.contains(&m.target.as_str()))
        .map(|m| json!({"source": m.source, "target": m.target, "read_only": m.read_only, "object": m.held.as_ref().and_then(|h| identity(&h.0))}))
        .collect();
    let protected: Vec<Value> = plan
        .protected
        .iter()
        .map(|a| json!({"target": a.target, "entries": a.entries, "bound": a.bound.iter().map(|b| json!([b.path, b.identity.0, b.identity.1])).collect::<Vec<_>>()}))
        .collect();
    let mut limits = serde_json::to_value(plan.limits).unwrap_or_default();
    if let Some(l) = limits.as_object_mut() {
        l.remove("timeout");
    }
    json!({
        "workcell": workcell_binary(),
        "worker": plan.worker,
        "image": plan.image,
        "system": plan.system,
        "mounts": mounts,
        "broker": plan.mounts.iter().any(|m| m.target == BROKER_MOUNT_POINT),
        "tmpfs": plan.tmpfs,
        "network": plan.network,
        "user": plan.user,
        "workdir": plan.workdir,
        "limits": limits,
        "project_dir": plan.project_dir,
        "runtime": plan.runtime,
        "protected": protected,
    })
}

/// The first part of two fingerprints that differs, said for a person.
pub fn difference(recorded: &Value, wanted: &Value) -> Option<String> {
    let (Some(a), Some(b)) = (recorded.as_object(), wanted.as_object()) else { return Some("the recorded plan is unreadable".into()) };
    // The most telling first: another binary, then protected paths (they are mounts too).
    let first = ["workcell", "protected"].map(String::from);
    let keys = first.iter().chain(a.keys()).chain(b.keys().filter(|k| !a.contains_key(*k)));
    for key in keys {
        if a.get(key) != b.get(key) {
            return Some(match key.as_str() {
                "workcell" => "it was started by another workcell binary".to_string(),
                "mounts" => "its zones differ (or a zone's directory was replaced since)".to_string(),
                "protected" => "its protected paths differ (one was made, removed or replaced since)".to_string(),
                other => format!("its {other} is not this run's"),
            });
        }
    }
    None
}

/// (device, inode) of an open file.
fn identity(fd: &impl std::os::fd::AsFd) -> Option<(u64, u64)> {
    rustix::fs::fstat(fd).ok().map(|s| (s.st_dev, s.st_ino))
}

/// The running workcell binary: its version and its file (the agent of a pooled sandbox is
/// the binary that filled it).
fn workcell_binary() -> Value {
    let file = std::fs::File::open("/proc/self/exe").ok();
    let stat = file.as_ref().and_then(|f| rustix::fs::fstat(f).ok());
    json!({"version": env!("CARGO_PKG_VERSION"), "file": stat.map(|s| (s.st_dev, s.st_ino, s.st_mtime, s.st_size))})
}

/// The pooled sandbox a run of `plan` may take, claimed for it alone; `None` (the run goes
/// cold) when there is no pool, the run is not of a kind the pool holds, or no entry
/// matches. Only a run on workcell's own terminal (`workcell run`) is warm.
pub fn claim(plan: &LaunchPlan, selected: Selected, output: Output) -> Option<warm::Warm> {
    if output != Output::Inherit {
        return None;
    }
    let base = existing_base()?;
    if let Some(why) = why_not(plan, selected) {
        tracing::debug!(reason = %why, "cold start: no pooled sandbox");
        return None;
    }
    let wanted = fingerprint(plan);
    loop {
        let Some(claimed) = entry::claim_matching(&base, &plan.project_dir, &wanted) else {
            tracing::debug!("cold start: no ready pooled sandbox matches this run");
            return None;
        };
        match claimed.connect(plan) {
            Ok(warm) => return Some(warm),
            // Its container was stopped, say: it went, and the next entry is tried.
            Err(e) => tracing::debug!(error = %e, "pooled sandbox unusable; removed"),
        }
    }
}
