//! `LaunchPlan`: what a run needs, independent of the backend that carries it out.
//!
//! A plan is computed once from a worker's effective sandbox, the worker's fields and the
//! command-line overrides. Backends only *render* it (Docker settings, bwrap argv, Seatbelt
//! profile) and run the rendering; none of them re-reads configuration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub mod access;
pub mod accounts;
mod agent_program;
mod control;
mod gitdir;
mod hookspath;
mod mounts;
mod pin;
mod services;
pub use services::{AGENT_PROGRAM, AGENT_SOCKET_DIR, AGENT_SOCKET_NAME, AGENT_STDIO_TASKS, BROKER_MOUNT_POINT, WORKER_HOSTNAME};
pub mod protected;
pub use crate::config::inherit as runtime;
pub mod ship;
mod workdir;
use mounts::copy_mounts;
pub(crate) use mounts::zone_mounts_as;
pub use mounts::{default_workdir, mount_target, mounts_for, zone_mounts};
pub use workdir::WorkdirError;

use crate::config::{ImageRef, Limits, Project, Worker};
pub use crate::held::Held;
pub use crate::hostrun::area::{BoundPath, ProtectedArea};
pub use crate::identity::{worker_user, UserSpec, FALLBACK_USER};
use crate::sandbox::Sandbox;
pub use crate::sandbox::{inside, ROOT_FORM_MOUNT_POINT};

/// PATH inside every worker.
pub const WORKER_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Default limits when neither the worker nor the project sets them.
pub const DEFAULT_PIDS: i64 = 512;
pub const DEFAULT_MEMORY: u64 = 2 << 30;

/// A host directory (or file) bound into the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanMount {
    /// Absolute host path of the object, read from its handle when the plan was made (shown
    /// to people; used for binding only where no backend can bind the handle).
    pub source: PathBuf,
    /// Absolute path inside the worker.
    pub target: String,
    pub read_only: bool,
    /// The object that was checked, held open: backends bind this very handle, never the
    /// path again, so a worker that renames directories cannot re-aim the mount.
    #[serde(skip)]
    pub held: Option<Held>,
}

/// One entry of the host system layout a worker sees with `image: host`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum SystemEntry {
    /// A host directory or file bound read-only at the same path.
    Bind { path: String },
    /// A symbolic link, as on the host (`/bin` → `usr/bin`).
    Symlink { path: String, target: String },
}

/// A private in-memory file system.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TmpfsMount {
    pub target: String,
    pub size_bytes: u64,
}

/// The network a worker gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// Loopback only.
    Off,
    /// The host's network, unfiltered (`network: true`).
    Open,
    /// Only the egress proxy, which applies `network: {allow: [...]}` (see
    /// [`crate::egress::seam`]).
    Proxied,
}

impl Network {
    /// Whether the worker gets the unfiltered network.
    pub fn is_open(self) -> bool {
        self == Network::Open
    }
}

/// Everything a backend needs to start one run. Serialises to the `workcell plan --json`
/// output.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchPlan {
    pub run_id: String,
    pub worker: Option<String>,
    pub image: ImageRef,
    /// Host system layout (only for `image: host`; empty for named images).
    pub system: Vec<SystemEntry>,
    /// Zones, in mount order (outer directories before nested ones).
    pub mounts: Vec<PlanMount>,
    pub tmpfs: Vec<TmpfsMount>,
    pub network: Network,
    /// The rules of a [`Network::Proxied`] plan, for the run's egress proxy (and `plan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<Arc<crate::egress::Policy>>,
    pub env: BTreeMap<String, String>,
    pub user: UserSpec,
    pub workdir: String,
    pub command: Vec<String>,
    pub limits: Limits,
    /// The project directory the run belongs to (docker labels its containers with it, for
    /// `workcell gc` and the tests).
    pub project_dir: PathBuf,
    pub interactive: bool,
    pub tty: bool,
    /// The Docker runtime to run under (`runsc` for gVisor); `None` is the daemon's default.
    /// Only the docker backend can honour it: the others refuse a plan that names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Mounts of zones with `delivery: copy`: the run binds a private copy in their place
    /// and publishes the checked result afterwards.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub copies: Vec<CopyMount>,
    /// The writable, bind-delivered mounts and the files the host runs in them
    /// (`crate::hostrun`): those that existed at launch are bound read-only (in `mounts`);
    /// after the run, any other one found is moved aside.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub protected: Vec<ProtectedArea>,
    /// Bytes written to the command's standard input, then closed (a captured run of the
    /// shell tool); `None`: an empty input.
    #[serde(skip)]
    pub stdin: Option<Arc<[u8]>>,
    /// The engine this plan was made for cannot see this host's files (what it is, for
    /// messages): every zone is a copy shipped to it ([`ship`]); nothing is bound by path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shipped: Option<String>,
}

