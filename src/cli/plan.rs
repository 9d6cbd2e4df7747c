//! `workcell plan`: the resolved launch plan, without running anything.

mod overview;

use crate::term::escape;
use clap::Args;

use super::out::{out, outln};
use super::style::{Painted, Role};
use super::{load_project, Cli, CliError};
use crate::config::{ImageRef, Limits};
use crate::plan::{LaunchPlan, Overrides};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Worker to plan (its sandbox, image, command and limits). With neither a worker nor a
    /// command, `plan` shows the project's sandbox: zones, modes, approvals, network, limits.
    pub worker: Option<String>,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print this backend's rendering instead of the summary (bwrap: the command line;
    /// seatbelt: the profile and its parameters; kubernetes: the manifests to `kubectl
    /// apply`, with --json as one List).
    #[arg(long, value_enum)]
    pub backend: Option<crate::config::BackendChoice>,
    /// Docker runtime to plan under, as `workcell run --runtime`.
    #[arg(long, value_name = "NAME", value_parser = crate::config::parse_runtime)]
    pub runtime: Option<String>,
    /// Host user the worker runs as, `UID` or `UID:GID` (never 0), like `defaults.user`;
    /// only as root (a normal user's workers run as that user).
    #[arg(long, value_name = "UID[:GID]", value_parser = crate::config::parse_user)]
    pub user: Option<crate::plan::UserSpec>,
    /// Command to plan instead of the worker's.
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub fn run(cli: &Cli, args: &PlanArgs) -> Result<i32, CliError> {
    let mut project = load_project(cli.config.as_deref())?;
    super::user::apply(&mut project, args.user)?;
    // Neither worker nor command: nothing to run, so the sandbox every run starts from.
    // A backend's rendering is of a run, and still needs a command.
    if args.worker.is_none() && args.command.is_empty() && matches!(args.backend, None | Some(crate::config::BackendChoice::Docker)) {
        return overview::print(&project, args.json, args.runtime.clone(), args.backend.unwrap_or(project.defaults.backend));
    }
    let worker = args.worker.as_deref().map(|w| project.worker(w)).transpose()?;
    let sandbox = worker.map(|w| w.sandbox.clone()).unwrap_or_else(|| project.sandbox.clone());
    let ov = Overrides { command: (!args.command.is_empty()).then(|| args.command.clone()), runtime: args.runtime.clone(), ..Overrides::default() };
    let plan = LaunchPlan::build(&project, worker, &sandbox, &ov).map_err(|e| CliError::Usage(e.to_string()))?;
    // A zone the worker's user cannot use: the plan is shown, then refused as a run would be.
    // (Seatbelt and none run the worker as workcell's own user, not as the plan's.)
    let choice = args.backend.unwrap_or(project.defaults.backend);
    if choice == crate::config::BackendChoice::Kubernetes {
        return print_kubernetes(args, &plan, &sandbox, &project.kubernetes);
    }
    // The backend a run would get, decided as `run` decides it; a rendering was asked for by name.
    let runs_on = match args.backend {
        Some(crate::config::BackendChoice::Bwrap | crate::config::BackendChoice::Seatbelt) => RunsOn { selected: None, why: String::new() },
        _ => RunsOn::of(&plan, choice, project.require_os_sandbox),
    };
    let access = match choice {
        crate::config::BackendChoice::Seatbelt | crate::config::BackendChoice::None => Ok(()),
        _ => crate::plan::access::check_sandbox(
            &sandbox,
            plan.user,
            choice == crate::config::BackendChoice::Bwrap || runs_on.selected == Some(crate::backend::Selected::Bwrap),
        )
        .map_err(|e| CliError::Usage(e.to_string())),
    };
    print_plan(args, &plan, &sandbox, &runs_on)?;
    access.map(|()| 0)
}

/// The backend a run of a plan would get and why, decided as `run` decides it (`run::choose`).
struct RunsOn {
    /// `None` when no backend can run it.
    selected: Option<crate::backend::Selected>,
    why: String,
}

impl RunsOn {
    fn of(plan: &LaunchPlan, choice: crate::config::BackendChoice, require_os_sandbox: bool) -> RunsOn {
        match crate::run::choose::choose(choice, plan, None, require_os_sandbox) {
            Ok(c) => RunsOn { selected: Some(c.selected), why: c.reason(choice) },
            Err(e) => RunsOn { selected: None, why: e.to_string() },
        }
    }

