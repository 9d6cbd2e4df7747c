//! The daemon's runtimes (`runc`, `runsc`, ...): listed by `doctor`, and asked before a run
//! that names one, so a missing runtime is refused with the steps that add it rather than
//! with the daemon's "unknown or invalid runtime name" after the container is half made.
//! `doctor` also reads how gVisor is registered: without `--host-uds=open` in its
//! `runtimeArgs`, gVisor refuses every connection to a host socket, and the worker's broker
//! is one (a run still starts, but its tools and child workers fail).

use std::collections::HashMap;

use bollard::models::Runtime;
use bollard::Docker;

use super::{api_message, DockerError};

/// What the daemon offers: its runtimes by name (sorted) and the one it uses by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Runtimes {
    pub names: Vec<String>,
    pub default: Option<String>,
    /// gVisor runtimes (sorted) whose `runtimeArgs` do not let a worker connect to a host
    /// socket (`--host-uds=open` or `all`): the broker is unreachable from workers under them.
    pub broker_unreachable: Vec<String>,
}

impl Runtimes {
    /// From `docker info`'s `Runtimes` (name → path and arguments) and `DefaultRuntime`.
    pub fn from_info(runtimes: HashMap<String, Runtime>, default: Option<String>) -> Runtimes {
        let mut names: Vec<String> = runtimes.keys().cloned().collect();
        names.sort();
        let mut broker_unreachable: Vec<String> =
            runtimes.iter().filter(|(name, r)| is_gvisor(name, r) && !opens_host_sockets(r)).map(|(n, _)| n.clone()).collect();
        broker_unreachable.sort();
        Runtimes { names, default, broker_unreachable }
    }
}

/// Asks the daemon (`GET /info`).
pub async fn list(docker: &Docker) -> Result<Runtimes, DockerError> {
    let info = docker.info().await.map_err(|e| DockerError::Api { what: "ask the daemon for its runtimes (`docker info`)".into(), source: e })?;
    Ok(Runtimes::from_info(info.runtimes.unwrap_or_default(), info.default_runtime))
}

/// gVisor, by its name or its binary's (`/usr/bin/runsc`, `runsc-debug`): a runtime
/// registered under another name runs the same `runsc`.
fn is_gvisor(name: &str, r: &Runtime) -> bool {
    let binary = r.path.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p));
    name.starts_with("runsc") || binary.is_some_and(|b| b.starts_with("runsc"))
}

/// Whether gVisor's arguments let the sandbox connect to host sockets: `--host-uds=open` or
/// `all` (runsc also takes one dash and a separate value), or the older boolean
/// `--fsgofer-host-uds`. `none` and `create` do not.
fn opens_host_sockets(r: &Runtime) -> bool {
    let args = r.runtime_args.as_deref().unwrap_or_default();
    args.iter().enumerate().any(|(i, arg)| {
        let flag = arg.trim_start_matches('-');
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (flag, None),
        };
        match name {
            "host-uds" => matches!(value.or(args.get(i + 1).map(String::as_str)), Some("open" | "all")),
            "fsgofer-host-uds" => !matches!(value, Some("false" | "0")),
            _ => false,
        }
    })
}

/// How to give gVisor runtime `name` `--host-uds=open`, for `doctor`.
pub fn host_uds_hint(name: &str) -> String {
    format!(
        "add \"--host-uds=open\" to \"runtimeArgs\" of \"{name}\" in the daemon's configuration (/etc/docker/daemon.json), \
         then reload the daemon (`systemctl reload docker`, or `kill -HUP $(pidof dockerd)`)"
    )
}

/// Whether the daemon has `wanted`; the error names what it has and how to add gVisor.
pub fn check(runtimes: &Runtimes, wanted: &str) -> Result<(), DockerError> {
    if runtimes.names.iter().any(|n| n == wanted) {
        return Ok(());
    }
    Err(DockerError::MissingRuntime { wanted: wanted.to_string(), available: runtimes.names.clone() })
}

