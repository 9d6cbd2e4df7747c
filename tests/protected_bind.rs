//! Files the host runs (git hooks and config, editor tasks, shell start-up files) that exist
//! in a writable zone stay read-only during a run: a hostile worker tries to change, move,
//! remove and replace them, on bwrap and docker, and the person's own `git` on the host
//! afterwards runs nothing of the worker's. The worker still uses git normally.
//!
//! Protected paths the worker *creates* are the after-run check's (moved aside); they are
//! not asserted here.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use workcell::config::Project;
use workcell::plan::{LaunchPlan, Overrides, PlanError};

const PREAPPROVED: &str = "approval: {write: preApproved, delete: preApproved}";

/// `git ARGS` in `dir` on the host, as the owner of `dir` (the person), with no system or
/// global configuration of the test machine's.
fn git(dir: &Path, args: &[&str]) -> Output {
    support::as_person(dir, &dir.parent().expect("parent").join(".githome"), "git", args)
}

#[track_caller]
fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = git(dir, args);
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A project in a temp dir: `workcell.yaml` as given, owned by the test worker.
struct Proj {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
}

impl Proj {
    fn new(config: &str) -> Proj {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::canonicalize(tmp.path()).expect("canonical").join("proj");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("workcell.yaml"), config).expect("config");
        support::give_to_worker(&dir);
        Proj { _tmp: tmp, dir }
    }

    /// A git repository at `rel` with one commit, made by the person on the host.
    fn repo(&self, rel: &str) -> PathBuf {
        let d = self.dir.join(rel);
        std::fs::create_dir_all(&d).expect("mkdir");
        support::give_to_worker(&d);
        git_ok(&d, &["init", "-q", "-b", "main"]);
        std::fs::write(d.join("README"), "hello\n").expect("write");
        support::give_to_worker(&d);
        git_ok(&d, &["add", "README"]);
        git_ok(&d, &["commit", "-q", "-m", "first"]);
        d
    }

    fn write(&self, rel: &str, text: &str) {
        let p = self.dir.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
        support::give_to_worker(&self.dir);
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }

    fn run(&self, backend: &str, script: &str) -> Output {
        let out = Command::new(assert_cmd::cargo::cargo_bin("workcell"))
            .current_dir(&self.dir)
            .args(["run", "--backend", backend, "--no-broker", "--", "sh", "-c", script])
            .output()
            .expect("workcell");
        eprintln!("stdout: {}\nstderr: {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        out
    }

    fn plan(&self) -> Result<LaunchPlan, PlanError> {
        let project = Project::load(Some(&self.dir.join("workcell.yaml")), &self.dir).expect("project");
        let ov = Overrides { command: Some(vec!["true".into()]), ..Overrides::default() };
        LaunchPlan::build(&project, None, &project.sandbox, &ov)
    }
}

/// A shell line that reports `WROTE:what` when `cmd` succeeds.
fn attempt(what: &str, cmd: &str) -> String {
    format!("if {cmd} 2>/dev/null; then echo WROTE:{what}; fi; ")
}

/// What a hook or fsmonitor planted by the worker would do on the host: touch `marker`.
fn payload(marker: &Path) -> String {
    format!("#!/bin/sh\ntouch {}\n", marker.display())
}

/// The attacks on one repository at `at` (a path inside the worker), its host directory `repo`.
fn attacks(at: &str, marker: &Path) -> String {
    let hook = payload(marker).replace('\n', "\\n");
    let fsmon = format!("[core]\\n\\tfsmonitor = \\\"touch {}\\\"\\n", marker.display());
    [
        attempt("hook", &format!("printf '{hook}' > {at}/.git/hooks/post-checkout")),
        attempt("hook-chmod", &format!("chmod +x {at}/.git/hooks/post-checkout")),
        attempt("config", &format!("printf '{fsmon}' >> {at}/.git/config")),
        attempt("config-git", &format!("git -C {at} config core.fsmonitor 'touch {}'", marker.display())),
        attempt("mv-config", &format!("mv {at}/.git/config {at}/config.away")),
        attempt("rm-config", &format!("rm -f {at}/.git/config")),
        attempt("rm-hooks", &format!("rm -rf {at}/.git/hooks")),
        attempt("mv-hooks", &format!("mv {at}/.git/hooks {at}/.git/hooks.away")),
        attempt("mv-git", &format!("mv {at}/.git {at}/.git.away")),
        // Move the repository's parent directory aside and put a repository of the worker's
        // in its place (the binds went with it, or the new one is free).
        attempt("replace-git", &format!("mkdir -p {at}/.gitnew/hooks && printf '{hook}' > {at}/.gitnew/hooks/post-checkout && mv -T {at}/.gitnew {at}/.git")),
        attempt("ln-config", &format!("ln -f {at}/.git/config {at}/hardlink")),
    ]
    .concat()
}

