//! The side-effecting half of the Docker backend: create → attach → start → wait →
//! remove, with signals and the timeout racing the run so the container is removed on
//! every path workcell survives.

use std::io::IsTerminal;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::query_parameters::{AttachContainerOptions, CreateContainerOptions, ResizeContainerTTYOptions, WaitContainerOptions};
use bollard::Docker;
use futures_util::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::signal::unix::{signal, SignalKind};

use super::container::remove;
use super::init_error::InitErrorFilter;
use super::{image, network, render, DockerError};
use crate::backend::egress::EgressProxy;
use crate::backend::outcome::Explained;
use crate::backend::supervise::Notes;
use crate::plan::LaunchPlan;

/// Label holding the pid of the workcell process that owns a container; `workcell gc`
/// treats running containers whose owner is gone as orphans.
pub const LABEL_PID: &str = "dev.workcell.pid";

/// How a supervised run ended, before cleanup.
enum Ended {
    Exited(i32),
    /// The runtime could not execute the command (126/127).
    Unrunnable(Explained),
    /// Killed by the kernel for exceeding the memory limit (the exit status, usually 137).
    OomKilled(i32),
    TimedOut,
    Signalled(i32, &'static str),
}

/// Where a run's output goes: workcell's own stdout/stderr, or buffers (the shell tool and
/// child workers, whose output returns to the caller).
#[derive(Clone, Default)]
pub enum Sink {
    #[default]
    Inherit,
    /// Bounded buffers: the output is drained as it comes and only the cap of each stream kept.
    Capture(std::sync::Arc<std::sync::Mutex<crate::backend::capture::Streams>>),
}

/// Runs the plan with its output sent to `sink` and workcell's own words to `notes`; returns
/// the exit status and whether the timeout ended the run.
pub async fn run(
    plan: &LaunchPlan,
    sink: Sink,
    notes: &mut Notes,
    egress: Option<&dyn EgressProxy>,
    returns: Option<&super::ship::Returns>,
) -> Result<(i32, bool), DockerError> {
    // A proxied run needs root for its firewall rules: refused before anything is made.
    if egress.is_some() {
        super::firewall::check()?;
    }
    // Signal handlers first: a Ctrl-C at any point after this still removes the container.
    let sig = |k: SignalKind| signal(k).map_err(|source| DockerError::Io { what: "cannot install a signal handler".into(), source });
    let mut sigint = sig(SignalKind::interrupt())?;
    let mut sigterm = sig(SignalKind::terminate())?;
    let mut sighup = sig(SignalKind::hangup())?;

    let (docker, engine) = super::connect_engine().await?;
    if engine.is_podman() {
        let address = super::client().map(|(a, _)| a).unwrap_or_default();
        for what in super::engine::unenforced(&engine, &address, &plan.limits) {
            notes.say(&format!("workcell: warning: not enforced by rootless Podman on cgroup v1: the {what}"));
        }
    }
    let image = tokio::select! {
        r = image::ensure(&docker, plan) => r?,
        _ = sigint.recv() => return Ok((130, false)),
        _ = sigterm.recv() => return Ok((143, false)),
        _ = sighup.recv() => return Ok((129, false)),
    };
    // Zones are bound as the handles that were checked (see `staging`); the staging mounts
    // go as soon as the container has started, and on every other path with `staging`.
    // A shipped plan binds nothing of this host: its zones go through `ship` instead.
    let (staged, mut staging) = if plan.shipped.is_some() { (plan.clone(), None) } else { super::staging::stage(plan)? };
    let mut settings = render::render(&staged, &image, &super::choose_init(plan));
    super::engine::adapt_for(&mut settings, &engine);
    if let Some(labels) = settings.create.labels.as_mut() {
        labels.insert(LABEL_PID.into(), std::process::id().to_string());
    }
    let name = settings.name.clone();
    let options = CreateContainerOptions { name: Some(name.clone()), ..Default::default() };
    // Before the container exists: whatever kills workcell from here on, the watchdog removes it
    // (and the run's network and firewall rules).
    let reaper = super::reaper::Reaper::start(&name);
    // A proxied run's network, firewall rules and listening proxy, before the container: a
    // signal meanwhile waits in its stream and ends the run at the next step, with cleanup.
    let proxied = match egress {
        None => None,
        Some(proxy) => match network::open(&docker, &name, settings.create.labels.clone().unwrap_or_default(), proxy).await {
            Ok(net) => {
                network::set_proxy_env(settings.create.env.get_or_insert_with(Vec::new), net.proxy());
                Some(net)
            }
            Err(e) => {
                if let Some(r) = reaper {
                    r.disarm();
                }
                return Err(e);
            }
        },
    };
    // Creating is raced with the signals too; if a signal wins, the container may exist
    // already, so cleanup below runs on every path from here on.
    let mut ended = tokio::select! {
        r = create_and_supervise(&docker, &engine, plan, &name, options, settings, sink, &mut staging) => r,
        _ = sigint.recv() => Ok(Ended::Signalled(130, "SIGINT")),
        _ = sigterm.recv() => Ok(Ended::Signalled(143, "SIGTERM")),
        _ = sighup.recv() => Ok(Ended::Signalled(129, "SIGHUP")),
    };
    drop(staging);
    remove(&docker, &name).await;
    if plan.shipped.is_some() {
        // Only a worker that ended by itself has results to deliver (the delivery then
        // judges its exit status as for a copy on this host).
        // Raced with the signals like the run itself: an interrupted download publishes
        // nothing (the run then did not end by itself).
        if let (Ok(Ended::Exited(_)), Some(returns)) = (&ended, returns) {
            tokio::select! {
                () = super::ship::bring_back(&docker, plan, returns) => {}
                _ = sigint.recv() => ended = Ok(Ended::Signalled(130, "SIGINT")),
                _ = sigterm.recv() => ended = Ok(Ended::Signalled(143, "SIGTERM")),
                _ = sighup.recv() => ended = Ok(Ended::Signalled(129, "SIGHUP")),
            }
        }
        super::ship::remove(&docker, &plan.run_id).await;
    }
    if proxied.is_some() {
        network::close(&docker, &name).await;
    }
    if let Some(r) = reaper {
        r.disarm();
    }
    match ended? {
        Ended::Exited(code) => Ok((code, false)),
        Ended::Unrunnable(why) => Ok((notes.explain(&why), false)),
        Ended::OomKilled(code) => {
            notes.explain(&Explained::OutOfMemory(plan.limits.memory_bytes));
            Ok((code, false))
        }
        Ended::TimedOut => Ok((notes.explain(&Explained::TimedOut(plan.timeout())), true)),
        Ended::Signalled(code, name) => {
            notes.say(&format!("workcell: interrupted by {name}; the container was removed"));
            Ok((code, false))
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn create_and_supervise(
    docker: &Docker,
    engine: &super::engine::Engine,
    plan: &LaunchPlan,
    name: &str,
    options: CreateContainerOptions,
    mut settings: render::DockerSettings,
    sink: Sink,
    staging: &mut Option<super::staging::Staging>,
) -> Result<Ended, DockerError> {
    if plan.shipped.is_some() {
        super::ship::send(docker, engine, plan, &mut settings).await?;
    }
    // From create until the start returned: one of the host's few slots (see `slots`).
    let slot = super::slots::acquire().await;
    docker.create_container(Some(options), settings.create).await.map_err(|e| create_error(plan, e))?;

    // Attach before start so no output is lost.
    let attach = AttachContainerOptions { stream: true, stdin: plan.interactive || plan.stdin.is_some(), stdout: true, stderr: true, ..Default::default() };
    let attached =
        docker.attach_container(name, Some(attach)).await.map_err(|e| DockerError::Api { what: format!("attach to container {name}"), source: e })?;
    let mut output = attached.output;
    let mut input = attached.input;
    let command = crate::term::escape(plan.command.first().map(String::as_str).unwrap_or_default()).into_owned();
    let tty = plan.tty;
    let (pipe_docker, pipe_name) = (docker.clone(), name.to_string());
    let mut filter = InitErrorFilter::new(command, tty);
    let verdict = filter.verdict();
    let out_task = tokio::spawn(async move {
        let mut piped = false;
        let mut stdout = tokio::io::stdout();
        let mut stderr = tokio::io::stderr();
        while let Some(frame) = output.next().await {
            let Ok(frame) = frame else { break };
            if let Sink::Capture(buf) = &sink {
                if let Ok(mut b) = buf.lock() {
                    match frame {
                        LogOutput::StdOut { message } | LogOutput::Console { message } => b.stdout.push(&message),
                        LogOutput::StdErr { message } => {
                            let text = filter.push(&message);
                            b.stderr.push(&text);
                        }
                        LogOutput::StdIn { .. } => {}
                    }
                }
                continue;
            }
            // Writes fail only when our own stdout/stderr went away; keep draining so the
            // container is not blocked on a full pipe.
            let _ = match frame {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    // tokio writes on a thread of its own: a write's failure shows at the
                    // flush (or the next write).
                    let r = match stdout.write_all(&message).await {
                        Ok(()) => stdout.flush().await,
                        e => e,
                    };
                    // Our stdout's reader is gone (`workcell run … | head -1`): the worker
                    // gets the SIGPIPE it would get writing to that pipe itself (through
                    // the container's init), instead of writing into the drain for ever.
                    if !piped && r.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
                        piped = true;
                        let opts = bollard::query_parameters::KillContainerOptions { signal: "SIGPIPE".into() };
                        let _ = pipe_docker.kill_container(&pipe_name, Some(opts)).await;
                    }
                    r
                }
                LogOutput::StdErr { message } => {
                    let text = filter.push(&message);
                    let r = stderr.write_all(&text).await;
                    let _ = stderr.flush().await;
                    r
                }
                LogOutput::StdIn { .. } => Ok(()),
            };
        }
        let rest = filter.finish();
        if let Sink::Capture(buf) = &sink {
            if let Ok(mut b) = buf.lock() {
                b.stderr.push(&rest);
            }
            return;
        }
        let _ = stderr.write_all(&rest).await;
        let _ = stderr.flush().await;
    });

    let _raw = if plan.tty && plan.interactive { RawMode::enable() } else { None };
    let given = plan.stdin.clone();
    let in_task = if let Some(bytes) = given {
        // The shell tool's input: written, then closed (the command sees end-of-input).
        Some(tokio::spawn(async move {
            let _ = input.write_all(&bytes).await;
            let _ = input.flush().await;
            let _ = input.shutdown().await;
        }))
    } else {
        plan.interactive.then(|| {
            tokio::spawn(async move {
                let mut stdin = tokio::io::stdin();
                let mut buf = vec![0u8; 8192];
                loop {
                    match stdin.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if input.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                            let _ = input.flush().await;
                        }
                    }
                }
                // Closing our half makes the container see end-of-input (stdin_once).
                let _ = input.shutdown().await;
            })
        })
    };

