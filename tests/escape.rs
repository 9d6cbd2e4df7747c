//! A hostile worker tries to get out, on every backend: act as host root, leave set-uid-root
//! programs behind, write kernel settings, re-aim a checked directory between the check and
//! the bind (delegation and expansion), rewrite the project's own control files, or keep
//! the network a child worker gave up. Each test asserts what the worker could and could not
//! do on the host.

mod support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use workcell::backend::{self, Attached, Finished, Output, Selected};
use workcell::config::{BackendChoice, Project};
use workcell::plan::{LaunchPlan, Overrides};
use workcell::sandbox::DeriveSpec;

fn selected(backend: &str) -> Selected {
    match backend {
        "bwrap" => Selected::Bwrap,
        "docker" => Selected::Docker,
        other => panic!("unknown backend {other}"),
    }
}

/// A project in a fresh directory (owned by the test worker) with `config` and, beside the
/// project, `outside/` holding a host secret that no zone contains.
struct Scene {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    dir: PathBuf,
}

impl Scene {
    fn new(config: &str) -> Scene {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let dir = root.join("proj");
        std::fs::create_dir_all(dir.join("out/sub")).expect("mkdir");
        std::fs::create_dir_all(root.join("outside")).expect("mkdir");
        std::fs::write(dir.join("out/sub/marker.txt"), "CHECKED\n").expect("write");
        std::fs::write(root.join("outside/marker.txt"), "OUTSIDE-SECRET\n").expect("write");
        std::fs::write(dir.join("workcell.yaml"), config).expect("config");
        support::give_to_worker(&root);
        // The outside directory is root's in CI, as a host directory would be; a worker
        // running as any uid may still read it, so reading it proves an escape.
        Scene { _tmp: tmp, root, dir }
    }

    fn outside(&self) -> PathBuf {
        self.root.join("outside")
    }

    fn project(&self) -> Project {
        Project::load(Some(&self.dir.join("workcell.yaml")), &self.dir).expect("project loads")
    }
}

const OUT_RW: &str = "sandbox:\n  zones:\n    out: {path: ./out, mode: rw, approval: {write: preApproved, delete: preApproved}}\n";

fn run(backend: &str, plan: &LaunchPlan) -> Finished {
    let out = backend::run(selected(backend), plan, Output::Capture, Attached::default()).expect("the run starts");
    eprintln!("exit {}\nstdout: {}\nstderr: {}", out.exit_code, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    out
}

fn sh(script: &str) -> Overrides {
    Overrides { command: Some(vec!["sh".into(), "-c".into(), script.into()]), ..Overrides::default() }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every file below `dir` (not following links).
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_dir() => todo.push(p),
                Ok(_) => out.push(p),
                Err(_) => {}
            }
        }
    }
    out
}

mod body {
    use super::*;

    /// The worker never holds host uid 0, and what it leaves behind is never set-uid root.
    pub fn never_host_root(backend: &str) {
        let scene = Scene::new(OUT_RW);
        let project = scene.project();
        let script = "id -u; cp /bin/sh /out/rootsh && chmod 4755 /out/rootsh; chown 0:0 /out/rootsh; chmod 4755 /out/rootsh; touch /out/made; ls -ln /out";
        let plan = LaunchPlan::build(&project, None, &project.sandbox, &sh(script)).expect("plan");
        let out = run(backend, &plan);
        assert_eq!(out.exit_code, 0);
        let uid_inside = text(&out.stdout).lines().next().unwrap_or_default().trim().to_string();
        assert_ne!(uid_inside, "0", "the worker runs as uid 0 inside");
        let made = std::fs::metadata(scene.dir.join("out/made")).expect("the worker wrote into its rw zone");
        assert_ne!(made.uid(), 0, "a file the worker wrote belongs to host root");
        assert_eq!(made.uid(), support::worker_uid());
        for f in files_below(&scene.dir) {
            let m = std::fs::symlink_metadata(&f).expect("meta");
            let setid = m.permissions().mode() & 0o6000 != 0;
            assert!(!(setid && (m.uid() == 0 || m.gid() == 0)), "set-id root file left in a zone: {} (mode {:o}, owner {})", f.display(), m.mode(), m.uid());
        }
    }

