//! Configuration: find `workcell.yaml`, parse it and the worker files, refuse anything
//! invalid with file, line and column, and turn the result into one resolved [`Project`]:
//! a project [`Sandbox`] and the workers with their effective sandboxes.

mod env;
pub mod inherit;
pub mod kubernetes;
mod limits;
mod mounts;
mod network;
pub mod raw;
mod runtime;
mod text;
mod worker;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_saphyr::{Location, MessageFormatter, Spanned};

use crate::sandbox::{Addressing, Approval, Approvals, Delivery, Sandbox, ZoneMode};
pub use env::valid_env_name;
pub use kubernetes::Kubernetes;
pub(crate) use limits::{limits_from, located};
pub use limits::{parse_count, parse_cpus, parse_file_size, parse_memory, parse_pids, parse_timeout, LimitError, Limits};
pub use mounts::{check_mount_point, MountError};
use mounts::{check_relative_dir, MountBuilder};
pub use raw::BackendChoice;
use raw::{RawApproval, RawProject, RootField, SandboxMode};
pub use runtime::{parse_runtime, RuntimeNameError, MAX_RUNTIME_NAME};
pub use text::{describe as describe_char, forbidden_char, TextError};
pub use worker::{AttachmentPolicy, Rule, SandboxDecl, ShellRule, Worker};

/// The name of the project file.
pub const CONFIG_FILE: &str = "workcell.yaml";

/// Mount points a zone may not take: the system directories every backend provides.
pub const RESERVED_MOUNT_POINTS: &[&str] =
    &["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/etc", "/proc", "/dev", "/sys", "/tmp", "/run", "/var", "/opt"];

/// A configuration problem, located in its file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    /// 1-based; 0 when the problem has no single location (a missing file).
    pub line: u64,
    pub column: u64,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}:{}:{}: {}", self.file.display(), self.line, self.column, self.message)
        }
    }
}

/// Builds [`ConfigError`]s for one file, shifting lines for front matter.
#[derive(Debug, Clone)]
pub(crate) struct Diag {
    pub file: PathBuf,
    pub line_offset: u64,
}

impl Diag {
    pub fn at(&self, loc: Location, message: impl fmt::Display) -> ConfigError {
        let known = loc.line() > 0;
        ConfigError {
            file: self.file.clone(),
            line: if known { loc.line() + self.line_offset } else { 0 },
            column: if known { loc.column() } else { 0 },
            message: message.to_string(),
        }
    }
    pub fn spanned<T>(&self, s: &Spanned<T>, message: impl fmt::Display) -> ConfigError {
        self.at(s.referenced, message)
    }
    pub fn whole(&self, message: impl fmt::Display) -> ConfigError {
        ConfigError { file: self.file.clone(), line: 0, column: 0, message: message.to_string() }
    }
    /// Parses YAML into `T`, mapping syntax and shape errors to located errors.
    pub fn parse<T: serde::de::DeserializeOwned>(&self, text: &str) -> Result<T, ConfigError> {
        let options = serde_saphyr::options! { duplicate_keys: serde_saphyr::DuplicateKeyPolicy::Error };
        serde_saphyr::from_str_with_options::<T>(text, options).map_err(|e| {
            let message = yaml_message(e.without_snippet());
            match e.location() {
                Some(loc) => self.at(loc, message),
                None => self.whole(message),
            }
        })
    }
}

/// The YAML library's message in the words of this file format: what was wrong and what is
/// allowed, without the library's own settings ("set DuplicateKeyPolicy in Options").
fn yaml_message(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error;
    match e {
        Error::DuplicateMappingKey { key: Some(k), .. } => {
            format!("the key '{}' appears twice in the same mapping; each key may appear once: remove or rename one of them", k.escape_debug())
        }
        Error::DuplicateMappingKey { key: None, .. } => {
            "a key appears twice in the same mapping; each key may appear once: remove or rename one of them".into()
        }
        Error::InvalidScalar { ty: "bool" | "boolean", .. } => "not a boolean; use true or false".into(),
        Error::InvalidScalar { ty, .. } if ty.starts_with('u') || ty.starts_with('i') => {
            format!("not a whole number in the range this setting takes ({ty}); use a number such as 10")
        }
        Error::InvalidScalar { ty, .. } => format!("this value cannot be read as {ty}"),
        other => alias_hint(serde_saphyr::DefaultMessageFormatter.format_message(other).into_owned()),
    }
}

