//! Kubernetes manifests of a [`LaunchPlan`], rendered only: workcell never talks to a
//! cluster. `workcell plan --backend kubernetes` prints what [`render`] returns, for a person
//! to `kubectl apply`: a Job with the docker backend's hardening, the NetworkPolicy that
//! gives it the plan's network, and, for a plan with network rules, the Service of the egress
//! proxy it may reach. Pure: a function of the plan, the zones' volumes and `kubernetes:` of
//! `workcell.yaml` ([`crate::config::Kubernetes`]).
//!
//! What a cluster cannot be given from a plan is refused ([`KubernetesError`]) or said in
//! docs/kubernetes.md ("Not carried to a cluster"): the pids limit (a kubelet setting), the read-only
//! binds of control files and of files the host runs (the volumes are not the host's
//! directories), the publishing of `delivery: copy` zones (no one reviews on a cluster), and
//! the egress proxy itself (workcell's proxy runs in workcell; only its Service is rendered).

mod network;
mod pod;

/// Kubernetes' name rules and quantities live with the config that checks names with them.
pub use crate::config::kubernetes::names;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::config::{ImageRef, Kubernetes};
use crate::plan::LaunchPlan;
use crate::sandbox::Sandbox;

/// Label of every rendered object (the Kubernetes convention).
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The run an object belongs to; the NetworkPolicy selects the Job's pod by it.
pub const LABEL_RUN: &str = "workcell.dev/run";
/// The worker a Job runs.
pub const LABEL_WORKER: &str = "workcell.dev/worker";
/// The project directory's name (a label value cannot hold a path).
pub const LABEL_PROJECT: &str = "workcell.dev/project";
/// The project directory, in full.
pub const ANNOTATION_PROJECT_DIR: &str = "workcell.dev/project-dir";
/// The plan's pids limit, which a pod spec cannot express (the kubelet's `podPidsLimit`).
pub const ANNOTATION_PIDS: &str = "workcell.dev/pids-limit";
/// The network rules a proxied plan's proxy is to apply.
pub const ANNOTATION_EGRESS_RULES: &str = "workcell.dev/egress-rules";

/// Why a plan cannot be rendered for a cluster.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubernetesError {
    #[error("a cluster cannot run `image: {image}`: it has no host system and no local build. Set `kubernetes: {{image: IMAGE}}` in workcell.yaml (the image pods run for `host` and `build:` workers), or give the worker an `image:` the cluster can pull")]
    NoClusterImage { image: String },
    #[error("zone '{zone}' has no volume on Kubernetes: add `kubernetes: {{zones: {{{zone}: {{claim: PVC_NAME}}}}}}` to workcell.yaml, naming the PersistentVolumeClaim that holds its files")]
    NoClaim { zone: String },
    #[error("the runtime '{runtime}' is not a RuntimeClass name ({reason}); name its RuntimeClass in workcell.yaml: `kubernetes: {{runtime_classes: {{{runtime}: CLASS}}}}`")]
    RuntimeClass {
        runtime: String,
        #[source]
        reason: names::NameError,
    },
}

/// One zone mount of a plan, as a cluster volume sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ZoneMount {
    /// The zone (a key of `kubernetes.zones`).
    pub zone: String,
    /// Where the worker sees it.
    pub target: String,
    /// The directory inside the zone, for a worker whose allowlist names one (`subPath`).
    pub sub_path: Option<String>,
    pub read_only: bool,
    /// `delivery: copy`: the worker gets a copy in an `emptyDir`, never the claim.
    pub copy: bool,
}

