//! The sandbox core: which sandbox paths a worker may read and write, and safe file I/O
//! beneath them.
//!
//! A [`Sandbox`] is a list of [`Mount`]s (host directory → mount point) plus the *areas*
//! inside them that are readable and writable. The project sandbox can read every mount and
//! write every `rw` mount; [`Sandbox::derive`] only ever shrinks those areas.
//!
//! Every file operation opens paths *beneath* a directory handle held for the area
//! (cap-std: `openat2(RESOLVE_BENEATH)` on Linux), never by checking a path and then
//! opening it, so a symlink swapped in between cannot lead outside.

mod bytes;
mod copied;
mod derive;
mod error;
mod expand;
mod gitmaker;
mod grant;
pub mod hostdir;
mod hostfiles;
mod io;
mod links;
mod listing;
pub(crate) mod mounted;
mod path;
mod protect;
mod query;
mod window;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::egress::Access;
use crate::identity::Identity;
pub use copied::CopiedArea;
use derive::minimise;
pub use derive::{DeriveSpec, ZoneRequest};
use error::show;
pub use error::{GitPiece, PathList, SandboxError};
pub use expand::{open_for_expansion, OpenedDir};
pub use grant::Created;
pub use io::{BytesRead, FileKind, FileStat, ReadResult, EDIT_MAX_BYTES};
pub use links::{FollowError, Followed};
pub use listing::{Listing, LIST_LIMIT};
pub use path::VirtualPath;
pub use query::{Querier, QUERY_HANDLES};

/// Where a root-form sandbox (one directory as virtual `/`) appears inside a worker.
pub const ROOT_FORM_MOUNT_POINT: &str = "/sandbox";

/// `path` relative to `dir` when it lies strictly inside it, after folding `.` and `..`
/// without touching the file system (`None` when it is `dir` itself or outside).
pub fn inside(dir: &Path, path: &Path) -> Option<PathBuf> {
    use std::path::Component;
    let mut folded = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                folded.pop();
            }
            Component::CurDir => {}
            other => folded.push(other),
        }
    }
    let rel = folded.strip_prefix(dir).ok()?;
    (!rel.as_os_str().is_empty()).then(|| rel.to_path_buf())
}

/// Read-only or read-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ZoneMode {
    /// Read-only.
    Ro,
    /// Read-write.
    Rw,
}

impl std::fmt::Display for ZoneMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ZoneMode::Ro => "ro",
            ZoneMode::Rw => "rw",
        })
    }
}

/// Whether an operation needs a person's yes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Approval {
    /// Proceeds without asking.
    #[serde(rename = "preApproved")]
    PreApproved,
    /// Asks a person first.
    #[serde(rename = "ask")]
    Ask,
    /// Never allowed.
    #[serde(rename = "blocked")]
    Blocked,
}

/// Approval settings of one mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Approvals {
    pub read: Approval,
    pub write: Approval,
    pub delete: Approval,
}

impl Default for Approvals {
    /// Reads proceed; writes and deletes ask: a zone without `approval:` changes nothing unasked.
    fn default() -> Self {
        Approvals { read: Approval::PreApproved, write: Approval::Ask, delete: Approval::Ask }
    }
}

impl Approvals {
    /// True when writes and deletes need nobody's yes, so the OS boundary may allow them
    /// directly (a read-write bind mount).
    pub fn writes_preapproved(&self) -> bool {
        self.write == Approval::PreApproved && self.delete == Approval::PreApproved
    }
}

/// How the contents of a mount reach a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// A bind mount of the host directory.
    #[default]
    Bind,
    /// Files copied in before the run and checked results copied out after it.
    Copy,
}

