//! Child sandboxes: `derive()` (allowlists) and zone declarations (`zones:`). Both only ever
//! shrink the parent's areas; asking for more is an [`SandboxError::Escalation`].

use std::sync::Arc;

use super::error::show;
use super::grant::Pending;
use super::path::VirtualPath;
use super::{Addressing, Area, AreaKey, PathList, Sandbox, SandboxError, ZoneMode};

/// What an allowlist entry grants: an area that exists, or a directory to create at launch.
enum Grant {
    Area(AreaKey, Arc<cap_std::fs::Dir>),
    Pending(Pending),
}

/// The existing areas and the pending ones of a list of grants.
fn split(grants: Vec<Grant>) -> (Vec<(AreaKey, Arc<cap_std::fs::Dir>)>, Vec<Pending>) {
    let mut areas = Vec::new();
    let mut pending = Vec::new();
    for g in grants {
        match g {
            Grant::Area(k, d) => areas.push((k, d)),
            Grant::Pending(p) => pending.push(p),
        }
    }
    (areas, pending)
}

/// Arguments of [`Sandbox::derive`], named as a worker file writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeriveSpec {
    /// Start from the parent's full access (true) or from nothing (false, the default).
    pub inherit: bool,
    /// Sandbox paths the child may read; `None` = no further restriction.
    pub allow_read: Option<Vec<String>>,
    /// Sandbox paths the child may write; `None` = none when `allow_read` is given.
    pub allow_write: Option<Vec<String>>,
    /// `Some(true)` forbids every write; `Some(false)` requires the parent to have writes.
    pub readonly: Option<bool>,
}

/// One zone a worker declares it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneRequest {
    pub name: String,
    pub mode: ZoneMode,
}

impl Sandbox {
    fn escalation(&self, requested: String, reason: String) -> SandboxError {
        SandboxError::Escalation { requested, reason, parent_readable: PathList(self.readable_roots()), parent_writable: PathList(self.writable_roots()) }
    }

    /// Resolves an allowlist entry to an area key inside the parent: the entry must be
    /// readable (and, for writes, writable) in the parent; a file stands for its directory;
    /// a directory that does not exist yet is granted pending when the parent could create
    /// it (see `grant`).
    fn allow_entry(&self, entry: &str, write: bool) -> Result<Grant, SandboxError> {
        let what = if write { "allow_write" } else { "allow_read" };
        // Messages show the entry with control characters escaped; parsing uses it as is.
        let shown = show(entry);
        // An entry that leads outside through a symlink asks for more than the parent
        // has: the same refusal as any other entry outside it.
        let escape_as_escalation = |e: SandboxError| match e {
            SandboxError::OutsideSandbox { .. } => {
                self.escalation(format!("{what}='{shown}'"), format!("'{shown}' leads outside the parent sandbox through a symlink"))
            }
            e => e,
        };
        if self.addressing() == Addressing::Root && !entry.starts_with('/') {
            return Err(self.escalation(format!("{what}='{shown}'"), "in a root sandbox allowlist entries must be sandbox-absolute, like '/src'".into()));
        }
        if entry.replace('\\', "/").split('/').any(|c| c == "..") {
            return Err(self.escalation(format!("{what}='{shown}'"), "allowlist entries may not contain '..'".into()));
        }
        // A bare zone name means the whole zone.
        let vp = match self.parse(entry) {
            Ok(vp) => vp,
            Err(SandboxError::OutsideSandbox { .. }) | Err(SandboxError::InvalidPath { .. }) => {
                return Err(self.escalation(format!("{what}='{shown}'"), format!("'{shown}' is not inside the parent sandbox")))
            }
            Err(e) => return Err(e),
        };
        let areas = if write { &self.writable } else { &self.readable };
        let Some(area) = areas.iter().filter(|a| a.key.contains(&AreaKey { mount: vp.mount, prefix: vp.rel.clone() })).max_by_key(|a| a.key.prefix.len())
        else {
            let reason = if write && self.readable.iter().any(|a| a.key.contains(&AreaKey { mount: vp.mount, prefix: vp.rel.clone() })) {
                format!("'{shown}' is read-only in the parent sandbox")
            } else {
                format!("'{shown}' is not inside the parent sandbox")
            };
            return Err(self.escalation(format!("{what}='{shown}'"), reason));
        };
        let mut rel = vp.rel[area.key.prefix.len()..].to_vec();
        // A file entry stands for its parent directory.
        let is_dir = |rel: &[String]| match area.dir.metadata(super::io::rel_path(rel)) {
            Ok(m) => Ok(m.is_dir()),
            Err(e) => Err(e),
        };
        match is_dir(&rel) {
            Ok(true) => {}
            Ok(false) => {
                rel.pop();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let full = AreaKey { mount: vp.mount, prefix: vp.rel.clone() };
                let Some(parent) = self.writable.iter().filter(|a| a.key.contains(&full)).max_by_key(|a| a.key.prefix.len()) else {
                    return Err(SandboxError::NotFound {
                        path: shown,
                        hint: format!(
                            " A directory that does not exist yet can be granted only where the parent sandbox can write (it is then created at launch). Parent can write: {}.",
                            self.writable_list()
                        ),
                    });
                };
                return match self.pending_grant(parent, &vp.rel[parent.key.prefix.len()..], write) {
                    Some(p) => Ok(Grant::Pending(p)),
                    None => Err(escape_as_escalation(self.io_error("derive", entry, &e))),
                };
            }
            Err(e) => return Err(escape_as_escalation(self.io_error("derive", entry, &e))),
        }
        let dir = if rel.is_empty() {
            area.dir.clone()
        } else {
            Arc::new(area.dir.open_dir(super::io::rel_path(&rel)).map_err(|e| escape_as_escalation(self.io_error("derive", entry, &e)))?)
        };
        let mut prefix = area.key.prefix.clone();
        prefix.extend(rel);
        Ok(Grant::Area(AreaKey { mount: vp.mount, prefix }, dir))
    }

