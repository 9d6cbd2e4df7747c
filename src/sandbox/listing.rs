//! `list`: the entries below a sandbox directory that match a glob, read beneath the area's
//! handle (as the sandbox's identity), bounded, with the directories that could not be read
//! named.

use globset::{GlobBuilder, GlobMatcher};
use serde::Serialize;

use super::error::show;
use super::io::{describe_io, rel_path};
use super::path::VirtualPath;
use super::{Addressing, Sandbox, SandboxError};
use cap_std::fs::Dir;

/// Maximum entries `list` returns, so a huge tree cannot flood the caller.
pub const LIST_LIMIT: usize = 10_000;

impl Sandbox {
    /// Lists entries below `path` whose path relative to it matches `pattern` (a glob where
    /// `*` never crosses `/`; `**` does). Directories end in `/`. `list("/")` shows the zones.
    /// Files whose suffix the mount does not allow are left out. Symlinked directories are
    /// not descended into. Directories that cannot be opened are named in the result, never
    /// skipped silently.
    pub fn list(&self, path: &str, pattern: &str) -> Result<Listing, SandboxError> {
        self.as_worker("list", path, || self.list_here(path, pattern))?
    }

    fn list_here(&self, path: &str, pattern: &str) -> Result<Listing, SandboxError> {
        let matcher = compile_pattern(pattern)?;
        let trimmed = path.trim();
        if self.addressing() == Addressing::Zones && (trimmed.is_empty() || trimmed == "/" || trimmed == ".") {
            let mut zones: Vec<String> = Vec::new();
            // The readable areas themselves (a whole zone `/data/`, or `/data/sub/` for a
            // child restricted to it): every entry shown here can be listed in turn.
            for a in &self.readable {
                let shown = self.area_path(&a.key);
                let entry = format!("{}/", shown.trim_end_matches('/'));
                // The pattern is matched against the top-level name, as `ls /` would.
                let top = shown.trim_start_matches('/').split('/').next().unwrap_or("");
                if !zones.contains(&entry) && matcher.is_match(top) {
                    zones.push(entry);
                }
            }
            zones.sort();
            return Ok(Listing { entries: zones, ..Listing::default() });
        }
        let path = if trimmed.is_empty() { "/" } else { trimmed };
        let vp = self.parse(path)?;
        let area = self.readable_area(&vp, path)?;
        let dir = area.dir.open_dir(rel_path(Self::inner(area, &vp))).map_err(|e| {
            if e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) {
                SandboxError::WrongKind { op: "list", path: show(path), found: "file", expected: "directory" }
            } else {
                self.io_error("list", path, &e)
            }
        })?;
        let base = self.display(&vp);
        // A pattern without `/` or `**` only matches the first level: nothing below is read.
        let deep = pattern.contains('/') || pattern.contains("**");
        let mut out = Listing::default();
        // Pending directories hold their parent's handle, not their own: depth-first, that
        // keeps one open directory per level, however wide the tree.
        let root = std::sync::Arc::new(dir);
        let mut stack: Vec<(std::sync::Arc<Dir>, Option<String>, String)> = vec![(root, None, String::new())];
        while let Some((parent, name, rel)) = stack.pop() {
            let dir = match &name {
                None => parent,
                Some(n) => match parent.open_dir(n) {
                    Ok(d) => std::sync::Arc::new(d),
                    Err(e) => {
                        out.unreadable.push(format!("{}/: {}", join(&base, &rel), describe_io(&e)));
                        continue;
                    }
                },
            };
            let entries = match dir.entries() {
                Ok(entries) => entries,
                Err(e) => {
                    out.unreadable.push(format!("{}/: {}", join(&base, &rel), describe_io(&e)));
                    continue;
                }
            };
            for entry in entries {
                let entry = entry.map_err(|e| self.io_error("list", path, &e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let rel_name = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
                let ft = entry.file_type().map_err(|e| self.io_error("list", path, &e))?;
                let child_vp = VirtualPath { mount: vp.mount, rel: vp.rel.iter().cloned().chain(rel_name.split('/').map(str::to_string)).collect() };
                if ft.is_dir() {
                    if matcher.is_match(&rel_name) {
                        out.entries.push(format!("{}/", join(&base, &rel_name)));
                    }
                    if deep {
                        stack.push((dir.clone(), Some(name), rel_name));
                    }
                } else if matcher.is_match(&rel_name) && self.check_suffix_vp(&child_vp, &rel_name).is_ok() {
                    out.entries.push(join(&base, &rel_name));
                }
                if out.entries.len() >= LIST_LIMIT {
                    out.truncated = true;
                    out.entries.sort();
                    return Ok(out);
                }
            }
        }
        out.entries.sort();
        Ok(out)
    }
}

/// What `list` found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// Matching paths, sorted; directories end in `/`.
    pub entries: Vec<String>,
    /// True when [`LIST_LIMIT`] entries were reached and the rest was not listed.
    pub truncated: bool,
    /// Directories that could not be read (`/data/sub/: permission denied…`): their
    /// entries are missing from `entries`.
    pub unreadable: Vec<String>,
}

fn join(base: &str, rel: &str) -> String {
    if base.ends_with('/') {
        format!("{base}{rel}")
    } else {
        format!("{base}/{rel}")
    }
}

/// Compiles a `list` pattern, refusing forms that could leave the listed directory.
fn compile_pattern(pattern: &str) -> Result<GlobMatcher, SandboxError> {
    let bad = |reason: &str| SandboxError::InvalidPattern { pattern: show(pattern), reason: reason.into() };
    if pattern.contains('\0') {
        return Err(bad("it contains a NUL byte"));
    }
    if pattern.starts_with('/') || pattern.starts_with('\\') {
        return Err(bad("it starts with '/'; give the directory as the path and a relative pattern"));
    }
    if pattern.starts_with('~') {
        return Err(bad("it starts with '~'"));
    }
    if pattern.split(['/', '\\']).any(|c| c == "..") {
        return Err(bad("it contains '..'"));
    }
    GlobBuilder::new(pattern).literal_separator(true).backslash_escape(true).build().map(|g| g.compile_matcher()).map_err(|e| bad(&e.kind().to_string()))
}
