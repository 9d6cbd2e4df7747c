//! `core.hooksPath`: a git configuration may send git for its hooks to any directory, and a
//! relative one is taken in each repository's work tree (`.githooks`, husky's `.husky/_`).
//! When a configuration the worker cannot change names one (the person's own, or a
//! repository's protected `config`), the directory it names is a file the host runs: it is
//! protected in the writable areas as an extra entry, so that the existing one is bound
//! read-only and a new one the worker makes is moved aside after the run.
//!
//! A relative value becomes an entry as written (matched at any depth, as every entry is:
//! wider than the repository it came from, never narrower); an absolute one (or `~/…`)
//! becomes the path relative to each area that holds it. A value that leaves its work tree
//! (`..`) is resolved against the repository it came from when that is known.
//!
//! A file such a configuration includes (`include.path`, `includeIf.*.path`, whatever the
//! condition) is git configuration too, and protected the same way (a relative one lies
//! beside the file naming it). What an included file itself names is not read.

use std::path::{Component, Path, PathBuf};

use crate::hostrun::{EntryError, Protection};

/// Longest configuration file read.
const MAX_CONFIG: usize = 256 * 1024;

/// A path a git configuration names that git then runs or reads as configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Named {
    /// `core.hooksPath`: taken in each work tree when relative.
    Hooks(String),
    /// `include.path`, `includeIf.*.path`: taken beside the configuration when relative.
    Include(String),
}

/// Every `core.hooksPath` and `include` path in the git configuration `text`, in order
/// (an `includeIf` whatever its condition).
pub(super) fn values(text: &str) -> Vec<Named> {
    let mut out = Vec::new();
    let (mut in_core, mut in_include) = (false, false);
    for line in text.lines() {
        let mut line = line.trim_start();
        if let Some(rest) = line.strip_prefix('[') {
            let Some(end) = rest.find(']') else { continue };
            let header = rest[..end].trim();
            // `[core]` only: `[core "x"]` is a subsection, `[core.x]` its old spelling.
            in_core = header.eq_ignore_ascii_case("core");
            let lower = header.to_ascii_lowercase();
            in_include = lower == "include" || lower.starts_with("includeif ") || lower.starts_with("includeif\"");
            line = rest[end + 1..].trim_start();
        }
        let Some((key, value)) = line.split_once('=').map(|(k, v)| (k.trim(), unquote(v))) else { continue };
        if value.is_empty() {
            continue;
        }
        if in_core && key.eq_ignore_ascii_case("hookspath") {
            out.push(Named::Hooks(value));
        } else if in_include && key.eq_ignore_ascii_case("path") {
            out.push(Named::Include(value));
        }
    }
    out
}

/// What `named`, found in the configuration file `config`, leads to.
pub(super) fn named_target(named: &Named, config: &Path, worktree: Option<&Path>) -> Option<Target> {
    match named {
        Named::Hooks(v) => target(v, worktree),
        // git takes a relative include beside the file that names it.
        Named::Include(v) => target(v, config.parent()).map(|t| match t {
            Target::Rel(r) => Target::Abs(lexical(&config.parent().unwrap_or(Path::new("/")).join(r))),
            abs => abs,
        }),
    }
}

/// A configuration value as git reads it: quotes removed, `\` escapes kept literal for the
/// usual ones, a comment (`#`, `;`) outside quotes ending it, spaces trimmed.
fn unquote(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(o) => out.push(o),
                None => {}
            },
            '#' | ';' if !quoted => break,
            _ => out.push(c),
        }
    }
    out.trim().to_string()
}

/// The values in the regular file `path` (read by path: the person's own configuration,
/// outside any zone), or none.
pub(super) fn values_in_host_file(path: &Path) -> Vec<Target> {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(path) else { return Vec::new() };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let mut buf = Vec::new();
    let _ = f.take(MAX_CONFIG as u64).read_to_end(&mut buf);
    values(&String::from_utf8_lossy(&buf)).iter().filter_map(|n| named_target(n, path, None)).collect()
}

/// The person's own git configuration files (system, global, XDG).
pub(super) fn host_configs() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("/etc/gitconfig")];
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        files.push(home.join(".gitconfig"));
        let xdg = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from).unwrap_or_else(|| home.join(".config"));
        files.push(xdg.join("git/config"));
    }
    files
}

/// Where a value leads: `Rel` for a path taken in each work tree, `Abs` for one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Rel(String),
    Abs(PathBuf),
}

/// What `value` names, for a repository whose work tree is `worktree` (when known).
pub(super) fn target(value: &str, worktree: Option<&Path>) -> Option<Target> {
    let expanded = match value.strip_prefix("~/") {
        Some(rest) => PathBuf::from(std::env::var_os("HOME")?).join(rest),
        None => PathBuf::from(value),
    };
    if expanded.is_absolute() {
        return Some(Target::Abs(lexical(&expanded)));
    }
    let normal = lexical(&expanded);
    if normal.components().any(|c| c == Component::ParentDir) || normal.as_os_str().is_empty() {
        return worktree.map(|w| Target::Abs(lexical(&w.join(&expanded))));
    }
    Some(Target::Rel(normal.to_string_lossy().into_owned()))
}