/// The person's git, on the host, after the run: `status` and `checkout` in `repo`, then the
/// marker must not exist.
#[track_caller]
fn host_git_runs_nothing(repo: &Path, marker: &Path) {
    git_ok(repo, &["status", "--short"]);
    git_ok(repo, &["checkout", "-q", "-b", &format!("person-{}", support::unique())]);
    git_ok(repo, &["checkout", "-q", "-"]);
    assert!(!marker.exists(), "the person's git ran the worker's code in {}", repo.display());
}

mod body {
    use super::*;

    /// A rw zone holding a repository with a nested repository, an existing `.vscode` and
    /// a home-like zone with `.bashrc`: every change fails, the host files are unchanged,
    /// the host's git runs nothing; the worker's own commits and branches still work.
    pub fn zone_repository(backend: &str) {
        let p = Proj::new(&format!("sandbox:\n  zones:\n    data: {{mode: rw, {PREAPPROVED}}}\n    home: {{mode: rw, {PREAPPROVED}}}\n"));
        let repo = p.repo("data");
        let sub = p.repo("data/sub");
        p.write("data/.vscode/tasks.json", "{\"version\": \"2.0.0\"}\n");
        p.write("home/.bashrc", "# the person's\n");
        // A linked worktree: its `.git` file and its `commondir` decide which repository
        // (and config) git uses there.
        git_ok(&repo, &["worktree", "add", "-q", "-b", "wt", &p.dir.join("data/wt").display().to_string()]);
        let wt = p.dir.join("data/wt");
        let marker = p.dir.parent().expect("parent").join("MARKER");
        let keep = ["data/.git/config", "data/sub/.git/config", "data/.vscode/tasks.json", "home/.bashrc", "data/.git/worktrees/wt/commondir", "data/wt/.git"];
        let before: Vec<Vec<u8>> = keep.iter().map(|f| p.read(f)).collect();
        let hooks_before = std::fs::read_dir(repo.join(".git/hooks")).expect("hooks").count();
        let script = [
            attacks("/data", &marker),
            attacks("/data/sub", &marker),
            attempt("vscode", "echo '{\"tasks\": [{\"runOptions\": {\"runOn\": \"folderOpen\"}}]}' > /data/.vscode/tasks.json"),
            attempt("vscode-new", "echo x > /data/.vscode/settings.json"),
            attempt("mv-vscode", "mv /data/.vscode /data/vscode.away"),
            attempt("bashrc", "echo 'touch /tmp/x' >> /home/.bashrc"),
            attempt("mv-bashrc", "mv /home/.bashrc /home/bashrc.away"),
            attempt("mv-sub", "mv /data/sub /data/sub.away"),
            // An evil common directory for the worktree, then the pointers aimed at it.
            "cp -r /data/.git /data/evil 2>/dev/null; printf '[core]\\n\\tfsmonitor = touch MARK\\n' >> /data/evil/config; "
                .replace("MARK", &marker.display().to_string()),
            attempt("commondir", "echo /data/evil > /data/.git/worktrees/wt/commondir"),
            attempt("gitfile", "echo 'gitdir: /data/evil' > /data/wt/.git"),
            attempt("mv-gitfile", "mv /data/wt/.git /data/wt/git.away"),
            // The worker's own work: objects, refs, index and HEAD stay writable.
            "cd /data && echo worker > w.txt && git add w.txt && git -c user.name=w -c user.email=w@x commit -q -m from-worker && echo COMMITTED; ".into(),
            "git checkout -q -b worker-branch && echo BRANCHED; git checkout -q main; ".into(),
        ]
        .concat();
        let out = p.run(backend, &script);
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("WROTE:"), "a protected path changed:\n{text}");
        assert!(text.contains("COMMITTED") && text.contains("BRANCHED"), "git in the sandbox failed:\n{text}");
        for (f, b) in keep.iter().zip(&before) {
            assert_eq!(&p.read(f), b, "{f} changed");
        }
        assert_eq!(std::fs::read_dir(repo.join(".git/hooks")).expect("hooks").count(), hooks_before);
        assert!(!repo.join(".git/hooks/post-checkout").exists() && !sub.join(".git/hooks/post-checkout").exists());
        assert!(!p.dir.join("data/.vscode/settings.json").exists());
        host_git_runs_nothing(&repo, &marker);
        host_git_runs_nothing(&sub, &marker);
        git_ok(&wt, &["status", "--short"]);
        assert!(!marker.exists(), "the person's git ran the worker's code in the worktree");
        assert!(git_ok(&repo, &["log", "--format=%s", "main"]).lines().any(|l| l == "from-worker"), "the worker's commit is missing");
        assert!(git_ok(&repo, &["branch", "--list", "worker-branch"]).contains("worker-branch"));
    }

    /// The root form, the project itself writable and a repository: the same holds.
    pub fn root_form_repository(backend: &str) {
        let p = Proj::new(&format!("sandbox:\n  root: {{root: ., readonly: false, {PREAPPROVED}}}\n"));
        let repo = p.repo(".");
        let marker = p.dir.parent().expect("parent").join("MARKER");
        let before = p.read(".git/config");
        let script = [
            attacks("/sandbox", &marker),
            "cd /sandbox && echo w > w.txt && git add w.txt && git -c user.name=w -c user.email=w@x commit -q -m from-worker && echo COMMITTED; ".into(),
        ]
        .concat();
        let out = p.run(backend, &script);
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("WROTE:"), "a protected path changed:\n{text}");
        assert!(text.contains("COMMITTED"), "git in the sandbox failed:\n{text}");
        assert_eq!(p.read(".git/config"), before);
        host_git_runs_nothing(&repo, &marker);
    }

    /// `unprotect: [.vscode]` gives the zone's `.vscode` back to the worker, and only that.
    pub fn unprotected_entry_is_writable(backend: &str) {
        let p = Proj::new(&format!("sandbox:\n  zones:\n    data: {{mode: rw, {PREAPPROVED}, unprotect: [.vscode]}}\n"));
        p.repo("data");
        p.write("data/.vscode/tasks.json", "{}\n");
        let script = [attempt("vscode", "echo changed > /data/.vscode/tasks.json"), attempt("config", "echo x >> /data/.git/config")].concat();
        let out = p.run(backend, &script);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("WROTE:vscode") && !text.contains("WROTE:config"), "{text}");
        assert_eq!(p.read("data/.vscode/tasks.json"), b"changed\n");
    }
}

