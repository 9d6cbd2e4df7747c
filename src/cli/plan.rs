//! `workcell plan`: the resolved launch plan, without running anything.

use crate::term::escape;
use clap::Args;

use super::{load_project, Cli, CliError};
use crate::plan::{LaunchPlan, Overrides};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Worker to plan (its sandbox, image, command and limits).
    pub worker: Option<String>,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print this backend's rendering instead of the summary (bwrap: the command line;
    /// seatbelt: the profile and its parameters).
    #[arg(long, value_enum)]
    pub backend: Option<crate::config::BackendChoice>,
    /// Command to plan instead of the worker's.
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub fn run(cli: &Cli, args: &PlanArgs) -> Result<i32, CliError> {
    let project = load_project(cli.config.as_deref())?;
    let worker = args.worker.as_deref().map(|w| project.worker(w)).transpose().map_err(CliError::Usage)?;
    let sandbox = worker.map(|w| w.sandbox.clone()).unwrap_or_else(|| project.sandbox.clone());
    let ov = Overrides { command: (!args.command.is_empty()).then(|| args.command.clone()), ..Overrides::default() };
    let plan = LaunchPlan::build(&project, worker, &sandbox, &ov).map_err(|e| CliError::Usage(e.to_string()))?;
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
        }
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("worker:   {}", escape(plan.worker.as_deref().unwrap_or("(ad hoc)")));
        println!("image:    {:?}", plan.image);
        println!("command:  {}", escape(&shlex::try_join(plan.command.iter().map(String::as_str)).unwrap_or_default()));
        println!("network:  {}", if plan.network { "on" } else { "off (loopback only)" });
        println!("workdir:  {}", escape(&plan.workdir));
        println!("user:     {}:{}", plan.user.uid, plan.user.gid);
        println!("mounts:");
        for m in &plan.mounts {
            println!("  {} <- {} ({})", escape(&m.target), escape(&m.source.to_string_lossy()), if m.read_only { "ro" } else { "rw" });
        }
        println!(
            "limits:   timeout {:?}, memory {:?} bytes, cpus {:?}, pids {:?}",
            plan.limits.timeout, plan.limits.memory_bytes, plan.limits.cpus, plan.limits.pids
        );
        print_docker(&docker);
    }
    Ok(0)
}

fn print_rendering(text: String) -> i32 {
    print!("{text}");
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
    println!("docker:");
    if let Some(e) = d.get("error").and_then(|e| e.as_str()) {
        println!("  (cannot render: {e})");
        return;
    }
    let hc = &d["create"]["HostConfig"];
    let list = |v: &serde_json::Value| v.as_array().map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(",")).unwrap_or_default();
    println!("  image:        {}", d["image"].as_str().unwrap_or(""));
    println!("  container:    {}", d["name"].as_str().unwrap_or(""));
    println!("  user:         {}", d["create"]["User"].as_str().unwrap_or(""));
    println!("  network_mode: {}", hc["NetworkMode"].as_str().unwrap_or(""));
    println!("  cap_drop:     {}", list(&hc["CapDrop"]));
    println!("  security_opt: {}", list(&hc["SecurityOpt"]));
    println!("  read-only /:  {}", hc["ReadonlyRootfs"]);
    let init = match (hc["Init"].as_bool(), d["create"]["Entrypoint"][0].as_str()) {
        (Some(true), _) => "docker-init (HostConfig.Init)".to_string(),
        (_, Some(p)) => format!("{p} (the host's tini, as entrypoint)"),
        _ => "none (the command is PID 1)".to_string(),
    };
    println!("  init:         {init}");
    println!("  limits:       memory={} memory_swap={} nano_cpus={} pids={}", hc["Memory"], hc["MemorySwap"], hc["NanoCpus"], hc["PidsLimit"]);
    if let Some(t) = hc["Tmpfs"].as_object() {
        for (k, v) in t {
            println!("  tmpfs:        {k} ({})", v.as_str().unwrap_or(""));
        }
    }
    for m in hc["Mounts"].as_array().into_iter().flatten() {
        println!(
            "  bind:         {} <- {} ({})",
            m["Target"].as_str().unwrap_or(""),
            m["Source"].as_str().unwrap_or(""),
            if m["ReadOnly"].as_bool().unwrap_or(false) { "ro" } else { "rw" }
        );
    }
}
