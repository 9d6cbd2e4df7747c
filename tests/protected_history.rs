//! History and the index carry protected files (issue 37, finding 7). A worker that never
//! writes a protected path can still commit its own `Makefile` onto the person's branch, or
//! stage it, with git plumbing; the person's natural undo (`git reset --hard`, `git checkout
//! .`, `git stash`) would then write it, and `make` run it. After the run the branch and the
//! index are set back, the worker's commit kept under `refs/workcell/quarantine/`, the run
//! exits 3 and says so; ordinary commits stay. On bwrap and docker (`image: host`).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CONFIG: &str = "sandbox:\n  protect: [Makefile]\n  zones:\n    data: {mode: rw, approval: {write: preApproved, delete: preApproved}}\n";

/// `ARGS` run on the host in `dir` as the person (the zone's owner), with no configuration
/// of the test machine's.
fn as_person(dir: &Path, args: &[&str]) -> Output {
    support::as_person(dir, &dir.parent().expect("parent").join(".home"), args[0], &args[1..])
}

#[track_caller]
fn git(dir: &Path, args: &[&str]) -> String {
    let argv: Vec<&str> = std::iter::once("git").chain(args.iter().copied()).collect();
    let out = as_person(dir, &argv);
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A project whose zone `data` is the person's checkout: a `Makefile` (protected) and
/// `src/x.c`, one commit on `main`.
struct Checkout {
    _tmp: tempfile::TempDir,
    proj: PathBuf,
    repo: PathBuf,
    /// What the worker's recipe would touch on the host.
    marker: PathBuf,
}

impl Checkout {
    fn new() -> Checkout {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = std::fs::canonicalize(tmp.path()).expect("canonical");
        let proj = root.join("proj");
        let repo = proj.join("data");
        std::fs::create_dir_all(repo.join("src")).expect("mkdir");
        std::fs::write(proj.join("workcell.yaml"), CONFIG).expect("config");
        std::fs::write(repo.join("Makefile"), "all:\n\t@echo person-build\n").expect("write");
        std::fs::write(repo.join("src/x.c"), "int x;\n").expect("write");
        support::give_to_worker(&root);
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "."]);
        git(&repo, &["commit", "-q", "-m", "the person's"]);
        Checkout { _tmp: tmp, proj, repo, marker: root.join("MADE") }
    }

    fn run(&self, backend: &str, script: &str) -> Output {
        let out = Command::new(env!("CARGO_BIN_EXE_workcell"))
            .current_dir(&self.proj)
            .env_remove("RUST_LOG")
            .args(["run", "--backend", backend, "--no-broker", "--", "sh", "-c", script])
            .output()
            .expect("workcell");
        eprintln!("status {:?}\nstdout: {}\nstderr: {}", out.status.code(), String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        out
    }

    /// The person's routine undo, then `make`: the worker's recipe must not run.
    fn undo_and_make(&self) {
        for undo in [&["git", "checkout", "-q", "."][..], &["git", "stash", "-q"], &["git", "reset", "-q", "--hard"]] {
            let _ = as_person(&self.repo, undo);
            let made = as_person(&self.repo, &["make"]);
            assert!(made.status.success(), "make: {}", String::from_utf8_lossy(&made.stderr));
            assert!(!self.marker.exists(), "`{}` then `make` ran the worker's recipe", undo.join(" "));
            assert_eq!(String::from_utf8_lossy(&made.stdout).trim(), "person-build");
        }
        assert!(!self.repo.join(".vscode").exists(), "the worker's .vscode/tasks.json reached the work tree");
    }

    /// The refs under `refs/workcell/quarantine/`: (name, commit).
    fn quarantined(&self) -> Vec<(String, String)> {
        let list = git(&self.repo, &["for-each-ref", "--format=%(refname) %(objectname)", "refs/workcell/quarantine"]);
        list.lines().filter_map(|l| l.split_once(' ')).map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }
}