    /// `bwrap (docker cannot run this here: …)`, or `nothing: WHY`.
    fn text(&self) -> String {
        match self.selected {
            Some(s) => format!("{} ({})", s.name(), self.why),
            None => format!("nothing: {}", self.why),
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({"backend": self.selected.map(crate::backend::Selected::name), "why": self.why})
    }
}

fn print_plan(args: &PlanArgs, plan: &LaunchPlan, sandbox: &crate::sandbox::Sandbox, runs_on: &RunsOn) -> Result<i32, CliError> {
    let plan = plan.clone();
    // The renderings of backends that would refuse this plan are not shown as if they would run.
    if let (Some(runtime), Some(backend @ (crate::config::BackendChoice::Bwrap | crate::config::BackendChoice::Seatbelt))) = (&plan.runtime, args.backend) {
        let backend = if backend == crate::config::BackendChoice::Bwrap { "bwrap" } else { "seatbelt" };
        return Err(CliError::Usage(crate::backend::BackendError::RuntimeUnsupported { backend, runtime: runtime.clone() }.to_string()));
    }
    match args.backend {
        Some(crate::config::BackendChoice::Bwrap) => return Ok(print_rendering(crate::backend::bwrap::plan_text(&plan))),
        Some(crate::config::BackendChoice::Seatbelt) => return Ok(print_rendering(crate::backend::seatbelt::plan_text(&plan))),
        _ => {}
    }
    let docker = docker_section(&plan);
    if args.json {
        let mut v = serde_json::to_value(&plan).unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("docker".into(), docker);
            obj.insert("runs_on".into(), runs_on.json());
            let way = |b| crate::run::resident::Exec::for_plan(&plan.image, b);
            obj.insert(
                "mcp_session".into(),
                serde_json::json!({"docker": way(crate::backend::Selected::Docker), "bwrap": way(crate::backend::Selected::Bwrap)}),
            );
            obj.insert("shell".into(), serde_json::json!(crate::tools::shell::dialect::Dialect::for_image(&plan.image)));
            let pending: Vec<_> = sandbox.pending_roots().into_iter().map(|(path, write)| serde_json::json!({"sandbox_path": path, "write": write})).collect();
            if !pending.is_empty() {
                obj.insert("pending_grants".into(), serde_json::Value::Array(pending));
            }
        }
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        outln!("{}   {}", heading("worker:"), escape(plan.worker.as_deref().unwrap_or("(ad hoc)")));
        outln!("{}  {}", heading("backend:"), escape(&runs_on.text()));
        outln!("{}    {}", heading("image:"), image_text(&plan.image));
        outln!("{}  {}", heading("command:"), escape(&shlex::try_join(plan.command.iter().map(String::as_str)).unwrap_or_default()));
        outln!("{}  {}", heading("network:"), network_text(&plan));
        outln!("{}  {}", heading("workdir:"), escape(&plan.workdir));
        outln!("{}     {}:{}", heading("user:"), plan.user.uid, plan.user.gid);
        outln!("{}", heading("mounts:"));
        for m in &plan.mounts {
            let copy = if plan.copies.iter().any(|c| c.target == m.target) { ", delivery: copy" } else { "" };
            outln!("  {} <- {} ({}{copy})", escape(&m.target), escape(&m.source.to_string_lossy()), if m.read_only { "ro" } else { "rw" });
        }
        // Granted directories that do not exist yet: a run creates them (`plan` never does).
        for (path, write) in sandbox.pending_roots() {
            let what = if write {
                "missing: created by the run, owned by the worker's user (rw)"
            } else {
                "missing: a read-only grant, the run is refused until it exists"
            };
            outln!("  {} ({what})", escape(&path));
        }
        print_protected(&plan);
        outln!("{}   {}", heading("limits:"), limits_text(&plan.limits));
        outln!("{}      one sandbox per session, commands by {}", heading("mcp:"), crate::run::resident::Exec::summary(&plan.image));
        outln!("{}    the shell tool runs {}", heading("shell:"), crate::tools::shell::dialect::Dialect::for_image(&plan.image).describe());
        match crate::pool::why_not(&plan, runs_on.selected.unwrap_or(crate::backend::Selected::Docker)) {
            None => outln!("{}     docker runs of this plan can start warm (`workcell pool fill` with the same arguments)", heading("pool:")),
            Some(why) => outln!("{}     not pooled: {why}", heading("pool:")),
        }
        match &plan.runtime {
            Some(r) => outln!("{}  {} (docker only: bwrap, seatbelt and none refuse this plan)", heading("runtime:"), escape(r)),
            None => outln!("{}  the Docker daemon's default", heading("runtime:")),
        }
        print_docker(&docker);
    }
    Ok(0)
}