    let started = docker.start_container(name, None::<bollard::query_parameters::StartContainerOptions>).await;
    drop(slot);
    if let Err(e) = started {
        out_task.abort();
        if let Some(t) = in_task {
            t.abort();
        }
        return start_error(plan, e);
    }
    if let Some(s) = staging.take() {
        s.release();
    }

    let mut winch = if plan.tty { signal(SignalKind::window_change()).ok() } else { None };
    if plan.tty {
        resize(docker, name).await;
    }

    let wait = async {
        let mut s = docker.wait_container(name, None::<WaitContainerOptions>);
        loop {
            tokio::select! {
                item = s.next() => return match item {
                    Some(Ok(r)) => Ok(i32::try_from(r.status_code).unwrap_or(1)),
                    // bollard reports a non-zero exit as an error carrying the code.
                    Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => Ok(i32::try_from(code).unwrap_or(1)),
                    Some(Err(e)) => Err(DockerError::Api { what: format!("wait for container {name}"), source: e }),
                    None => Err(DockerError::Local(format!("the daemon stopped reporting on container {name}"))),
                },
                Some(()) = async { match winch.as_mut() { Some(w) => w.recv().await, None => std::future::pending().await } } => resize(docker, name).await,
            }
        }
    };
    let code = match plan.timeout() {
        Some(t) => match tokio::time::timeout(t, wait).await {
            Ok(r) => r?,
            Err(_) => {
                out_task.abort();
                return Ok(Ended::TimedOut);
            }
        },
        None => wait.await?,
    };
    // The attach stream ends when the container exits; give the last bytes a moment.
    let _ = tokio::time::timeout(Duration::from_secs(2), out_task).await;
    if let Some(t) = in_task {
        t.abort();
    }
    // A SIGKILL status may be the kernel's OOM killer: the daemon records which.
    if code == 137 {
        let inspected = docker.inspect_container(name, None::<bollard::query_parameters::InspectContainerOptions>).await;
        if inspected.ok().and_then(|c| c.state).and_then(|s| s.oom_killed) == Some(true) {
            return Ok(Ended::OomKilled(code));
        }
    }
    Ok(Ended::Exited(verdict.status(code)))
}