/// One host directory made visible at a sandbox path, with its policies.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Mount {
    /// Zone name (the mount point without its leading `/`), or `/` for the root form.
    pub name: String,
    /// Absolute, canonical host directory (whoever creates a mount canonicalizes it;
    /// launchers bind it as it is). Never shown in refusal messages.
    pub host_path: PathBuf,
    /// Absolute sandbox path where the directory appears (`/data`, or `/`).
    pub mount_point: String,
    pub mode: ZoneMode,
    /// Allowed file suffixes (lowercase, with dot); `None` allows every suffix.
    pub suffixes: Option<Vec<String>>,
    /// Largest file that may be read or written.
    pub max_file_bytes: Option<u64>,
    pub approval: Approvals,
    pub delivery: Delivery,
    /// The files the host runs that a worker may not leave in this mount when it is
    /// writable (`crate::hostrun`): the defaults, plus `sandbox.protect`, less the zone's
    /// `unprotect`. A derived mount keeps its parent's.
    #[serde(skip)]
    #[schemars(skip)]
    pub protection: crate::hostrun::Protection,
}

/// How sandbox paths are addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Addressing {
    /// Several named mounts: `/zone/rel`, `zone/rel`, `zone:rel`; `/` lists the zones.
    Zones,
    /// One directory as virtual `/`: `/rel` or `rel`.
    Root,
}

/// A subtree of one mount: the mount's index and the path components below its root.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct AreaKey {
    pub mount: usize,
    pub prefix: Vec<String>,
}

impl AreaKey {
    /// True when `other` lies inside (or equals) this area.
    pub fn contains(&self, other: &AreaKey) -> bool {
        self.mount == other.mount && other.prefix.starts_with(&self.prefix)
    }
}

/// An area together with an open handle of its directory, so that every operation inside
/// it resolves beneath that handle.
#[derive(Debug, Clone)]
pub(crate) struct Area {
    pub key: AreaKey,
    pub dir: Arc<Dir>,
}

/// A readable or writable area, as a launcher needs it: sandbox path, host directory, mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct AreaView {
    /// Sandbox path of the area (`/data` or `/data/reports`).
    pub sandbox_path: String,
    /// Host directory behind it (canonical).
    pub host_path: PathBuf,
    /// Name of the mount it belongs to.
    pub mount: String,
}

/// The effective sandbox of a project or a worker. Cloning is cheap; directory handles are
/// shared.
#[derive(Debug, Clone)]
pub struct Sandbox {
    mounts: Arc<Vec<Mount>>,
    addressing: Addressing,
    readable: Vec<Area>,
    writable: Vec<Area>,
    network: Access,
    /// Control files the tool service may not change (see `protect`).
    protected: Arc<protect::Protected>,
    /// Granted directories that do not exist yet, created at launch (see `grant`).
    pending: Vec<grant::Pending>,
    /// What judges the files the host runs for the tool service (see `hostfiles`).
    hostfiles: Arc<hostfiles::HostFiles>,
    /// The project's files the host runs (defaults plus `sandbox.protect`): what a mount
    /// added later (`--zone`, `request_access`) is given; never narrowed by a worker.
    hostrun: Arc<crate::hostrun::Protection>,
    /// Whose rights the file I/O of this sandbox uses: the worker's (see
    /// [`Sandbox::acting_as`]); workcell's own until a run or `workcell mcp` says whose.
    identity: Identity,
    /// The mounts (by index) whose areas are a run's private copies (see `copied`).
    copied: Arc<Vec<usize>>,
}