/// `p` with `.` removed and `..` applied to what precedes it (a leading `..` is kept).
fn lexical(p: &Path) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.last(), Some(Component::Normal(_))) => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out.iter().collect()
}

/// The hook directories named by the configurations the walks found: each git directory's
/// `config`, and a home's `.gitconfig` and `.config/git/config`.
pub(super) fn in_walked(walked: &[super::protected::Walked<'_>]) -> Vec<Target> {
    let mut out = Vec::new();
    for w in walked {
        for (rel, entry) in &w.found {
            let name = rel.file_name().and_then(|n| n.to_str());
            let (file, worktree) = match name {
                Some("config") => {
                    let gitdir = w.m.source.join(rel.parent().unwrap_or(Path::new("")));
                    // A relative value is taken in the work tree, or in a bare repository.
                    let worktree = if gitdir.file_name().is_some_and(|n| n == ".git") { gitdir.parent().map(Path::to_path_buf) } else { Some(gitdir) };
                    (rel.clone(), worktree)
                }
                Some(".gitconfig") => (rel.clone(), None),
                _ if entry == ".config/git" && rel.ends_with(".config/git") => (rel.join("config"), None),
                _ => continue,
            };
            let Some(text) = super::gitdir::read_beneath(&w.dir, &file, MAX_CONFIG) else { continue };
            let config = w.m.source.join(&file);
            for v in values(&text) {
                if let Some(t) = named_target(&v, &config, worktree.as_deref()) {
                    if !out.contains(&t) {
                        out.push(t);
                    }
                }
            }
        }
    }
    out
}

/// `protection` plus the hook directories of `hooks` that lie in the area at `source`.
pub(super) fn with_hooks(protection: &Protection, hooks: &[Target], source: &Path) -> Result<Protection, EntryError> {
    let added: Vec<String> = hooks
        .iter()
        .filter_map(|t| match t {
            Target::Rel(r) => entry(Path::new(r)),
            Target::Abs(p) => entry(canonical(p).strip_prefix(source).ok()?),
        })
        .filter(|e| !protection.entries().contains(e))
        .collect();
    if added.is_empty() {
        return Ok(protection.clone());
    }
    protection.with_more(added)
}

/// `p` with links resolved as far as it exists (a hook directory may not exist yet).
fn canonical(p: &Path) -> PathBuf {
    if let Ok(c) = std::fs::canonicalize(p) {
        return c;
    }
    match (p.parent(), p.file_name()) {
        (Some(parent), Some(name)) => canonical(parent).join(name),
        _ => p.to_path_buf(),
    }
}

/// `rel` as a protected entry: glob characters escaped, so that it names only itself.
pub(super) fn entry(rel: &Path) -> Option<String> {
    let s = rel.to_str()?;
    if s.is_empty() {
        return None;
    }
    let mut out = String::new();
    for c in s.chars() {
        if "*?[]{}\\".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_core_hookspath() {
        let text =
            "[user]\n\thooksPath = no\n[core]\n\tbare = false\n\thooksPath = .githooks # mine\n[core \"x\"]\n\thookspath = no\n[Core] HOOKSPATH = \"a b\"\n\
                    [include]\n\tpath = ../x.cfg\n[includeIf \"gitdir:/p/\"]\n\tpath = /p/y.cfg\n";
        let named = vec![Named::Hooks(".githooks".into()), Named::Hooks("a b".into()), Named::Include("../x.cfg".into()), Named::Include("/p/y.cfg".into())];
        assert_eq!(values(text), named);
        let config = Path::new("/z/repo/.git/config");
        assert_eq!(named_target(&named[2], config, Some(Path::new("/z/repo"))), Some(Target::Abs("/z/repo/x.cfg".into())));
        assert_eq!(named_target(&named[0], config, Some(Path::new("/z/repo"))), Some(Target::Rel(".githooks".into())));
    }

    #[test]
    fn targets() {
        assert_eq!(target(".husky/_", None), Some(Target::Rel(".husky/_".into())));
        assert_eq!(target("./hooks/", None), Some(Target::Rel("hooks".into())));
        assert_eq!(target("/p/hooks", None), Some(Target::Abs("/p/hooks".into())));
        assert_eq!(target("../h", None), None);
        assert_eq!(target("../h", Some(Path::new("/z/repo"))), Some(Target::Abs("/z/h".into())));
        assert_eq!(target(".", Some(Path::new("/z/repo"))), Some(Target::Abs("/z/repo".into())));
    }

    #[test]
    fn entries_are_literal() {
        assert_eq!(entry(Path::new("a*/[b]")).as_deref(), Some("a\\*/\\[b\\]"));
        assert_eq!(entry(Path::new("")), None);
    }
}
