//! `kubernetes:` of `workcell.yaml`: what `workcell plan --backend kubernetes` needs that the
//! rest of the file cannot say (a cluster has no host directories and no host system): the
//! namespace, the image for `host` and `build:` workers, a PersistentVolumeClaim per zone,
//! and the RuntimeClass of each Docker runtime name. Names the API server would refuse are
//! refused here, with their line.

use std::collections::BTreeMap;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;

pub mod names;

use super::{parse_runtime, text, ConfigError, Diag};
use crate::sandbox::Sandbox;

/// `kubernetes:` as written.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawKubernetes {
    /// Namespace of every rendered object (unset: none is written, and kubectl uses its
    /// current namespace).
    #[schemars(with = "Option<String>")]
    pub namespace: Option<Spanned<String>>,
    /// The image pods run for workers whose image is `host` or `build:` (neither exists on a
    /// cluster). A worker with an image name of its own runs that image.
    #[schemars(with = "Option<String>")]
    pub image: Option<Spanned<String>>,
    /// The volume of each zone on the cluster: `{ZONE: {claim: PVC_NAME}}`.
    #[schemars(with = "Option<BTreeMap<String, RawKubernetesZone>>")]
    pub zones: Option<IndexMap<Spanned<String>, RawKubernetesZone>>,
    /// The RuntimeClass for a Docker runtime name, e.g. `{runsc: gvisor}` (unset: the
    /// RuntimeClass of the same name).
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub runtime_classes: Option<IndexMap<Spanned<String>, Spanned<String>>>,
}

/// One zone of `kubernetes.zones`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawKubernetesZone {
    /// The PersistentVolumeClaim holding the zone's files (in the rendered namespace).
    #[schemars(with = "String")]
    pub claim: Spanned<String>,
}

/// `kubernetes:`, checked. Empty when the file has none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Kubernetes {
    pub namespace: Option<String>,
    pub image: Option<String>,
    /// Zone name → PersistentVolumeClaim name.
    pub claims: BTreeMap<String, String>,
    /// Docker runtime name → RuntimeClass name.
    pub runtime_classes: BTreeMap<String, String>,
}

/// Checks `raw` against the project's zones.
pub(super) fn kubernetes_from(raw: Option<&RawKubernetes>, sandbox: &Sandbox, diag: &Diag) -> Result<Kubernetes, ConfigError> {
    let Some(raw) = raw else { return Ok(Kubernetes::default()) };
    let mut out = Kubernetes::default();
    if let Some(ns) = &raw.namespace {
        names::check_label(&ns.value).map_err(|e| diag.spanned(ns, format!("kubernetes.namespace '{}' {e}", ns.value.escape_debug())))?;
        out.namespace = Some(ns.value.clone());
    }
    if let Some(image) = &raw.image {
        text::check_printable("kubernetes.image", &image.value).map_err(|m| diag.spanned(image, m))?;
        if image.value.trim().is_empty() || image.value == "host" {
            return Err(diag.spanned(
                image,
                "kubernetes.image names the image pods run on the cluster (such as registry.example/tools:1.0); `host` is this machine's own system, which a cluster does not have",
            ));
        }
        out.image = Some(image.value.clone());
    }
    let defined: Vec<&str> = sandbox.mounts().iter().map(|m| m.name.as_str()).collect();
    for (zone, z) in raw.zones.iter().flatten() {
        if !defined.contains(&zone.value.as_str()) {
            return Err(diag.spanned(
                zone,
                format!("kubernetes.zones names '{}', which is not a zone of this project; zones: {}", zone.value.escape_debug(), defined.join(", ")),
            ));
        }
        names::check_subdomain(&z.claim.value)
            .map_err(|e| diag.spanned(&z.claim, format!("the claim name '{}' {e} (it names a PersistentVolumeClaim)", z.claim.value.escape_debug())))?;
        out.claims.insert(zone.value.clone(), z.claim.value.clone());
    }
    for (runtime, class) in raw.runtime_classes.iter().flatten() {
        parse_runtime(&runtime.value).map_err(|e| diag.spanned(runtime, format!("invalid runtime: {e}")))?;
        names::check_subdomain(&class.value).map_err(|e| diag.spanned(class, format!("the RuntimeClass name '{}' {e}", class.value.escape_debug())))?;
        out.runtime_classes.insert(runtime.value.clone(), class.value.clone());
    }
    Ok(out)
}