    /// Kernel settings stay read-only: writing one (with its current value, so a broken
    /// boundary changes nothing) fails.
    pub fn proc_sys_not_writable(backend: &str) {
        let scene = Scene::new(OUT_RW);
        let project = scene.project();
        let before = std::fs::read_to_string("/proc/sys/fs/lease-break-time").expect("host sysctl");
        let script = "v=$(cat /proc/sys/fs/lease-break-time); if echo $v > /proc/sys/fs/lease-break-time; then echo WROTE-SYSCTL; fi; \
                      if echo '|/out/x' > /proc/sys/kernel/core_pattern; then echo WROTE-CORE-PATTERN; fi; \
                      if [ -w /proc/sysrq-trigger ]; then echo SYSRQ-WRITABLE; fi; exit 0";
        let plan = LaunchPlan::build(&project, None, &project.sandbox, &sh(script)).expect("plan");
        let core_before = std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("core_pattern");
        let out = run(backend, &plan);
        let stdout = text(&out.stdout);
        assert!(!stdout.contains("WROTE"), "the worker wrote a kernel setting: {stdout}");
        assert!(!stdout.contains("SYSRQ-WRITABLE"), "{stdout}");
        assert_eq!(std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("core_pattern"), core_before);
        assert_eq!(std::fs::read_to_string("/proc/sys/fs/lease-break-time").expect("host sysctl"), before);
    }

    /// The directory a child was granted is swapped for a link to a host directory after
    /// the grant was checked and before the child starts: the child must get the directory
    /// that was checked (deterministic: the swap happens exactly in the window).
    pub fn swapped_grant_binds_what_was_checked(backend: &str) {
        let scene = Scene::new(OUT_RW);
        let project = scene.project();
        let spec = DeriveSpec { allow_read: Some(vec!["/out/sub".into()]), allow_write: Some(vec!["/out/sub".into()]), ..DeriveSpec::default() };
        let child = project.sandbox.derive(&spec).expect("derive");
        // The parent worker's move: the checked directory away, a link to the host in its place.
        std::fs::rename(scene.dir.join("out/sub"), scene.dir.join("out/sub.checked")).expect("rename");
        std::os::unix::fs::symlink(scene.outside(), scene.dir.join("out/sub")).expect("symlink");
        let plan = LaunchPlan::build(&project, None, &child, &sh("cat /out/sub/marker.txt; echo planted > /out/sub/planted; exit 0")).expect("plan");
        let out = run(backend, &plan);
        let stdout = text(&out.stdout);
        assert!(!stdout.contains("OUTSIDE-SECRET"), "the child read a host directory outside every zone: {stdout}");
        assert!(!scene.outside().join("planted").exists(), "the child wrote into a host directory outside every zone");
        assert!(stdout.contains("CHECKED"), "the child should see the directory that was checked: {stdout}");
        assert!(scene.dir.join("out/sub.checked/planted").exists(), "the write should land in the checked directory");
    }

