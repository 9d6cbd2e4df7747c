//! The Job of a run: one pod, never restarted, with the docker backend's hardening in the
//! words of a pod spec, the plan's limits, `/tmp` in memory, and the zones as volumes.
//!
//! A zone is its PersistentVolumeClaim (read-only where every mount of it is), mounted at
//! the zone's place, with `subPath` where a worker's allowlist names a directory inside it.
//! A `delivery: copy` zone is an `emptyDir` that an init container fills from the claim
//! (mounted read-only, and only there) before the worker starts: the worker changes the copy
//! alone, and the copy goes with the pod (nothing is published back).

use serde_json::{json, Map, Value};

use super::names::{bytes_quantity, cpu_quantity, literal};
use super::{KubernetesError, Meta, ZoneMount};
use crate::config::Kubernetes;
use crate::plan::{LaunchPlan, Network};

/// Where a copy's init container sees the claim, and the copy.
pub const COPY_SOURCE: &str = "/workcell/source";
pub const COPY_TARGET: &str = "/workcell/copy";

/// The Job of `plan`, running `image`.
pub(super) fn job(
    plan: &LaunchPlan,
    zones: &[ZoneMount],
    config: &Kubernetes,
    image: &str,
    runtime_class: Option<&str>,
    meta: &Meta,
) -> Result<Value, KubernetesError> {
    let vols = volumes(plan, zones, config)?;
    let security = container_security(plan);
    let resources = resources(plan);
    // `WORKCELL_ZONES` as mounted here: granted directories that do not exist on the host yet
    // are in it too (a run on the host lists them once it has made them).
    let listed: Vec<String> = zones.iter().map(|z| format!("{}:{}", z.target, if z.read_only { "ro" } else { "rw" })).collect();
    let mut env: Vec<Value> = plan
        .env
        .iter()
        .map(|(k, v)| {
            let v = if k == "WORKCELL_ZONES" { listed.join(",") } else { v.clone() };
            json!({ "name": k, "value": literal(&v) })
        })
        .collect();
    if plan.network == Network::Proxied {
        env.extend(super::network::proxy_env().into_iter().map(|(k, v)| json!({ "name": k, "value": v })));
    }
    // `args`, as docker's `Cmd`: a named image's entrypoint, if it has one, stays.
    let mut worker = json!({
        "name": "worker",
        "image": image,
        "args": plan.command.iter().map(|a| literal(a)).collect::<Vec<_>>(),
        "workingDir": plan.workdir,
        "env": env,
        "securityContext": security,
        "volumeMounts": vols.mounts,
    });
    if let Some(r) = &resources {
        worker["resources"] = r.clone();
    }
    let init: Vec<Value> = vols
        .copies
        .iter()
        .enumerate()
        .map(|(i, mounts)| {
            let mut c = json!({
                "name": format!("copy-{i}"),
                "image": image,
                // `command`: the copy program itself, whatever the image's entrypoint. `/.`
                // copies the directory's contents, hidden names included.
                "command": ["cp", "-R", format!("{COPY_SOURCE}/."), format!("{COPY_TARGET}/")],
                "securityContext": security,
                "volumeMounts": mounts,
            });
            if let Some(r) = &resources {
                c["resources"] = r.clone();
            }
            c
        })
        .collect();

    let mut pod = Map::new();
    pod.insert("restartPolicy".into(), "Never".into());
    pod.insert("automountServiceAccountToken".into(), false.into());
    // Service variables only where the proxy's are needed: otherwise a worker learns nothing
    // of the namespace's Services from its environment.
    pod.insert("enableServiceLinks".into(), (plan.network == Network::Proxied).into());
    pod.insert("hostname".into(), crate::plan::WORKER_HOSTNAME.into());
    if let Some(class) = runtime_class {
        pod.insert("runtimeClassName".into(), class.into());
    }
    pod.insert(
        "securityContext".into(),
        json!({
            "runAsNonRoot": true,
            "runAsUser": plan.user.uid,
            "runAsGroup": plan.user.gid,
            "seccompProfile": { "type": "RuntimeDefault" },
        }),
    );
    if !init.is_empty() {
        pod.insert("initContainers".into(), init.into());
    }
    pod.insert("containers".into(), json!([worker]));
    pod.insert("volumes".into(), vols.volumes.into());

    let mut metadata = meta.metadata(None, true);
    if let Some(pids) = plan.limits.pids {
        metadata["annotations"][super::ANNOTATION_PIDS] = pids.to_string().into();
    }
    if let (Network::Proxied, Some(policy)) = (plan.network, &plan.egress) {
        metadata["annotations"][super::ANNOTATION_EGRESS_RULES] = policy.describe(usize::MAX).into();
    }
    let mut spec = Map::new();
    spec.insert("backoffLimit".into(), 0.into());
    if let Some(t) = plan.limits.timeout {
        // Whole seconds, rounded up: a deadline never shorter than the plan's.
        let secs = t.as_secs() + u64::from(t.subsec_nanos() > 0);
        spec.insert("activeDeadlineSeconds".into(), secs.max(1).into());
    }
    spec.insert("template".into(), json!({ "metadata": { "labels": meta.labels }, "spec": pod }));
    Ok(json!({ "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec }))
}

/// The hardening of every container of the pod (docker: `CapDrop: ALL`,
/// `no-new-privileges`, read-only root, the plan's user, the default seccomp profile).
fn container_security(plan: &LaunchPlan) -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "capabilities": { "drop": ["ALL"] },
        "privileged": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "runAsUser": plan.user.uid,
        "runAsGroup": plan.user.gid,
        "seccompProfile": { "type": "RuntimeDefault" },
    })
}