/// A `mounts:` field named twice (`host` and `host_path`) or not at all: say which names
/// mean the same setting, since serde names only the first.
fn alias_hint(message: String) -> String {
    for (name, alias) in [("host", "host_path"), ("at", "mount_point")] {
        if message.ends_with(&format!("duplicate field `{name}`")) {
            return format!("{message}: `{name}` and `{alias}` are two names for the same setting; give one of them");
        }
        if message.ends_with(&format!("missing field `{name}`")) {
            return format!("{message} (or `{alias}`)");
        }
    }
    message
}

/// Why a worker's `user` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserError {
    #[error("use a numeric UID or UID:GID, like 1000 or 1000:1000")]
    NotNumeric(#[source] std::num::ParseIntError),
    #[error("workers never run as root (uid or gid 0); name an unprivileged user, like 1000:1000")]
    Root,
    /// 4294967295 is -1 to the kernel: "leave the id unchanged" (`setresuid`, `chown`), so a
    /// worker given it would keep workcell's own ids.
    #[error("{0} is not a user or group id (the kernel reads it as -1, \"unchanged\"); name an unprivileged user, like 1000:1000")]
    Unchanged(u32),
}

/// `UID` or `UID:GID` (numeric; the gid defaults to the uid). Root is refused: a worker never
/// runs as host uid 0.
pub fn parse_user(text: &str) -> Result<crate::identity::UserSpec, UserError> {
    let (uid, gid) = match text.split_once(':') {
        Some((u, g)) => (u, g),
        None => (text, text),
    };
    let num = |s: &str| s.trim().parse::<u32>().map_err(UserError::NotNumeric);
    let (uid, gid) = (num(uid)?, num(gid)?);
    if uid == 0 || gid == 0 {
        return Err(UserError::Root);
    }
    if let Some(bad) = [uid, gid].into_iter().find(|&id| id == u32::MAX) {
        return Err(UserError::Unchanged(bad));
    }
    Ok(crate::identity::UserSpec { uid, gid })
}

/// Why a worker cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Unknown(#[from] UnknownWorker),
    /// The worker's file exists but was refused when the project was loaded.
    #[error("{0}")]
    Broken(#[source] ConfigError),
}

/// No worker of the project has the name asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no worker named '{name}' (looked for {}); known workers: {}",
    looked_for.display(),
    if known.is_empty() { "none".to_string() } else { known.join(", ") }
)]
pub struct UnknownWorker {
    pub name: String,
    /// The worker file that would define it.
    pub looked_for: PathBuf,
    pub known: Vec<String>,
}

/// Which image a worker runs in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageRef {
    /// workcell's empty base image plus the host's system directories, read-only.
    Host,
    /// A local image by name.
    Named(String),
    /// An image built from a Dockerfile folder.
    Build(PathBuf),
}

impl ImageRef {
    pub fn from_name(name: &str) -> ImageRef {
        if name == "host" {
            ImageRef::Host
        } else {
            ImageRef::Named(name.to_string())
        }
    }
}

/// Defaults for workers from `defaults:`.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    pub image: ImageRef,
    pub backend: BackendChoice,
    pub limits: Limits,
    /// `defaults.user`: the host user workers run as when workcell runs as root.
    pub user: Option<crate::identity::UserSpec>,
    /// `defaults.runtime`: the Docker runtime of workers that name none.
    pub runtime: Option<String>,
    /// `defaults.env`: variables for every worker (`None`: the host's value), applied before
    /// the worker's `env:` and `--env`.
    pub env: indexmap::IndexMap<String, Option<String>>,
}

/// A loaded, validated project: everything later stages need, read once.
#[derive(Debug, Clone)]
pub struct Project {
    /// The directory holding `workcell.yaml` (or the current directory without one).
    pub dir: PathBuf,
    /// The config file, when there is one.
    pub file: Option<PathBuf>,
    /// The project sandbox: every zone, full access.
    pub sandbox: Sandbox,
    pub require_os_sandbox: bool,
    pub dynamic: bool,
    pub defaults: Defaults,
    pub workers: BTreeMap<String, Worker>,
    /// Worker files that were refused, by file stem, with the refusal: only the commands
    /// that use one of them fail (`doctor` lists them).
    pub broken: BTreeMap<String, ConfigError>,
    /// The `build:` folder each refused worker file names, when it can still be read.
    pub broken_builds: BTreeMap<String, PathBuf>,
    /// `kubernetes:`: what `workcell plan --backend kubernetes` renders with.
    pub kubernetes: Kubernetes,
}

