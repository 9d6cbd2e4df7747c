//! The mounts of a project's sandbox as the config writes them (zones, paths, the root form,
//! mounts), checked one by one with the line and column of each value: names and mount
//! points, host directories (which must exist, must not overlap, and must not be system
//! directories: `sandbox::hostdir`), and relative paths that a symlink would lead out of the
//! project.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

use serde_saphyr::{Location, Spanned};

use std::os::fd::AsFd;

use rustix::fs::{Mode, OFlags};

use super::text::{check_printable, TextError};
use super::{ConfigError, Diag, RESERVED_MOUNT_POINTS};
use crate::hostrun::Protection;
use crate::sandbox::{hostdir, normalise_suffix, Approvals, Delivery, Mount, ZoneMode};

/// A sandbox folder, zone name or mount point the configuration (or `--zone`) gives that
/// cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    #[error(transparent)]
    Text(#[from] TextError),
    /// `what` is "sandbox folder" or "zone path in sandboxed mode".
    #[error("the {what} '{path}' must be a relative path inside the project, without '..'")]
    NotRelative { what: &'static str, path: String },
    #[error("mount point '{point}' contains '{found}', which separates the entries of WORKCELL_ZONES (/in:ro,/out:rw); use another name")]
    Separator { point: String, found: char },
    #[error("mount point '{0}' must be absolute, like '/data'")]
    NotAbsolute(String),
    #[error("mount point '{0}' may not contain '.' or '..' components")]
    DotComponent(String),
    #[error("mount point '{0}' must be normalised (no trailing or doubled '/')")]
    NotNormalised(String),
    #[error("mount point '{point}' is inside the system directory '{system}', which every backend provides read-only; reserved: {}", RESERVED_MOUNT_POINTS.join(", "))]
    Reserved { point: String, system: &'static str },
    #[error("invalid zone name '{}': use letters, digits, '_', '.' or '-', starting with a letter or digit", .0.escape_debug())]
    ZoneName(String),
}

/// Checks a folder inside the project: `what` names it in the message ("sandbox folder").
pub(super) fn check_relative_dir(what: &'static str, s: &str) -> Result<(), MountError> {
    check_printable(&format!("the {what}"), s)?;
    if Path::new(s).is_absolute() || Path::new(s).components().any(|c| c == Component::ParentDir) {
        return Err(MountError::NotRelative { what, path: s.into() });
    }
    Ok(())
}

/// Checks a mount point: absolute, normalised, no `..`, NUL or reserved system directory.
pub fn check_mount_point(p: &str) -> Result<(), MountError> {
    check_printable(&format!("mount point '{}'", p.escape_debug()), p)?;
    if let Some(found) = p.chars().find(|c| matches!(c, ',' | ':')) {
        // Workers read their zones from `WORKCELL_ZONES=/in:ro,/out:rw`.
        return Err(MountError::Separator { point: p.into(), found });
    }
    if !p.starts_with('/') {
        return Err(MountError::NotAbsolute(p.into()));
    }
    if p.split('/').any(|c| c == ".." || c == ".") {
        return Err(MountError::DotComponent(p.into()));
    }
    if p != "/" && (p.ends_with('/') || p.contains("//")) {
        return Err(MountError::NotNormalised(p.into()));
    }
    if let Some(r) = RESERVED_MOUNT_POINTS.iter().find(|r| p == **r || p.starts_with(&format!("{r}/"))) {
        return Err(MountError::Reserved { point: p.into(), system: r });
    }
    Ok(())
}

fn check_zone_name(name: &str) -> Result<(), MountError> {
    check_printable(&format!("zone name '{}'", name.escape_debug()), name)?;
    let ok = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if !ok {
        return Err(MountError::ZoneName(name.into()));
    }
    check_mount_point(&format!("/{name}"))
}

/// Creates `rel` beneath `dir`, one component at a time; its last component, the zone's own
/// directory, when made here (never one that existed), is given to `owner`, through a handle
/// opened without following links. The folders above it stay ours.
fn create_owned(dir: &cap_std::fs::Dir, rel: &Path, owner: Option<crate::identity::UserSpec>) -> std::io::Result<()> {
    use rustix::fs::{Gid, Mode, OFlags, Uid};
    let mut at = PathBuf::new();
    let last = rel.components().count();
    for (i, c) in rel.components().enumerate() {
        at.push(c);
        match dir.create_dir(&at) {
            Ok(()) => {
                if let (Some(u), true) = (owner, i + 1 == last) {
                    let fd = rustix::fs::openat(dir, &at, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
                    rustix::fs::fchown(&fd, Some(Uid::from_raw(u.uid)), Some(Gid::from_raw(u.gid)))?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub(super) struct MountBuilder<'a> {
    pub diag: &'a Diag,
    pub dir: &'a Path,
    pub sandboxed: bool,
    pub folder: &'a str,
    /// Who the directories `sandboxed` mode creates are given to (as root: the worker).
    pub owner: Option<crate::identity::UserSpec>,
    pub mounts: Vec<Mount>,
    pub spans: Vec<Location>,
    /// The project's protected entries (`crate::hostrun`): the defaults plus `sandbox.protect`.
    pub protection: Protection,
}

/// The project's protected entries: the defaults plus `protect` (each checked where it is
/// written).
pub(super) fn project_protection(protect: Option<&[Spanned<String>]>, diag: &Diag) -> Result<Protection, ConfigError> {
    let added: Vec<String> = protect.unwrap_or_default().iter().map(|e| e.value.clone()).collect();
    for e in protect.unwrap_or_default() {
        Protection::new([e.value.clone()]).map_err(|m| diag.spanned(e, format!("sandbox.protect: {m}")))?;
    }
    Protection::with_added(&added).map_err(|m| diag.whole(format!("sandbox.protect: {m}")))
}

impl MountBuilder<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn add(
        &mut self,
        name: &Spanned<String>,
        (host, host_loc): (String, Location),
        point: Option<(String, Location)>,
        mode: ZoneMode,
        suffixes: Option<&[String]>,
        max_file_bytes: Option<u64>,
        approval: Approvals,
        delivery: Delivery,
        unprotect: Option<&[Spanned<String>]>,
    ) -> Result<(), ConfigError> {
        let diag = self.diag;
        let (mount_point, point_loc) = match point {
            Some(p) => p,
            None => {
                check_zone_name(&name.value).map_err(|m| diag.spanned(name, m))?;
                (format!("/{}", name.value), name.referenced)
            }
        };
        if self.mounts.iter().any(|m| m.mount_point == mount_point) {
            return Err(diag.at(point_loc, format!("duplicate mount point '{mount_point}': each mount needs its own")));
        }
        check_printable("the host path", &host).map_err(|m| diag.at(host_loc, m))?;
        let host_path = if self.sandboxed {
            let rel = host.trim_start_matches("./");
            check_relative_dir("zone path in sandboxed mode", rel).map_err(|m| diag.at(host_loc, m))?;
            let p = self.dir.join(self.folder).join(rel);
            // Beneath the project's handle: a symlink planted in the project (say `.sandbox`
            // -> /etc, by a worker whose zone the project is) cannot make this create
            // directories elsewhere.
            cap_std::fs::Dir::open_ambient_dir(self.dir, cap_std::ambient_authority())
                .and_then(|d| create_owned(&d, &Path::new(self.folder).join(rel), self.owner))
                .map_err(|e| diag.at(host_loc, format!("cannot create the zone directory '{}': {e}", p.display())))?;
            p
        } else {
            let p = Path::new(&host);
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                self.dir.join(p)
            }
        };
        let host_path = match std::fs::canonicalize(&host_path) {
            Ok(p) if p.is_dir() => p,
            Ok(p) => return Err(diag.at(host_loc, format!("host path '{}' is not a directory", p.display()))),
            Err(_) => {
                return Err(diag.at(
                    host_loc,
                    format!(
                        "host directory '{}' does not exist; create it, or use `sandbox.mode: sandboxed` to have zones created under .sandbox/",
                        host_path.display()
                    ),
                ))
            }
        };
        // The zone's name as the person wrote it, for messages.
        let zone = if name.value == "/" || name.value.is_empty() { "root".to_string() } else { name.value.clone() };
        let written = if self.sandboxed { format!("{}/{}", self.folder, host.trim_start_matches("./")) } else { host.clone() };
        if let Some(m) = hostdir::leaves_through_symlink(self.dir, &written, &host_path) {
            return Err(diag.at(host_loc, format!("zone '{zone}': {m}")));
        }
        // Checked here for the line and column; `Sandbox::new` checks again on the handle it
        // keeps, and refuses a directory that changed in between.
        let opened = rustix::fs::open(&host_path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| diag.at(host_loc, format!("cannot open the host directory '{}': {e}", host_path.display())))?;
        hostdir::check(&zone, opened.as_fd(), mode, &host_path).map_err(|e| diag.at(host_loc, e.to_string()))?;
        // A zone that is a home by where it is or by the start-up file at its top gets the
        // home entries now, so that `unprotect:` can turn one off (a deeper home is found by
        // the walk at launch: `plan::protected`).
        let mut protection = self.protection.clone();
        if crate::hostrun::home::at_top(opened.as_fd(), &host_path).is_some() {
            protection = crate::hostrun::home::widen(&protection).map_err(|m| diag.at(host_loc, m.to_string()))?;
        }
        // Each entry turned off must be one in force here, so that a typo protects nothing
        // silently less.
        for e in unprotect.unwrap_or_default() {
            protection = protection.without(std::slice::from_ref(&e.value)).map_err(|m| diag.spanned(e, format!("unprotect: {m}")))?;
        }
        for (other, loc) in self.mounts.iter().zip(&self.spans) {
            if host_path.starts_with(&other.host_path) || other.host_path.starts_with(&host_path) {
                return Err(diag.at(
                    host_loc,
                    format!(
                        "host directory of '{}' overlaps the one of '{}' (line {}); mounts must not share or nest host directories",
                        mount_point,
                        other.mount_point,
                        loc.line()
                    ),
                ));
            }
        }
        let mut seen = HashSet::new();
        let suffixes = suffixes.map(|s| s.iter().map(|x| normalise_suffix(x)).filter(|x| seen.insert(x.clone())).collect());
        self.spans.push(host_loc);
        self.mounts.push(Mount { name: name.value.clone(), host_path, mount_point, mode, suffixes, max_file_bytes, approval, delivery, protection });
        Ok(())
    }

    pub(super) fn finish(self) -> Result<Vec<Mount>, ConfigError> {
        Ok(self.mounts)
    }
}