/// Memory and CPU limits (requests default to them). The pids limit has no field here.
fn resources(plan: &LaunchPlan) -> Option<Value> {
    let mut limits = Map::new();
    if let Some(m) = plan.limits.memory_bytes {
        limits.insert("memory".into(), bytes_quantity(m).into());
    }
    if let Some(c) = plan.limits.cpus {
        limits.insert("cpu".into(), cpu_quantity(c).into());
    }
    (!limits.is_empty()).then(|| json!({ "limits": limits }))
}

/// The pod's volumes, the worker's mounts, and each copy's init-container mounts.
struct Volumes {
    volumes: Vec<Value>,
    mounts: Vec<Value>,
    copies: Vec<Vec<Value>>,
}

fn volumes(plan: &LaunchPlan, zones: &[ZoneMount], config: &Kubernetes) -> Result<Volumes, KubernetesError> {
    let mut out = Volumes { volumes: Vec::new(), mounts: Vec::new(), copies: Vec::new() };
    for (i, t) in plan.tmpfs.iter().enumerate() {
        let name = format!("tmp-{i}");
        out.volumes.push(json!({ "name": name, "emptyDir": { "medium": "Memory", "sizeLimit": bytes_quantity(t.size_bytes) } }));
        out.mounts.push(json!({ "name": name, "mountPath": t.target }));
    }
    // One volume per zone, in the order the zones first appear; writable when any mount of
    // it the worker gets is.
    let mut claims: Vec<(String, String, bool)> = Vec::new();
    for z in zones {
        let claim = config.claims.get(&z.zone).ok_or_else(|| KubernetesError::NoClaim { zone: z.zone.clone() })?;
        let index = match claims.iter().position(|(zone, _, _)| zone == &z.zone) {
            Some(i) => i,
            None => {
                claims.push((z.zone.clone(), claim.clone(), false));
                claims.len() - 1
            }
        };
        let volume = format!("zone-{index}");
        if z.copy {
            let copy = format!("copy-{}", out.copies.len());
            let mut source = json!({ "name": volume, "mountPath": COPY_SOURCE, "readOnly": true });
            if let Some(sub) = &z.sub_path {
                source["subPath"] = sub.clone().into();
            }
            out.copies.push(vec![source, json!({ "name": copy, "mountPath": COPY_TARGET })]);
            out.volumes.push(json!({ "name": copy, "emptyDir": {} }));
            out.mounts.push(json!({ "name": copy, "mountPath": z.target, "readOnly": z.read_only }));
        } else {
            claims[index].2 |= !z.read_only;
            let mut m = json!({ "name": volume, "mountPath": z.target, "readOnly": z.read_only });
            if let Some(sub) = &z.sub_path {
                m["subPath"] = sub.clone().into();
            }
            out.mounts.push(m);
        }
    }
    for (i, (_, claim, writable)) in claims.into_iter().enumerate() {
        out.volumes.push(json!({ "name": format!("zone-{i}"), "persistentVolumeClaim": { "claimName": claim, "readOnly": !writable } }));
    }
    Ok(out)
}
