//! Benchmark baseline: the bare Engine API calls of one run — create, start, wait, remove
//! — with a create body taken from `workcell plan --json` (its `docker.create` key), so the
//! container is configured exactly as workcell configures it. No attach, no image check.
//!
//! Usage: `raw_api PLAN.json`

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions, WaitContainerOptions};
use bollard::Docker;
use futures_util::StreamExt;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).ok_or("usage: raw_api PLAN.json")?;
    let plan: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
    let body: ContainerCreateBody = serde_json::from_value(plan["docker"]["create"].clone())?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let code = rt.block_on(async {
        let docker = Docker::connect_with_local_defaults()?.negotiate_version().await?;
        let created = docker.create_container(None::<CreateContainerOptions>, body).await?;
        docker.start_container(&created.id, None::<bollard::query_parameters::StartContainerOptions>).await?;
        let code = match docker.wait_container(&created.id, None::<WaitContainerOptions>).next().await {
            Some(Ok(r)) => r.status_code,
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
            Some(Err(e)) => return Err(e.into()),
            None => 1,
        };
        docker.remove_container(&created.id, Some(RemoveContainerOptions { force: true, ..Default::default() })).await?;
        Ok::<i64, Box<dyn std::error::Error>>(code)
    })?;
    std::process::exit(code as i32)
}
