//! Files the host runs: paths inside a writable area that a person's own tools execute later,
//! on the host, as the person (git hooks and config, direnv's `.envrc`, editor task files,
//! shell start-up files). A worker that could leave one would run code outside its sandbox
//! the next time someone types `git status` in the folder.
//!
//! This module only says *which* paths are protected; the plan binds the existing ones
//! read-only (`plan::protected`), the run moves aside the ones a worker created
//! (`hostrun::quarantine`), and the tool service and copy delivery refuse them.
//!
//! An entry is a relative path, `/`-separated, whose components may use `*` (within one
//! name) and `**` (any number of names). It protects that path at any depth of an area and
//! everything beneath it: `.git/hooks` covers `.git/hooks/pre-commit` and
//! `sub/.git/hooks/x`. The entry `.git` is special: it covers a `.git` that is *not* a
//! directory (a `gitdir:` pointer file, or a link), never a repository's `.git` directory,
//! whose contents the other entries judge.
//!
//! A link (or anything not a directory) at a name on the way to an entry is protected too:
//! with `.config` a link to `x`, git reads `x/git/config` as `~/.config/git/config`, and the
//! path `x/git/config` itself matches nothing.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};
use std::sync::Arc;

#[cfg(test)]
mod against_globs;
pub mod area;
mod forms;
pub mod history;
pub mod home;
pub mod looked;
pub mod quarantine;
pub(crate) mod remove;
pub mod tally;
pub mod tools;

/// The entries protected in every writable area unless a zone turns one off (`unprotect:`):
/// the paths of the tool table's rows that hold always ([`tools::TOOLS`]).
pub static DEFAULTS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(tools::defaults);

/// The entry that covers a non-directory `.git` only.
const GIT_POINTER: &str = ".git";

/// What git reads and runs from a git directory, whatever the directory is called (a bare
/// repository, a `--separate-git-dir`, a worktree's): protected in every one.
pub const GIT_DIR_INSIDE: &[&str] = &["config", "hooks", "commondir", "config.worktree"];

/// True when `dir` may be a git directory as git recognises one: `HEAD`, and `objects` or
/// `commondir` (a linked worktree's). Any entry of those names counts, a link too, dangling
/// or not: nothing is followed, and a wider answer only protects more. (git also takes a
/// directory holding these as the repository when run inside it, with no `.git` at all.)
pub fn is_git_dir(dir: std::os::fd::BorrowedFd<'_>) -> bool {
    let exists = |n: &std::ffi::CStr| rustix::fs::statat(dir, n, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok();
    exists(c"HEAD") && (exists(c"objects") || exists(c"commondir"))
}

/// What a path is, where that decides a match (the `.git` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    /// A file, a link, or anything else that is not a directory (also: not created yet).
    Other,
}

/// An entry that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error(
        "protected entry '{0}' is not a relative path inside an area: write it like `.git/hooks` or `Makefile` (no leading `/`, no `.` or `..`, not empty)"
    )]
    NotRelative(String),
    #[error("protected entry '{entry}' is not a valid pattern: {reason}")]
    BadPattern { entry: String, reason: String },
    #[error("'{0}' is not a protected entry here, so it cannot be turned off; the entries are: {1}")]
    Unknown(String, String),
}

/// The protected entries of one writable area (cheap to clone: the matchers are shared).
#[derive(Debug, Clone)]
pub struct Protection {
    entries: Vec<String>,
    /// Every entry's `**/` forms (the entry itself, and the names on the way to it). Paths
    /// beneath an entry have no form of their own (`**/E/**` made the glob set's regexes
    /// several times larger): [`Protection::matches`] looks at each ancestor instead.
    forms: Arc<forms::Forms>,
    /// The same entries in lower case, for [`Protection::matches_any_case`]; built on first
    /// use and shared by clones. Holds `None` when every entry is lower case already.
    folded: Arc<std::sync::OnceLock<Option<forms::Forms>>>,
    /// The entries a protected manifest brought in ([`tools::family`]), and why: what `plan`
    /// shows beside the entries.
    families: Arc<[tools::FamilyEntry]>,
}