impl Sandbox {
    /// Builds the full-access sandbox of a project from its mounts: every mount readable,
    /// every `rw` mount writable. Opens each host directory once; it must exist.
    pub fn new(mounts: Vec<Mount>, addressing: Addressing, network: impl Into<Access>) -> Result<Sandbox, SandboxError> {
        let network = network.into();
        let mut readable = Vec::with_capacity(mounts.len());
        let mut writable = Vec::new();
        let mut roots = Vec::with_capacity(mounts.len());
        for (i, m) in mounts.iter().enumerate() {
            let dir = Dir::open_ambient_dir(&m.host_path, ambient_authority()).map_err(|e| SandboxError::Io {
                op: "open",
                path: m.mount_point.clone(),
                message: format!("the directory behind this mount cannot be opened ({})", io::describe_io(&e)),
            })?;
            // On the handle every backend binds: where it really leads, not how it is spelled.
            hostdir::check_opened(&m.name, std::os::fd::AsFd::as_fd(&dir), m.mode, &m.host_path)?;
            roots.push(hostfiles::root_identity(&dir));
            let area = Area { key: AreaKey { mount: i, prefix: Vec::new() }, dir: Arc::new(dir) };
            if m.mode == ZoneMode::Rw {
                writable.push(area.clone());
            }
            readable.push(area);
        }
        let hostfiles = Arc::new(hostfiles::HostFiles { roots, ..Default::default() });
        Ok(Sandbox {
            mounts: Arc::new(mounts),
            addressing,
            readable,
            writable,
            network,
            protected: Arc::default(),
            pending: Vec::new(),
            hostfiles,
            hostrun: Arc::default(),
            identity: Identity::Own,
            copied: Arc::default(),
        })
    }

    /// A sandbox with no file access at all (a worker that declares nothing).
    pub fn empty_like(&self) -> Sandbox {
        Sandbox {
            mounts: self.mounts.clone(),
            addressing: self.addressing,
            readable: Vec::new(),
            writable: Vec::new(),
            network: self.network.clone(),
            protected: self.protected.clone(),
            pending: Vec::new(),
            hostfiles: self.hostfiles.clone(),
            hostrun: self.hostrun.clone(),
            identity: self.identity,
            copied: self.copied.clone(),
        }
    }

    /// This sandbox with `p` as the project's protected entries, for mounts added later.
    pub fn with_host_protection(mut self, p: crate::hostrun::Protection) -> Sandbox {
        self.hostrun = Arc::new(p);
        self
    }

    /// The project's protected entries (see [`Sandbox::with_host_protection`]).
    pub fn host_protection(&self) -> &crate::hostrun::Protection {
        &self.hostrun
    }

    /// The same sandbox doing its file I/O as the worker running as `user`: every read,
    /// write, listing and check of an existing path is then allowed or refused by the
    /// operating system exactly as for the worker's own commands, and what it creates is the
    /// worker's. A workcell that already is that user changes nothing.
    pub fn acting_as(mut self, user: crate::identity::UserSpec) -> Sandbox {
        self.identity = Identity::of(user);
        self
    }

    /// Whose rights this sandbox's file I/O uses.
    pub fn identity(&self) -> Identity {
        self.identity
    }

    /// Runs `f` with this sandbox's identity; a failure to take it is a refusal of `op` on
    /// `shown`, with nothing done.
    pub(crate) fn as_worker<R: Send>(&self, op: &'static str, shown: &str, f: impl FnOnce() -> R + Send) -> Result<R, SandboxError> {
        self.identity.run(f).map_err(|e| SandboxError::Io { op, path: show(shown), message: e.to_string() })
    }

    /// The mounts this sandbox was built from (including ones it can no longer see).
    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    pub fn addressing(&self) -> Addressing {
        self.addressing
    }

    /// Whether workers in this sandbox reach any network beyond loopback (filtered or not).
    pub fn network(&self) -> bool {
        self.network.any()
    }

    /// The network workers in this sandbox get: off, open, or filtered by rules.
    pub fn network_access(&self) -> &Access {
        &self.network
    }

    /// The same sandbox with network access turned off (never on: that would widen it).
    pub fn without_network(mut self) -> Sandbox {
        self.network = Access::Off;
        self
    }

    /// The same sandbox with the network a child asks for, never more than this one's
    /// (see [`Access::narrowed_by`]).
    pub fn network_narrowed_by(mut self, child: &Access) -> Sandbox {
        self.network = self.network.narrowed_by(child);
        self
    }

    /// Sandbox paths that can be read (`/data`, `/out/reports`).
    pub fn readable_roots(&self) -> Vec<String> {
        self.readable.iter().map(|a| self.area_path(&a.key)).collect()
    }