support::backend_suite!(bwrap, "bwrap", [zone_repository, root_form_repository, unprotected_entry_is_writable]);
support::backend_suite!(docker, "docker", [zone_repository, root_form_repository, unprotected_entry_is_writable]);

/// `plan` names, per writable zone, the entries in force, those turned off and what is
/// bound read-only; `--json` the same.
#[test]
fn plan_shows_protection() {
    let p =
        Proj::new(&format!("sandbox:\n  protect: [Makefile]\n  zones:\n    data: {{mode: rw, {PREAPPROVED}, unprotect: [.vscode]}}\n    ro: {{mode: ro}}\n"));
    p.repo("data");
    std::fs::create_dir_all(p.dir.join("ro")).expect("mkdir");
    p.write("data/Makefile", "all:\n");
    p.write("data/.vscode/tasks.json", "{}\n");
    let out = support::workcell_in(&p.dir).args(["plan", "--", "true"]).output().expect("plan");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let section = text.split("protected (").nth(1).expect("a protected section").split("limits:").next().expect("section");
    assert!(section.contains("  /data\n"), "{section}");
    assert!(!section.contains("/ro"), "a read-only zone has nothing to protect: {section}");
    assert!(section.contains("turned off:     .vscode (unprotect)"), "{section}");
    let entries = section.lines().find(|l| l.trim_start().starts_with("entries:")).expect("entries line");
    assert!(entries.contains(".git/hooks") && entries.contains("Makefile") && !entries.contains(".vscode"), "{entries}");
    let bound = section.lines().find(|l| l.trim_start().starts_with("bound ro:")).expect("bound line");
    assert!(bound.contains(".git/config") && bound.contains(".git/hooks") && bound.contains("Makefile") && !bound.contains(".vscode"), "{bound}");
    let out = support::workcell_in(&p.dir).args(["plan", "--json", "--", "true"]).output().expect("plan");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let area = &v["protected"][0];
    assert_eq!(area["target"], "/data");
    assert_eq!(area["unprotected"], serde_json::json!([".vscode"]));
    let bound: Vec<&str> = area["bound"].as_array().expect("bound").iter().filter_map(|b| b["path"].as_str()).collect();
    assert!(bound.contains(&".git/config") && bound.contains(&"Makefile"), "{bound:?}");
}

