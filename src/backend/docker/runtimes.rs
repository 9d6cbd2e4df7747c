//! The daemon's runtimes (`runc`, `runsc`, ...): listed by `doctor`, and asked before a run
//! that names one, so a missing runtime is refused with the steps that add it rather than
//! with the daemon's "unknown or invalid runtime name" after the container is half made.

use bollard::Docker;

use super::{api_message, DockerError};

/// What the daemon offers: its runtimes by name (sorted) and the one it uses by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Runtimes {
    pub names: Vec<String>,
    pub default: Option<String>,
}

/// Asks the daemon (`GET /info`).
pub async fn list(docker: &Docker) -> Result<Runtimes, DockerError> {
    let info = docker.info().await.map_err(|e| DockerError::Api { what: "ask the daemon for its runtimes (`docker info`)".into(), source: e })?;
    let mut names: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
    names.sort();
    Ok(Runtimes { names, default: info.default_runtime })
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
    let rt = super::runtime()?;
    let r = rt.block_on(async {
        let docker = super::connect().await?;
        check(&list(&docker).await?, wanted)
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
         (`systemctl reload docker`, or `kill -HUP $(pidof dockerd)`) and check with `workcell doctor`"
    )
}

/// The daemon's message when `docker info` answered with an error (for `doctor`).
pub fn describe(e: &DockerError) -> String {
    match e {
        DockerError::Api { source, .. } => api_message(source),
        other => other.to_string(),
    }
}