/// What part of an entry a form matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The entry itself (and so, at an ancestor, everything beneath it).
    Itself,
    /// A name on the way to it (`.config` of `.config/git`): protected when not a directory.
    OnTheWay,
}

/// The default protection, built once per process: every project and sandbox starts from
/// it.
static DEFAULT: std::sync::LazyLock<Protection> = std::sync::LazyLock::new(|| Protection::build(DEFAULTS.clone()).expect("the default entries are valid"));

impl Default for Protection {
    fn default() -> Self {
        DEFAULT.clone()
    }
}

impl PartialEq for Protection {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Protection {
    /// The protection made of `entries` (duplicates folded, order kept).
    pub fn new(entries: impl IntoIterator<Item = String>) -> Result<Protection, EntryError> {
        let mut kept: Vec<String> = Vec::new();
        for e in entries {
            let e = check_entry(&e)?;
            if !kept.contains(&e) {
                kept.push(e);
            }
        }
        if kept == *DEFAULTS {
            return Ok(Protection::default());
        }
        Protection::build(kept)
    }

    fn build(kept: Vec<String>) -> Result<Protection, EntryError> {
        let mut all = Vec::new();
        for (i, e) in kept.iter().enumerate() {
            all.push((e.clone(), i, Part::Itself));
            let names: Vec<&str> = e.split('/').collect();
            for k in 1..names.len() {
                // `**` itself goes through directories only, whatever they are called.
                if names[k - 1] != "**" {
                    all.push((names[..k].join("/"), i, Part::OnTheWay));
                }
            }
        }
        let forms = forms::Forms::build(all).map_err(|bad| EntryError::BadPattern { entry: kept[bad.entry].clone(), reason: bad.reason })?;
        Ok(Protection { entries: kept, forms: Arc::new(forms), folded: Arc::default(), families: Arc::new([]) })
    }

    /// The defaults plus `added`, and what each added manifest brings with it
    /// (`Makefile`: `GNUmakefile` and `makefile`; `package.json`: `.npmrc`, `.yarnrc.yml`, …;
    /// see [`tools::family`]).
    pub fn with_added(added: &[String]) -> Result<Protection, EntryError> {
        let mut families: Vec<tools::FamilyEntry> = Vec::new();
        for a in added {
            let a = check_entry(a)?;
            for f in tools::family(&a) {
                if !DEFAULTS.contains(&f.entry) && !added.contains(&f.entry) && !families.iter().any(|g| g.entry == f.entry) {
                    families.push(f);
                }
            }
        }
        let extra: Vec<String> = families.iter().map(|f| f.entry.clone()).collect();
        let p = Protection::new(DEFAULTS.iter().cloned().chain(added.iter().cloned()).chain(extra))?;
        Ok(Protection { families: families.into(), ..p })
    }

    /// This protection with `more` entries; the families it had stay named.
    pub fn with_more(&self, more: impl IntoIterator<Item = String>) -> Result<Protection, EntryError> {
        let p = Protection::new(self.entries.iter().cloned().chain(more))?;
        Ok(Protection { families: self.families.clone(), ..p })
    }

    /// The entries a protected manifest brought in, each with the entry and tool it came from.
    pub fn families(&self) -> &[tools::FamilyEntry] {
        &self.families
    }

    /// This protection without `removed` (each must be one of its entries, as written).
    pub fn without(&self, removed: &[String]) -> Result<Protection, EntryError> {
        for r in removed {
            let r = check_entry(r)?;
            if !self.entries.contains(&r) {
                return Err(EntryError::Unknown(r, self.entries.join(", ")));
            }
        }
        let removed: Vec<String> = removed.iter().filter_map(|r| check_entry(r).ok()).collect();
        let p = Protection::new(self.entries.iter().filter(|e| !removed.contains(e)).cloned())?;
        let families: Vec<tools::FamilyEntry> = self.families.iter().filter(|f| !removed.contains(&f.entry)).cloned().collect();
        Ok(Protection { families: families.into(), ..p })
    }