/// The zone mounts of `plan`, made from `sandbox` (the one the plan was built from), each
/// with its zone and its path inside the zone. Only zones: the control files and files the
/// host runs that other backends bind read-only over them are host files, not the volume's.
/// Granted directories that do not exist on the host yet are mounted too: on a cluster the
/// claim's contents decide (the kubelet creates a missing `subPath`).
pub fn zone_mounts(plan: &LaunchPlan, sandbox: &Sandbox) -> Vec<ZoneMount> {
    let mut out: Vec<ZoneMount> = existing_mounts(plan, sandbox);
    for (path, write) in sandbox.pending_roots() {
        let inside = |m: &&crate::sandbox::Mount| m.mount_point == "/" || path == m.mount_point || path.starts_with(&format!("{}/", m.mount_point));
        let Some(zone) = sandbox.mounts().iter().filter(inside).max_by_key(|m| m.mount_point.len()) else { continue };
        let copy = zone.delivery == crate::sandbox::Delivery::Copy;
        let target = crate::plan::mount_target(sandbox.addressing(), &path);
        let root = crate::plan::mount_target(sandbox.addressing(), &zone.mount_point);
        let rest = target.strip_prefix(&root).unwrap_or("").trim_matches('/');
        out.push(ZoneMount {
            zone: zone.name.clone(),
            sub_path: (!rest.is_empty()).then(|| rest.to_string()),
            // As the plan mounts a zone: writable only with writes pre-approved (or copied).
            read_only: !(write && (zone.approval.writes_preapproved() || copy)),
            copy,
            target,
        });
    }
    // Outer directories before the ones inside them, as the plan orders its mounts.
    out.sort_by(|a, b| a.target.matches('/').count().cmp(&b.target.matches('/').count()).then(a.target.cmp(&b.target)));
    out
}

fn existing_mounts(plan: &LaunchPlan, sandbox: &Sandbox) -> Vec<ZoneMount> {
    crate::plan::zone_mounts(sandbox)
        .into_iter()
        .map(|(m, zone)| {
            let root = sandbox
                .mounts()
                .iter()
                .find(|z| z.name == zone)
                .map(|z| crate::plan::mount_target(sandbox.addressing(), &z.mount_point))
                .unwrap_or_else(|| m.target.clone());
            let rest = m.target.strip_prefix(&root).unwrap_or("").trim_matches('/');
            ZoneMount {
                sub_path: (!rest.is_empty()).then(|| rest.to_string()),
                copy: plan.copies.iter().any(|c| c.target == m.target),
                read_only: m.read_only,
                target: m.target,
                zone,
            }
        })
        .collect()
}

/// The objects of one run, in the order `kubectl apply` must create them: the proxy's
/// Service (its variables reach the pod only when it exists first), the NetworkPolicy (so
/// the pod never starts without it), then the Job.
pub fn render(plan: &LaunchPlan, zones: &[ZoneMount], config: &Kubernetes) -> Result<Vec<Value>, KubernetesError> {
    let image = match &plan.image {
        ImageRef::Named(name) => name.clone(),
        other => config.image.clone().ok_or_else(|| KubernetesError::NoClusterImage {
            image: match other {
                ImageRef::Build(dir) => format!("build: {}", dir.display()),
                _ => "host".into(),
            },
        })?,
    };
    let runtime_class = plan
        .runtime
        .as_ref()
        .map(|r| {
            let class = config.runtime_classes.get(r).cloned().unwrap_or_else(|| r.clone());
            names::check_subdomain(&class).map(|()| class).map_err(|reason| KubernetesError::RuntimeClass { runtime: r.clone(), reason })
        })
        .transpose()?;
    let meta = Meta::of(plan, config);
    let mut out = Vec::new();
    if plan.network == crate::plan::Network::Proxied {
        out.push(network::proxy_service(&meta));
    }
    out.push(network::policy(plan, &meta));
    out.push(pod::job(plan, zones, config, &image, runtime_class.as_deref(), &meta)?);
    Ok(out)
}

/// The objects as one `kind: List` (what `--json` prints; kubectl applies it as well).
pub fn as_list(objects: Vec<Value>) -> Value {
    json!({ "apiVersion": "v1", "kind": "List", "items": objects })
}

/// The objects as a YAML stream, after a comment saying how to apply it.
pub fn to_yaml(objects: &[Value]) -> String {
    let job = objects.iter().find(|o| o["kind"] == "Job").and_then(|o| o["metadata"]["name"].as_str()).unwrap_or("NAME");
    let mut out = format!(
        "# Rendered by `workcell plan --backend kubernetes`; workcell does not run it.\n# kubectl apply -f FILE && kubectl wait --for=condition=complete job/{job}; kubectl logs job/{job}\n"
    );
    for o in objects {
        out.push_str("---\n");
        // Every string on one line (no folded `>` blocks): a command reads as it runs.
        // Strings a YAML 1.1 reader (kubectl's) would take for another type are quoted.
        let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
        // A `Value` always serialises; an empty document would still be valid YAML.
        out.push_str(&serde_saphyr::to_string_with_options(o, options).unwrap_or_default());
    }
    out
}