    /// The same swap, raced: a thread keeps exchanging the granted directory with a link to
    /// the host while grants are derived, planned and run.
    pub fn swap_race_never_reaches_the_host(backend: &str, rounds: usize) {
        let scene = Scene::new(OUT_RW);
        let project = scene.project();
        let link = scene.dir.join("out/link");
        std::os::unix::fs::symlink(scene.outside(), &link).expect("symlink");
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, a, b) = (stop.clone(), scene.dir.join("out/sub"), link.clone());
            std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if rustix::fs::renameat_with(rustix::fs::CWD, &a, rustix::fs::CWD, &b, rustix::fs::RenameFlags::EXCHANGE).is_ok() {
                        swaps += 1;
                    }
                }
                swaps
            })
        };
        let spec = DeriveSpec { allow_read: Some(vec!["/out/sub".into()]), allow_write: Some(vec!["/out/sub".into()]), ..DeriveSpec::default() };
        let mut checked = 0;
        for _ in 0..rounds {
            // A grant checked while the name pointed at the link is refused (that is the
            // check working): retry until one is granted, then race the bind.
            let Some(child) = (0..100_000).find_map(|_| project.sandbox.derive(&spec).ok()) else { continue };
            let plan =
                LaunchPlan::build(&project, None, &child, &sh("cat /out/sub/marker.txt 2>/dev/null; echo planted > /out/sub/planted 2>/dev/null; exit 0"))
                    .expect("plan");
            checked += 1;
            let out = run(backend, &plan);
            assert!(!text(&out.stdout).contains("OUTSIDE-SECRET"), "round {checked}: the child read the host directory");
            assert!(!scene.outside().join("planted").exists(), "round {checked}: the child wrote into the host directory");
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().expect("swapper");
        eprintln!("{checked} grants run while the directory was swapped {swaps} times");
        assert!(checked == rounds && swaps > 0, "the race ran {checked} of {rounds} rounds");
    }

    /// `request_access` for a directory in the worker's own zone; while the person reads the
    /// prompt, the worker swaps it for a link to a host directory. The grant is what the
    /// prompt showed, for the tools and for the backend alike.
    pub fn expansion_grants_what_was_shown(backend: &str) {
        let config = format!("{OUT_RW}  dynamic: true\n");
        let scene = Scene::new(&config);
        let project = Arc::new(scene.project());
        let sub = scene.dir.join("out/sub");
        let shown = Arc::new(std::sync::Mutex::new(Vec::new()));
        let prompter = Swapper { sub: sub.clone(), outside: scene.outside(), shown: shown.clone() };
        let approver = workcell::tools::approval::Approver::new(workcell::tools::approval::ApprovalMode::Interactive, Some(Box::new(prompter)));
        let choice = if backend == "bwrap" { BackendChoice::Bwrap } else { BackendChoice::Docker };
        let runner = workcell::run::runner::BackendRunner::new(project.clone(), choice, workcell::tools::approval::ApprovalMode::Strict);
        let caller = workcell::tools::service::Caller { worker: None, chain: Vec::new() };
        let audit = workcell::audit::AuditLog::new(&scene.dir, "escape-test");
        let service = workcell::tools::service::ToolService::new(project.clone(), caller, project.sandbox.clone(), approver, audit, Arc::new(runner));
        service.request_access(&sub.to_string_lossy(), "ro").expect("granted");
        let prompts = shown.lock().expect("prompts").clone();
        assert_eq!(prompts.len(), 1);
        assert!(prompts[0].contains(&*sub.to_string_lossy()), "the prompt should name the directory: {prompts:?}");
        let read = service.read_file("/granted-1/marker.txt", 1000, 0).expect("read through the grant");
        assert!(read.to_string().contains("CHECKED") && !read.to_string().contains("OUTSIDE"), "the tools read another directory than the one shown: {read}");
        let plan = LaunchPlan::build(&project, None, &service.sandbox(), &sh("cat /granted-1/marker.txt")).expect("plan");
        let out = run(backend, &plan);
        let stdout = text(&out.stdout);
        assert!(stdout.contains("CHECKED") && !stdout.contains("OUTSIDE-SECRET"), "the worker got another directory than the one shown: {stdout}");
    }

    /// Answers yes, after swapping the requested directory for a link to `outside`.
    struct Swapper {
        sub: PathBuf,
        outside: PathBuf,
        shown: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl workcell::tools::approval::Prompter for Swapper {
        fn ask(
            &mut self,
            req: &workcell::tools::approval::ApprovalRequest,
        ) -> Result<workcell::tools::approval::Choice, workcell::tools::approval::PromptError> {
            use workcell::tools::approval::PromptError;
            self.shown.lock().map_err(|e| PromptError::NoAnswer(e.to_string()))?.push(req.subject.clone());
            let moved = self.sub.with_extension("checked");
            std::fs::rename(&self.sub, &moved).map_err(|e| PromptError::NoAnswer(e.to_string()))?;
            std::os::unix::fs::symlink(&self.outside, &self.sub).map_err(|e| PromptError::NoAnswer(e.to_string()))?;
            Ok(workcell::tools::approval::Choice::Once)
        }
    }

    /// With the whole project writable (root form), the worker cannot rewrite the config,
    /// add worker files, or plant a link where workcell keeps its audit log.
    pub fn control_files_stay_read_only(backend: &str) {
        let config = "sandbox:\n  root: {root: ., readonly: false, approval: {write: preApproved, delete: preApproved}}\n";
        let scene = Scene::new(config);
        let project = scene.project();
        let script = format!(
            "cd /sandbox; echo 'sandbox: {{root: {{root: /}}}}' > workcell.yaml; mv workcell.yaml moved.yaml; \
             mkdir -p workers; echo x > workers/evil.worker; rm -rf .workcell/audit.jsonl; ln -s {} .workcell/audit.jsonl; \
             rm -rf .workcell; ln -s {} .workcell; echo ok > allowed.txt; exit 0",
            scene.outside().join("marker.txt").display(),
            scene.outside().display()
        );
        let plan = LaunchPlan::build(&project, None, &project.sandbox, &sh(&script)).expect("plan");
        let out = run(backend, &plan);
        assert_eq!(out.exit_code, 0);
        assert!(scene.dir.join("allowed.txt").exists(), "the rest of the project stays writable");
        assert_eq!(std::fs::read_to_string(scene.dir.join("workcell.yaml")).expect("config"), config, "the worker rewrote workcell.yaml");
        assert!(!scene.dir.join("moved.yaml").exists());
        assert!(!scene.dir.join("workers/evil.worker").exists(), "the worker added a worker file");
        let dot = std::fs::symlink_metadata(scene.dir.join(".workcell")).expect(".workcell");
        assert!(dot.is_dir(), ".workcell was replaced");
        assert!(std::fs::symlink_metadata(scene.dir.join(".workcell/audit.jsonl")).map(|m| !m.file_type().is_symlink()).unwrap_or(true));
        assert_eq!(std::fs::read_to_string(scene.outside().join("marker.txt")).expect("marker"), "OUTSIDE-SECRET\n");
    }

    /// A child worker that says `network: false` gets no network, even when its caller has
    /// one: only the loopback interface.
    pub fn child_keeps_network_off(backend: &str) {
        let config = "sandbox:\n  network: true\n  zones:\n    out: {path: ./out, mode: rw}\n";
        let scene = Scene::new(config);
        let worker = "---\ndescription: offline child\ncommand: [sh, -c, 'cat /proc/net/dev']\nnetwork: false\nsandbox: {zones: [{name: out, mode: ro}]}\n---\nno network\n";
        std::fs::create_dir_all(scene.dir.join("workers")).expect("mkdir");
        std::fs::write(scene.dir.join("workers/offline.worker"), worker).expect("worker");
        support::give_to_worker(&scene.dir);
        let project = Arc::new(scene.project());
        let choice = if backend == "bwrap" { BackendChoice::Bwrap } else { BackendChoice::Docker };
        let runner = workcell::run::runner::BackendRunner::new(project.clone(), choice, workcell::tools::approval::ApprovalMode::ApproveAll);
        let caller = workcell::tools::service::Caller { worker: None, chain: Vec::new() };
        let service = runner.service_for(caller, project.sandbox.clone(), "escape-test");
        let result = service.call_worker("offline", "", &[]).expect("the child runs");
        let output = result["output"].as_str().unwrap_or_default().to_string();
        eprintln!("{result}");
        let interfaces: Vec<&str> = output.lines().skip(2).filter_map(|l| l.split(':').next()).map(str::trim).collect();
        assert!(!interfaces.is_empty(), "no interface list: {output}");
        assert_eq!(interfaces, ["lo"], "the child has more than loopback: {output}");
    }
}

