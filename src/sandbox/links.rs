//! Where a path that a command names *inside* the running sandbox really leads: the path is
//! walked one component at a time as the kernel would walk it (`..` after a symlink pops the
//! link's target, not the link), and every symlink met inside a zone is read beneath the
//! handle of its area. Used by the shell rules' `sandbox_paths`, which must judge the file a
//! command will open, not the words it was given.

use std::collections::VecDeque;
use std::io;

use super::io::rel_path;
use super::path::VirtualPath;
use super::{deepest, Addressing, Sandbox};

/// Symlinks followed before giving up, as Linux does (`ELOOP` after 40).
const MAX_LINKS: usize = 40;

/// Where a command path leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followed {
    /// The sandbox path it leads to, every symlink resolved.
    pub path: VirtualPath,
    /// Whether something exists there now (a missing path may still be created later).
    pub exists: bool,
}

/// Why a command path cannot be judged; the caller refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FollowError {
    #[error("it leads outside the zones")]
    Outside,
    #[error("it passes through '{0}', outside the zones, where symlinks cannot be checked")]
    Unchecked(String),
    #[error("it goes through more than {MAX_LINKS} symlinks")]
    TooManyLinks,
    #[error("a symlink on the way cannot be read ({0})")]
    Unreadable(String),
}

/// What one component of a path is.
enum Entry {
    Missing,
    Plain,
    Link(String),
}

impl Sandbox {
    /// The sandbox path behind a path as the running command sees it (zones at their mount
    /// points; the root form at [`super::ROOT_FORM_MOUNT_POINT`]), if it lies in a mount.
    fn sandbox_path_of(&self, container: &[String]) -> Option<VirtualPath> {
        let sandbox_components: &[String] = match self.addressing() {
            Addressing::Zones => container,
            Addressing::Root => {
                let root: Vec<&str> = super::ROOT_FORM_MOUNT_POINT.split('/').filter(|c| !c.is_empty()).collect();
                if container.len() < root.len() || !container.iter().zip(&root).all(|(a, b)| a == b) {
                    return None;
                }
                &container[root.len()..]
            }
        };
        // Components come from splitting on `/`; a `\\` would be split again by `parse`
        // (it counts as `/` there), so such a name is not judged at all.
        if sandbox_components.iter().any(|c| c.contains('\\')) {
            return None;
        }
        self.parse(&format!("/{}", sandbox_components.join("/"))).ok()
    }

    /// True when `container` is a directory the launcher creates to hold a mount (`/`, or the
    /// parents of a mount point or of a narrower area): never a symlink.
    fn is_scaffolding(&self, container: &[String]) -> bool {
        if container.is_empty() {
            return true;
        }
        let targets = self.readable.iter().chain(self.writable.iter()).map(|a| {
            let shown = self.area_path(&a.key);
            let mut comps: Vec<String> = Vec::new();
            if self.addressing() == Addressing::Root {
                comps.extend(super::ROOT_FORM_MOUNT_POINT.split('/').filter(|c| !c.is_empty()).map(str::to_string));
            }
            comps.extend(shown.split('/').filter(|c| !c.is_empty()).map(str::to_string));
            comps
        });
        targets.into_iter().any(|t| t.len() > container.len() && t.starts_with(container))
    }

    /// What the entry at `container` is, looked up beneath the handle of its area.
    fn entry(&self, container: &[String]) -> Result<Entry, FollowError> {
        let shown = || format!("/{}", container.join("/"));
        let Some(vp) = self.sandbox_path_of(container) else {
            return if self.is_scaffolding(container) { Ok(Entry::Plain) } else { Err(FollowError::Unchecked(shown())) };
        };
        let area = match deepest(&self.readable, &vp).or_else(|| deepest(&self.writable, &vp)) {
            Some(a) => a,
            // Inside a mount but in no area: not mounted in the command's sandbox at all.
            None => return Ok(if self.is_scaffolding(container) { Entry::Plain } else { Entry::Missing }),
        };
        let inner = &vp.rel[area.key.prefix.len()..];
        if inner.is_empty() {
            // The area's own directory: bound from its handle, never a symlink.
            return Ok(Entry::Plain);
        }
        match area.dir.symlink_metadata(rel_path(inner)) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = area.dir.read_link_contents(rel_path(inner)).map_err(|e| FollowError::Unreadable(super::io::describe_io(&e)))?;
                target.to_str().map(|t| Entry::Link(t.to_string())).ok_or_else(|| FollowError::Unreadable("its target is not UTF-8".into()))
            }
            Ok(_) => Ok(Entry::Plain),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Entry::Missing),
            // A component that is a file (ENOTDIR): the command's lookup fails there too.
            Err(e) if e.raw_os_error() == Some(libc_enotdir()) => Ok(Entry::Missing),
            Err(e) => Err(FollowError::Unreadable(super::io::describe_io(&e))),
        }
    }

    /// Walks `path` (absolute, as the command sees it) like the kernel: `.` skipped, `..`
    /// pops what was resolved so far, symlinks replaced by their targets (absolute targets
    /// restart from the sandbox's `/`). Every component that exists must lie in a zone (or be
    /// a directory holding one), because only there can symlinks be read.
    pub fn follow_command_path(&self, path: &str) -> Result<Followed, FollowError> {
        let mut todo: VecDeque<String> = path.split('/').map(str::to_string).collect();
        let mut cur: Vec<String> = Vec::new();
        let mut links = 0usize;
        // How deep the first missing component sits. The command may create it (`mkdir -p`,
        // `install -D`), so a `..` back above it resumes the walk where things exist again:
        // `new/../link` goes through `link`.
        let mut missing_at: Option<usize> = None;
        while let Some(c) = todo.pop_front() {
            match c.as_str() {
                "" | "." => continue,
                ".." => {
                    cur.pop();
                    if missing_at.is_some_and(|depth| cur.len() < depth) {
                        missing_at = None;
                    }
                    continue;
                }
                _ => cur.push(c),
            }
            if missing_at.is_some() {
                continue;
            }
            match self.entry(&cur)? {
                Entry::Plain => {}
                Entry::Missing => missing_at = Some(cur.len()),
                Entry::Link(target) => {
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(FollowError::TooManyLinks);
                    }
                    cur.pop();
                    if target.starts_with('/') {
                        cur.clear();
                    }
                    for t in target.split('/').rev() {
                        todo.push_front(t.to_string());
                    }
                }
            }
        }
        let vp = self.sandbox_path_of(&cur).ok_or(FollowError::Outside)?;
        Ok(Followed { path: vp, exists: missing_at.is_none() })
    }
}

fn libc_enotdir() -> i32 {
    rustix::io::Errno::NOTDIR.raw_os_error()
}