/// A `.git/hooks` that is a link (a person's shared hooks folder) is not bound (a bind
/// would follow it, and the worker may replace a link in its directory): it is left to the
/// check after the run. Links to the outside are never followed by the walk.
#[test]
fn links_are_not_bound_or_followed() {
    let p = Proj::new(&format!("sandbox:\n  zones:\n    data: {{mode: rw, {PREAPPROVED}}}\n"));
    let repo = p.repo("data");
    // A link into a protected place elsewhere is not followed by the walk.
    let outside = p.dir.parent().expect("parent").join("outside");
    std::fs::create_dir_all(outside.join("deep/.git/hooks")).expect("mkdir");
    std::os::unix::fs::symlink(&outside, repo.join("elsewhere")).expect("link");
    let plan = p.plan().expect("plan");
    let mut bound: Vec<&str> = plan.protected[0].bound.iter().map(|b| b.path.as_str()).collect();
    bound.sort();
    assert_eq!(bound, [".git/config", ".git/hooks"], "{bound:?}");
    assert!(plan.mounts.iter().all(|m| !m.source.starts_with(&outside)), "{:?}", plan.mounts);
    // A protected path that is itself a link cannot be kept read-only: the run is refused,
    // saying how to keep it.
    std::fs::rename(repo.join(".git/hooks"), repo.join("shared-hooks")).expect("mv");
    std::os::unix::fs::symlink("../shared-hooks", repo.join(".git/hooks")).expect("link");
    let e = p.plan().expect_err("a linked .git/hooks was accepted");
    let msg = e.to_string();
    assert!(matches!(e, PlanError::Protected { .. }), "{msg}");
    assert!(msg.contains(".git/hooks") && msg.contains("symbolic link") && msg.contains("unprotect"), "{msg}");
}

/// A protected file with another name (a hard link made before the run) could be written
/// through that name: the run is refused, naming the file and how to fix it.
#[test]
fn hard_linked_protected_file_is_refused() {
    let p = Proj::new(&format!("sandbox:\n  zones:\n    data: {{mode: rw, {PREAPPROVED}}}\n"));
    let repo = p.repo("data");
    std::fs::hard_link(repo.join(".git/config"), repo.join("notes.txt")).expect("link");
    let e = p.plan().expect_err("a hard-linked .git/config was accepted");
    let msg = e.to_string();
    assert!(matches!(e, PlanError::Protected { .. }), "{msg}");
    assert!(msg.contains("/data") && msg.contains(".git/config") && msg.contains("hard links"), "{msg}");
    // Inside a bound directory too.
    std::fs::remove_file(repo.join("notes.txt")).expect("rm");
    std::fs::write(repo.join("hook"), "#!/bin/sh\n").expect("write");
    std::fs::hard_link(repo.join("hook"), repo.join(".git/hooks/pre-commit")).expect("link");
    let msg = p.plan().expect_err("a hard-linked hook was accepted").to_string();
    assert!(msg.contains(".git/hooks/pre-commit"), "{msg}");
}

/// Past its bounds the walk refuses the run, naming the zone and what to do, instead of
/// leaving some protected paths writable.
#[test]
fn too_many_protected_paths_refuse_the_run() {
    let p = Proj::new(&format!("sandbox:\n  zones:\n    data: {{mode: rw, {PREAPPROVED}}}\n"));
    for i in 0..=workcell::plan::protected::MAX_BOUND {
        p.write(&format!("data/d{i}/.envrc"), "x\n");
    }
    let msg = p.plan().expect_err("too many protected paths were accepted").to_string();
    assert!(msg.contains("/data") && msg.contains(&format!("more than {}", workcell::plan::protected::MAX_BOUND)), "{msg}");
    assert!(msg.contains("read-only") && msg.contains("delivery: copy"), "{msg}");
}

