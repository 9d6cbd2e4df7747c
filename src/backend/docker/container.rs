//! Removing a run's container: what both the run and its watchdog ([`super::reaper`]) do at
//! the end, kept here so that neither needs the other.

use bollard::query_parameters::RemoveContainerOptions;
use bollard::Docker;

/// Force-removes the container (killing it if it still runs). Errors are reported, not
/// returned: the run's outcome matters more, and `workcell gc` can finish the job.
pub(super) async fn remove(docker: &Docker, name: &str) {
    let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    let _slot = super::slots::acquire().await;
    match docker.remove_container(name, Some(opts)).await {
        Ok(()) => {}
        // 404: never created, or already gone; 409: removal already in progress.
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404 | 409, .. }) => {}
        Err(e) => eprintln!("workcell: could not remove container {name}: {}; run `workcell gc` to clean up", super::api_message(&e)),
    }
}
