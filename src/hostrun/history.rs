//! History and the index: what a worker did to the person's current branch, to `HEAD` and to
//! the index of a repository in a writable zone.
//!
//! The protected paths of a checkout are bound read-only, but its refs, objects, index and
//! `HEAD` stay writable (the worker's own git must commit). So a worker can *commit* a
//! protected path without ever writing it: with plumbing it puts its own `Makefile` in a
//! commit on the person's branch and leaves the file on disk as it was. `git status` then
//! shows ` M Makefile`, and the person's natural undo (`git reset --hard`, `git checkout .`,
//! `git stash`) writes the worker's file, which `make` runs. Staging it in the index does
//! the same with one step less.
//!
//! So, for each repository whose git directory lies in a writable, bind-delivered zone (found
//! by its `.git/config`, bound read-only at launch), [`Watch::take`] notes, just before the
//! worker starts: `HEAD`'s text, the branch it names and that branch's commit, and the
//! identity (inode, size, times) of `packed-refs`, `reftable/tables.list` and `index`. That is
//! read beneath the held git directory, naming nothing by path and running no git: when the
//! worker left all of it as it was, the check after the run costs a few `stat`s. Unless
//! `HEAD` is a link, or its branch a link or a symbolic ref (an earlier run of a worker can
//! leave them so; a commit to the ref they lead to changes none of those files): then git is
//! asked after every run.
//!
//! When something changed, the host's git is asked (`git`: held directory, no configuration
//! but the repository's read-only one, bounded): the paths changed between the commit at launch
//! and the one the branch (or `HEAD`) names now, by their trees, so a rewritten history is
//! judged like new commits. When one of them is protected in the zone (matched as a path
//! relative to the zone, whatever the repository's place in it), the branch goes back to the
//! commit it had (compare-and-swap: not over a change that came later) and the worker's commit
//! is kept as `refs/workcell/quarantine/RUN_ID` (`-head` for a moved `HEAD`). A run whose
//! commits change no protected path keeps them all; one that changed one is set back whole, to
//! the state before the run (its ordinary commits are in the kept ref, to be picked again by a
//! person who has looked). Then the index (when the worker wrote it, or a ref was set back): each entry for a protected path that
//! differs from the commit `HEAD` now names is set back to that commit's (removed when the
//! commit has none). That is the "state before the run" only if the person had not staged a
//! change to that path themselves; the report names the object each entry held, so a person
//! who had can stage it again (`git update-index --cacheinfo MODE,ID,PATH`).
//!
//! Other branches (new ones, or the person's others) are not judged: a branch is the person's
//! to review before checking it out, and the report says so. A repository nested in the zone
//! is watched like its root, and a linked worktree (`.git/worktrees/NAME`, found by its bound
//! `commondir`) with its own `HEAD` and index, up to [`MAX_REPOS`]; a git directory outside any
//! writable zone is out of the worker's reach. A `--separate-git-dir` repository and
//! submodules (`.git/modules/`) are not watched.

pub mod git;
mod looks;

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use super::area::ProtectedArea;
use super::{Kind, Protection};
use git::{GitError, Repo};
use looks::{is_id, launch_tip, open_dir, plain, read_beneath, stamp, symbolic, Looks, MAX_REF};

/// Repositories one run watches, at most.
pub const MAX_REPOS: usize = 64;
/// How many protected paths a report names (the count goes on).
pub const KEPT: usize = 20;
/// The longest `HEAD` or loose ref read.
/// Where the worker's commits are kept.
pub const QUARANTINE: &str = "refs/workcell/quarantine";

/// One repository being watched.
#[derive(Debug, Clone)]
struct Watched {
    target: String,
    host: Option<String>,
    /// The work tree relative to the zone (`""` for the zone itself; a linked worktree's
    /// repository's, whose protection matches at any depth alike).
    at: String,
    /// How the report names it.
    label: String,
    repo: Repo,
    /// Where its branches are: the git directory itself, or a linked worktree's repository.
    refs: Arc<OwnedFd>,
    protection: Protection,
    looks: Looks,
    /// The branch `HEAD` named at launch (`refs/heads/…`), when it named one.
    branch: Option<String>,
    /// The commit `HEAD` resolved to at launch (`None`: an unborn branch).
    tip: Option<String>,
    /// Whether [`Looks`] sees every change to what `HEAD` resolves to: `HEAD` a file naming a
    /// commit or a plain branch, whose loose ref is a file naming a commit, or absent. Not so
    /// when `HEAD` is a link, or names a ref that is a link or names another ref (a worker's
    /// earlier run can leave either: git follows them, and a later commit to the ref they
    /// lead to changes none of the files looked at): then the check always asks git.
    plain: bool,
}