    /// Sandbox paths that can be written.
    pub fn writable_roots(&self) -> Vec<String> {
        self.writable.iter().map(|a| self.area_path(&a.key)).collect()
    }

    /// Readable areas with their host directories, for launchers.
    pub fn readable_areas(&self) -> Vec<AreaView> {
        self.readable.iter().map(|a| self.area_view(&a.key)).collect()
    }

    /// Writable areas with their host directories, for launchers.
    pub fn writable_areas(&self) -> Vec<AreaView> {
        self.writable.iter().map(|a| self.area_view(&a.key)).collect()
    }

    /// [`Sandbox::readable_areas`] with a handle of each area's directory (the one every
    /// check used), for launchers that bind handles instead of paths.
    pub fn readable_held(&self) -> Vec<(AreaView, crate::held::Held)> {
        self.held_views(&self.readable)
    }

    /// [`Sandbox::writable_areas`] with handles, as [`Sandbox::readable_held`].
    pub fn writable_held(&self) -> Vec<(AreaView, crate::held::Held)> {
        self.held_views(&self.writable)
    }

    fn held_views(&self, areas: &[Area]) -> Vec<(AreaView, crate::held::Held)> {
        areas
            .iter()
            .filter_map(|a| {
                // A duplicate fails only when the process is out of descriptors; the area is
                // then left out (less access, never a by-name bind).
                let held = crate::held::Held::dup(&*a.dir).ok()?;
                let mut view = self.area_view(&a.key);
                if let Some(p) = held.current_path() {
                    view.host_path = p;
                }
                Some((view, held))
            })
            .collect()
    }

    /// The mount a sandbox path belongs to, when the path is well formed.
    pub fn mount_of(&self, path: &str) -> Option<&Mount> {
        self.parse(path).ok().map(|vp| &self.mounts[vp.mount])
    }

    fn area_view(&self, key: &AreaKey) -> AreaView {
        let m = &self.mounts[key.mount];
        let mut host = m.host_path.clone();
        for c in &key.prefix {
            host.push(c);
        }
        // Canonical, so that a launcher binds what the handle saw (symlinks inside the
        // mount were already checked to stay inside it when the area was derived). The
        // mount's own directory was made canonical when the mount was created.
        let host_path = if key.prefix.is_empty() { host } else { std::fs::canonicalize(&host).unwrap_or(host) };
        AreaView { sandbox_path: self.area_path(key), host_path, mount: m.name.clone() }
    }

    pub(crate) fn area_path(&self, key: &AreaKey) -> String {
        let m = &self.mounts[key.mount];
        path::join_display(&m.mount_point, &key.prefix)
    }

    fn readable_list(&self) -> PathList {
        PathList(self.readable_roots())
    }

    fn writable_list(&self) -> PathList {
        PathList(self.writable_roots())
    }

    /// True when `path` may be read: well formed, inside a readable area, and not leading
    /// outside it through symlinks.
    pub fn can_read(&self, path: &str) -> bool {
        self.resolve(path).is_ok()
    }

    /// True when `path` may be written (it need not exist yet).
    pub fn can_write(&self, path: &str) -> bool {
        self.resolve_for_write(path).is_ok()
    }

