//! A plan for an engine that cannot see this host's files (`DOCKER_HOST=tcp://…`, or a local
//! engine in another mount namespace: `backend::docker::placement` decides). Nothing can be
//! bound there by path, so every zone is delivered as a copy (`delivery: copy`): taken here
//! with copy delivery's checked walk, shipped into an engine-side volume, and, for a writable
//! zone, brought back after the run through the same checker, review and publish.
//!
//! What cannot reach such an engine is refused with the way out: `image: host` (the host's
//! `/usr` is not there) and network rules (the egress proxy and the firewall that makes it
//! the only way out live on this host). The read-only binds a local run lays over a zone
//! become paths held back at publish: the project's control files by name
//! ([`CopyMount::withhold`]), the files the host runs by the zone's protection, as for any
//! copy.

use super::{control, zone_mounts_as, CopyMount, LaunchPlan, Network, PlanError};
use crate::config::ImageRef;
use crate::config::Project;
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
    pub fn ship(&mut self, project: &Project, sandbox: &Sandbox, engine: &str) -> Result<(), PlanError> {
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
        let kept: Vec<_> = zones.iter().map(|(m, _)| m.clone()).collect();
        // The refusals of a local run's writable zones hold here too (a zone holding the
        // project, inside its control files, a `build:` folder); the pins it makes are
        // not used: a copy cannot rename the host's directories.
        control::control_mounts(project, &kept)?;
        for (m, name) in &zones {
            if !self.copies.iter().any(|c| c.target == m.target) {
                self.copies.push(CopyMount { target: m.target.clone(), zone: name.clone(), writable: !m.read_only, withhold: Vec::new() });
            }
            if let Some(copy) = self.copies.iter_mut().find(|c| c.target == m.target && c.writable) {
                copy.withhold = control::control_names(project, m);
            }
        }
        self.mounts = kept;
        self.shipped = Some(engine);
        Ok(())
    }
}