/// The repositories of a run, as they were when the worker started.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    repos: Vec<Watched>,
}

/// A ref the check moved back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moved {
    /// `refs/heads/NAME`, or `HEAD` (when the worker pointed it elsewhere).
    pub what: String,
    /// The commit it had at launch (`None`: none, an unborn branch).
    pub from: Option<String>,
    /// The commit the worker left it at.
    pub to: String,
    /// Where that commit is kept (`None` when it could not be kept; `error` says why).
    pub kept: Option<String>,
    /// The first [`KEPT`] protected paths its commits changed.
    pub paths: Vec<String>,
    pub total: usize,
    /// Why it could not be moved back, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An index entry set back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Staged {
    pub path: String,
    /// What the worker had staged: `MODE ID` (empty when the entry was removed).
    pub was: String,
}

/// What the check of one repository did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The zone's mount target.
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The work tree relative to the zone (`.` for the zone itself).
    pub repository: String,
    pub moved: Vec<Moved>,
    /// The commit the index was judged against (`None`: an unborn branch).
    pub index_base: Option<String>,
    /// Index entries set back (the first [`KEPT`]), and how many in all.
    pub index: Vec<Staged>,
    pub index_total: usize,
    /// Why the repository could not be fully checked, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl Report {
    /// Whether the check changed something or could not finish: the run exits 3.
    pub fn acted(&self) -> bool {
        !self.moved.is_empty() || self.index_total > 0 || self.problem.is_some()
    }
}

impl Watch {
    /// Notes the repositories of a plan's protected `areas` as they are now (call it just
    /// before the worker starts).
    pub fn take(areas: &[ProtectedArea]) -> Watch {
        let mut repos = Vec::new();
        for area in areas {
            let Some(held) = &area.held else { continue };
            let host = held.current_path().map(|p| p.to_string_lossy().into_owned());
            for b in &area.bound {
                // A repository by its config; a linked worktree by its `commondir` (its own
                // `HEAD` and index, the refs of the repository it belongs to).
                let (at, git, common) = if let Some(at) = b.path.strip_suffix(".git/config").filter(|a| a.is_empty() || a.ends_with('/')) {
                    (at.trim_end_matches('/'), format!("{at}.git"), None)
                } else if let Some(wt) = b.path.strip_suffix("/commondir").filter(|w| w.contains(".git/worktrees/")) {
                    let at = wt.split(".git/worktrees/").next().unwrap_or_default();
                    (at.trim_end_matches('/'), wt.to_string(), Some(format!("{at}.git")))
                } else {
                    continue;
                };
                if repos.len() >= MAX_REPOS {
                    break;
                }
                let Some(dir) = open_dir(held.0.as_fd(), &git) else { continue };
                let refs = match &common {
                    Some(c) => match open_dir(held.0.as_fd(), c) {
                        Some(fd) => Arc::new(fd),
                        None => continue,
                    },
                    None => Arc::new(match rustix::io::fcntl_dupfd_cloexec(&dir, 0) {
                        Ok(fd) => fd,
                        Err(_) => continue,
                    }),
                };
                let repo = Repo::new(Arc::new(dir));
                let looks = Looks::read(repo.dir().as_fd(), refs.as_fd());
                // A `HEAD` that is no regular file (a link to `refs/heads/main`, which git
                // still follows) is asked of git: the branch it leads to is the one set back
                // after the run, not `HEAD` alone (a later `git checkout main` would bring
                // the worker's commit back).
                let branch = match looks.head.as_deref() {
                    Some(head) => symbolic(head),
                    None => {
                        repo.run(&["symbolic-ref", "-q", "HEAD"], b"", true).ok().flatten().and_then(|name| symbolic(&[b"ref: ".as_slice(), &name].concat()))
                    }
                };
                let tip = launch_tip(&repo, refs.as_fd(), &looks, branch.as_deref());
                let plain = plain(refs.as_fd(), &looks, branch.as_deref());
                let label = match &common {
                    Some(_) => format!("{} (a linked worktree of {})", git.rsplit('/').next().unwrap_or_default(), if at.is_empty() { "." } else { at }),
                    None if at.is_empty() => ".".to_string(),
                    None => at.to_string(),
                };
                repos.push(Watched {
                    target: area.target.clone(),
                    host: host.clone(),
                    at: at.to_string(),
                    label,
                    repo,
                    refs,
                    protection: area.protection.clone(),
                    looks,
                    branch,
                    tip,
                    plain,
                });
            }
        }
        Watch { repos }
    }

