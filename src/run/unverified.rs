//! Zones whose check after a run could not finish.
//!
//! The sweep after a run (`hostrun::quarantine`) is bounded; a worker that fills a zone past
//! its bounds hides whatever lies beyond them (a repository whose `core.fsmonitor` runs on
//! the person's next `git status`). Such a run fails (exit [`EXIT_UNVERIFIED`], the reason
//! on workcell's stderr, or for a captured run in the tool's own error), and the zone is
//! *unverified* until a person has looked: every later run or session call that would
//! mount it is refused, naming the zone, why, and what to do.
//!
//! Where that state lives: in the project's own `.workcell/unverified/`, beside the audit
//! log, one file per zone named by the zone directory's device and inode. No worker can
//! reach it: `.workcell/` is bound read-only over itself in every writable mount that holds
//! the project, refused to the tool service (`plan::control`, `sandbox::protect`), and a
//! zone that contains the project directory or lies inside `.workcell/` is refused outright.
//! The zone's own `.workcell/` would not do: it is the worker's to delete. It is keyed by
//! identity, not path, so a renamed zone stays unverified and a zone of another name on the
//! same directory is refused too; it is opened beneath a handle on the project directory,
//! no link followed, like the audit log.
//!
//! Clearing it is the person's act, after looking: `workcell unverified` lists the zones
//! and `workcell unverified --clear DIR` forgets one. A fresh sweep could not do it for
//! them: it cannot tell the person's own `.git/config` from one a worker planted.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::hostrun::quarantine::Report;
use crate::plan::LaunchPlan;
use crate::sandbox::Sandbox;

/// The exit status of a run whose check for files the host runs could not finish, and of
/// one refused because a zone is still unverified from such a run.
pub const EXIT_UNVERIFIED: i32 = 4;
/// Where the markers live, beneath the project directory.
pub const DIR: &str = ".workcell/unverified";
/// The largest marker read back (workcell writes far less).
const MARKER_MAX: u64 = 64 << 10;

/// One unverified zone, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The zone's mount target in the run that left it unverified.
    pub target: String,
    /// Its host directory then, when the kernel had a name for it.
    pub host: Option<String>,
    pub run_id: String,
    /// Why the check stopped.
    pub why: String,
}

impl Marker {
    fn shown(&self) -> String {
        let host = self.host.as_deref().map(|h| format!(" ({})", crate::term::escape(h))).unwrap_or_default();
        format!("{}{host}", crate::term::escape(&self.target))
    }

    fn host_or_zone(&self) -> String {
        crate::term::escape(self.host.as_deref().unwrap_or(&self.target)).into_owned()
    }
}

/// Why a run failed or was refused for an unverified zone.
#[derive(Debug, thiserror::Error)]
pub enum UnverifiedError {
    /// The check after this run could not finish in these zones.
    #[error(
        "the check for files the host runs could not finish in {}, so what the worker left there was not all looked at; {}. {}",
        .zones.iter().map(|(m, _)| format!("{} ({})", m.shown(), crate::term::escape(&m.why))).collect::<Vec<_>>().join(", "),
        recorded(.zones),
        what_to_do(.zones.iter().map(|(m, _)| m))
    )]
    Unfinished { zones: Vec<(Marker, Option<String>)> },
    /// A zone this run would mount is unverified from an earlier run.
    #[error(
        "the zone {} is unverified: after run {} the check for files the host runs could not finish ({}), so a worker's files may still be in it, unchecked. {}",
        .0.shown(),
        crate::term::escape(&.0.run_id),
        crate::term::escape(&.0.why),
        what_to_do([.0].into_iter())
    )]
    Marked(Marker),
    /// The markers could not be read: workcell cannot tell whether a zone is verified, so
    /// nothing runs. Not the zone's fault (exit 125, not 4): `.workcell` itself is wrong.
    #[error(
        "cannot read {} (where workcell records the zones it could not check): {source}. The project's `.workcell` must be a directory of the project, not a link or a file: remove what is there (`rm -r .workcell` loses the audit log and the quarantine's index) and run again",
        DIR
    )]
    Read {
        #[source]
        source: std::io::Error,
    },
}

/// Whether each zone's marker was written (a run that cannot record one still fails).
fn recorded(zones: &[(Marker, Option<String>)]) -> String {
    let failed: Vec<String> = zones.iter().filter_map(|(m, e)| e.as_ref().map(|e| format!("{}: {}", m.shown(), crate::term::escape(e)))).collect();
    if failed.is_empty() {
        format!("later runs refuse it until you clear it (recorded in {DIR})")
    } else {
        format!("it could not be recorded as unverified ({}), so later runs will not refuse it: do not use it before you have looked", failed.join("; "))
    }
}