/// A missing `build:` folder is created beneath the zone's handle: when `images` is a link to
/// a directory outside the project, nothing is created or given away there.
#[test]
fn missing_build_folder_behind_a_link_is_not_created_outside() {
    let p = Proj::new(&format!("sandbox:\n  root: {{root: ., readonly: false, {PREAPPROVED}}}\n"));
    p.write("workers/tool.worker", "---\nbuild: images/tool\ncommand: [true]\n---\nx\n");
    let outside = p.dir.parent().expect("parent").join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::os::unix::fs::symlink(&outside, p.dir.join("images")).expect("link");
    let _ = p.plan();
    assert_eq!(std::fs::read_dir(&outside).expect("outside").count(), 0, "something was created outside the project");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&outside).expect("meta").uid(), rustix::process::geteuid().as_raw(), "the outside directory was given away");
    // Without the link it is created, owned like the project.
    std::fs::remove_file(p.dir.join("images")).expect("rm");
    p.plan().expect("plan");
    let made = std::fs::metadata(p.dir.join("images/tool")).expect("created");
    assert!(made.is_dir());
    assert_eq!(made.uid(), std::fs::metadata(&p.dir).expect("meta").uid());
}

/// Zones added after loading (`--zone`) carry the project's entries, `sandbox.protect`
/// included.
#[test]
fn ad_hoc_zones_keep_the_projects_protection() {
    if !support::backend_ready("bwrap") {
        return;
    }
    let p = Proj::new("sandbox:\n  protect: [Makefile]\n  zones: {}\n");
    p.write("extra/Makefile", "all:\n");
    p.write("extra/.envrc", "x\n");
    let script = [attempt("makefile", "echo evil >> /x/Makefile"), attempt("envrc", "echo evil >> /x/.envrc"), attempt("other", "echo ok > /x/other")].concat();
    let out = support::workcell_in(&p.dir).args(["run", "--backend", "bwrap", "--zone", "x=extra:rw", "--", "sh", "-c", &script]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.trim(), "WROTE:other");
    assert_eq!(p.read("extra/Makefile"), b"all:\n");
}

/// A git directory with another name, named by a `.git` file (`git init --separate-git-dir`
/// inside the zone): its config and hooks are bound read-only too.
#[test]
fn separate_git_dir_named_by_a_pointer_is_protected() {
    let p = Proj::new(&format!("sandbox:\n  zones:\n    data: {{mode: rw, {PREAPPROVED}}}\n"));
    let work = p.dir.join("data/work");
    std::fs::create_dir_all(&work).expect("mkdir");
    std::fs::create_dir_all(p.dir.join("data/store")).expect("mkdir");
    support::give_to_worker(&p.dir);
    git_ok(&work, &["init", "-q", "--separate-git-dir", &p.dir.join("data/store/repo-meta").display().to_string()]);
    let plan = p.plan().expect("plan");
    let bound: Vec<&str> = plan.protected[0].bound.iter().map(|b| b.path.as_str()).collect();
    for b in ["work/.git", "store/repo-meta/config", "store/repo-meta/hooks"] {
        assert!(bound.contains(&b), "{b} not bound: {bound:?}");
    }
    if support::backend_ready("bwrap") {
        let script = [
            attempt("config", "echo '[core] fsmonitor = x' >> /data/store/repo-meta/config"),
            attempt("hook", "echo x > /data/store/repo-meta/hooks/pre-commit"),
        ]
        .concat();
        let out = p.run("bwrap", &script);
        assert!(!String::from_utf8_lossy(&out.stdout).contains("WROTE:"), "{}", String::from_utf8_lossy(&out.stdout));
    }
}

/// A bare repository in the zone (git uses its config when a person works inside it, e.g.
/// `core.pager`): its config and hooks are bound, though nothing in its name says git.
#[test]
fn bare_repository_is_protected() {
    let p = Proj::new(&format!("sandbox:\n  zones:\n    data: {{mode: rw, {PREAPPROVED}}}\n"));
    let bare = p.dir.join("data/vendored");
    std::fs::create_dir_all(&bare).expect("mkdir");
    support::give_to_worker(&p.dir);
    git_ok(&bare, &["init", "-q", "--bare"]);
    let plan = p.plan().expect("plan");
    let bound: Vec<&str> = plan.protected[0].bound.iter().map(|b| b.path.as_str()).collect();
    assert_eq!(bound, ["vendored/config", "vendored/hooks"], "{bound:?}");
}