    /// Judges what the worker did to each repository since [`Watch::take`], sets back what
    /// brought a protected path onto the current branch or into the index, and says what it
    /// did (only the repositories where it did something, or could not check).
    pub fn check(&self, run_id: &str) -> Vec<Report> {
        self.repos
            .iter()
            .filter(|w| !w.plain || Looks::read(w.repo.dir().as_fd(), w.refs.as_fd()) != w.looks)
            .map(|w| w.check(run_id))
            .filter(Report::acted)
            .collect()
    }
}

impl Watched {
    fn check(&self, run_id: &str) -> Report {
        let mut report = Report { target: self.target.clone(), host: self.host.clone(), repository: self.label.clone(), ..Report::default() };
        match self.judge(run_id, &mut report) {
            // git itself finds no repository there (a `.git` of a config and hooks only): no
            // git command of the person's sees a branch or an index in it to bring back.
            Err(GitError::Failed { stderr, .. }) if stderr.contains("not a git repository") => {}
            Err(e) => report.problem = Some(e.to_string()),
            Ok(()) => {}
        }
        report
    }

    fn judge(&self, run_id: &str, report: &mut Report) -> Result<(), GitError> {
        let empty = self.empty_tree()?;
        let old = self.tip.as_deref();
        // The branch `HEAD` named at launch.
        if let Some(branch) = &self.branch {
            if let Some(now) = self.resolve(branch)?.filter(|now| Some(now.as_str()) != old) {
                let paths = self.protected_between(old.unwrap_or(&empty), &now)?;
                if !paths.is_empty() {
                    let mut moved = self.moved(branch, old, &now, paths, run_id, "");
                    let back = match old {
                        Some(old) => self.git(&["update-ref", "-m", "workcell: a worker's commit changed protected paths", branch, old, &now]),
                        None => self.git(&["update-ref", "-d", branch, &now]),
                    };
                    moved.error = back.err().map(|e| e.to_string());
                    report.moved.push(moved);
                }
            }
        }
        // `HEAD` itself, when the worker pointed it at another branch or commit.
        let head = read_beneath(self.repo.dir().as_fd(), "HEAD", MAX_REF);
        if head != self.looks.head || !self.plain {
            if let Some(now) = self.resolve("HEAD")?.filter(|now| Some(now.as_str()) != old) {
                let paths = self.protected_between(old.unwrap_or(&empty), &now)?;
                if !paths.is_empty() {
                    let mut moved = self.moved("HEAD", old, &now, paths, run_id, "-head");
                    let back = match (&self.branch, old) {
                        (Some(branch), _) => self.git(&["symbolic-ref", "HEAD", branch]),
                        (None, Some(old)) => self.git(&["update-ref", "--no-deref", "HEAD", old]),
                        (None, None) => Ok(()),
                    };
                    moved.error = back.err().map(|e| e.to_string());
                    report.moved.push(moved);
                }
            }
        }
        // The index only when the worker wrote it or a ref was set back (a person's own staged
        // change to a protected path is not the worker's to lose).
        if stamp(self.repo.dir().as_fd(), "index") != self.looks.index || !report.moved.is_empty() {
            self.judge_index(&empty, report)?;
        }
        Ok(())
    }