macro_rules! backend_suite {
    ($backend:ident) => {
        mod $backend {
            fn ready() -> bool {
                super::support::backend_ready(stringify!($backend))
            }

            #[test]
            fn never_host_root() {
                if ready() {
                    super::body::never_host_root(stringify!($backend));
                }
            }

            #[test]
            fn proc_sys_not_writable() {
                if ready() {
                    super::body::proc_sys_not_writable(stringify!($backend));
                }
            }

            #[test]
            fn swapped_grant_binds_what_was_checked() {
                if ready() {
                    super::body::swapped_grant_binds_what_was_checked(stringify!($backend));
                }
            }

            #[test]
            fn swap_race_never_reaches_the_host() {
                if ready() {
                    let rounds = if stringify!($backend) == "docker" { 15 } else { 40 };
                    super::body::swap_race_never_reaches_the_host(stringify!($backend), rounds);
                }
            }

            #[test]
            fn expansion_grants_what_was_shown() {
                if ready() {
                    super::body::expansion_grants_what_was_shown(stringify!($backend));
                }
            }

            #[test]
            fn control_files_stay_read_only() {
                if ready() {
                    super::body::control_files_stay_read_only(stringify!($backend));
                }
            }

            #[test]
            fn child_keeps_network_off() {
                if ready() {
                    super::body::child_keeps_network_off(stringify!($backend));
                }
            }
        }
    };
}

