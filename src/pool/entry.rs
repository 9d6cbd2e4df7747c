//! A pool entry's directory and its states (`ID.filling`, `ID`, `ID.claimed`), and the
//! commands over all of them: list, drain, collect.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{PoolError, WAKE};
use crate::plan::{LaunchPlan, UserSpec};

pub(super) const AGENT_DIR: &str = "agent";
pub(super) const BROKER_DIR: &str = "broker";
const RECORD: &str = "record.json";
const FILLING: &str = ".filling";
const CLAIMED: &str = ".claimed";
/// An entry still filling after this long belongs to a `pool fill` that died.
const FILL_STALE: Duration = Duration::from_secs(600);
/// A claimed entry whose agent still waits to be woken this long after the claim belongs to
/// a run that died between its claim and the wake (a run wakes it at once).
const CLAIM_STALE: Duration = Duration::from_secs(60);

/// What a pooled sandbox was made of, written when it is ready.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub worker: Option<String>,
    pub project_dir: PathBuf,
    pub container: String,
    /// Seconds since the epoch.
    pub created: u64,
    /// The names of the environment the sandbox's agent carries (the filling plan's): each
    /// run's command gets its own environment instead.
    pub env_keys: Vec<String>,
    pub fingerprint: Value,
}

/// An entry being filled; removed when dropped before [`Filling::ready`].
pub struct Filling {
    dir: PathBuf,
    id: String,
    done: bool,
}

impl Filling {
    /// A new entry in the pool directory, owner only until [`Filling::share_with`].
    pub fn new() -> Result<Filling, PoolError> {
        let base = super::base()?;
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|e| PoolError::Dir { path: base.clone(), source: std::io::Error::other(e.to_string()) })?;
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let dir = base.join(format!("{id}{FILLING}"));
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| PoolError::Dir { path, source }
        };
        std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(io(&dir))?;
        let filling = Filling { dir: dir.clone(), id, done: false };
        for sub in [AGENT_DIR, BROKER_DIR] {
            let p = dir.join(sub);
            std::fs::create_dir(&p).map_err(io(&p))?;
        }
        let fifo = dir.join(AGENT_DIR).join(WAKE);
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600))
            .map_err(|e| PoolError::Dir { path: fifo.clone(), source: e.into() })?;
        Ok(filling)
    }

    /// Opens the agent and broker directories (and the FIFO) to `user`'s group when
    /// workcell is root: the worker runs as another uid. Nothing else of the entry is.
    pub fn share_with(&self, user: UserSpec) -> Result<(), PoolError> {
        let agent = self.dir.join(AGENT_DIR);
        for (p, mode) in [(agent.clone(), 0o750), (self.dir.join(BROKER_DIR), 0o750), (agent.join(WAKE), 0o640)] {
            share(&p, user, mode).map_err(|source| PoolError::Dir { path: p.clone(), source })?;
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The container's name for this entry.
    pub fn container(&self) -> String {
        format!("workcell-pool-{}", self.id)
    }

    /// The entry's path without its state (the container's [`super::LABEL_POOL`]).
    pub fn label(&self) -> String {
        self.dir.with_file_name(&self.id).display().to_string()
    }

    /// Records what the sandbox of `plan` is made of and makes the entry ready: from now on
    /// a run may claim it. Returns its id.
    pub fn ready(mut self, plan: &LaunchPlan) -> Result<String, PoolError> {
        let record = Record {
            worker: plan.worker.clone(),
            project_dir: plan.project_dir.clone(),
            container: self.container(),
            created: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            env_keys: plan.env.keys().cloned().collect(),
            fingerprint: super::fingerprint(plan),
        };
        let path = self.dir.join(RECORD);
        let body = serde_json::to_vec_pretty(&record).map_err(|e| PoolError::Dir { path: path.clone(), source: e.into() })?;
        std::fs::write(&path, body).map_err(|source| PoolError::Dir { path: path.clone(), source })?;
        let ready = self.dir.with_file_name(&self.id);
        std::fs::rename(&self.dir, &ready).map_err(|source| PoolError::Dir { path: ready, source })?;
        self.done = true;
        Ok(self.id.clone())
    }
}

impl Drop for Filling {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Gives `path` to `user`'s group with `mode` when workcell is root; else owner only.
fn share(path: &Path, user: UserSpec, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if rustix::process::geteuid().as_raw() == 0 && user.uid != 0 {
        rustix::fs::chown(path, None, Some(rustix::process::Gid::from_raw(user.gid)))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
    } else {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o700))
    }
}