/// Tells the container the terminal's size, so full-screen programs draw correctly.
async fn resize(docker: &Docker, name: &str) {
    if let Ok(ws) = rustix::termios::tcgetwinsize(std::io::stdout()) {
        if ws.ws_row > 0 && ws.ws_col > 0 {
            let _ = docker.resize_container_tty(name, ResizeContainerTTYOptions { h: i32::from(ws.ws_row), w: i32::from(ws.ws_col) }).await;
        }
    }
}

fn create_error(plan: &LaunchPlan, e: bollard::errors::Error) -> DockerError {
    let msg = super::api_message(&e);
    if msg.contains("bind source path does not exist") || msg.contains("invalid mount config") {
        let zones: Vec<String> = plan.mounts.iter().map(|m| format!("{} <- {}", m.target, m.source.display())).collect();
        return DockerError::Local(format!(
            "docker cannot mount a zone: {msg}. The daemon must see the same paths as workcell (zones: {}); with a remote or VM-based daemon, share these directories with it",
            zones.join(", ")
        ));
    }
    DockerError::Api { what: "create the container".into(), source: e }
}

/// Maps a start failure to 126/127 when the OCI runtime could not execute the command
/// (possible when the image's own init runs it directly), else to an error.
fn start_error(plan: &LaunchPlan, e: bollard::errors::Error) -> Result<Ended, DockerError> {
    let msg = super::api_message(&e);
    let program = plan.command.first().map(String::as_str).unwrap_or_default();
    let lower = msg.to_ascii_lowercase();
    if lower.contains("executable file not found") || (lower.contains("exec:") && lower.contains("no such file or directory")) {
        return Ok(Ended::Unrunnable(Explained::NotFound(program.to_string())));
    }
    if lower.contains("exec:") && lower.contains("permission denied") {
        return Ok(Ended::Unrunnable(Explained::NotExecutable(program.to_string())));
    }
    Err(DockerError::Api { what: "start the container".into(), source: e })
}

/// The terminal in raw mode for `-it`, restored on drop, so keys (Ctrl-C included) go to
/// the worker as with `docker run -it`.
struct RawMode {
    saved: rustix::termios::Termios,
}

impl RawMode {
    fn enable() -> Option<RawMode> {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return None;
        }
        let saved = rustix::termios::tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = rustix::termios::tcsetattr(std::io::stdin(), rustix::termios::OptionalActions::Now, &self.saved);
    }
}
