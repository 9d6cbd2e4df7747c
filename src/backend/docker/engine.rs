//! Which engine serves the Docker API: Docker itself or Podman's compatible service. The two
//! differ in a few places that matter to a run, and [`adapt`] bends a rendered create body
//! for Podman (the render itself stays the one, engine-free policy).

use bollard::models::{ResourcesUlimits, SystemVersion};
use bollard::Docker;

use super::render::DockerSettings;

/// The engine behind the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Engine {
    Docker,
    /// Podman's Docker-compatible service (`podman system service`), with its version.
    Podman(String),
}

impl Engine {
    /// From the version endpoint: Podman names itself in `Components` ("Podman Engine");
    /// Docker's platform and components say Docker.
    pub fn from_version(v: &SystemVersion) -> Engine {
        let podman = v.components.iter().flatten().any(|c| c.name.to_ascii_lowercase().contains("podman"))
            || v.platform.as_ref().is_some_and(|p| p.name.to_ascii_lowercase().contains("podman"));
        if podman {
            Engine::Podman(v.version.clone().unwrap_or_default())
        } else {
            Engine::Docker
        }
    }

    /// Asks the daemon. An engine that does not answer the version call is taken for Docker:
    /// the run itself will then report what is wrong.
    pub async fn detect(docker: &Docker) -> Engine {
        match docker.version().await {
            Ok(v) => Engine::from_version(&v),
            Err(_) => Engine::Docker,
        }
    }

    pub fn is_podman(&self) -> bool {
        matches!(self, Engine::Podman(_))
    }

    /// "Docker" or "Podman", for messages.
    pub fn label(&self) -> &'static str {
        match self {
            Engine::Docker => "Docker",
            Engine::Podman(_) => "Podman",
        }
    }
}

/// Open-file and process limits as (soft, hard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimits {
    pub nofile: (u64, u64),
    pub nproc: (u64, u64),
}

impl HostLimits {
    /// workcell's own limits.
    pub fn current() -> HostLimits {
        use rustix::process::{getrlimit, Resource};
        let pair = |r: Resource| {
            let l = getrlimit(r);
            // None is "unlimited".
            let hard = l.maximum.unwrap_or(u64::MAX);
            (l.current.unwrap_or(hard).min(hard), hard)
        };
        HostLimits { nofile: pair(Resource::Nofile), nproc: pair(Resource::Nproc) }
    }

    /// The lower of each: a container started by the daemon cannot get more than the daemon
    /// has without CAP_SYS_RESOURCE, and the worker gets no more than workcell has.
    pub fn min(self, other: HostLimits) -> HostLimits {
        let m = |a: (u64, u64), b: (u64, u64)| {
            let hard = a.1.min(b.1);
            (a.0.min(b.0).min(hard), hard)
        };
        HostLimits { nofile: m(self.nofile, other.nofile), nproc: m(self.nproc, other.nproc) }
    }

    /// The limits of the process listening on the daemon's unix socket (its peer
    /// credentials name it), read from `/proc/PID/limits`; `None` for a remote daemon or one
    /// whose process we may not read.
    pub fn of_listener(address: &str) -> Option<HostLimits> {
        let path = address.strip_prefix("unix://")?;
        let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
        let pid = rustix::net::sockopt::socket_peercred(&stream).ok()?.pid.as_raw_nonzero().get();
        parse_proc_limits(&std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?)
    }

    /// The uid of the process listening on the daemon's unix socket.
    pub fn listener_uid(address: &str) -> Option<u32> {
        let path = address.strip_prefix("unix://")?;
        let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
        Some(rustix::net::sockopt::socket_peercred(&stream).ok()?.uid.as_raw())
    }

    /// What a Podman container can be given here: workcell's limits, lowered to the Podman
    /// service's when it runs on this host.
    pub fn for_daemon(address: &str) -> HostLimits {
        let own = HostLimits::current();
        HostLimits::of_listener(address).map_or(own, |d| own.min(d))
    }
}

/// Reads `Max open files` and `Max processes` from a `/proc/PID/limits` text.
fn parse_proc_limits(text: &str) -> Option<HostLimits> {
    let pair = |label: &str| -> Option<(u64, u64)> {
        let rest = text.lines().find_map(|l| l.strip_prefix(label))?;
        let mut fields = rest.split_whitespace();
        let value = |f: Option<&str>| match f? {
            "unlimited" => Some(u64::MAX),
            n => n.parse().ok(),
        };
        Some((value(fields.next())?, value(fields.next())?))
    };
    Some(HostLimits { nofile: pair("Max open files")?, nproc: pair("Max processes")? })
}

/// The scratch directory Podman adds to a read-only root beyond the plan's.
const PODMAN_VAR_TMP: &str = "/var/tmp";
/// Podman's tmpfs option for "start empty" (Docker refuses it, and needs it not).
const NO_COPY_UP: &str = "notmpcopyup";

