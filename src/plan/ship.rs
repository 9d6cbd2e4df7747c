//! A plan for an engine that cannot see this host's files (`DOCKER_HOST=tcp://…`, or a local
//! engine in another mount namespace: `backend::docker::placement` decides). Nothing can be
//! bound there by path, so every zone is delivered as a copy (`delivery: copy`): taken here
//! with copy delivery's checked walk, shipped into an engine-side volume, and, for a writable
//! zone, brought back after the run through the same checker, review and publish.
//!
//! What cannot reach such an engine is refused with the way out: `image: host` (the host's
//! `/usr` is not there) and network rules (the egress proxy and the firewall that makes it
//! the only way out live on this host). The read-only binds a local run lays over a zone
//! (the project's control files, the files the host runs) become paths held back at publish.

use std::path::Path;

use super::{zone_mounts_as, CopyMount, LaunchPlan, Network, PlanError};
use crate::config::ImageRef;
use crate::sandbox::Sandbox;

/// Why a plan cannot run on a remote engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteRefusal {
    #[error(
        "`image: host` needs the engine on this host, but {engine}: name an image instead (`image:` in the worker, `defaults.image`, or `--image`), or use an engine on this host (unset DOCKER_HOST) or `--backend bwrap`"
    )]
    HostImage { engine: String },
    #[error(
        "network rules (`network: {{allow: …}}`) need the engine on this host (the egress proxy and the firewall rules that make it the only way out live here), but {engine}: use `network: false` or `true` for this worker, or an engine on this host"
    )]
    Egress { engine: String },
    #[error("{what} needs the engine on this host, but {engine}: use an engine on this host (unset DOCKER_HOST) or `--backend bwrap`")]
    Service { what: &'static str, engine: String },
}

impl LaunchPlan {
    /// Makes this plan one for the remote engine described by `engine` ("the engine at
    /// tcp://… is on another host"): every zone a copy, shipped; the binds laid over zones
    /// held back at publish instead.
    pub fn ship(&mut self, sandbox: &Sandbox, engine: &str) -> Result<(), PlanError> {
        let engine = engine.to_string();
        if self.image == ImageRef::Host {
            return Err(RemoteRefusal::HostImage { engine }.into());
        }
        if self.network == Network::Proxied {
            return Err(RemoteRefusal::Egress { engine }.into());
        }
        // Writable wherever the zone is: a copy's changes are approved before they are
        // published, not refused while the worker makes them.
        let zones = zone_mounts_as(sandbox, true);
        let is_zone = |target: &str| zones.iter().any(|(z, _)| z.target == target);
        let laid_over: Vec<_> = std::mem::take(&mut self.mounts).into_iter().filter(|m| !is_zone(&m.target)).collect();
        let kept: Vec<_> = zones.iter().map(|(m, _)| m.clone()).collect();
        for (m, name) in &zones {
            if !self.copies.iter().any(|c| c.target == m.target) {
                self.copies.push(CopyMount { target: m.target.clone(), zone: name.clone(), writable: !m.read_only, withhold: Vec::new() });
            }
        }
        // Only the read-only binds: the others are pins (directories bound onto themselves so
        // that they cannot be renamed), which a copy does not need.
        for over in laid_over.into_iter().filter(|m| m.read_only) {
            // The innermost zone holding it: its copy carries the file, its publish holds it back.
            let holder = self.copies.iter_mut().filter(|c| c.writable && Path::new(&over.target).starts_with(&c.target)).max_by_key(|c| c.target.len());
            let Some(copy) = holder else { continue };
            if let Ok(rel) = Path::new(&over.target).strip_prefix(&copy.target) {
                copy.withhold.push(rel.to_string_lossy().into_owned());
            }
        }
        self.mounts = kept;
        self.shipped = Some(engine);
        Ok(())
    }
}