/// Checks `wanted` against a fresh answer of the daemon (its configuration can change
/// between runs: a reload adds or removes runtimes).
pub fn require(wanted: &str) -> Result<(), DockerError> {
    check(&current()?, wanted)
}

/// The daemon's runtimes, asked now.
pub fn current() -> Result<Runtimes, DockerError> {
    let rt = super::runtime()?;
    let r = rt.block_on(async {
        let docker = super::connect().await?;
        list(&docker).await
    });
    rt.shutdown_background();
    r
}

/// How to install and register a runtime, for the error and for `doctor`. gVisor is the one
/// workcell documents; other runtimes are registered the same way.
pub fn install_hint(wanted: &str) -> String {
    let (install, args, note) = if wanted == "runsc" {
        (
            "install gVisor (Debian/Ubuntu: `apt-get install runsc`; elsewhere https://gvisor.dev/docs/user_guide/install/)",
            ", \"runtimeArgs\": [\"--host-uds=open\"]",
            " (--host-uds=open lets the worker reach workcell's broker socket; add \"--network=host\" where gVisor cannot set up its own network)",
        )
    } else {
        ("install it", "", "")
    };
    format!(
        "{install}, register it in the daemon's configuration (/etc/docker/daemon.json: \
         \"runtimes\": {{\"{wanted}\": {{\"path\": \"/usr/bin/{wanted}\"{args}}}}}){note}, then reload the daemon \
         (`systemctl reload docker`, or `kill -HUP $(pidof dockerd)`)"
    )
}

/// The daemon's message when `docker info` answered with an error (for `doctor`).
pub fn describe(e: &DockerError) -> String {
    match e {
        DockerError::Api { source, .. } => api_message(source),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docker info --format '{{json .Runtimes}}'` as a daemon answers it.
    fn parsed(json: &str) -> Runtimes {
        let runtimes: HashMap<String, Runtime> = serde_json::from_str(json).expect("docker info's runtimes");
        Runtimes::from_info(runtimes, Some("runc".into()))
    }

    #[test]
    fn gvisor_without_host_uds_open_is_named() {
        let r = parsed(
            r#"{"io.containerd.runc.v2":{"path":"runc"},"runc":{"path":"runc"},
                "runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--network=host"]},
                "gvisor":{"path":"/usr/local/bin/runsc"},
                "sealed":{"path":"/usr/bin/runsc","runtimeArgs":["--host-uds=create"]}}"#,
        );
        assert_eq!(r.names, ["gvisor", "io.containerd.runc.v2", "runc", "runsc", "sealed"]);
        assert_eq!(r.default.as_deref(), Some("runc"));
        assert_eq!(r.broker_unreachable, ["gvisor", "runsc", "sealed"]);
    }

    #[test]
    fn gvisor_with_host_uds_open_is_not() {
        for args in [r#"["--network=host", "--host-uds=open"]"#, r#"["-host-uds=all"]"#, r#"["--host-uds", "open"]"#, r#"["--fsgofer-host-uds"]"#] {
            let r = parsed(&format!(r#"{{"runc":{{"path":"runc"}},"runsc":{{"path":"/usr/bin/runsc","runtimeArgs":{args}}}}}"#));
            assert_eq!(r.broker_unreachable, Vec::<String>::new(), "{args}");
        }
        // Only gVisor is asked about host sockets: another runtime's arguments mean nothing here.
        let r = parsed(r#"{"kata":{"path":"/usr/bin/kata-runtime"},"crun":{"path":"crun","runtimeArgs":["--debug"]}}"#);
        assert_eq!(r.broker_unreachable, Vec::<String>::new());
    }

    #[test]
    fn the_hint_names_the_flag_and_the_file() {
        let h = host_uds_hint("runsc");
        assert!(h.contains("--host-uds=open") && h.contains("daemon.json") && h.contains("\"runsc\"") && h.contains("reload"), "{h}");
    }
}