    /// Resolves a sandbox path to its host path, refusing anything outside the readable
    /// areas, including through symlinks of the existing part of the path.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, SandboxError> {
        let vp = self.parse(path)?;
        let area = self.readable_area(&vp, path)?;
        self.check_beneath(area, &vp, path)?;
        Ok(self.host_path_of(&vp))
    }

    /// Like [`Sandbox::resolve`] but for writing.
    pub fn resolve_for_write(&self, path: &str) -> Result<PathBuf, SandboxError> {
        let vp = self.parse(path)?;
        let area = self.writable_area(&vp, path)?;
        self.check_beneath(area, &vp, path)?;
        Ok(self.host_path_of(&vp))
    }

    /// Refuses a path whose suffix is not allowed by its mount.
    pub fn check_suffix(&self, path: &str) -> Result<(), SandboxError> {
        let vp = self.parse(path)?;
        self.check_suffix_vp(&vp, path)
    }

    /// Refuses a size above the mount's `max_file_bytes`.
    pub fn check_size(&self, path: &str, size: u64) -> Result<(), SandboxError> {
        let vp = self.parse(path)?;
        self.check_size_vp(&vp, path, size, "read")
    }

    /// Refuses writing `size` bytes to `path` when that is above its mount's `max_file_bytes`:
    /// asked before the content is decoded or anybody is asked about the write.
    pub fn check_write_size(&self, path: &str, size: u64) -> Result<(), SandboxError> {
        let vp = self.parse(path)?;
        self.check_size_vp(&vp, path, size, "write")
    }

    fn check_suffix_vp(&self, vp: &VirtualPath, shown: &str) -> Result<(), SandboxError> {
        let m = &self.mounts[vp.mount];
        let Some(allowed) = &m.suffixes else { return Ok(()) };
        let name = vp.rel.last().map(String::as_str).unwrap_or("");
        let lower = name.to_lowercase();
        if allowed.iter().any(|s| lower.ends_with(s.as_str()) && lower.len() > s.len()) {
            Ok(())
        } else {
            Err(SandboxError::SuffixNotAllowed { path: show(shown), allowed: PathList(allowed.clone()) })
        }
    }

    fn check_size_vp(&self, vp: &VirtualPath, shown: &str, size: u64, op: &'static str) -> Result<(), SandboxError> {
        match self.mounts[vp.mount].max_file_bytes {
            Some(limit) if size > limit => Err(SandboxError::TooLarge { op, path: show(shown), size, limit }),
            _ => Ok(()),
        }
    }

    fn host_path_of(&self, vp: &VirtualPath) -> PathBuf {
        let mut p = self.mounts[vp.mount].host_path.clone();
        for c in &vp.rel {
            p.push(c);
        }
        p
    }

    /// The deepest readable area containing `vp`.
    fn readable_area(&self, vp: &VirtualPath, shown: &str) -> Result<&Area, SandboxError> {
        deepest(&self.readable, vp).ok_or_else(|| match self.pending.iter().find(|p| p.key.mount == vp.mount && vp.rel.starts_with(&p.key.prefix)) {
            // Granted, only not created yet (`plan`, `check`, `workcell mcp` before a
            // launch): "outside the sandbox" would send the reader the wrong way.
            Some(p) => SandboxError::NotFound {
                path: show(shown),
                hint: format!(
                    " It lies in '{}', {}.",
                    show(&self.area_path(&p.key)),
                    if p.write {
                        "granted for writing but missing when this sandbox was made: a run creates it at launch"
                    } else {
                        "granted for reading but missing when this sandbox was made: create it before a run"
                    }
                ),
            },
            None => SandboxError::OutsideSandbox { path: show(shown), detail: String::new(), readable: self.readable_list() },
        })
    }

    /// The deepest writable area containing `vp`.
    fn writable_area(&self, vp: &VirtualPath, shown: &str) -> Result<&Area, SandboxError> {
        if let Some(a) = deepest(&self.writable, vp) {
            return Ok(a);
        }
        // Distinguish "read-only" from "not in the sandbox at all".
        self.readable_area(vp, shown)?;
        Err(SandboxError::NotWritable { path: show(shown), writable: self.writable_list() })
    }
}

fn deepest<'a>(areas: &'a [Area], vp: &VirtualPath) -> Option<&'a Area> {
    areas.iter().filter(|a| a.key.mount == vp.mount && vp.rel.starts_with(&a.key.prefix)).max_by_key(|a| a.key.prefix.len())
}

/// Normalises a suffix from config (`PDF`, `.pdf`) to the lowercase dotted form.
pub fn normalise_suffix(s: &str) -> String {
    let s = s.trim().to_lowercase();
    if s.starts_with('.') {
        s
    } else {
        format!(".{s}")
    }
}