backend_suite!(bwrap);
backend_suite!(docker);

/// Under bwrap the worker's user resolves each zone's path: a zone behind a directory that
/// user cannot search is refused before anything starts, saying what to change.
#[test]
fn bwrap_zone_behind_a_closed_directory_says_what_to_do() {
    if !support::backend_ready("bwrap") || rustix::process::geteuid().as_raw() != 0 {
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let closed = std::fs::canonicalize(tmp.path()).expect("canonical");
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let dir = closed.join("proj");
    std::fs::create_dir_all(dir.join("in")).expect("mkdir");
    std::fs::write(dir.join("workcell.yaml"), "sandbox:\n  zones:\n    in: {path: ./in, mode: ro}\n").expect("config");
    // Root owns everything here, so the worker runs as 65534.
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("workcell"))
        .current_dir(&dir)
        .args(["run", "--backend", "bwrap", "--", "true"])
        .output()
        .expect("workcell");
    let stderr = text(&out.stderr);
    // Refused before anything starts (`plan::access`), naming the directory and the fixes.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot reach zone 'in'") && stderr.contains(&closed.display().to_string()) && stderr.contains("chmod o+x"), "{stderr}");
}

/// The broker token never appears on a command line (any local user can read every
/// process's `/proc/PID/cmdline`); the worker still receives it in its environment.
#[test]
fn bwrap_broker_token_is_on_no_command_line() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let p = support::Proj::new();
    let token_file = p.dir.join("out/token");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_workcell"))
        .current_dir(&p.dir)
        .args([
            "run",
            "--backend",
            "bwrap",
            "--zone",
            "out=out:rw",
            "--",
            "sh",
            "-c",
            "echo \"$WORKCELL_TOKEN\" > /out/token.tmp; mv /out/token.tmp /out/token; sleep 5",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("workcell runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !token_file.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let token = std::fs::read_to_string(&token_file).expect("the worker wrote its token").trim().to_string();
    assert_eq!(token.len(), 64, "the worker has the token: {token:?}");
    // While the worker runs: no process's command line carries it.
    let carriers: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok().map(|c| (e.file_name(), c)))
        .filter(|(_, c)| c.windows(token.len()).any(|w| w == token.as_bytes()))
        .map(|(pid, c)| format!("{}: {}", pid.to_string_lossy(), String::from_utf8_lossy(&c).replace('\0', " ")))
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert!(carriers.is_empty(), "the token is on these command lines: {carriers:?}");
}