/// The worker's plumbing: its `Makefile` (whose recipe touches `marker`) and a
/// `.vscode/tasks.json` staged by object id, never written as files.
fn stage_plant(marker: &Path) -> String {
    format!(
        "cd /data && export GIT_AUTHOR_NAME=w GIT_AUTHOR_EMAIL=w@x GIT_COMMITTER_NAME=w GIT_COMMITTER_EMAIL=w@x && \
         B=$(printf 'all:\\n\\t@touch {m}; echo person-build\\n' | git hash-object -w --stdin) && \
         T=$(printf '{{\"tasks\":[{{\"command\":\"touch {m}\",\"runOptions\":{{\"runOn\":\"folderOpen\"}}}}]}}' | git hash-object -w --stdin) && \
         git update-index --cacheinfo 100644,$B,Makefile && git update-index --add --cacheinfo 100644,$T,.vscode/tasks.json && ",
        m = marker.display()
    )
}

mod body {
    use super::*;

    /// Committed onto `main` with plumbing, the index reset to the worker's commit: `main` is
    /// set back, the commit kept, exit 3, and the person's undo and `make` run nothing of it.
    pub fn a_commit_of_protected_files_is_set_back(backend: &str) {
        let c = Checkout::new();
        let old = git(&c.repo, &["rev-parse", "main"]);
        let script = stage_plant(&c.marker)
            + "C=$(git commit-tree $(git write-tree) -p HEAD -m build) && git update-ref refs/heads/main $C && git read-tree $C && echo PLANTED $C";
        let out = c.run(backend, &script);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let planted = stdout.lines().find_map(|l| l.strip_prefix("PLANTED ")).unwrap_or_else(|| panic!("the worker's plumbing failed: {stdout}")).to_string();
        assert_eq!(git(&c.repo, &["rev-parse", "main"]), old, "main still carries the worker's commit");
        let kept = c.quarantined();
        assert_eq!(kept.len(), 1, "one quarantine ref: {kept:?}");
        assert_eq!(kept[0].1, planted, "the worker's commit is kept");
        assert_eq!(git(&c.repo, &["diff", "--cached", "--name-only"]), "", "the index still holds the worker's entries");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&kept[0].0) && stderr.contains("Makefile") && stderr.contains(".vscode/tasks.json"), "the summary names it: {stderr}");
        assert!(stderr.contains("other branches are not checked"), "{stderr}");
        assert_eq!(out.status.code(), Some(3), "a run whose commits were set back exits 3");
        c.undo_and_make();
    }

    /// Staged only: the index entries are set back to the commit's, exit 3.
    pub fn staged_protected_files_are_set_back(backend: &str) {
        let c = Checkout::new();
        let out = c.run(backend, &(stage_plant(&c.marker) + "git diff --cached --name-only && echo STAGED"));
        assert!(String::from_utf8_lossy(&out.stdout).contains("STAGED"), "the worker's plumbing failed");
        assert_eq!(git(&c.repo, &["diff", "--cached", "--name-only"]), "", "the index still holds the worker's entries");
        assert!(c.quarantined().is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("index's entries") && stderr.contains("Makefile"), "{stderr}");
        assert_eq!(out.status.code(), Some(3));
        c.undo_and_make();
    }

    /// A shell call of `workcell mcp` is checked like a run: the commit is set back after the
    /// call, and the agent is told in the call's result.
    pub fn mcp_calls_are_checked(backend: &str) {
        if !support::python_ready(&["mcp"]) {
            return;
        }
        let c = Checkout::new();
        let old = git(&c.repo, &["rev-parse", "main"]);
        let command = stage_plant(&c.marker) + "C=$(git commit-tree $(git write-tree) -p HEAD -m build) && git update-ref refs/heads/main $C && echo PLANTED";
        let client = format!(
            "import asyncio, json, sys\nfrom mcp import ClientSession, StdioServerParameters\nfrom mcp.client.stdio import stdio_client\n\
             async def main():\n    p = StdioServerParameters(command={bin:?}, args=['mcp', '--backend', {backend:?}, '--approve-all'], cwd={cwd:?})\n\
             \x20   async with stdio_client(p) as (r, w):\n        async with ClientSession(r, w) as session:\n            await session.initialize()\n\
             \x20           res = await session.call_tool('shell', {{'command': {command:?}}})\n\
             \x20           print(json.dumps({{'error': res.is_error, 'text': ''.join(getattr(c, 'text', '') for c in res.content)}}))\n\
             asyncio.run(main())\n",
            bin = env!("CARGO_BIN_EXE_workcell"),
            cwd = c.proj.display().to_string(),
        );
        let o = Command::new(support::python()).arg("-c").arg(&client).output().expect("python");
        assert!(o.status.success(), "client: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        let text = v["text"].as_str().unwrap_or("");
        eprintln!("{text}");
        assert!(text.contains("PLANTED"), "the worker's plumbing failed: {text}");
        assert!(text.contains("refs/heads/main set back") && text.contains("Makefile"), "the agent is told: {text}");
        assert_eq!(git(&c.repo, &["rev-parse", "main"]), old, "main still carries the worker's commit");
        assert_eq!(c.quarantined().len(), 1);
        c.undo_and_make();
    }

    /// A first run leaves `main` a symbolic ref to `x` (or `HEAD` a link to `main`), at the
    /// same commit: nothing to set back. A second run commits the `Makefile` onto `x` (onto
    /// `main`) with plumbing, writing none of the files the check looked at before (`HEAD`,
    /// `main`'s own file, the index): it is set back all the same.
    pub fn a_ref_that_leads_elsewhere_is_followed(backend: &str) {
        for first in
            ["git update-ref refs/heads/x HEAD && git symbolic-ref refs/heads/main refs/heads/x", "ln -s refs/heads/main .git/H && mv -f .git/H .git/HEAD"]
        {
            let c = Checkout::new();
            let before = git(&c.repo, &["rev-parse", "HEAD"]);
            let out = c.run(backend, &format!("cd /data && {first}"));
            assert_eq!(out.status.code(), Some(0), "the first run changes no commit");
            let m = c.marker.display();
            let script = format!(
                "cd /data && export GIT_AUTHOR_NAME=w GIT_AUTHOR_EMAIL=w@x GIT_COMMITTER_NAME=w GIT_COMMITTER_EMAIL=w@x && \
                 B=$(printf 'all:\\n\\t@touch {m}; echo person-build\\n' | git hash-object -w --stdin) && \
                 T=$(printf '100644 blob %s\\tMakefile\\n' $B | git mktree) && C=$(git commit-tree $T -p HEAD -m w) && \
                 git update-ref $(git symbolic-ref -q refs/heads/main || echo refs/heads/main) $C"
            );
            let out = c.run(backend, &script);
            assert_eq!(out.status.code(), Some(3), "{first}: the commit is set back, exit 3");
            assert_eq!(git(&c.repo, &["rev-parse", "HEAD"]), before, "{first}: HEAD resolves to the person's commit");
            assert_eq!(git(&c.repo, &["rev-parse", "main"]), before, "{first}: the branch itself is the person's commit again");
            c.undo_and_make();
        }
    }

    /// A commit of 200,000 long paths besides the `Makefile`: more names than git's output
    /// may hold, so they cannot be listed; the commit is set back as unjudged (before, a
    /// warning, and the branch stayed at the worker's commit).
    pub fn a_commit_too_large_to_list_is_set_back(backend: &str) {
        let c = Checkout::new();
        let before = git(&c.repo, &["rev-parse", "HEAD"]);
        let m = c.marker.display();
        let script = format!(
            "cd /data && export GIT_AUTHOR_NAME=w GIT_AUTHOR_EMAIL=w@x GIT_COMMITTER_NAME=w GIT_COMMITTER_EMAIL=w@x && \
             B=$(printf 'all:\\n\\t@touch {m}; echo person-build\\n' | git hash-object -w --stdin) && \
             T=$({{ printf '100644 blob %s\\tMakefile\\n' $B; seq 1 200000 | awk -v b=$B '{{printf \"100644 blob %s\\t%0120d\\n\", b, $1}}'; }} | git mktree) && \
             C=$(git commit-tree $T -p HEAD -m w) && git update-ref refs/heads/main $C"
        );
        let out = c.run(backend, &script);
        assert_eq!(out.status.code(), Some(3), "the commit is set back, exit 3");
        assert_eq!(git(&c.repo, &["rev-parse", "main"]), before, "main is the person's commit again");
        assert_eq!(c.quarantined().len(), 1, "the worker's commit is kept");
        c.undo_and_make();
    }

    /// The index's side of the same: a protected path staged among 200,000 long names, too
    /// many for the check to list, sets the whole index back.
    pub fn an_index_too_large_to_list_is_set_back(backend: &str) {
        let c = Checkout::new();
        let m = c.marker.display();
        let script = format!(
            "cd /data && B=$(printf 'all:\\n\\t@touch {m}; echo person-build\\n' | git hash-object -w --stdin) && \
             {{ printf '100644 %s\\tMakefile\\n' $B; seq 1 200000 | awk -v b=$B '{{printf \"100644 %s\\t%0120d\\n\", b, $1}}'; }} | git update-index --add --index-info && echo STAGED"
        );
        let out = c.run(backend, &script);
        assert!(String::from_utf8_lossy(&out.stdout).contains("STAGED"), "the worker's plumbing failed: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(3), "the index is set back, exit 3");
        assert_eq!(git(&c.repo, &["diff", "--cached", "--name-only"]), "", "the index still holds the worker's entries");
        c.undo_and_make();
    }

    /// A linked worktree in the zone (`git worktree add`): the worker commits onto its branch
    /// through the worktree's own git directory; that branch and index are set back.
    pub fn a_linked_worktree_is_checked(backend: &str) {
        let c = Checkout::new();
        let wt = c.repo.join("wt");
        git(&c.repo, &["worktree", "add", "-q", "-b", "side", &wt.display().to_string()]);
        let old = git(&c.repo, &["rev-parse", "side"]);
        // Its `.git` file names the host's path: the worker names the directories itself.
        let script = format!(
            "export GIT_DIR=/data/.git/worktrees/wt GIT_WORK_TREE=/data/wt && {}",
            stage_plant(&c.marker).replacen("cd /data", "cd /data/wt", 1)
                + "C=$(git commit-tree $(git write-tree) -p HEAD -m build) && git update-ref refs/heads/side $C && git read-tree $C && echo PLANTED"
        );
        let out = c.run(backend, &script);
        assert!(String::from_utf8_lossy(&out.stdout).contains("PLANTED"), "the worker's plumbing failed");
        assert_eq!(git(&c.repo, &["rev-parse", "side"]), old, "the worktree's branch still carries the worker's commit");
        assert_eq!(git(&wt, &["diff", "--cached", "--name-only"]), "", "the worktree's index still holds the worker's entries");
        assert_eq!(c.quarantined().len(), 1);
        assert!(String::from_utf8_lossy(&out.stderr).contains("a linked worktree of"));
        assert_eq!(out.status.code(), Some(3));
        for undo in [&["git", "checkout", "-q", "."][..], &["git", "reset", "-q", "--hard"]] {
            let _ = as_person(&wt, undo);
            let _ = as_person(&wt, &["make"]);
            assert!(!c.marker.exists(), "`{}` then `make` in the worktree ran the worker's recipe", undo.join(" "));
        }
    }

    /// An ordinary commit (and a staged ordinary file) stays: exit 0, nothing said.
    pub fn ordinary_commits_stay(backend: &str) {
        let c = Checkout::new();
        let script =
            "cd /data && echo 'int y;' >> src/x.c && git -c user.name=w -c user.email=w@x commit -qam work && echo z > z.txt && git add z.txt && echo DONE";
        let out = c.run(backend, script);
        assert!(String::from_utf8_lossy(&out.stdout).contains("DONE"));
        assert_eq!(out.status.code(), Some(0));
        assert_eq!(git(&c.repo, &["log", "-1", "--format=%s", "main"]), "work", "the worker's ordinary commit stays");
        assert_eq!(git(&c.repo, &["diff", "--cached", "--name-only"]), "z.txt");
        assert!(c.quarantined().is_empty());
        assert!(!String::from_utf8_lossy(&out.stderr).contains("set back"));
    }
}

support::backend_suite!(
    bwrap,
    "bwrap",
    [
        a_commit_of_protected_files_is_set_back,
        staged_protected_files_are_set_back,
        ordinary_commits_stay,
        mcp_calls_are_checked,
        a_linked_worktree_is_checked,
        a_ref_that_leads_elsewhere_is_followed,
        a_commit_too_large_to_list_is_set_back,
        an_index_too_large_to_list_is_set_back
    ]
);
support::backend_suite!(
    docker,
    "docker",
    [
        a_commit_of_protected_files_is_set_back,
        staged_protected_files_are_set_back,
        ordinary_commits_stay,
        mcp_calls_are_checked,
        a_linked_worktree_is_checked,
        a_ref_that_leads_elsewhere_is_followed,
        a_commit_too_large_to_list_is_set_back,
        an_index_too_large_to_list_is_set_back
    ]
);