    /// Derives a child sandbox that can see at most what this one can.
    ///
    /// Child readable = parent readable ∩ allow_read (or everything/nothing per `inherit`),
    /// child writable = parent writable ∩ allow_write; write implies read. Entries outside
    /// the parent's bounds are escalations, not silent no-ops.
    pub fn derive(&self, spec: &DeriveSpec) -> Result<Sandbox, SandboxError> {
        let mut allow_read = spec.allow_read.clone();
        let mut allow_write = spec.allow_write.clone();
        if allow_read.is_none() && allow_write.is_some() {
            allow_read = allow_write.clone();
        }
        if allow_read.is_some() && allow_write.is_none() {
            allow_write = Some(Vec::new());
        }
        if spec.readonly == Some(false) && self.writable.is_empty() {
            return Err(self.escalation("readonly=false".into(), "parent sandbox is readonly".into()));
        }

        // Writes first: an entry of allow_write (also read) is refused under its own name.
        let write_grants = allow_write.as_ref().map(|list| list.iter().map(|e| self.allow_entry(e, true)).collect::<Result<Vec<_>, _>>()).transpose()?;
        let read_grants = allow_read.as_ref().map(|list| list.iter().map(|e| self.allow_entry(e, false)).collect::<Result<Vec<_>, _>>()).transpose()?;
        let (read_grants, mut pending) = match read_grants.map(split) {
            Some((areas, pending)) => (Some(areas), pending),
            None => (None, Vec::new()),
        };
        let (write_grants, write_pending) = match write_grants.map(split) {
            Some((areas, pending)) => (Some(areas), pending),
            None => (None, Vec::new()),
        };

        let mut readable = match read_grants {
            Some(grants) => intersect(&self.readable, grants),
            None if spec.inherit => self.readable.clone(),
            None => Vec::new(),
        };
        let mut writable = match write_grants {
            Some(grants) => intersect(&self.writable, grants),
            None if spec.inherit => self.writable.clone(),
            None => Vec::new(),
        };
        if spec.readonly == Some(true) {
            writable.clear();
        } else {
            pending.extend(write_pending);
        }
        // Write implies read.
        readable.extend(writable.iter().cloned());
        // A pending grant inside an area the child already has adds nothing.
        pending.retain(|p| !(if p.write { &writable } else { &readable }).iter().any(|a| a.key.contains(&p.key)));
        let created: Vec<AreaKey> = pending.iter().filter(|p| p.write).map(|p| p.key.clone()).collect();
        pending.retain(|p| p.write || !created.iter().any(|k| k.contains(&p.key)));
        let mut child = self.with_areas(readable, writable);
        child.pending = pending;
        Ok(child)
    }