/// An area a worker's allowlist grants inside a zone is protected like the zone, with the
/// zone's entries (`unprotect` included).
#[test]
fn allowlist_areas_are_protected() {
    let p = Proj::new(&format!("sandbox:\n  zones:\n    data: {{mode: rw, {PREAPPROVED}, unprotect: [.envrc]}}\n"));
    p.repo("data/sub");
    p.write("data/sub/.envrc", "x\n");
    p.write("workers/w.worker", "---\ncommand: [true]\nsandbox: {allow_write: [/data/sub]}\n---\nx\n");
    let project = Project::load(Some(&p.dir.join("workcell.yaml")), &p.dir).expect("project");
    let worker = project.worker("w").expect("worker");
    let plan = LaunchPlan::build(&project, Some(worker), &worker.sandbox, &Overrides::default()).expect("plan");
    assert_eq!(plan.protected.len(), 1, "{:?}", plan.protected);
    let area = &plan.protected[0];
    assert_eq!(area.target, "/data/sub");
    assert_eq!(area.unprotected, [".envrc"]);
    let bound: Vec<&str> = area.bound.iter().map(|b| b.path.as_str()).collect();
    assert_eq!(bound, [".git/config", ".git/hooks"], "{bound:?}");
    assert!(plan.mounts.iter().any(|m| m.target == "/data/sub/.git/config" && m.read_only));
}

/// A directory granted during a session (`request_access`) carries the project's entries:
/// a person's yes to a directory turns none off.
#[test]
fn expansions_keep_the_projects_protection() {
    let p = Proj::new("sandbox:\n  protect: [Makefile]\n  zones:\n    data: {mode: rw, unprotect: [.envrc]}\n");
    std::fs::create_dir_all(p.dir.join("data")).expect("mkdir");
    std::fs::create_dir_all(p.dir.join("extra")).expect("mkdir");
    let project = Project::load(Some(&p.dir.join("workcell.yaml")), &p.dir).expect("project");
    let opened = workcell::sandbox::open_for_expansion(&p.dir.join("extra")).expect("open");
    let expanded = project.sandbox.with_extra_mount("extra", opened, workcell::sandbox::ZoneMode::Rw).expect("expand");
    let m = expanded.mounts().iter().find(|m| m.name == "extra").expect("the new mount");
    assert!(m.protection.entries().iter().any(|e| e == "Makefile") && m.protection.entries().iter().any(|e| e == ".envrc"), "{:?}", m.protection.entries());
    // A worker's sandbox keeps the zone's own (derived from the project's).
    let data = expanded.mounts().iter().find(|m| m.name == "data").expect("data");
    assert!(!data.protection.entries().iter().any(|e| e == ".envrc"));
}

/// A zone nested beneath a pinned directory of another zone stays visible: the pin goes on
/// before it, not over it.
fn nested_zone_under_a_pin(backend: &str) {
    let p = Proj::new(&format!(
        "sandbox:\n  mounts:\n    - {{host: ./data, at: /data, mode: rw, {PREAPPROVED}}}\n    - {{host: ./other, at: /data/x/y, mode: ro}}\n"
    ));
    p.write("data/x/.git/config", "[core]\n");
    p.write("data/x/y/hidden.txt", "the outer zone's\n");
    p.write("other/seen.txt", "the nested zone's\n");
    let script =
        ["cat /data/x/y/seen.txt; ".to_string(), attempt("config", "echo x >> /data/x/.git/config"), attempt("nested", "echo x > /data/x/y/new")].concat();
    let out = p.run(backend, &script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("the nested zone's"), "the nested zone is hidden:\n{text}");
    assert!(!text.contains("WROTE:"), "{text}");
    assert_eq!(p.read("data/x/.git/config"), b"[core]\n");
}

#[test]
fn bwrap_nested_zone_under_a_pin() {
    if support::backend_ready("bwrap") {
        nested_zone_under_a_pin("bwrap");
    }
}

#[test]
fn docker_nested_zone_under_a_pin() {
    if support::backend_ready("docker") {
        nested_zone_under_a_pin("docker");
    }
}