impl Project {
    /// Every `build:` folder of the project with its worker's name: those of the workers
    /// that load, and those a refused worker file names (its folder stays protected: fixing
    /// the file must not build from a context another worker rewrote in the meantime).
    pub fn build_folders(&self) -> Vec<(PathBuf, &str)> {
        let loaded = self.workers.values().filter_map(|w| match &w.image {
            Some(ImageRef::Build(d)) => Some((d.clone(), w.name.as_str())),
            _ => None,
        });
        let refused = self.broken_builds.iter().map(|(name, d)| (d.clone(), name.as_str()));
        loaded.chain(refused).collect()
    }
}

/// Walks up from `start` to the first directory holding `workcell.yaml`.
pub fn find_config(start: &Path) -> Option<PathBuf> {
    start.ancestors().map(|d| d.join(CONFIG_FILE)).find(|p| p.is_file())
}

impl Project {
    /// Loads `file` (or, without one, the nearest `workcell.yaml` searching upward from
    /// `cwd`). With none found it is refused: a default project would create its zones in
    /// whatever directory the person happened to be in.
    pub fn load(file: Option<&Path>, cwd: &Path) -> Result<Project, ConfigError> {
        let f = match file {
            Some(f) => {
                if f.is_absolute() {
                    f.to_path_buf()
                } else {
                    cwd.join(f)
                }
            }
            None => find_config(cwd).ok_or_else(|| ConfigError { file: cwd.to_path_buf(), line: 0, column: 0, message: NO_PROJECT.into() })?,
        };
        let text = std::fs::read_to_string(&f).map_err(|e| ConfigError {
            file: f.clone(),
            line: 0,
            column: 0,
            message: format!("cannot read the config file: {e}"),
        })?;
        let dir = f.parent().map(Path::to_path_buf).unwrap_or_else(|| cwd.to_path_buf());
        Self::from_text(&text, &f, &dir)
    }