/// A mount of a zone with `delivery: copy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CopyMount {
    /// The mount's target (as in [`LaunchPlan::mounts`]).
    pub target: String,
    /// The zone it belongs to (its policies apply to what the worker leaves).
    pub zone: String,
    /// True when the worker's changes are published (a writable zone).
    pub writable: bool,
    /// Paths relative to the zone never published from the copy: the control files a zone
    /// shipped to a remote engine carries (see [`ship`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub withhold: Vec<String>,
}

/// Command-line choices that override the worker and project.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub image: Option<String>,
    pub command: Option<Vec<String>>,
    /// `Some(true)` from `--network`.
    pub network: Option<bool>,
    pub limits: Limits,
    /// `K=V` sets a variable; `K` passes the host's value through.
    pub env: Vec<String>,
    pub workdir: Option<String>,
    pub interactive: bool,
    pub tty: bool,
    /// `--runtime`: replaces the worker's and the project's runtime for this run (the person
    /// at the command line decides, as with `--backend none`).
    pub runtime: Option<String>,
    /// The runtime of the run that starts this one (a child worker, a shell command): this
    /// run gets the same, and may not name another (see [`runtime::inherit`]).
    pub inherited_runtime: Option<String>,
    /// Standard input for a captured run (the shell tool's `stdin`).
    pub stdin: Option<Arc<[u8]>>,
}

