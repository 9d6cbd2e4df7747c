//! The pure half of the Docker backend: a [`LaunchPlan`] rendered as the Engine API's
//! container-create body. No I/O here, so the whole hardening policy is snapshot-tested
//! without a daemon.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountBindOptions, MountBindOptionsPropagationEnum, MountType};
use serde::Serialize;

use crate::plan::{LaunchPlan, Network};

/// Label every container and image workcell creates carries.
pub const LABEL_MANAGED: &str = "dev.workcell.managed";
/// The run a container belongs to.
pub const LABEL_RUN: &str = "dev.workcell.run";
/// The worker a container runs, when the run has one.
pub const LABEL_WORKER: &str = "dev.workcell.worker";
/// The project directory a container belongs to.
pub const LABEL_PROJECT: &str = "dev.workcell.project";

/// The run-time state directory; see [`RUN_TMPFS`].
pub const RUN_DIR: &str = "/run";
/// What `/run` is in every container: empty, read-only, root's, bounded. Read-only, not only
/// 0755: the runtime gives a tmpfs at an existing directory that directory's mode (an image's
/// 1777 `/run` stays 1777), so the mode alone would not keep the worker out.
pub const RUN_TMPFS: &str = "ro,nosuid,nodev,noexec,mode=0755,size=64k";
/// The size of `/dev/shm`, the same on every engine.
const SHM_BYTES: i64 = 64 << 20;

/// The labels of the container of `plan`.
pub fn labels(plan: &LaunchPlan) -> HashMap<String, String> {
    let mut labels = HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_RUN.to_string(), plan.run_id.clone()),
        (LABEL_PROJECT.to_string(), plan.project_dir.display().to_string()),
    ]);
    if let Some(w) = &plan.worker {
        labels.insert(LABEL_WORKER.to_string(), w.clone());
    }
    labels
}

/// The Docker settings of one run: the image reference and the create body sent to
/// `POST /containers/create`. Printed by `workcell plan` under the `docker` key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DockerSettings {
    /// Container name (`workcell-<run id>`), so `docker ps` shows whose container it is.
    pub name: String,
    /// The body of the create call.
    pub create: ContainerCreateBody,
}

/// Container name of a run.
pub fn container_name(plan: &LaunchPlan) -> String {
    format!("workcell-{}", plan.run_id)
}

/// The process that runs as PID 1 and starts the command: it reaps zombies, forwards
/// signals, and reports an unrunnable command as 126/127.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Init {
    /// Docker's own (`HostConfig.Init`), bound by the daemon at `/sbin/docker-init`.
    Docker,
    /// A host init program (tini) reachable through the system binds, used as entrypoint.
    /// Needed for `image: host`: with a merged `/usr`, the image's `/sbin` is a symlink into
    /// the read-only `/usr` bind, where Docker cannot place its init.
    Program(String),
    /// No init: the command itself is PID 1.
    None,
}

