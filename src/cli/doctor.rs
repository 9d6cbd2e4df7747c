//! `workcell doctor`: which backends work here, and what to fix when they do not.

use clap::Args;

use crate::term::escape;

use super::out::outln;
use super::style::Role;
use super::{Cli, CliError};
use crate::backend::docker::maintenance::{diagnose, DockerDiagnosis};
use crate::config::{find_config, Project};

/// Arguments of `workcell doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Prints the findings; exit status 0 when at least one isolation backend works, else 1.
pub fn run(cli: &Cli, args: &DoctorArgs) -> Result<i32, CliError> {
    let project = project_findings(cli);
    let docker = diagnose();
    let bwrap = crate::backend::bwrap::probe();
    let seatbelt = crate::backend::seatbelt::probe();
    let ok = docker.error.is_none() || bwrap.is_ok() || seatbelt.is_ok();
    // Limits a fallback backend cannot enforce, named so nobody relies on them unknowingly.
    let support = crate::backend::cgroup::Support::detect();
    let mut bwrap_limits = support.summary();
    for (name, place) in [("memory", &support.memory), ("pids", &support.pids), ("cpus", &support.cpu)] {
        if let Err(why) = place {
            bwrap_limits.push_str(&format!("; {name}: not enforced: {why}"));
        }
    }
    // Seatbelt has no limits at all, and its timeout reaches only the worker's session.
    let seatbelt_gaps: Vec<String> = ["memory, pids and cpus limits: macOS has no per-sandbox limits"]
        .iter()
        .map(|s| s.to_string())
        .chain(crate::backend::seatbelt::GENERAL.iter().map(|s| s.to_string()))
        .collect();
    if args.json {
        let v = serde_json::json!({
            "docker": docker,
            "bwrap": match &bwrap { Ok(p) => serde_json::json!({"ok": true, "path": p, "unenforced_limits": bwrap_limits}), Err(e) => serde_json::json!({"ok": false, "error": e.to_string()}) },
            "seatbelt": match &seatbelt {
                Ok(()) => serde_json::json!({"ok": true, "not_enforced": seatbelt_gaps}),
                Err(e) => serde_json::json!({"ok": false, "error": e.to_string(), "not_enforced": seatbelt_gaps}),
            },
            "ok": ok,
            "project": project.as_ref().map(|p| serde_json::json!({
                "file": p.file,
                "workers": p.workers,
                "broken": p.broken.iter().map(|(name, e)| serde_json::json!({"worker": name, "error": e.to_string()})).collect::<Vec<_>>(),
                "error": p.error,
                "access": p.access,
            })),
        });
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(if ok { 0 } else { 1 });
    }
    print_docker(&docker);
    // Each backend where it can exist: bwrap on Linux, Seatbelt on macOS. Elsewhere they are
    // no finding, and their caveats would only be noise (`--json` still lists all of them).
    if cfg!(target_os = "linux") {
        match &bwrap {
            Ok(p) => outln!("{}   {} ({})\n  limits: {bwrap_limits}", Role::Heading.out("bwrap:"), Role::Ok.out("ok"), p.display()),
            Err(e) => outln!("{}   {}: {e}", Role::Heading.out("bwrap:"), Role::Denied.out("unavailable")),
        }
    }
    if cfg!(target_os = "macos") {
        match &seatbelt {
            Ok(()) => outln!("{} {} (/usr/bin/sandbox-exec)", Role::Heading.out("seatbelt:"), Role::Ok.out("ok")),
            Err(e) => outln!("{} {}: {e}", Role::Heading.out("seatbelt:"), Role::Denied.out("unavailable")),
        }
        for gap in &seatbelt_gaps {
            outln!("  not enforced by seatbelt: {gap}");
        }
    }
    if let Some(p) = &project {
        print_project(p);
    }
    if !ok {
        outln!(
            "\n{} Install and start Docker, or install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap).",
            Role::Denied.out("No isolation backend works here.")
        );
    }
    Ok(if ok { 0 } else { 1 })
}

