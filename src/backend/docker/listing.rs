//! Listing containers by label, tolerant of Podman: its container states include `stopped`
//! (exited, before its cleanup ran; seen while another run ends), which bollard's typed list
//! refuses whole ("unknown variant `stopped`"). Then the same list is read again as loose
//! JSON over the local socket.

use std::collections::HashMap;

use bollard::query_parameters::ListContainersOptions;
use bollard::Docker;

use super::DockerError;

/// What gc and the pool need of a listed container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub id: String,
    /// The first name, without Docker's leading `/`.
    pub name: String,
    /// `running`, `exited`, `created`, … as the engine says it.
    pub state: String,
    pub labels: HashMap<String, String>,
}

/// Containers in any state carrying every label of `labels` (`key` or `key=value`).
pub async fn containers(docker: &Docker, labels: Vec<String>) -> Result<Vec<Listed>, DockerError> {
    let filters = HashMap::from([("label".to_string(), labels)]);
    let typed = docker.list_containers(Some(ListContainersOptions { all: true, filters: Some(filters.clone()), ..Default::default() })).await;
    match typed {
        Ok(list) => Ok(list
            .into_iter()
            .map(|c| Listed {
                name: c.names.as_ref().and_then(|n| n.first()).map(|n| n.trim_start_matches('/').to_string()).or(c.id.clone()).unwrap_or_default(),
                id: c.id.unwrap_or_default(),
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                labels: c.labels.unwrap_or_default(),
            })
            .collect()),
        Err(err @ (bollard::errors::Error::JsonDataError { .. } | bollard::errors::Error::JsonSerdeError { .. })) => loose(&filters).await.map_err(|e| {
            DockerError::Local(format!("docker: list containers failed: the answer does not parse ({err}), nor as loose JSON over the socket: {e}"))
        }),
        Err(e) => Err(DockerError::Api { what: "list containers".into(), source: e }),
    }
}

/// The list read by hand (local sockets only: that is where Podman's service runs).
async fn loose(filters: &HashMap<String, Vec<String>>) -> std::io::Result<Vec<Listed>> {
    let (address, _) = super::client().map_err(|e| std::io::Error::other(e.to_string()))?;
    let path = address.strip_prefix("unix://").ok_or_else(|| std::io::Error::other(format!("{address} is not a local socket")))?;
    let query = serde_json::to_string(filters).map_err(std::io::Error::other)?;
    let value = super::rawhttp::get_json(std::path::Path::new(path), &format!("/containers/json?all=1&filters={}", super::rawhttp::encode(&query))).await?;
    Ok(parse(&value))
}

/// Reads a `/containers/json` answer, whatever its states are called.
fn parse(value: &serde_json::Value) -> Vec<Listed> {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    value
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let id = text(&c["Id"]);
            let name = c["Names"].as_array().and_then(|n| n.first()).map(|n| text(n).trim_start_matches('/').to_string()).unwrap_or_else(|| id.clone());
            let labels = c["Labels"].as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), text(v))).collect()).unwrap_or_default();
            Listed { id, name, state: text(&c["State"]), labels }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podmans_states_are_read() {
        let v = serde_json::json!([
            {"Id": "abc", "Names": ["/workcell-1"], "State": "stopped", "Labels": {"dev.workcell.managed": "true"}},
            {"Id": "def", "State": "running"}
        ]);
        let l = parse(&v);
        assert_eq!(
            l[0],
            Listed {
                id: "abc".into(),
                name: "workcell-1".into(),
                state: "stopped".into(),
                labels: HashMap::from([("dev.workcell.managed".into(), "true".into())])
            }
        );
        assert_eq!((l[1].name.as_str(), l[1].state.as_str()), ("def", "running"));
    }
}