/// The name, namespace, labels and annotations the objects of one run share.
pub(crate) struct Meta {
    pub name: String,
    pub namespace: Option<String>,
    pub labels: Map<String, Value>,
    pub annotations: Map<String, Value>,
    pub run_id: String,
}

impl Meta {
    fn of(plan: &LaunchPlan, config: &Kubernetes) -> Meta {
        let mut labels = Map::new();
        labels.insert(LABEL_MANAGED_BY.into(), "workcell".into());
        labels.insert(LABEL_RUN.into(), plan.run_id.clone().into());
        if let Some(w) = plan.worker.as_deref().and_then(names::to_label_value) {
            labels.insert(LABEL_WORKER.into(), w.into());
        }
        if let Some(p) = plan.project_dir.file_name().and_then(|n| names::to_label_value(&n.to_string_lossy())) {
            labels.insert(LABEL_PROJECT.into(), p.into());
        }
        let mut annotations = Map::new();
        annotations.insert(ANNOTATION_PROJECT_DIR.into(), plan.project_dir.display().to_string().into());
        // "workcell-" + worker + "-" + run id, at most 63 characters: the Job controller
        // puts the name in a label of the pod.
        let worker = plan.worker.as_deref().map(|w| names::to_label_part(w, 63 - 10 - plan.run_id.len())).unwrap_or_default();
        let name = if worker.is_empty() { format!("workcell-{}", plan.run_id) } else { format!("workcell-{worker}-{}", plan.run_id) };
        Meta { name, namespace: config.namespace.clone(), labels, annotations, run_id: plan.run_id.clone() }
    }