fn print_docker(d: &DockerDiagnosis) {
    match &d.error {
        None => outln!(
            "{}  {}: {} {} (daemon API {}, workcell speaks {}) at {}",
            Role::Heading.out("docker:"),
            Role::Ok.out("ok"),
            d.engine.as_deref().unwrap_or("Engine"),
            d.version.as_deref().unwrap_or("?"),
            d.api_version.as_deref().unwrap_or("?"),
            d.negotiated_api.as_deref().unwrap_or("?"),
            d.address.as_deref().unwrap_or("?")
        ),
        Some(e) => outln!("{}  {}: {e}", Role::Heading.out("docker:"), Role::Denied.out("unavailable")),
    }
    for note in &d.engine_notes {
        outln!("  note: {note}");
    }
    outln!("  DOCKER_HOST: {}", d.docker_host.as_deref().unwrap_or("(not set)"));
    outln!("  sockets tried{}:", if d.docker_host.is_some() { " (only when DOCKER_HOST is unset)" } else { "" });
    for s in &d.sockets {
        outln!("    {} {}", s.path.display(), if s.exists { "exists" } else { "absent" });
    }
    if let Some(r) = &d.runtimes {
        let names: Vec<String> = r
            .names
            .iter()
            .map(|n| if r.default.as_deref() == Some(n.as_str()) { format!("{} (default)", escape(n)) } else { escape(n).into_owned() })
            .collect();
        outln!("  runtimes: {} (what `runtime:` and --runtime may name)", names.join(", "));
        if !r.names.iter().any(|n| n == "runsc") {
            outln!("    gVisor (runsc) is not registered; to run workers under it, {}", crate::backend::docker::runtimes::install_hint("runsc"));
        }
        // Podman lists the runtimes its containers.conf names, with no arguments to read, and
        // its runtimes are configured there, not in daemon.json: nothing to judge.
        let docker = d.engine.as_deref() != Some("Podman");
        for name in r.broker_unreachable.iter().filter(|_| docker) {
            outln!(
                "    {} gVisor's `{}` is registered without --host-uds=open: workers under it cannot reach workcell's broker (their tools and child workers fail); {}",
                Role::Warning.out("warning:"),
                escape(name),
                crate::backend::docker::runtimes::host_uds_hint(&escape(name))
            );
        }
    }
    if let Some(e) = &d.runtimes_error {
        outln!("  runtimes: cannot be listed: {e}");
    }
    if let Some((tag, built)) = &d.host_image {
        outln!("  host base image: {tag} ({})", if *built { "built" } else { "not built yet; the first run builds it locally" });
    }
    if d.error.is_some() && d.docker_host.is_none() && !d.sockets.iter().any(|s| s.exists) {
        outln!("  fix: no Docker or Podman socket exists; install Docker (https://docs.docker.com/engine/install/) or start Podman's socket (systemctl --user start podman.socket) and set DOCKER_HOST=unix://$XDG_RUNTIME_DIR/podman/podman.sock");
    }
}

/// What `doctor` says about the project in (or above) the current directory.
struct ProjectFindings {
    file: std::path::PathBuf,
    /// Workers that load.
    workers: Vec<String>,
    /// Worker files refused, with the refusal (file:line:column).
    broken: Vec<(String, crate::config::ConfigError)>,
    /// The project file itself was refused.
    error: Option<String>,
    /// Zones the worker's user cannot use, as `run` would refuse them (`plan::access`).
    access: Vec<String>,
    /// The project's default image (how an MCP session runs its commands depends on it).
    image: Option<crate::config::ImageRef>,
}

fn project_findings(cli: &Cli) -> Option<ProjectFindings> {
    let cwd = std::env::current_dir().ok()?;
    let file = match &cli.config {
        Some(f) => cwd.join(f),
        None => find_config(&cwd)?,
    };
    Some(match Project::load(Some(&file), &cwd) {
        Ok(p) => {
            let access = access_findings(&p);
            let image = Some(p.defaults.image.clone());
            ProjectFindings { file, workers: p.workers.keys().cloned().collect(), broken: p.broken.into_iter().collect(), error: None, access, image }
        }
        Err(e) => ProjectFindings { file, workers: Vec::new(), broken: Vec::new(), error: Some(e.to_string()), access: Vec::new(), image: None },
    })
}

/// The zones of the project and of each worker that the worker's user could not use, each
/// once (the directories above them too when bwrap works here).
fn access_findings(p: &Project) -> Vec<String> {
    let user = crate::plan::worker_user(&p.dir, p.defaults.user);
    let bwrap = crate::backend::bwrap::probe().is_ok();
    let mut out: Vec<String> = Vec::new();
    for sandbox in std::iter::once(&p.sandbox).chain(p.workers.values().map(|w| &w.sandbox)) {
        if let Err(e) = crate::plan::access::check_sandbox(sandbox, user, bwrap) {
            for r in e.refusals {
                let text = r.to_string();
                if !out.contains(&text) {
                    out.push(text);
                }
            }
        }
    }
    out
}

fn print_project(p: &ProjectFindings) {
    // Messages quote worker-chosen names and paths: escaped before the terminal sees them.
    let esc = |s: &str| crate::term::escape(s).to_string();
    outln!("{} {}", Role::Heading.out("project:"), esc(&p.file.display().to_string()));
    if let Some(e) = &p.error {
        let lines: Vec<String> = e.lines().map(esc).collect();
        outln!("  {} {}", Role::Denied.out("refused:"), lines.join("\n    "));
        return;
    }
    outln!("  workers: {}", if p.workers.is_empty() { "none".to_string() } else { esc(&p.workers.join(", ")) });
    for (name, e) in &p.broken {
        // One escaped line at a time: the refusal's own lines stay lines.
        let text = e.to_string();
        let lines: Vec<String> = text.lines().map(esc).collect();
        outln!("  {} '{}': {}", Role::Denied.out("broken worker"), esc(name), lines.join("\n    "));
    }
    if !p.broken.is_empty() {
        outln!("  (a broken worker file stops only the commands that use that worker)");
    }
    if let Some(image) = &p.image {
        outln!("  mcp sessions: one sandbox per session, commands by {}", crate::run::resident::Exec::summary(image));
        outln!("  shell tool: {}", crate::tools::shell::dialect::Dialect::for_image(image).describe());
    }
    for finding in &p.access {
        // Already escaped where it quotes paths and names. The refusal is its first line;
        // the fixes follow.
        let (refusal, fixes) = finding.split_once('\n').map_or((finding.as_str(), None), |(r, f)| (r, Some(f)));
        outln!("  {}", Role::Denied.out(refusal));
        if let Some(fixes) = fixes {
            outln!("  {}", fixes.replace('\n', "\n  "));
        }
    }
}