/// Renders `plan` for Docker, with `image` the resolved local image reference (for
/// `image: host`, the content-addressed base image tag; see [`super::image`]) and `init`
/// chosen by the caller ([`super::choose_init`] reads the host for it).
///
/// Hardening is not optional here: every run drops all capabilities, sets
/// `no-new-privileges`, has a read-only root and `/run`, a private `noexec` `/tmp`, an IPC
/// namespace of its own, process/memory limits and an init process, and has no network
/// unless the plan allows it (a proxied plan's network is
/// completed by the runner: the proxy's address is known only once the network exists).
pub fn render(plan: &LaunchPlan, image: &str, init: &Init) -> DockerSettings {
    let mut mounts = Vec::new();
    for entry in &plan.system {
        // Symlinks live in the base image itself; only binds are mounts.
        if let crate::plan::SystemEntry::Bind { path } = entry {
            mounts.push(bind(path, path, true));
        }
    }
    for m in &plan.mounts {
        mounts.push(bind(&m.source.to_string_lossy(), &m.target, m.read_only));
    }

    let mut tmpfs: HashMap<String, String> = plan
        .tmpfs
        .iter()
        // mode=1777: every uid may create files, as on a normal /tmp; nosuid/nodev because
        // nothing in a scratch area needs set-id binaries or device nodes; noexec named
        // because Docker adds it to a tmpfs unless told otherwise and Podman does not: the
        // scratch area is data on both engines.
        .map(|t| (t.target.clone(), format!("rw,nosuid,nodev,noexec,size={},mode=1777", t.size_bytes)))
        .collect();
    // /run is a read-only empty tmpfs of its own on every engine: Docker leaves
    // the image's /run on the read-only root, but Podman mounts a writable tmpfs there (its
    // `--read-only-tmpfs`, which the compatible API cannot turn off), world-writable and
    // unbounded when the image has no /run. The binds beneath it (the broker's directory,
    // the agent) are made by the runtime before the read-only remount.
    let bound = |target: &str| mounts.iter().any(|m| m.target.as_deref() == Some(target));
    if !tmpfs.contains_key(RUN_DIR) && !bound(RUN_DIR) {
        tmpfs.insert(RUN_DIR.to_string(), RUN_TMPFS.to_string());
    }

    let memory = plan.limits.memory_bytes.and_then(|m| i64::try_from(m).ok());
    let host_config = HostConfig {
        mounts: Some(mounts),
        tmpfs: Some(tmpfs),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(true),
        // Its own IPC namespace that no other container may join. Docker's default depends
        // on the daemon's `default-ipc-mode` (older daemons: shareable), Podman's is
        // shareable; a joined namespace would share the worker's SysV objects and /dev/shm.
        ipc_mode: Some("private".into()),
        // /dev/shm's size named: Docker gives 64 MiB, Podman 62.5 (65536000 bytes).
        shm_size: Some(SHM_BYTES),
        init: Some(*init == Init::Docker),
        // Proxied: the run's own internal network, made by the runner under the container's
        // name ([`super::network`]), and a DNS server where nothing answers.
        network_mode: Some(match plan.network {
            Network::Open => "bridge".into(),
            Network::Off => "none".into(),
            Network::Proxied => container_name(plan),
        }),
        // The worker's own name on loopback without a network (Docker adds it with one).
        extra_hosts: (plan.network == Network::Off).then(|| vec![format!("{}:127.0.0.1", crate::plan::WORKER_HOSTNAME)]),
        dns: (plan.network == Network::Proxied).then(|| vec![super::network::NOWHERE_DNS.to_string()]),
        pids_limit: plan.limits.pids,
        memory,
        // Swap equal to memory means "no swap on top": the limit is the limit.
        memory_swap: memory,
        nano_cpus: plan.limits.cpus.map(|c| (c * 1e9).round() as i64),
        privileged: Some(false),
        // Another OCI runtime (gVisor's runsc) in place of the daemon's default; the daemon
        // was asked for it before the run (`runtimes::require`).
        runtime: plan.runtime.clone(),
        ..Default::default()
    };

    let mut env: Vec<String> = plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    env.sort();
    let create = ContainerCreateBody {
        image: Some(image.to_string()),
        cmd: Some(plan.command.clone()),
        entrypoint: match init {
            Init::Program(p) => Some(vec![p.clone(), "--".into()]),
            _ => None,
        },
        env: Some(env),
        user: Some(format!("{}:{}", plan.user.uid, plan.user.gid)),
        working_dir: Some(plan.workdir.clone()),
        hostname: Some(crate::plan::WORKER_HOSTNAME.into()),
        labels: Some(labels(plan)),
        tty: Some(plan.tty),
        attach_stdin: Some(plan.interactive || plan.stdin.is_some()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(plan.interactive || plan.stdin.is_some()),
        // The container's stdin closes when workcell's does (or when the given input has
        // been written), as with `docker run -i`.
        stdin_once: Some(plan.interactive || plan.stdin.is_some()),
        // Not `network_disabled`: with it Docker writes an empty `/etc/hosts`. `network_mode:
        // none` alone gives the worker loopback only, and a hosts file with `localhost`.
        network_disabled: Some(false),
        host_config: Some(host_config),
        ..Default::default()
    };
    DockerSettings { name: container_name(plan), create }
}

fn bind(source: &str, target: &str, read_only: bool) -> Mount {
    Mount {
        typ: Some(MountType::BIND),
        source: Some(source.to_string()),
        target: Some(target.to_string()),
        read_only: Some(read_only),
        // rprivate: mounts made later on the host under a zone do not appear inside.
        bind_options: Some(MountBindOptions { propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE), ..Default::default() }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;
    use crate::config::{ImageRef, Limits};
    use crate::plan::{PlanMount, SystemEntry, TmpfsMount, UserSpec};

    fn plan(network: bool) -> LaunchPlan {
        let mut env = BTreeMap::new();
        env.insert("PATH".into(), crate::plan::WORKER_PATH.into());
        env.insert("WORKCELL_ZONES".into(), "/in:ro,/out:rw".into());
        LaunchPlan {
            run_id: "0123456789abcdef".into(),
            worker: Some("w".into()),
            image: ImageRef::Host,
            system: vec![
                SystemEntry::Bind { path: "/usr".into() },
                SystemEntry::Symlink { path: "/bin".into(), target: "usr/bin".into() },
                SystemEntry::Bind { path: "/etc/ssl".into() },
            ],
            mounts: vec![
                PlanMount { source: PathBuf::from("/home/u/p/in"), target: "/in".into(), read_only: true, held: None },
                PlanMount { source: PathBuf::from("/home/u/p/out"), target: "/out".into(), read_only: false, held: None },
            ],
            tmpfs: vec![TmpfsMount { target: "/tmp".into(), size_bytes: 256 << 20 }],
            network: if network { crate::plan::Network::Open } else { crate::plan::Network::Off },
            egress: None,
            env,
            user: UserSpec { uid: 1000, gid: 1000 },
            workdir: "/out".into(),
            command: vec!["sh".into(), "-c".into(), "ls /in".into()],
            limits: Limits { timeout: None, memory_bytes: Some(64 << 20), cpus: Some(1.5), pids: Some(64) },
            project_dir: PathBuf::from("/home/u/p"),
            interactive: false,
            tty: false,
            runtime: None,
            copies: Vec::new(),
            protected: Vec::new(),
            stdin: None,
            shipped: None,
        }
    }

    #[test]
    fn hardened_defaults_network_off() {
        // Labels and tmpfs are hash maps: sort them so the snapshot is stable.
        insta::with_settings!({ sort_maps => true }, {
            insta::assert_json_snapshot!(render(&plan(false), "workcell-host:abc", &Init::Program("/usr/bin/docker-init".into())));
        });
    }

    #[test]
    fn runtime_runsc() {
        let mut p = plan(false);
        p.runtime = Some("runsc".into());
        insta::with_settings!({ sort_maps => true }, {
            insta::assert_json_snapshot!(render(&p, "workcell-host:abc", &Init::Program("/usr/bin/docker-init".into())));
        });
    }

    #[test]
    fn no_runtime_means_the_daemons_default() {
        let hc = render(&plan(false), "img", &Init::Docker).create.host_config.unwrap_or_default();
        assert_eq!(hc.runtime, None);
    }

    #[test]
    fn network_on_uses_bridge() {
        let s = render(&plan(true), "img", &Init::Docker);
        let hc = s.create.host_config.unwrap_or_default();
        assert_eq!(hc.network_mode.as_deref(), Some("bridge"));
        assert_eq!(s.create.network_disabled, Some(false));
    }

    #[test]
    fn proxied_joins_the_runs_network_without_dns() {
        let mut p = plan(false);
        p.network = crate::plan::Network::Proxied;
        let s = render(&p, "img", &Init::Docker);
        let hc = s.create.host_config.unwrap_or_default();
        assert_eq!(hc.network_mode.as_deref(), Some("workcell-0123456789abcdef"));
        assert_eq!(hc.network_mode, Some(s.name));
        assert_eq!(hc.dns, Some(vec!["127.0.0.1".to_string()]));
        assert_eq!(s.create.network_disabled, Some(false));
    }

    #[test]
    fn interactive_tty_attach_stdin() {
        let mut p = plan(false);
        p.interactive = true;
        p.tty = true;
        let s = render(&p, "img", &Init::Docker);
        assert_eq!(s.create.open_stdin, Some(true));
        assert_eq!(s.create.stdin_once, Some(true));
        assert_eq!(s.create.tty, Some(true));
    }

    #[test]
    fn no_limits_means_unset() {
        let mut p = plan(false);
        p.limits = Limits::default();
        let hc = render(&p, "img", &Init::Docker).create.host_config.unwrap_or_default();
        assert_eq!(hc.memory, None);
        assert_eq!(hc.memory_swap, None);
        assert_eq!(hc.nano_cpus, None);
        assert_eq!(hc.pids_limit, None);
    }
}
