//! The plan's network on a cluster: one NetworkPolicy per run, selecting the Job's pod by its
//! run label. Ingress is always closed (a worker serves no one). Egress: none for
//! `network: false` (no DNS either, as on docker); everything for `network: true`; for rules,
//! only the egress proxy's pods on its port, reached through the proxy's Service by the
//! variables Kubernetes gives every pod for the Services that exist when it starts, so that
//! the worker needs no DNS.
//!
//! The proxy itself is not rendered: workcell's proxy runs inside workcell, on the machine
//! that starts a run. A cluster needs a proxy of its own (pods labelled
//! [`PROXY_POD_LABEL`]`: "true"`, HTTP forward and `CONNECT` on [`PROXY_PORT`]) that applies
//! the rules the Job carries in its `workcell.dev/egress-rules` annotation. Without one the
//! worker reaches nothing: the policy fails closed.

use serde_json::{json, Value};

use super::Meta;
use crate::plan::{LaunchPlan, Network};

/// The Service of the egress proxy, in the run's namespace.
pub const PROXY_SERVICE: &str = "workcell-egress-proxy";
/// The label of the proxy's pods: the Service selects them, the worker's policy allows them.
pub const PROXY_POD_LABEL: &str = "workcell.dev/egress-proxy";
/// The proxy's port (the one the worker's proxy variables name under bwrap, too).
pub const PROXY_PORT: u16 = crate::backend::egress::PROXY_PORT;

/// The NetworkPolicy of the run.
pub(super) fn policy(plan: &LaunchPlan, meta: &Meta) -> Value {
    let egress = match plan.network {
        Network::Off => json!([]),
        // One empty rule: every destination, every port.
        Network::Open => json!([{}]),
        // The pods behind the Service, not its cluster address: policies are enforced after
        // the Service address is translated to a pod's.
        Network::Proxied => json!([{
            "to": [{ "podSelector": { "matchLabels": { PROXY_POD_LABEL: "true" } } }],
            "ports": [{ "protocol": "TCP", "port": PROXY_PORT }],
        }]),
    };
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta.metadata(None, false),
        "spec": {
            "podSelector": { "matchLabels": { super::LABEL_RUN: meta.run_id } },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    })
}

/// The egress proxy's Service (shared by every run in the namespace).
pub(super) fn proxy_service(meta: &Meta) -> Value {
    let mut metadata = json!({ "name": PROXY_SERVICE, "labels": { super::LABEL_MANAGED_BY: "workcell" } });
    if let Some(ns) = &meta.namespace {
        metadata["namespace"] = ns.clone().into();
    }
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "selector": { PROXY_POD_LABEL: "true" },
            "ports": [{ "name": "proxy", "protocol": "TCP", "port": PROXY_PORT, "targetPort": PROXY_PORT }],
        },
    })
}

/// The proxy variables of a proxied worker: `$(...)` is expanded by the kubelet from the
/// Service's variables (`WORKCELL_EGRESS_PROXY_SERVICE_HOST`, `..._PORT`). No `ALL_PROXY`:
/// whether the cluster's proxy speaks SOCKS5 is not workcell's to say.
pub(super) fn proxy_env() -> Vec<(String, String)> {
    let var = PROXY_SERVICE.to_ascii_uppercase().replace('-', "_");
    let http = format!("http://$({var}_SERVICE_HOST):$({var}_SERVICE_PORT)");
    let mut out = Vec::new();
    for (k, v) in [("HTTP_PROXY", http.as_str()), ("HTTPS_PROXY", http.as_str()), ("NO_PROXY", crate::backend::egress::NO_PROXY)] {
        out.push((k.to_string(), v.to_string()));
        out.push((k.to_ascii_lowercase(), v.to_string()));
    }
    out
}