/// A label or heading of the readable plan, bold on a terminal.
fn heading(label: &str) -> Painted<&str> {
    Role::Heading.out(label)
}

/// Per writable bind mount: the files the host runs that are protected there, the entries
/// the zone turned off, and the existing ones bound read-only for the run.
fn print_protected(plan: &LaunchPlan) {
    if plan.protected.is_empty() {
        return;
    }
    outln!("{} (files the host runs: existing ones read-only, new ones moved aside after the run):", heading("protected"));
    for a in &plan.protected {
        outln!("  {}", escape(&a.target));
        if let Some(why) = &a.home {
            // `why` is escaped where it is made (it names users and paths).
            outln!("    home directory: {why}: its start-up files, PATH folders and tools' configurations are protected too");
        }
        outln!("    entries:        {}", escape(&a.entries.join(", ")));
        if !a.unprotected.is_empty() {
            outln!("    turned off:     {} (unprotect)", escape(&a.unprotected.join(", ")));
        }
        for f in &a.by_family {
            outln!("    with {}: {} (read by {})", escape(&f.from), escape(&f.entry), escape(f.tool));
        }
        let bound: Vec<&str> = a.bound.iter().map(|b| b.path.as_str()).collect();
        let bound = if bound.is_empty() { "(none exist)".to_string() } else { escape(&bound.join(", ")).into_owned() };
        outln!("    bound ro:       {bound}");
    }
}

/// `off (loopback only)`, `on`, or proxied: how each backend confines the worker to the
/// proxy, then the rules, one layer a line.
fn network_text(plan: &LaunchPlan) -> String {
    use crate::plan::Network;
    match (plan.network, &plan.egress) {
        (Network::Off, _) => "off (loopback only)".into(),
        (Network::Open, _) => "on".into(),
        (Network::Proxied, policy) => {
            let rules = policy.as_ref().map(|p| p.describe(usize::MAX)).unwrap_or_default();
            let lines: Vec<String> = rules.lines().map(|l| format!("\n  {}", escape(l))).collect();
            format!("{}{}", proxied_mechanisms(), lines.concat())
        }
    }
}

/// How each backend confines a proxied worker to the proxy.
fn proxied_mechanisms() -> String {
    use crate::backend::egress::PROXY_PORT;
    format!(
        "proxied (only through workcell's egress proxy: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY=socks5h://, NO_PROXY for loopback)\n\
         \x20         bwrap: no interface but loopback; the proxy listens on 127.0.0.1:{PROXY_PORT} inside\n\
         \x20         docker: an internal network of the run's own, the proxy on a free port of its gateway, no DNS, \
         every other port of the host rejected by firewall rules (needs root)"
    )
}

/// The image as it is written in a worker file: `host`, a name, or `build: DIR`.
fn image_text(image: &ImageRef) -> String {
    match image {
        ImageRef::Host => "host".into(),
        ImageRef::Named(name) => escape(name).into_owned(),
        ImageRef::Build(dir) => format!("build: {}", escape(&dir.to_string_lossy())),
    }
}

/// `timeout 30s, memory 512 MiB, cpus 1.5, pids 256`, each `none` when unset.
fn limits_text(l: &Limits) -> String {
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    format!(
        "timeout {}, memory {}, cpus {}, pids {}",
        or_none(l.timeout.map(|t| humantime::format_duration(t).to_string())),
        or_none(l.memory_bytes.map(bytes_text)),
        or_none(l.cpus.map(|c| c.to_string())),
        or_none(l.pids.map(|p| p.to_string())),
    )
}

/// A byte count in the largest binary unit that divides it exactly (`512 MiB`, `1536 KiB`),
/// else in bytes: the value a person wrote in the config comes back unchanged.
fn bytes_text(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n != 0 && n.is_multiple_of(1 << shift) {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// The Kubernetes manifests of `plan`: YAML documents, or with `--json` one `List`. The
/// host's access check does not apply: the cluster's volumes are not the host's directories.
fn print_kubernetes(args: &PlanArgs, plan: &LaunchPlan, sandbox: &crate::sandbox::Sandbox, config: &crate::config::Kubernetes) -> Result<i32, CliError> {
    use crate::backend::kubernetes;
    let zones = kubernetes::zone_mounts(plan, sandbox);
    let objects = kubernetes::render(plan, &zones, config).map_err(|e| CliError::Usage(e.to_string()))?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&kubernetes::as_list(objects)).unwrap_or_default());
    } else {
        out!("{}", kubernetes::to_yaml(&objects));
    }
    Ok(0)
}

