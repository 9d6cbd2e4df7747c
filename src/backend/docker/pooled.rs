//! The Docker side of the pool ([`crate::pool`]): a container started ahead of its run,
//! left running without a watchdog until a run claims it (its entry in the pool directory
//! is what keeps track of it; the claiming run starts one), removed by the daemon itself
//! when its first process ends (`AutoRemove`).

use bollard::query_parameters::{CreateContainerOptions, InspectContainerOptions};

use super::render::Init;
use super::{connect, image, render, runtime, DockerError};
use crate::backend::BackendError;
use crate::plan::LaunchPlan;

/// The label of a pooled container: its entry directory (`crate::pool` re-exports it).
pub const LABEL_POOL: &str = "dev.workcell.pool";

/// Creates and starts the container of `plan` under `name`, labelled with its entry
/// (`entry`), and returns once it runs. Its zones are bound by handle, as for a run.
pub fn start(plan: &LaunchPlan, name: &str, entry: &str) -> Result<(), BackendError> {
    let rt = runtime()?;
    let r = rt.block_on(async {
        let (docker, engine) = super::connect_engine().await?;
        let image = image::ensure(&docker, plan).await?;
        let (staged, staging) = super::staging::stage(plan)?;
        // The agent itself is the container's first process, not under an init: the kernel
        // keeps every signal of the worker's (same uid) from a pid namespace's first process,
        // so the worker can neither kill nor stop it — as in a cold run, where that is the
        // init. A killed agent would end the run early; a stopped one would no longer end
        // the worker when workcell goes.
        let mut settings = render::render(&staged, &image, &Init::None);
        super::engine::adapt_for(&mut settings, &engine);
        if let Some(labels) = settings.create.labels.as_mut() {
            labels.insert(LABEL_POOL.into(), entry.to_string());
        }
        if let Some(host) = settings.create.host_config.as_mut() {
            // Gone with its first process: at the end of the run that claims it, or when that
            // run's workcell dies (the agent then ends everything it started, and itself; the
            // run's watchdog removes the container too).
            host.auto_remove = Some(true);
            // The agent's tasks in place of a cold run's init (one, when it has one): the
            // worker's commands get exactly the limit they would get cold.
            let cold_init = i64::from(super::choose_init(plan) != Init::None);
            host.pids_limit = host.pids_limit.map(|p| p.saturating_add(crate::plan::AGENT_STDIO_TASKS - cold_init));
        }
        let options = CreateContainerOptions { name: Some(name.to_string()), ..Default::default() };
        let slot = super::slots::acquire().await;
        docker.create_container(Some(options), settings.create).await.map_err(|e| DockerError::Api { what: format!("create container {name}"), source: e })?;
        let started = docker.start_container(name, None::<bollard::query_parameters::StartContainerOptions>).await;
        drop(slot);
        if let Some(s) = staging {
            s.release();
        }
        if let Err(e) = started {
            super::container::remove(&docker, name).await;
            return Err(DockerError::Api { what: format!("start container {name}"), source: e });
        }
        Ok(())
    });
    rt.shutdown_background();
    Ok(r?)
}

/// Force-removes a pooled container (gone already counts as removed).
pub fn remove(name: &str) -> Result<(), BackendError> {
    use bollard::query_parameters::RemoveContainerOptions;
    let rt = runtime()?;
    let r = rt.block_on(async {
        let docker = connect().await?;
        let _slot = super::slots::acquire().await;
        match docker.remove_container(name, Some(RemoveContainerOptions { force: true, v: true, ..Default::default() })).await {
            Ok(()) | Err(bollard::errors::Error::DockerResponseServerError { status_code: 404 | 409, .. }) => Ok(()),
            Err(e) => Err(DockerError::Api { what: format!("remove container {name}"), source: e }),
        }
    });
    rt.shutdown_background();
    Ok(r?)
}

/// The pooled containers that exist (any state): their names and entries.
pub fn running() -> Result<Vec<(String, String)>, BackendError> {
    let rt = runtime()?;
    let r = rt.block_on(async {
        let docker = connect().await?;
        let list = super::listing::containers(&docker, vec![LABEL_POOL.to_string()]).await?;
        Ok::<_, DockerError>(list.into_iter().filter_map(|c| Some((c.name, c.labels.get(LABEL_POOL)?.clone()))).collect())
    });
    rt.shutdown_background();
    Ok(r?)
}

/// The host pid of a running container's first process.
pub fn main_pid(name: &str) -> Option<u32> {
    let rt = runtime().ok()?;
    let pid = rt.block_on(async {
        let docker = connect().await.ok()?;
        let c = docker.inspect_container(name, None::<InspectContainerOptions>).await.ok()?;
        c.state?.pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0)
    });
    rt.shutdown_background();
    pid
}

/// Whether the kernel's OOM killer struck in the container (the daemon's record).
pub fn oom_killed(name: &str) -> bool {
    let Ok(rt) = runtime() else { return false };
    let oom = rt.block_on(async {
        let Ok(docker) = connect().await else { return false };
        let c = docker.inspect_container(name, None::<InspectContainerOptions>).await.ok();
        c.and_then(|c| c.state).and_then(|s| s.oom_killed) == Some(true)
    });
    rt.shutdown_background();
    oom
}