    /// The entries, as written.
    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// The entry that protects `rel` (a path relative to the area's root, `/`-separated as
    /// the file system has it), when one does: `rel` is a protected path or lies beneath one.
    /// `kind` is what the last component of `rel` is.
    pub fn matches(&self, rel: &Path, kind: Kind) -> Option<&str> {
        self.matches_in(&self.forms, rel, kind)
    }

    /// Like [`Protection::matches`], in any case: `rel` and the entries both in lower case.
    /// On a case-insensitive file system (macOS; a casefolded Linux directory) `.GIT/HOOKS`
    /// is `.git/hooks`, and an entry `Makefile` covers `MAKEFILE`; elsewhere the extra
    /// refusals cost little (make reads `makefile` as well as `Makefile`).
    pub fn matches_any_case(&self, rel: &Path, kind: Kind) -> Option<&str> {
        self.matches(rel, kind).or_else(|| {
            let folded = self.folded.get_or_init(|| self.fold()).as_ref();
            // A path in lower case already, against entries in lower case: the answer stands
            // (most paths; the zone walks at launch and after the run look at every one).
            let text = rel.as_os_str().as_bytes();
            if folded.is_none() && !text.iter().any(|b| b.is_ascii_uppercase() || !b.is_ascii()) {
                return None;
            }
            let lower = match rel.to_str() {
                Some(text) => text.to_lowercase().into_bytes(),
                None => rel.as_os_str().as_bytes().to_ascii_lowercase(),
            };
            self.matches_in(folded.unwrap_or(&self.forms), Path::new(OsStr::from_bytes(&lower)), kind)
        })
    }

    /// The forms of the entries in lower case (in the same order, so an index names the
    /// entry as written), when one has an upper-case letter and the lower-case set is still
    /// valid (a range `[Z-a]` is not); otherwise the entries' own forms serve.
    fn fold(&self) -> Option<forms::Forms> {
        if !self.entries.iter().any(|e| e.chars().any(char::is_uppercase)) {
            return None;
        }
        let folded = Protection::build(self.entries.iter().map(|e| e.to_lowercase()).collect()).ok()?;
        Arc::into_inner(folded.forms)
    }