fn print_rendering(text: String) -> i32 {
    out!("{text}");
    0
}

// --- Docker section -------------------------------------------------------------------

/// The Docker rendering of `plan`: `{image, name, create}` (the create body sent to the
/// Engine API), or `{error}` when the image reference cannot be worked out.
fn docker_section(plan: &LaunchPlan) -> serde_json::Value {
    use crate::backend::docker::{choose_init, image::planned_image, render};
    match planned_image(plan) {
        Ok(image) => {
            let s = render(plan, &image, &choose_init(plan));
            serde_json::json!({ "image": image, "name": s.name, "create": s.create })
        }
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

fn print_docker(d: &serde_json::Value) {
    outln!("{}", heading("docker:"));
    if let Some(e) = d.get("error").and_then(|e| e.as_str()) {
        outln!("  (cannot render: {e})");
        return;
    }
    let hc = &d["create"]["HostConfig"];
    let list = |v: &serde_json::Value| v.as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(",")).unwrap_or_default();
    outln!("  image:        {}", d["image"].as_str().unwrap_or(""));
    outln!("  container:    {}", d["name"].as_str().unwrap_or(""));
    outln!("  user:         {}", d["create"]["User"].as_str().unwrap_or(""));
    outln!("  network_mode: {}", hc["NetworkMode"].as_str().unwrap_or(""));
    if hc["Dns"].is_array() {
        outln!("  dns:          {} (nothing answers there)", list(&hc["Dns"]));
    }
    outln!("  cap_drop:     {}", list(&hc["CapDrop"]));
    outln!("  security_opt: {}", list(&hc["SecurityOpt"]));
    outln!("  read-only /:  {}", hc["ReadonlyRootfs"]);
    let init = match (hc["Init"].as_bool(), d["create"]["Entrypoint"][0].as_str()) {
        (Some(true), _) => "docker-init (HostConfig.Init)".to_string(),
        (_, Some(p)) => format!("{p} (the host's tini, as entrypoint)"),
        _ => "none (the command is PID 1)".to_string(),
    };
    outln!("  init:         {init}");
    outln!("  runtime:      {}", hc["Runtime"].as_str().map(escape).unwrap_or_else(|| "(the daemon's default)".into()));
    let field = |v: &serde_json::Value| if v.is_null() { "none".to_string() } else { v.to_string() };
    outln!(
        "  limits:       memory={} memory_swap={} nano_cpus={} pids={}",
        field(&hc["Memory"]),
        field(&hc["MemorySwap"]),
        field(&hc["NanoCpus"]),
        field(&hc["PidsLimit"])
    );
    if let Some(t) = hc["Tmpfs"].as_object() {
        for (k, v) in t {
            outln!("  tmpfs:        {k} ({})", v.as_str().unwrap_or(""));
        }
    }
    for m in hc["Mounts"].as_array().into_iter().flatten() {
        outln!(
            "  bind:         {} <- {} ({})",
            m["Target"].as_str().unwrap_or(""),
            m["Source"].as_str().unwrap_or(""),
            if m["ReadOnly"].as_bool().unwrap_or(false) { "ro" } else { "rw" }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn limits_read_as_written() {
        let l = Limits { timeout: Some(Duration::from_secs(30)), memory_bytes: Some(512 << 20), cpus: Some(1.5), pids: Some(256) };
        assert_eq!(limits_text(&l), "timeout 30s, memory 512 MiB, cpus 1.5, pids 256");
        let none = Limits { timeout: None, memory_bytes: None, cpus: None, pids: None };
        assert_eq!(limits_text(&none), "timeout none, memory none, cpus none, pids none");
    }

    #[test]
    fn bytes_in_the_largest_exact_unit() {
        assert_eq!(bytes_text(1 << 30), "1 GiB");
        assert_eq!(bytes_text(1536 << 20), "1536 MiB");
        assert_eq!(bytes_text(1000), "1000 bytes");
        assert_eq!(bytes_text(0), "0 bytes");
    }

    #[test]
    fn proxied_network_names_each_mechanism() {
        let t = proxied_mechanisms();
        assert!(t.contains("HTTP_PROXY") && t.contains("127.0.0.1:3128") && t.contains("internal network") && t.contains("needs root"), "{t}");
    }

    #[test]
    fn images_as_written() {
        assert_eq!(image_text(&ImageRef::Host), "host");
        assert_eq!(image_text(&ImageRef::Named("python:3".into())), "python:3");
        assert_eq!(image_text(&ImageRef::Build("/p/images/doc".into())), "build: /p/images/doc");
    }
}