/// An entry a run has claimed: its directory goes when this is dropped (its container at the
/// end of the run, see [`super::warm`]).
pub struct Claimed {
    pub(super) dir: PathBuf,
    pub(super) record: Record,
}

impl Claimed {
    pub(super) fn agent_dir(&self) -> PathBuf {
        self.dir.join(AGENT_DIR)
    }

    pub(super) fn broker_dir(&self) -> PathBuf {
        self.dir.join(BROKER_DIR)
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn read_record(dir: &Path) -> Option<Record> {
    // Small, and written by this user in a directory of their own.
    serde_json::from_slice(&std::fs::read(dir.join(RECORD)).ok()?).ok()
}

/// Claims the first ready entry of `project_dir` whose fingerprint is `wanted`.
pub(super) fn claim_matching(base: &Path, project_dir: &Path, wanted: &Value) -> Option<Claimed> {
    let mut names: Vec<String> = std::fs::read_dir(base).ok()?.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
    // Oldest first is not known from names; any order serves (each entry is used once).
    names.sort();
    for name in names.into_iter().filter(|n| !n.contains('.')) {
        let dir = base.join(&name);
        let Some(record) = read_record(&dir) else { continue };
        if record.project_dir != project_dir {
            continue;
        }
        if let Some(why) = super::difference(&record.fingerprint, wanted) {
            tracing::debug!(entry = %name, reason = %why, "pooled sandbox not used");
            continue;
        }
        let claimed = base.join(format!("{name}{CLAIMED}"));
        // One rename wins; a concurrent run that lost tries the next entry.
        if std::fs::rename(&dir, &claimed).is_ok() {
            // Its age is now that of the claim (`gc` tells a claim whose run died by it).
            let _ = std::fs::File::open(&claimed).and_then(|f| f.set_modified(SystemTime::now()));
            tracing::debug!(entry = %name, "warm start: claimed a pooled sandbox");
            return Some(Claimed { dir: claimed, record });
        }
    }
    None
}

/// One entry, as `workcell pool ls` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    pub id: String,
    /// `ready`, `filling` or `claimed`.
    pub state: &'static str,
    pub worker: Option<String>,
    pub project_dir: Option<PathBuf>,
    pub container: String,
    /// Seconds since it was made (or since its directory last changed).
    pub age_secs: u64,
    #[serde(skip)]
    dir: PathBuf,
}

/// The entries of the pool, all projects' (`project_dir` filters).
pub fn list(project_dir: Option<&Path>) -> Vec<Listed> {
    let Some(base) = super::existing_base() else { return Vec::new() };
    let Ok(dir) = std::fs::read_dir(&base) else { return Vec::new() };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Ok(name) = e.file_name().into_string() else { continue };
        let (id, state) = match name.split_once('.') {
            None => (name.as_str(), "ready"),
            Some((id, "filling")) => (id, "filling"),
            Some((id, "claimed")) => (id, "claimed"),
            Some(_) => continue,
        };
        let record = read_record(&e.path());
        if let (Some(p), Some(r)) = (project_dir, &record) {
            if r.project_dir != p {
                continue;
            }
        }
        // Whose an entry still filling is, its record tells only once it is ready.
        if project_dir.is_some() && record.is_none() {
            continue;
        }
        let age = e.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| t.elapsed().ok()).map(|d| d.as_secs()).unwrap_or(0);
        out.push(Listed {
            id: id.to_string(),
            state,
            worker: record.as_ref().and_then(|r| r.worker.clone()),
            project_dir: record.as_ref().map(|r| r.project_dir.clone()),
            container: format!("workcell-pool-{id}"),
            age_secs: age,
            dir: e.path(),
        });
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// Removes the ready entries of `project_dir` (all projects' with `None`) and their
/// containers; returns the ids removed and what could not be.
pub fn drain(project_dir: Option<&Path>) -> (Vec<String>, Vec<String>) {
    let mut removed = Vec::new();
    let mut errors = Vec::new();
    for e in list(project_dir).into_iter().filter(|e| e.state == "ready") {
        // Claimed first (renamed), so that no run takes it while it goes.
        let gone = e.dir.with_file_name(format!("{}{CLAIMED}", e.id));
        if std::fs::rename(&e.dir, &gone).is_err() {
            continue;
        }
        match crate::backend::docker::pooled::remove(&e.container) {
            Ok(()) => removed.push(e.id),
            Err(err) => errors.push(format!("container {}: {err}", e.container)),
        }
        let _ = std::fs::remove_dir_all(&gone);
    }
    (removed, errors)
}

/// Whether the agent of the entry in `dir` still waits on its FIFO: opening it for writing
/// without blocking succeeds only then (and wakes the agent, which finds no socket and
/// ends, its container with it).
fn never_woken(dir: &Path) -> bool {
    let fifo = dir.join(AGENT_DIR).join(WAKE);
    rustix::fs::open(&fifo, rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::CLOEXEC, rustix::fs::Mode::empty()).is_ok()
}

/// `workcell gc`: the entries no run can use any more — started by another workcell binary,
/// whose container no longer runs, left filling by a `pool fill` that died, claimed by a
/// run that is over or that died before it woke the agent — and pooled containers whose
/// entry is gone. Returns what went.
pub fn gc() -> Vec<String> {
    let mut removed = Vec::new();
    // The entries first: a container not among those that exist a moment later is gone for
    // good (an entry is ready only once its container runs; a fill finishing meanwhile is not
    // taken for stale).
    let entries = list(None);
    let running = crate::backend::docker::pooled::running().unwrap_or_default();
    let current = super::workcell_binary();
    for e in entries {
        let alive = running.iter().any(|(name, _)| *name == e.container);
        let stale = match e.state {
            "ready" => !alive || read_record(&e.dir).is_none_or(|r| r.fingerprint.get("workcell") != Some(&current)),
            "filling" => e.age_secs > FILL_STALE.as_secs(),
            _ => !alive || (e.age_secs > CLAIM_STALE.as_secs() && never_woken(&e.dir)),
        };
        if !stale {
            continue;
        }
        // A ready entry is claimed first, as by `drain`: a run (of the binary that filled
        // it) may be taking it this moment, and then it is that run's.
        let dir = match e.state {
            "ready" => {
                let claimed = e.dir.with_file_name(format!("{}{CLAIMED}", e.id));
                if std::fs::rename(&e.dir, &claimed).is_err() {
                    continue;
                }
                claimed
            }
            _ => e.dir.clone(),
        };
        let _ = crate::backend::docker::pooled::remove(&e.container);
        if std::fs::remove_dir_all(&dir).is_ok() {
            removed.push(format!("pool entry {} ({})", e.id, e.state));
        }
    }
    // Containers of entries that are gone (a drained or removed pool directory): the label
    // holds the entry's path without its state, looked for in the order of its states (an
    // entry renamed between two looks is found at the next).
    for (name, dir) in running {
        let exists = [FILLING, "", CLAIMED].iter().any(|s| Path::new(&format!("{dir}{s}")).exists());
        if !exists && crate::backend::docker::pooled::remove(&name).is_ok() {
            removed.push(format!("pooled container {name}"));
        }
    }
    removed
}