    fn matches_in(&self, forms: &forms::Forms, rel: &Path, kind: Kind) -> Option<&str> {
        let text = rel.as_os_str().as_bytes();
        if text.is_empty() {
            return None;
        }
        let mut best: Option<usize> = None;
        // `rel` itself, then its text before each `/` (a directory, with `rel` beneath it).
        // The text, not `Path::ancestors`: a glob judges text, and with a trailing `/` or an
        // empty name (`x/y/`, `x//y`) the text has a prefix `x/y` or `x/` that the names
        // alone do not give, and that a `**/E/**` glob saw.
        let slashes = text.iter().enumerate().rev().filter(|&(_, &b)| b == b'/').map(|(i, _)| i);
        for end in std::iter::once(text.len()).chain(slashes).filter(|&end| end > 0) {
            let path = Path::new(OsStr::from_bytes(&text[..end]));
            let beneath = end < text.len();
            for (entry, part) in forms.matches(path) {
                // `.git` itself counts only when it is not a directory; paths beneath a `.git`
                // directory are judged by the other entries.
                if self.entries[entry] == GIT_POINTER && (beneath || kind == Kind::Dir) {
                    continue;
                }
                // A name on the way to an entry is protected only as a non-directory.
                if part == Part::OnTheWay && (beneath || kind == Kind::Dir) {
                    continue;
                }
                best = Some(best.map_or(entry, |b| b.min(entry)));
            }
        }
        best.map(|i| self.entries[i].as_str())
    }
}

/// `e` as an entry: relative, normalised, no `.`/`..`, no empty components.
fn check_entry(e: &str) -> Result<String, EntryError> {
    let bad = || EntryError::NotRelative(crate::term::escape(e).into_owned());
    let trimmed = e.trim_end_matches('/');
    if trimmed.is_empty() || trimmed.starts_with('/') || crate::config::forbidden_char(trimmed).is_some() {
        return Err(bad());
    }
    for c in Path::new(trimmed).components() {
        if !matches!(c, Component::Normal(_)) {
            return Err(bad());
        }
    }
    // `Path::components` drops a `.` inside a path (`a/./b`, `a/.`): the text is looked at too,
    // or the entry would be kept with a name no path's names ever equal.
    if trimmed.split('/').any(|n| n.is_empty() || n == "." || n == "..") {
        return Err(bad());
    }
    Ok(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &Protection, rel: &str, kind: Kind) -> Option<String> {
        p.matches(Path::new(rel), kind).map(str::to_string)
    }

    #[test]
    fn any_case_folds_the_path_and_the_entries() {
        let p = Protection::with_added(&["Makefile".into(), "build/*.SH".into()]).expect("entries");
        let any = |rel: &str, kind| p.matches_any_case(Path::new(rel), kind).map(str::to_string);
        assert_eq!(m(&p, "MAKEFILE", Kind::Other), None, "as written, only the entry's own case");
        assert_eq!(any("MAKEFILE", Kind::Other).as_deref(), Some("Makefile"));
        // `makefile` is an entry of its own: `Makefile` brings the names make reads.
        assert_eq!(any("sub/makefile", Kind::Other).as_deref(), Some("makefile"));
        assert_eq!(any("sub/GNUMakefile", Kind::Other).as_deref(), Some("GNUmakefile"));
        assert_eq!(any("x/Build/run.sh", Kind::Other).as_deref(), Some("build/*.SH"));
        assert_eq!(any(".GIT/Hooks/pre-commit", Kind::Other).as_deref(), Some(".git/hooks"));
        assert_eq!(any(".Envrc", Kind::Other).as_deref(), Some(".envrc"));
        assert_eq!(any("Makefile.txt", Kind::Other), None);
        // The defaults alone are lower case: no folded copy is built for them.
        let d = Protection::default();
        assert_eq!(d.matches_any_case(Path::new(".GIT/CONFIG"), Kind::Other), Some(".git/config"));
        assert!(d.folded.get().is_some_and(Option::is_none));
        // A lower case that is no valid pattern keeps the entries as written.
        let r = Protection::with_added(&["[Z-a]x".into()]).expect("valid as written");
        assert_eq!(r.matches_any_case(Path::new("ZX"), Kind::Other), None);
        assert_eq!(r.matches_any_case(Path::new(".BASHRC"), Kind::Other), Some(".bashrc"));
    }

    #[test]
    fn defaults_at_any_depth() {
        let p = Protection::default();
        assert_eq!(m(&p, ".git/hooks/post-checkout", Kind::Other).as_deref(), Some(".git/hooks"));
        assert_eq!(m(&p, ".git/hooks", Kind::Dir).as_deref(), Some(".git/hooks"));
        assert_eq!(m(&p, "sub/deeper/.git/config", Kind::Other).as_deref(), Some(".git/config"));
        assert_eq!(m(&p, ".git/modules/a/config", Kind::Other).as_deref(), Some(".git/modules/**/config"));
        assert_eq!(m(&p, ".git/modules/a/modules/b/hooks/x", Kind::Other).as_deref(), Some(".git/modules/**/hooks"));
        assert_eq!(m(&p, "home/.bashrc", Kind::Other).as_deref(), Some(".bashrc"));
        assert_eq!(m(&p, ".vscode/tasks.json", Kind::Other).as_deref(), Some(".vscode"));
        assert_eq!(m(&p, "a/.config/git/config", Kind::Other).as_deref(), Some(".config/git"));
        assert_eq!(m(&p, ".git/worktrees/wt/commondir", Kind::Other).as_deref(), Some(".git/worktrees/*/commondir"));
        assert_eq!(m(&p, ".git/worktrees/wt/HEAD", Kind::Other), None);
        // A trailing `/` or an empty name: the text before a `/` is an ancestor to the globs.
        assert_eq!(m(&p, ".git/modules/a/config/", Kind::Dir).as_deref(), Some(".git/modules/**/config"));
        assert_eq!(m(&p, ".git/worktrees/wt/commondir//x", Kind::Other).as_deref(), Some(".git/worktrees/*/commondir"));
    }

    #[test]
    fn git_directory_contents_stay_writable() {
        let p = Protection::default();
        for rel in [".git/objects/ab/cdef", ".git/refs/heads/main", ".git/index", ".git/HEAD", ".git/logs/HEAD", "src/main.rs", "config", "hooks/x"] {
            assert_eq!(m(&p, rel, Kind::Other), None, "{rel}");
        }
        assert_eq!(m(&p, ".git", Kind::Dir), None);
        assert_eq!(m(&p, "sub/.git", Kind::Dir), None);
    }

    #[test]
    fn a_git_pointer_file_is_protected() {
        let p = Protection::default();
        assert_eq!(m(&p, ".git", Kind::Other).as_deref(), Some(".git"));
        assert_eq!(m(&p, "sub/.git", Kind::Other).as_deref(), Some(".git"));
    }

    #[test]
    fn a_link_on_the_way_is_protected() {
        let p = Protection::default();
        assert_eq!(m(&p, ".config", Kind::Other).as_deref(), Some(".config/git"));
        assert_eq!(m(&p, "home/.config", Kind::Other).as_deref(), Some(".config/git"));
        assert_eq!(m(&p, ".config", Kind::Dir), None);
        assert_eq!(m(&p, ".git/modules", Kind::Other).as_deref(), Some(".git/modules/**/config"));
        assert_eq!(m(&p, ".git/worktrees/wt", Kind::Other).as_deref(), Some(".git/worktrees/*/commondir"));
        assert_eq!(m(&p, ".git/worktrees", Kind::Dir), None);
        assert_eq!(m(&p, ".git/modules/a", Kind::Other), None, "below `**`: a git directory by its contents");
    }

    #[test]
    fn names_are_matched_whole() {
        let p = Protection::default();
        assert_eq!(m(&p, "x.bashrc", Kind::Other), None);
        assert_eq!(m(&p, ".bashrc.bak", Kind::Other), None);
        assert_eq!(m(&p, "not.git/config", Kind::Other), None);
    }

    #[test]
    fn added_and_removed() {
        let p = Protection::with_added(&["Makefile".into(), ".github/workflows".into()]).unwrap();
        assert_eq!(m(&p, "sub/Makefile", Kind::Other).as_deref(), Some("Makefile"));
        assert_eq!(m(&p, ".github/workflows/ci.yml", Kind::Other).as_deref(), Some(".github/workflows"));
        // What make reads besides `Makefile` comes with it, named as its family.
        assert_eq!(m(&p, "sub/GNUmakefile", Kind::Other).as_deref(), Some("GNUmakefile"));
        let family: Vec<&str> = p.families().iter().map(|f| f.entry.as_str()).collect();
        assert_eq!(family, ["GNUmakefile", "makefile"]);
        let q = p.without(&[".vscode".into()]).unwrap();
        assert_eq!(m(&q, ".vscode/tasks.json", Kind::Other), None);
        assert_eq!(q.families().len(), 2, "a family stays named when another entry is turned off");
        assert_eq!(q.without(&["makefile".into()]).unwrap().families().len(), 1);
        assert!(matches!(q.without(&[".nope".into()]), Err(EntryError::Unknown(..))));
    }

    #[test]
    fn bad_entries() {
        for e in ["", "/etc/x", "../x", "a/../b", "./a", "a//b", "a/./b", "a/.", ".git/./hooks"] {
            assert!(Protection::new([e.to_string()]).is_err(), "{e:?}");
        }
    }
}