    /// Parses and validates project text as if read from `file` in `dir`, then loads the
    /// workers under `dir/workers/`.
    pub fn from_text(text: &str, file: &Path, dir: &Path) -> Result<Project, ConfigError> {
        let diag = Diag { file: file.to_path_buf(), line_offset: 0 };
        let raw: RawProject = diag.parse(text)?;
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let rs = raw.sandbox.unwrap_or_default();

        let sandboxed = rs.mode.as_ref().map(|m| m.value) == Some(SandboxMode::Sandboxed);
        let folder = match rs.root.as_ref().map(|r| &r.value) {
            Some(RootField::Folder(f)) => {
                let s = rs.root.as_ref().map(|r| r.referenced).unwrap_or(Location::UNKNOWN);
                check_relative_dir("sandbox folder", f).map_err(|m| diag.at(s, m))?;
                f.clone()
            }
            _ => ".sandbox".to_string(),
        };
        let mut forms: Vec<(&str, Location)> = [
            rs.zones.as_ref().map(|z| ("zones", z.referenced)),
            rs.paths.as_ref().map(|p| ("paths", p.referenced)),
            rs.root.as_ref().filter(|r| matches!(r.value, RootField::Form(_))).map(|r| ("root", r.referenced)),
            rs.mounts.as_ref().map(|m| ("mounts", m.referenced)),
        ]
        .into_iter()
        .flatten()
        .collect();
        if forms.len() > 1 {
            // Point at the second form in the file: the first one is the one to keep.
            forms.sort_by_key(|(_, loc)| (loc.line(), loc.column()));
            let names: Vec<&str> = forms.iter().map(|(n, _)| *n).collect();
            return Err(diag.at(forms[1].1, format!("sandbox declares {}; use exactly one of zones, paths, root (mapping) or mounts", names.join(" and "))));
        }

        let protection = mounts::project_protection(rs.protect.as_deref(), &diag)?;
        // Zone directories `sandboxed` mode creates belong to the worker's user (as root: the
        // configured `defaults.user`, an invalid one being refused below).
        let configured = raw.defaults.as_ref().and_then(|d| d.user.as_ref()).and_then(|u| parse_user(&u.value).ok());
        let owner = rustix::process::geteuid().is_root().then(|| crate::identity::worker_user(&dir, configured));
        let mut builder =
            MountBuilder { diag: &diag, dir: &dir, sandboxed, folder: &folder, owner, mounts: Vec::new(), spans: Vec::new(), protection: protection.clone() };
        let mut addressing = Addressing::Zones;
        if let Some(zones) = &rs.zones {
            for (i, (name, z)) in zones.value.0.iter().enumerate() {
                // The list form can name a zone twice, and a mapping's repeated key reads the same way.
                if zones.value.0[..i].iter().any(|(seen, _)| seen.value == name.value) {
                    return Err(diag.spanned(name, format!("zone '{}' is given twice; give each zone once", name.value.escape_debug())));
                }
                let host = z.path.as_ref().map(|p| (p.value.clone(), p.referenced)).unwrap_or_else(|| (format!("./{}", name.value), name.referenced));
                builder.add(
                    name,
                    host,
                    None,
                    z.mode.unwrap_or(ZoneMode::Ro),
                    z.suffixes.as_deref(),
                    located(z.max_file_bytes.as_ref(), "max_file_bytes", parse_file_size, &diag)?,
                    approvals(z.approval.as_ref()),
                    z.delivery.unwrap_or_default(),
                    z.unprotect.as_deref(),
                )?;
            }
        } else if let Some(paths) = &rs.paths {
            for (name, p) in &paths.value {
                let a = Approvals {
                    read: if p.read_approval.unwrap_or(false) { Approval::Ask } else { Approval::PreApproved },
                    write: if p.write_approval.unwrap_or(true) { Approval::Ask } else { Approval::PreApproved },
                    delete: if p.write_approval.unwrap_or(true) { Approval::Ask } else { Approval::PreApproved },
                };
                builder.add(
                    name,
                    (p.root.value.clone(), p.root.referenced),
                    None,
                    p.mode.unwrap_or(ZoneMode::Ro),
                    p.suffixes.as_deref(),
                    located(p.max_file_bytes.as_ref(), "max_file_bytes", parse_file_size, &diag)?,
                    a,
                    Delivery::Bind,
                    p.unprotect.as_deref(),
                )?;
            }
        } else if let Some(Spanned { value: RootField::Form(r), referenced, .. }) = &rs.root {
            addressing = Addressing::Root;
            let mode = if r.readonly.unwrap_or(false) { ZoneMode::Ro } else { ZoneMode::Rw };
            let name = Spanned::new("/".to_string(), *referenced, *referenced);
            builder.add(
                &name,
                (r.root.value.clone(), r.root.referenced),
                Some(("/".into(), *referenced)),
                mode,
                r.suffixes.as_deref(),
                located(r.max_file_bytes.as_ref(), "max_file_bytes", parse_file_size, &diag)?,
                approvals(r.approval.as_ref()),
                Delivery::Bind,
                r.unprotect.as_deref(),
            )?;
        } else if let Some(mounts) = &rs.mounts {
            for m in &mounts.value {
                let point = m.at.value.clone();
                check_mount_point(&point).map_err(|msg| diag.spanned(&m.at, msg))?;
                let name = Spanned::new(point.trim_start_matches('/').to_string(), m.at.referenced, m.at.defined);
                builder.add(
                    &name,
                    (m.host.value.clone(), m.host.referenced),
                    Some((point, m.at.referenced)),
                    m.mode.unwrap_or(ZoneMode::Ro),
                    m.suffixes.as_deref(),
                    located(m.max_file_bytes.as_ref(), "max_file_bytes", parse_file_size, &diag)?,
                    approvals(m.approval.as_ref()),
                    m.delivery.unwrap_or_default(),
                    m.unprotect.as_deref(),
                )?;
            }
            if builder.mounts.iter().any(|m| m.mount_point == "/") {
                if let (true, Some(root)) = (builder.mounts.len() > 1, mounts.value.iter().find(|m| m.at.value == "/")) {
                    // One directory as `/` is the root form, addressed without zone names;
                    // other mounts beside it would need names inside it (see
                    // docs/differences.md, "A mount at `/` beside other mounts is refused").
                    return Err(diag.spanned(
                        &root.at,
                        "a mount at '/' must be the only mount (it is the root form: one directory as the whole sandbox); \
                         give every directory a mount point of its own such as /data and /special, or keep only the mount at '/'",
                    ));
                }
                addressing = Addressing::Root;
            }
        }
        let mounts = builder.finish()?;

        let network = network::project_access(rs.network.as_ref(), &diag)?;
        let sandbox = Sandbox::new(mounts, addressing, network).map_err(|e| diag.whole(e.to_string()))?.with_host_protection(protection);

        let kubernetes = kubernetes::kubernetes_from(raw.kubernetes.as_ref(), &sandbox, &diag)?;
        let rd = raw.defaults.unwrap_or_default();
        let defaults = Defaults {
            image: match &rd.image {
                Some(i) => {
                    text::check_printable("the image name", &i.value).map_err(|m| diag.spanned(i, m))?;
                    ImageRef::from_name(&i.value)
                }
                None => ImageRef::Host,
            },
            backend: rd.backend.unwrap_or_default(),
            limits: rd.limits.as_ref().map(|l| limits_from(l, &diag)).transpose()?.unwrap_or_default(),
            user: rd.user.as_ref().map(|u| parse_user(&u.value).map_err(|m| diag.spanned(u, format!("invalid user '{}': {m}", u.value)))).transpose()?,
            runtime: runtime_from(rd.runtime.as_ref(), &diag)?,
            env: env::env_from(rd.env.as_ref(), &diag)?,
        };
        let mut project = Project {
            dir: dir.clone(),
            file: Some(file.to_path_buf()),
            sandbox,
            require_os_sandbox: rs.require_os_sandbox.unwrap_or(true),
            dynamic: rs.dynamic.unwrap_or(false),
            defaults,
            workers: BTreeMap::new(),
            broken: BTreeMap::new(),
            broken_builds: BTreeMap::new(),
            kubernetes,
        };
        (project.workers, project.broken, project.broken_builds) = worker::load_all(&project);
        // The config, worker files, audit log and build folders are out of the tool
        // service's reach in every sandbox of this project (`sandbox::protect`).
        let config_name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| CONFIG_FILE.into());
        let builds: Vec<PathBuf> = project.build_folders().into_iter().map(|(d, _)| d).collect();
        let build_refs: Vec<&Path> = builds.iter().map(PathBuf::as_path).collect();
        project.sandbox = project.sandbox.clone().protecting(&project.dir, &config_name, &build_refs);
        for w in project.workers.values_mut() {
            w.sandbox = w.sandbox.clone().protected_like(&project.sandbox);
        }
        Ok(project)
    }

    /// The worker called `name`, or why it cannot be used: its file's refusal, or an error
    /// listing the ones that exist.
    pub fn worker(&self, name: &str) -> Result<&Worker, WorkerError> {
        if let Some(e) = self.broken.get(name) {
            return Err(WorkerError::Broken(e.clone()));
        }
        self.workers.get(name).ok_or_else(|| {
            WorkerError::Unknown(UnknownWorker {
                name: name.into(),
                looked_for: self.dir.join("workers").join(format!("{name}.worker")),
                known: self.workers.keys().cloned().collect(),
            })
        })
    }
}

/// Why [`Project::load`] found no project (after the directory searched from).
pub const NO_PROJECT: &str =
    "no workcell.yaml here or in any directory above; `workcell init` writes a starter project (workcell.yaml, data/, out/ and a worker), or name one with --config FILE";

/// A `runtime:` value, checked, or its located error.
pub(crate) fn runtime_from(raw: Option<&Spanned<String>>, diag: &Diag) -> Result<Option<String>, ConfigError> {
    raw.map(|r| parse_runtime(&r.value).map_err(|e| diag.spanned(r, format!("invalid runtime: {e}")))).transpose()
}

fn approvals(raw: Option<&RawApproval>) -> Approvals {
    let d = Approvals::default();
    match raw {
        None => d,
        Some(r) => Approvals { read: r.read.unwrap_or(d.read), write: r.write.unwrap_or(d.write), delete: r.delete.unwrap_or(d.delete) },
    }
}