/// Bends `settings` (rendered for Docker) for `engine`. For Docker it changes nothing.
///
/// Podman (rootful) sets a container's open-file and process limits to 1048576 unless the
/// request names them, and raising a hard limit needs CAP_SYS_RESOURCE, which a service
/// running in a restricted host (a container, a CI sandbox) lacks: the start fails with
/// "error setting rlimit type 7: operation not permitted". Docker leaves both as its daemon
/// has them. So for Podman the request names them ([`HostLimits::for_daemon`]): never more
/// than the service has, since lowering a limit needs no privilege.
pub fn adapt(settings: &mut DockerSettings, engine: &Engine, limits: HostLimits) {
    if !engine.is_podman() {
        return;
    }
    let Some(host) = settings.create.host_config.as_mut() else { return };
    let ulimit = |name: &str, (soft, hard): (u64, u64)| ResourcesUlimits {
        name: Some(name.to_string()),
        soft: Some(i64::try_from(soft).unwrap_or(i64::MAX)),
        hard: Some(i64::try_from(hard).unwrap_or(i64::MAX)),
    };
    // With a read-only root Podman mounts writable tmpfs on /run, /tmp and /var/tmp (its
    // `--read-only-tmpfs`, which the compatible API cannot turn off); Docker adds none. /tmp
    // and /run are the render's own (for every engine), but /var/tmp is open to every user:
    // a read-only one of our own takes its place, so the worker can write only where the
    // plan says.
    let tmpfs = host.tmpfs.get_or_insert_with(Default::default);
    let bound = |t: &str| host.mounts.iter().flatten().any(|m| m.target.as_deref() == Some(t));
    if !tmpfs.contains_key(PODMAN_VAR_TMP) && !bound(PODMAN_VAR_TMP) {
        tmpfs.insert(PODMAN_VAR_TMP.to_string(), "ro,nosuid,nodev,noexec,size=16k".to_string());
    }
    // Podman fills each tmpfs with what the image has at that path (`tmpcopyup`, its
    // default), and takes that directory's mode for the tmpfs' root: an image's 1777 /run
    // would override the render's 0755. Docker starts every tmpfs empty; so does Podman
    // when told.
    for options in tmpfs.values_mut() {
        if !options.split(',').any(|o| o == NO_COPY_UP) {
            options.push(',');
            options.push_str(NO_COPY_UP);
        }
    }
    let mut set = host.ulimits.take().unwrap_or_default();
    for (name, pair) in [("nofile", limits.nofile), ("nproc", limits.nproc)] {
        if !set.iter().any(|u| u.name.as_deref() == Some(name)) {
            set.push(ulimit(name, pair));
        }
    }
    host.ulimits = Some(set);
}

/// What a Podman service on another host is asked for: its own limits cannot be read from
/// here, and these are below what any service runs with (lowering needs no privilege).
pub const REMOTE_PODMAN_LIMITS: HostLimits = HostLimits { nofile: (1024, 4096), nproc: (4096, 4096) };

/// [`adapt`] with the limits of this daemon (read only for Podman).
pub fn adapt_for(settings: &mut DockerSettings, engine: &Engine) {
    if engine.is_podman() {
        let address = super::client().map(|(a, _)| a).unwrap_or_default();
        let limits = if address.starts_with("unix://") { HostLimits::for_daemon(&address) } else { REMOTE_PODMAN_LIMITS };
        adapt(settings, engine, limits);
    }
}

/// What `doctor` says about `engine` at `address` beyond "it answers": for Podman, a missing
/// init, the runtimes it lists without having them, and what a rootless service cannot do.
pub fn notes(engine: &Engine, address: &str) -> Vec<String> {
    let mut out = Vec::new();
    if !engine.is_podman() {
        return out;
    }
    out.push("Podman's Docker-compatible service: see docs/engines.md, \"Other engines: Podman\", for what differs".into());
    let local = address.starts_with("unix://");
    if local && podman_init_missing() {
        out.push(PODMAN_INIT_HINT.into());
    }
    out.push("Podman lists every runtime its containers.conf names, installed or not: a run naming one that is not installed fails at start".into());
    let rootless = local && HostLimits::listener_uid(address).is_some_and(|uid| uid != 0);
    if rootless {
        out.push("rootless Podman: proxied runs (egress rules) are refused, they need the host firewall (root); the worker's uid is one of the user's subordinate ids, so zones must be readable (rw zones writable) by it".into());
        if !std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            out.push("rootless Podman on cgroup v1 ignores memory, process and cpu limits: runs say so; use rootful Podman, Docker, or cgroup v2".into());
        }
    }
    out
}

/// The limits of a plan that the engine at `address` will not enforce: rootless Podman on
/// cgroup v1 ignores every resource limit, saying so only in its own log ("Resource limits
/// are not supported and ignored on cgroups V1 rootless systems"), not to the client.
pub fn unenforced(engine: &Engine, address: &str, limits: &crate::config::Limits) -> Vec<&'static str> {
    let cgroup_v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let rootless = || HostLimits::listener_uid(address).is_some_and(|uid| uid != 0);
    if !engine.is_podman() || cgroup_v2 || !rootless() {
        return Vec::new();
    }
    [(limits.memory_bytes.is_some(), "memory limit"), (limits.pids.is_some(), "process limit"), (limits.cpus.is_some(), "cpu limit")]
        .into_iter()
        .filter_map(|(set, what)| set.then_some(what))
        .collect()
}

