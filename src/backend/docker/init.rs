//! Which init a container runs as PID 1. For `image: host` that depends on the host (is
//! there a tini inside a system bind?), so it is decided here, with a look at the file
//! system, and handed to the pure [`render`](super::render::render).

use super::render::Init;
use crate::plan::LaunchPlan;

/// Where hosts keep tini, Docker's init: Debian/Ubuntu's docker.io, Docker's packages, tini.
const HOST_INIT_CANDIDATES: &[&str] = &[
    "/usr/bin/docker-init",
    "/usr/libexec/docker/docker-init",
    "/usr/local/bin/docker-init",
    "/usr/bin/tini-static",
    "/usr/bin/tini",
    "/usr/sbin/docker-init",
];

/// The init for `plan`: Docker's for named and built images; for `image: host`, a host tini
/// inside a system bind when there is one, else none. Reads the host file system.
pub fn choose_init(plan: &LaunchPlan) -> Init {
    if plan.image != crate::config::ImageRef::Host {
        return Init::Docker;
    }
    let bound = |p: &str| plan.system.iter().any(|e| matches!(e, crate::plan::SystemEntry::Bind { path } if std::path::Path::new(p).starts_with(path)));
    HOST_INIT_CANDIDATES
        .iter()
        .find(|c| bound(c) && std::fs::metadata(c).map(|m| m.is_file()).unwrap_or(false))
        .map(|c| Init::Program(c.to_string()))
        .unwrap_or(Init::None)
}