    /// `metadata` of an object called `name` (the run's own name when `None`).
    pub fn metadata(&self, name: Option<&str>, annotations: bool) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), name.unwrap_or(&self.name).into());
        if let Some(ns) = &self.namespace {
            m.insert("namespace".into(), ns.clone().into());
        }
        m.insert("labels".into(), Value::Object(self.labels.clone()));
        if annotations {
            m.insert("annotations".into(), Value::Object(self.annotations.clone()));
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::config::Limits;
    use crate::plan::{Network, TmpfsMount, UserSpec};

    fn plan() -> LaunchPlan {
        LaunchPlan {
            run_id: "0123456789abcdef".into(),
            worker: Some("Doc Writer".into()),
            image: ImageRef::Host,
            system: Vec::new(),
            mounts: Vec::new(),
            tmpfs: vec![TmpfsMount { target: "/tmp".into(), size_bytes: 256 << 20 }],
            network: Network::Off,
            egress: None,
            env: BTreeMap::new(),
            user: UserSpec { uid: 1000, gid: 1000 },
            workdir: "/tmp".into(),
            command: vec!["true".into()],
            limits: Limits::default(),
            project_dir: PathBuf::from("/home/u/My Project"),
            interactive: false,
            tty: false,
            runtime: None,
            copies: Vec::new(),
            protected: Vec::new(),
            stdin: None,
            shipped: None,
        }
    }

    fn config() -> Kubernetes {
        Kubernetes { image: Some("tools:1".into()), ..Kubernetes::default() }
    }

    fn job(objects: &[Value]) -> &Value {
        objects.iter().find(|o| o["kind"] == "Job").expect("a Job")
    }

    #[test]
    fn host_and_build_images_need_a_cluster_image() {
        let mut p = plan();
        let e = render(&p, &[], &Kubernetes::default()).expect_err("host");
        assert!(e.to_string().contains("image: host") && e.to_string().contains("kubernetes: {image: IMAGE}"), "{e}");
        p.image = ImageRef::Build(PathBuf::from("/p/images/doc"));
        let e = render(&p, &[], &Kubernetes::default()).expect_err("build");
        assert!(e.to_string().contains("image: build: /p/images/doc"), "{e}");
        let objects = render(&p, &[], &config()).expect("rendered");
        assert_eq!(job(&objects)["spec"]["template"]["spec"]["containers"][0]["image"], "tools:1");
        p.image = ImageRef::Named("python:3.12".into());
        let objects = render(&p, &[], &config()).expect("rendered");
        assert_eq!(job(&objects)["spec"]["template"]["spec"]["containers"][0]["image"], "python:3.12", "the worker's own image wins");
    }

    #[test]
    fn names_and_labels_from_any_worker_name() {
        let objects = render(&plan(), &[], &config()).expect("rendered");
        let meta = &job(&objects)["metadata"];
        assert_eq!(meta["name"], "workcell-doc-writer-0123456789abcdef");
        assert_eq!(meta["labels"][LABEL_WORKER], "Doc-Writer");
        assert_eq!(meta["labels"][LABEL_PROJECT], "My-Project");
        assert_eq!(meta["annotations"][ANNOTATION_PROJECT_DIR], "/home/u/My Project");
        let mut p = plan();
        p.worker = Some("w".repeat(100));
        let objects = render(&p, &[], &config()).expect("rendered");
        assert_eq!(job(&objects)["metadata"]["name"].as_str().map(str::len), Some(63));
    }

    #[test]
    fn limits_and_deadline() {
        let mut p = plan();
        let objects = render(&p, &[], &config()).expect("rendered");
        let j = job(&objects);
        assert!(j["spec"].get("activeDeadlineSeconds").is_none());
        assert!(j["spec"]["template"]["spec"]["containers"][0].get("resources").is_none(), "no limits, no resources");
        p.limits = Limits { timeout: Some(Duration::from_millis(1500)), memory_bytes: Some(1 << 30), cpus: Some(1.5), pids: Some(64) };
        let objects = render(&p, &[], &config()).expect("rendered");
        let j = job(&objects);
        assert_eq!(j["spec"]["activeDeadlineSeconds"], 2, "rounded up, never shorter");
        assert_eq!(j["spec"]["template"]["spec"]["containers"][0]["resources"], json!({"limits": {"memory": "1Gi", "cpu": "1500m"}}));
        assert_eq!(j["metadata"]["annotations"][ANNOTATION_PIDS], "64");
    }

    #[test]
    fn runtime_classes() {
        let mut p = plan();
        p.runtime = Some("runsc".into());
        let objects = render(&p, &[], &config()).expect("rendered");
        assert_eq!(job(&objects)["spec"]["template"]["spec"]["runtimeClassName"], "runsc");
        let mut c = config();
        c.runtime_classes.insert("runsc".into(), "gvisor".into());
        let objects = render(&p, &[], &c).expect("rendered");
        assert_eq!(job(&objects)["spec"]["template"]["spec"]["runtimeClassName"], "gvisor");
        p.runtime = Some("My_Runtime".into());
        let e = render(&p, &[], &config()).expect_err("not a RuntimeClass name");
        assert!(e.to_string().contains("runtime_classes: {My_Runtime: CLASS}"), "{e}");
    }

    #[test]
    fn a_zone_mounted_ro_and_rw_is_one_writable_volume() {
        let zones = [
            ZoneMount { zone: "data".into(), target: "/data".into(), sub_path: None, read_only: true, copy: false },
            ZoneMount { zone: "data".into(), target: "/data/out".into(), sub_path: Some("out".into()), read_only: false, copy: false },
        ];
        let mut c = config();
        c.claims.insert("data".into(), "data-pvc".into());
        let objects = render(&plan(), &zones, &c).expect("rendered");
        let pod = &job(&objects)["spec"]["template"]["spec"];
        let claims: Vec<&Value> = pod["volumes"].as_array().expect("volumes").iter().filter(|v| v.get("persistentVolumeClaim").is_some()).collect();
        assert_eq!(claims, [&json!({"name": "zone-0", "persistentVolumeClaim": {"claimName": "data-pvc", "readOnly": false}})]);
        let mounts = &pod["containers"][0]["volumeMounts"];
        assert_eq!(mounts[1], json!({"name": "zone-0", "mountPath": "/data", "readOnly": true}));
        assert_eq!(mounts[2], json!({"name": "zone-0", "mountPath": "/data/out", "readOnly": false, "subPath": "out"}));
        let e = render(&plan(), &zones, &config()).expect_err("no claim");
        assert_eq!(e, KubernetesError::NoClaim { zone: "data".into() });
    }
}