/// Why a plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A granted directory could not be created (or, granted read-only, does not exist).
    #[error("{0}")]
    Grant(#[source] crate::sandbox::SandboxError),
    #[error("nothing to run: the worker has no command; give one after `--`, e.g. `workcell run {worker} -- sh -c 'ls /'`")]
    NoCommand { worker: String },
    #[error("invalid --env '{0}': use NAME=VALUE to set a variable or NAME to pass the host's value through")]
    BadEnv(String),
    #[error("zone '{0}' uses delivery: copy but holds the project's control files (workcell.yaml, workers/), which are bound live into every run; use delivery: bind for it, or a zone beside the project's files")]
    CopyDelivery(String),
    #[error("the working directory '{}' cannot be used: {reason}", crate::term::escape(workdir))]
    BadWorkdir {
        workdir: String,
        #[source]
        reason: WorkdirError,
    },
    #[error(transparent)]
    Runtime(#[from] runtime::RuntimeChanged),
    #[error("nothing to run: the command's program name is empty")]
    EmptyProgram,
    #[error("the sandbox path '{0}' contains ',', ':' or a control character, which would make WORKCELL_ZONES (/in:ro,/out:rw) ambiguous; rename the directory or name another one")]
    AmbiguousZone(String),
    #[error("the writable zone {zone} ({}) contains the project directory: a worker could rename the project and put a workcell.yaml of its own in its place. Make the zone read-only, or use the project directory itself (the root form `root: .`) or a directory inside it", dir.display())]
    ZoneContainsProject { zone: String, dir: PathBuf },
    #[error("the build folder of worker '{worker}' is or contains the writable zone {zone}: a worker could rewrite what gets built. Put the Dockerfile in a folder of its own inside the project (like images/{worker}), or make the zone read-only")]
    BuildFolderWritable { worker: String, zone: String },
    #[error("the writable zone {zone} is inside the project's control files ({}): a worker could rewrite what decides its next sandbox. Make the zone read-only", entry.display())]
    ZoneInsideControl { zone: String, entry: PathBuf },
    #[error(
        "the writable zone {zone} cannot be kept safe for the host: {reason}. Before a run workcell finds the files the host runs (git hooks and config, .envrc, editor and shell settings) in every writable zone to keep them read-only, and refuses rather than leave some writable: make the zone read-only, use `delivery: copy`, or name a smaller directory as the zone"
    )]
    Protected {
        zone: String,
        #[source]
        reason: protected::ProtectError,
    },
    /// A zone the worker's identity cannot use (checked before anything starts).
    #[error(transparent)]
    Access(#[from] access::AccessError),
    /// The plan cannot run on the remote engine it was made for.
    #[error(transparent)]
    Remote(#[from] ship::RemoteRefusal),
    #[error("the writable zone {zone} is the project directory, which has no workcell.yaml: a worker could write one that a later run would use. Create it first (`workcell init`), or make the zone read-only, or use a directory inside the project")]
    WritableProjectWithoutConfig { zone: String },
}

/// A fresh run id: 16 hex digits from the clock and the process id.
pub fn new_run_id() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let mixed = (nanos as u64) ^ ((std::process::id() as u64) << 40) ^ (nanos >> 64) as u64;
    format!("{:016x}", mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The host system layout bound read-only for `image: host`: directories bound, top-level
/// symlinks (merged `/usr`) recreated, and the few `/etc` entries programs need.
pub fn host_system_layout() -> Vec<SystemEntry> {
    host_system_layout_at(Path::new("/"))
}

/// [`host_system_layout`] for a host root other than `/` (tests).
pub fn host_system_layout_at(root: &Path) -> Vec<SystemEntry> {
    const TOP: &[&str] = &["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];
    const ETC: &[&str] = &["etc/alternatives", "etc/ld.so.cache", "etc/ld.so.conf", "etc/ld.so.conf.d", "etc/ssl", "etc/ca-certificates", "etc/localtime"];
    let mut out = Vec::new();
    for name in TOP.iter().chain(ETC) {
        let p = root.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&p) else { continue };
        let path = format!("/{name}");
        if meta.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(&p) {
                out.push(SystemEntry::Symlink { path, target: target.to_string_lossy().into_owned() });
            }
        } else {
            out.push(SystemEntry::Bind { path });
        }
    }
    out
}

impl LaunchPlan {
    /// Computes the plan for `worker` (or an ad-hoc command) running in `sandbox`.
    pub fn build(project: &Project, worker: Option<&Worker>, sandbox: &Sandbox, ov: &Overrides) -> Result<LaunchPlan, PlanError> {
        let run_id = new_run_id();
        let worker_name = worker.map(|w| w.name.clone());
        let command = ov
            .command
            .clone()
            .or_else(|| worker.and_then(|w| w.command.clone()))
            .ok_or_else(|| PlanError::NoCommand { worker: worker_name.clone().unwrap_or_else(|| "WORKER".into()) })?;
        if command.first().is_some_and(|p| p.is_empty()) {
            return Err(PlanError::EmptyProgram);
        }
        let image = match &ov.image {
            Some(i) => ImageRef::from_name(i),
            None => worker.and_then(|w| w.image.clone()).unwrap_or_else(|| project.defaults.image.clone()),
        };
        // `--network` is the person at the terminal opening the network for this run.
        let (network, egress) = match sandbox.network_access() {
            _ if ov.network == Some(true) => (Network::Open, None),
            crate::egress::Access::Off => (Network::Off, None),
            crate::egress::Access::Open => (Network::Open, None),
            crate::egress::Access::Filtered(p) => (Network::Proxied, Some(p.clone())),
        };
        let named = zone_mounts(sandbox);
        let mounts: Vec<PlanMount> = named.iter().map(|(m, _)| m.clone()).collect();
        let workdir = match ov.workdir.clone().or_else(|| worker.and_then(|w| w.workdir.clone())) {
            Some(w) => w,
            None => default_workdir(&mounts),
        };

        let mut env = BTreeMap::new();
        env.insert("PATH".to_string(), WORKER_PATH.to_string());
        env.insert("HOME".to_string(), "/tmp".to_string());
        env.insert("LANG".to_string(), "C.UTF-8".to_string());
        if ov.tty {
            env.insert("TERM".to_string(), std::env::var("TERM").unwrap_or_else(|_| "xterm".into()));
        }
        env.insert("WORKCELL_RUN_ID".to_string(), run_id.clone());
        if let Some(w) = &worker_name {
            env.insert("WORKCELL_WORKER".to_string(), w.clone());
        }
        // `,` and `:` separate the entries; a newline or other control character would let a
        // directory name forge entries or lines. Mount points are checked when the config is
        // read; this covers areas a worker's allowlist names inside a zone.
        if let Some(m) = mounts.iter().find(|m| m.target.contains([',', ':']) || crate::config::forbidden_char(&m.target).is_some()) {
            return Err(PlanError::AmbiguousZone(m.target.escape_debug().to_string()));
        }
        let zones: Vec<String> = mounts.iter().map(|m| format!("{}:{}", m.target, if m.read_only { "ro" } else { "rw" })).collect();
        // After the zones, so that they cover them (and after the list the worker is told):
        // the control files and the files the host runs, read-only, their parents pinned.
        let control = control::control_mounts(project, &mounts)?;
        let copies = copy_mounts(sandbox, &named, &control)?;
        let (protected, hostrun) = protected::protected_areas(sandbox, &project.dir, &named, &control)?;
        let kept: Vec<pin::Pinned> = control.into_iter().chain(hostrun).collect();
        let mut mounts = mounts;
        pin::assemble(&mut mounts, &kept);
        env.insert("WORKCELL_ZONES".to_string(), zones.join(","));
        let shown = match network {
            Network::Off => "0",
            Network::Open => "1",
            Network::Proxied => "proxy",
        };
        env.insert("WORKCELL_NETWORK".to_string(), shown.to_string());
        // The project's `defaults.env`, then the worker's `env:`, each over the last.
        let configured = project.defaults.env.iter().chain(worker.into_iter().flat_map(|w| w.env.iter()));
        for (k, v) in configured {
            match v {
                Some(v) => {
                    env.insert(k.clone(), v.clone());
                }
                None => {
                    if let Ok(v) = std::env::var(k) {
                        env.insert(k.clone(), v);
                    }
                }
            }
        }
        for e in &ov.env {
            match e.split_once('=') {
                Some((k, v)) if crate::config::valid_env_name(k) => {
                    env.insert(k.to_string(), v.to_string());
                }
                None if crate::config::valid_env_name(e) => {
                    if let Ok(v) = std::env::var(e) {
                        env.insert(e.clone(), v);
                    }
                }
                _ => return Err(PlanError::BadEnv(e.clone())),
            }
        }

        let base = worker.map(|w| w.limits).unwrap_or(project.defaults.limits);
        let mut limits = ov.limits.or(base);
        limits.pids = limits.pids.or(Some(DEFAULT_PIDS));
        limits.memory_bytes = limits.memory_bytes.or(Some(DEFAULT_MEMORY));

        let named = worker.and_then(|w| w.runtime.clone());
        let runtime = match (&ov.inherited_runtime, &ov.runtime, &project.defaults.runtime) {
            (Some(caller), _, _) => Some(runtime::inherit(worker_name.as_deref(), named, caller, runtime::Floor::Caller)?),
            (None, Some(chosen), _) => Some(chosen.clone()),
            (None, None, Some(default)) => Some(runtime::inherit(worker_name.as_deref(), named, default, runtime::Floor::Defaults)?),
            (None, None, None) => named,
        };
        let system = if image == ImageRef::Host { host_system_layout() } else { Vec::new() };
        workdir::check(&workdir, &mounts, (image == ImageRef::Host).then_some(&system[..]))
            .map_err(|reason| PlanError::BadWorkdir { workdir: workdir.clone(), reason })?;
        Ok(LaunchPlan {
            run_id,
            worker: worker_name,
            image,
            system,
            mounts,
            tmpfs: vec![TmpfsMount { target: "/tmp".into(), size_bytes: 256 << 20 }],
            network,
            egress,
            env,
            user: worker_user(&project.dir, project.defaults.user),
            workdir,
            command,
            limits,
            project_dir: project.dir.clone(),
            interactive: ov.interactive,
            tty: ov.tty,
            runtime,
            copies,
            protected,
            stdin: ov.stdin.clone(),
            shipped: None,
        })
    }

    /// The timeout, if any.
    pub fn timeout(&self) -> Option<Duration> {
        self.limits.timeout
    }
}