    /// A sandbox over the same mounts with these areas (duplicates and covered ones dropped).
    fn with_areas(&self, readable: Vec<Area>, writable: Vec<Area>) -> Sandbox {
        Sandbox {
            mounts: self.mounts.clone(),
            addressing: self.addressing,
            readable: minimise(readable),
            writable: minimise(writable),
            network: self.network.clone(),
            protected: self.protected.clone(),
            pending: Vec::new(),
            hostfiles: self.hostfiles.clone(),
            hostrun: self.hostrun.clone(),
            identity: self.identity,
            copied: self.copied.clone(),
        }
    }

    /// Derives a child from zone declarations: only the declared zones, at most
    /// the parent's mode in each. `rw` over a parent's `ro` is an error.
    pub fn derive_zones(&self, requests: &[ZoneRequest]) -> Result<Sandbox, SandboxError> {
        let mut readable = Vec::new();
        let mut writable = Vec::new();
        for req in requests {
            let Some(mount) = self.mounts().iter().position(|m| m.name == req.name) else {
                return Err(self.escalation(format!("zone '{}'", req.name), format!("the parent has no zone named '{}'", req.name)));
            };
            let in_zone = |areas: &[Area]| areas.iter().filter(|a| a.key.mount == mount).cloned().collect::<Vec<_>>();
            let r = in_zone(&self.readable);
            if r.is_empty() {
                return Err(self.escalation(format!("zone '{}' ({})", req.name, req.mode), format!("the parent has no access to zone '{}'", req.name)));
            }
            if req.mode == ZoneMode::Rw {
                let w = in_zone(&self.writable);
                if w.is_empty() {
                    return Err(self
                        .escalation(format!("zone '{}' (rw)", req.name), format!("child requests 'rw' on zone '{}' but the parent only has 'ro'", req.name)));
                }
                writable.extend(w);
            }
            readable.extend(r);
        }
        Ok(self.with_areas(readable, writable))
    }

    /// True when every area of `self` lies inside an area of `parent` (readable and
    /// writable separately): the invariant every derive keeps.
    pub fn is_within(&self, parent: &Sandbox) -> bool {
        let inside = |mine: &[Area], theirs: &[Area]| mine.iter().all(|a| theirs.iter().any(|p| p.key.contains(&a.key)));
        inside(&self.readable, &parent.readable) && inside(&self.writable, &parent.writable)
    }

    /// The parsed form of a path, for callers that compare paths (delegation, tests).
    pub fn parse_for_compare(&self, path: &str) -> Result<VirtualPath, SandboxError> {
        self.parse(path)
    }
}

/// Parent areas ∩ granted areas: for each pair, the narrower one when nested.
fn intersect(parent: &[Area], grants: Vec<(AreaKey, Arc<cap_std::fs::Dir>)>) -> Vec<Area> {
    let mut out = Vec::new();
    for (key, dir) in grants {
        for p in parent {
            if p.key.contains(&key) {
                out.push(Area { key: key.clone(), dir: dir.clone() });
            } else if key.contains(&p.key) {
                out.push(p.clone());
            }
        }
    }
    out
}

/// Drops duplicates and areas already covered by a wider one.
pub(super) fn minimise(mut areas: Vec<Area>) -> Vec<Area> {
    areas.sort_by(|a, b| a.key.cmp(&b.key));
    let mut out: Vec<Area> = Vec::new();
    for a in areas {
        if !out.iter().any(|o| o.key.contains(&a.key)) {
            out.push(a);
        }
    }
    out
}