/// What a person does about unverified zones.
fn what_to_do<'a>(zones: impl Iterator<Item = &'a Marker>) -> String {
    let hosts: Vec<String> = zones.map(Marker::host_or_zone).collect();
    let first = hosts.first().cloned().unwrap_or_default();
    format!(
        "Do not run git, make, direnv or an editor in it until you have looked: find what stopped the check (`du --inodes -S {first} | sort -n | tail`), remove what you did not make, look at the files the host runs there (git config and hooks, .envrc, …), then run `workcell unverified --clear {}`",
        hosts.join(" ")
    )
}

/// Records every area of `plan` whose sweep (`reports`) did not finish; an error naming them
/// when there were any (the run fails with it).
pub(super) fn record(plan: &LaunchPlan, reports: &[Report]) -> Result<(), UnverifiedError> {
    let mut zones = Vec::new();
    for r in reports {
        let Some(why) = &r.incomplete else { continue };
        let marker = Marker { target: r.target.clone(), host: r.host.clone(), run_id: plan.run_id.clone(), why: why.clone() };
        let held = plan.protected.iter().find(|a| a.target == r.target).and_then(|a| a.held.as_ref());
        let written = match held {
            Some(h) => write(&plan.project_dir, h.0.as_fd(), &marker).err().map(|e| e.to_string()),
            None => Some("the zone was not held open".to_string()),
        };
        zones.push((marker, written));
    }
    if zones.is_empty() {
        Ok(())
    } else {
        Err(UnverifiedError::Unfinished { zones })
    }
}

/// Refuses `sandbox` when one of its zones is unverified in the project at `project_dir`.
pub fn refuse_marked(project_dir: &Path, sandbox: &Sandbox) -> Result<(), UnverifiedError> {
    let dir = match open_markers(project_dir, false) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(UnverifiedError::Read { source }),
    };
    for (_, held) in sandbox.readable_held().into_iter().chain(sandbox.writable_held()) {
        let Ok(name) = name_of(held.0.as_fd()) else { continue };
        match read(dir.as_fd(), &name) {
            Ok(Some(marker)) => return Err(UnverifiedError::Marked(marker)),
            Ok(None) => {}
            Err(source) => return Err(UnverifiedError::Read { source }),
        }
    }
    Ok(())
}

/// Every unverified zone of the project at `project_dir`: its marker's name and content.
pub fn list(project_dir: &Path) -> std::io::Result<Vec<(String, Marker)>> {
    let dir = match open_markers(project_dir, false) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for e in rustix::fs::Dir::read_from(&dir)? {
        let e = e?;
        let Some(name) = e.file_name().to_str().ok().filter(|n| n.ends_with(".json")).map(str::to_string) else { continue };
        if let Some(marker) = read(dir.as_fd(), &name)? {
            out.push((name, marker));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Forgets that the directory `zone` is unverified; false when it was not.
pub fn clear(project_dir: &Path, zone: &Path) -> std::io::Result<bool> {
    let held = rustix::fs::open(zone, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let name = name_of(held.as_fd())?;
    let dir = match open_markers(project_dir, false) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match rustix::fs::unlinkat(&dir, name.as_str(), AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The marker's name for the zone directory `zone`: its device and inode.
fn name_of(zone: BorrowedFd<'_>) -> std::io::Result<String> {
    let st = rustix::fs::fstat(zone)?;
    Ok(format!("{}-{}.json", st.st_dev, st.st_ino))
}

fn write(project_dir: &Path, zone: BorrowedFd<'_>, marker: &Marker) -> std::io::Result<()> {
    let dir = open_markers(project_dir, true)?;
    let bytes = serde_json::to_vec_pretty(marker).map_err(std::io::Error::other)?;
    crate::statedir::replace(dir.as_fd(), &name_of(zone)?, &bytes, true)
}

/// A marker beneath `dir`, when there is one (a regular file, no link followed).
fn read(dir: BorrowedFd<'_>, name: &str) -> std::io::Result<Option<Marker>> {
    let Some(text) = crate::statedir::read(dir, name, MARKER_MAX)? else { return Ok(None) };
    // A marker that cannot be read back still marks its zone: unverified, reason unknown.
    Ok(Some(serde_json::from_slice(&text).unwrap_or_else(|_| Marker {
        target: name.to_string(),
        host: None,
        run_id: "?".into(),
        why: format!("its record in {DIR}/{name} cannot be read"),
    })))
}

/// `.workcell/unverified` beneath the project directory (`crate::statedir`).
fn open_markers(project_dir: &Path, create: bool) -> std::io::Result<OwnedFd> {
    crate::statedir::open(project_dir, DIR, create)
}