/// What to do when Podman has no init to give a container.
pub const PODMAN_INIT_HINT: &str =
    "Podman runs named and built images with its init, catatonit, which is missing: install it (Debian/Ubuntu: `apt-get install catatonit`; Fedora: `dnf install catatonit`)";

/// Where Podman's packages put catatonit; Podman looks in the first unless containers.conf
/// says otherwise (`init_path`).
const PODMAN_INIT_PATHS: &[&str] = &["/usr/libexec/podman/catatonit", "/usr/lib/podman/catatonit", "/usr/local/libexec/podman/catatonit"];

/// Whether no catatonit is where Podman looks. Only meaningful when Podman runs on this host
/// (a local socket); a remote Podman's files are not ours to see.
pub fn podman_init_missing() -> bool {
    !PODMAN_INIT_PATHS.iter().any(|p| std::path::Path::new(p).exists())
}

#[cfg(test)]
mod tests {
    use bollard::models::SystemVersionComponents;

    use super::*;

    fn version(component: &str) -> SystemVersion {
        SystemVersion {
            version: Some("4.3.1".into()),
            components: Some(vec![SystemVersionComponents { name: component.into(), version: "4.3.1".into(), details: None }]),
            ..Default::default()
        }
    }

    #[test]
    fn podman_is_told_by_its_components() {
        assert_eq!(Engine::from_version(&version("Podman Engine")), Engine::Podman("4.3.1".into()));
        assert_eq!(Engine::from_version(&version("Engine")), Engine::Docker);
        assert_eq!(Engine::from_version(&SystemVersion::default()), Engine::Docker);
    }

    fn settings() -> DockerSettings {
        DockerSettings { name: "n".into(), create: bollard::models::ContainerCreateBody { host_config: Some(Default::default()), ..Default::default() } }
    }

    #[test]
    fn proc_limits_are_read() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \nMax processes             32768                32768                processes \nMax open files            1024                 unlimited            files     \n";
        let l = parse_proc_limits(text).unwrap();
        assert_eq!(l, HostLimits { nofile: (1024, u64::MAX), nproc: (32768, 32768) });
        let own = HostLimits { nofile: (20000, 20000), nproc: (96365, 96365) };
        assert_eq!(own.min(l), HostLimits { nofile: (1024, 20000), nproc: (32768, 32768) });
        assert!(parse_proc_limits("nothing").is_none());
    }

    #[test]
    fn podman_gets_the_hosts_limits_docker_nothing() {
        let limits = HostLimits { nofile: (1024, 20000), nproc: (u64::MAX, u64::MAX) };
        let mut d = settings();
        adapt(&mut d, &Engine::Docker, limits);
        assert_eq!(d, settings());
        let mut p = settings();
        adapt(&mut p, &Engine::Podman("4".into()), limits);
        let u = p.create.host_config.clone().and_then(|h| h.ulimits).unwrap_or_default();
        assert_eq!(u.len(), 2);
        assert_eq!((u[0].name.as_deref(), u[0].soft, u[0].hard), (Some("nofile"), Some(1024), Some(20000)));
        assert_eq!((u[1].name.as_deref(), u[1].soft, u[1].hard), (Some("nproc"), Some(i64::MAX), Some(i64::MAX)));
        let tmpfs = p.create.host_config.and_then(|h| h.tmpfs).unwrap_or_default();
        assert!(tmpfs.get("/var/tmp").is_some_and(|o| o.starts_with("ro,")), "{tmpfs:?}");
    }

    #[test]
    fn podmans_tmpfs_start_empty_once() {
        let limits = HostLimits { nofile: (1024, 1024), nproc: (64, 64) };
        let with_tmp = || {
            let mut s = settings();
            let tmpfs = [("/tmp".to_string(), "rw,noexec".to_string()), ("/run".to_string(), "ro,notmpcopyup".to_string())];
            if let Some(h) = s.create.host_config.as_mut() {
                h.tmpfs = Some(tmpfs.into());
            }
            s
        };
        let mut d = with_tmp();
        adapt(&mut d, &Engine::Docker, limits);
        assert_eq!(d, with_tmp(), "Docker refuses notmpcopyup");
        let mut p = with_tmp();
        adapt(&mut p, &Engine::Podman("4".into()), limits);
        let tmpfs = p.create.host_config.and_then(|h| h.tmpfs).unwrap_or_default();
        assert_eq!(tmpfs.get("/tmp").map(String::as_str), Some("rw,noexec,notmpcopyup"));
        assert_eq!(tmpfs.get("/run").map(String::as_str), Some("ro,notmpcopyup"));
        assert!(tmpfs.get("/var/tmp").is_some_and(|o| o.ends_with(",notmpcopyup")), "{tmpfs:?}");
    }
}