    /// Sets back the index entries of protected paths that differ from `HEAD`'s commit.
    fn judge_index(&self, empty: &str, report: &mut Report) -> Result<(), GitError> {
        if stamp(self.repo.dir().as_fd(), "index").is_none() {
            return Ok(());
        }
        let base = self.resolve("HEAD")?;
        let tree = base.clone().unwrap_or_else(|| empty.to_string());
        let names = match self.names(&["diff-index", "--cached", "--no-renames", "--name-only", "-z", &tree, "--"]) {
            Ok(names) => names,
            // An index too large to list within the bounds (a worker staged a protected path
            // among 200,000 others): it is set back whole to the commit's tree, as a commit too
            // large to list is set back whole. What was staged stays in the object store.
            Err(e @ (GitError::TooLong { .. } | GitError::TooSlow { .. })) => {
                self.repo.run(&["read-tree", &tree], &[], false)?;
                report.index_base = base;
                report.problem = Some(format!(
                    "{e}, so the whole index was set back to the tree of {} (stage again what you had staged yourself)",
                    report.index_base.as_deref().unwrap_or("an empty tree")
                ));
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let paths: Vec<String> = names.into_iter().filter(|p| self.protected(p)).collect();
        if paths.is_empty() {
            return Ok(());
        }
        let mut args = vec!["ls-files", "-s", "-z", "--"];
        args.extend(paths.iter().map(String::as_str));
        let staged = self.out(&args)?;
        let mut args = vec!["ls-tree", "-r", "-z", "--full-tree", &tree, "--"];
        args.extend(paths.iter().map(String::as_str));
        let committed = self.out(&args)?;
        // Every stage of each path removed, then the commit's entry (if any) put back.
        let zero = "0".repeat(empty.len());
        let mut info: Vec<u8> = Vec::new();
        for p in &paths {
            info.extend_from_slice(format!("0 {zero}\t{p}\0").as_bytes());
        }
        info.extend_from_slice(&committed);
        self.repo.run(&["update-index", "-z", "--index-info"], &info, false)?;
        report.index_base = base;
        report.index_total = paths.len();
        report.index = paths
            .iter()
            .take(KEPT)
            .map(|p| {
                let was = staged
                    .split(|b| *b == 0)
                    .filter_map(|l| std::str::from_utf8(l).ok())
                    .filter_map(|l| l.split_once('\t'))
                    .find(|(_, path)| path == p)
                    .map(|(meta, _)| meta.split(' ').take(2).collect::<Vec<_>>().join(" "))
                    .unwrap_or_default();
                Staged { path: p.clone(), was }
            })
            .collect();
        Ok(())
    }

    /// The report of `what` moved back from `now` to `old`, `now` kept under the run's name.
    fn moved(&self, what: &str, old: Option<&str>, now: &str, paths: Vec<String>, run_id: &str, suffix: &str) -> Moved {
        let mut kept = None;
        let mut error = None;
        // A session runs many calls under one run id: the first free name.
        for n in 1..=100 {
            let name = if n == 1 { format!("{QUARANTINE}/{run_id}{suffix}") } else { format!("{QUARANTINE}/{run_id}{suffix}-{n}") };
            match self.resolve(&name) {
                Ok(Some(_)) => continue,
                Err(e) => {
                    error = Some(e.to_string());
                    break;
                }
                Ok(None) => {}
            }
            // Created only where nothing is (the old value all zeros): never over a ref.
            let zero = "0".repeat(now.len());
            match self.git(&["update-ref", "-m", "workcell: kept a worker's commit", &name, now, &zero]) {
                Ok(()) => kept = Some(name),
                Err(e) => error = Some(e.to_string()),
            }
            break;
        }
        Moved {
            what: what.to_string(),
            from: old.map(str::to_string),
            to: now.to_string(),
            kept: kept.clone(),
            total: paths.len(),
            paths: paths.into_iter().take(KEPT).collect(),
            error: if kept.is_some() { None } else { error },
        }
    }

    /// The protected paths whose content differs between the trees of `old` and `new`. When
    /// git cannot list them (past its bounds: a worker's commit of millions of paths, or objects
    /// made slow or broken), the commit cannot be judged, so it is set back as one that changed
    /// a protected path: its one "path" says why.
    fn protected_between(&self, old: &str, new: &str) -> Result<Vec<String>, GitError> {
        match self.names(&["diff-tree", "-r", "--no-renames", "--no-ext-diff", "--name-only", "-z", old, new, "--"]) {
            Ok(names) => Ok(names.into_iter().filter(|p| self.protected(p)).collect()),
            Err(e) => Ok(vec![format!("(the changed paths could not be listed: {e})")]),
        }
    }

    /// Whether the repository path `p` is protected in the zone.
    fn protected(&self, p: &str) -> bool {
        self.protection.matches_any_case(&Path::new(&self.at).join(p), Kind::Other).is_some()
    }

    /// The commit `name` resolves to now (`None`: it names none).
    fn resolve(&self, name: &str) -> Result<Option<String>, GitError> {
        let out = self.repo.run(&["rev-parse", "-q", "--verify", &format!("{name}^{{commit}}")], b"", true)?;
        Ok(out.map(|o| String::from_utf8_lossy(&o).trim().to_string()).filter(|s| is_id(s.as_bytes())))
    }

    /// The empty tree's id in this repository's hash.
    fn empty_tree(&self) -> Result<String, GitError> {
        Ok(String::from_utf8_lossy(&self.out(&["hash-object", "-t", "tree", "--stdin"])?).trim().to_string())
    }

    fn names(&self, args: &[&str]) -> Result<Vec<String>, GitError> {
        Ok(self.out(args)?.split(|b| *b == 0).filter(|n| !n.is_empty()).map(|n| String::from_utf8_lossy(n).into_owned()).collect())
    }

    fn out(&self, args: &[&str]) -> Result<Vec<u8>, GitError> {
        Ok(self.repo.run(args, b"", false)?.unwrap_or_default())
    }

    fn git(&self, args: &[&str]) -> Result<(), GitError> {
        self.repo.run(args, b"", false).map(|_| ())
    }
}
