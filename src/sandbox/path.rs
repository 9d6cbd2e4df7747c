//! Parsing of sandbox paths into a mount and normalised components. Purely lexical: the
//! file system is consulted later, beneath a directory handle.

use super::error::show;
use super::{Addressing, Sandbox, SandboxError};

/// A well-formed sandbox path: which mount, and the components below its root (no `.`,
/// no `..`, no empty parts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualPath {
    pub mount: usize,
    pub rel: Vec<String>,
}

/// `"/data"` + `["a", "b"]` → `"/data/a/b"`; `"/"` + `["a"]` → `"/a"`.
pub(crate) fn join_display(mount_point: &str, rel: &[String]) -> String {
    let mut s = mount_point.trim_end_matches('/').to_string();
    for c in rel {
        s.push('/');
        s.push_str(c);
    }
    if s.is_empty() {
        s.push('/');
    }
    s
}

fn is_drive_letter(p: &str) -> bool {
    let b = p.as_bytes();
    b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b.len() == 2 || b[2] == b'/' || b[2] == b'\\')
}

impl Sandbox {
    /// Parses a sandbox path. Accepted forms: `/zone/rel`, `zone/rel`, `zone:rel` (zones
    /// addressing) and `/rel`, `rel` (root addressing). Backslashes count as `/`.
    pub fn parse(&self, path: &str) -> Result<VirtualPath, SandboxError> {
        let invalid = |reason: &str| SandboxError::InvalidPath { path: show(path), reason: reason.to_string(), readable: self.readable_list() };
        let outside = |detail: &str| SandboxError::OutsideSandbox { path: show(path), detail: detail.to_string(), readable: self.readable_list() };
        if let Some(c) = path.chars().find(|c| c.is_control()) {
            // Shown to a person in prompts and summaries, such a path could rewrite what
            // they read; no real file needs one.
            return Err(invalid(&format!("it contains the control character U+{:04X}; sandbox paths cannot contain control characters", c as u32)));
        }
        if path.trim().is_empty() {
            return Err(invalid("it is empty"));
        }
        if path.starts_with('~') {
            return Err(invalid("home directories (~) are not part of the sandbox; use a sandbox path"));
        }
        let mounts = self.mounts();
        let zone_colon = match self.addressing() {
            Addressing::Zones => path.split_once(':').filter(|(zone, _)| !zone.contains('/') && !zone.contains('\\') && mounts.iter().any(|m| m.name == *zone)),
            Addressing::Root => None,
        };
        if zone_colon.is_none() && is_drive_letter(path) {
            return Err(invalid("drive letters are not sandbox paths; use a sandbox path"));
        }
        // Backslashes count as `/` in every form, `zone:rel` included (`data:..\\x` must be
        // the `..` it looks like, not a file name with backslashes in it).
        let unified: String = match zone_colon {
            Some((zone, rest)) => format!("/{zone}/{}", rest.replace('\\', "/")),
            None => path.replace('\\', "/"),
        };
        // A path naming a mount's host directory is a host path: the worker must use the
        // sandbox path instead. The message neither repeats the path nor says which host
        // directory matched (messages never show host paths); it names the sandbox path.
        if unified.starts_with('/') {
            for (i, m) in mounts.iter().enumerate() {
                let host = m.host_path.to_string_lossy();
                if m.mount_point == host {
                    continue;
                }
                if let Some(rest) = strip_under(&unified, &host) {
                    let rel: Vec<String> = rest.split('/').filter(|c| !c.is_empty() && *c != ".").map(str::to_string).collect();
                    let hint = if rel.iter().any(|c| c == "..") { String::new() } else { format!(", here '{}'", self.display(&VirtualPath { mount: i, rel })) };
                    return Err(SandboxError::InvalidPath {
                        path: "<host path>".into(),
                        reason: format!("it is a host path; address files by their sandbox path{hint}"),
                        readable: self.readable_list(),
                    });
                }
            }
        }

        let mut raw = unified.split('/').filter(|c| !c.is_empty() && *c != ".").peekable();
        // Zones addressing: the leading components pick the mount (mount points may have
        // several components, like `/srv/data`; the longest match wins), and `..` may never
        // pop them.
        let mount = match self.addressing() {
            Addressing::Root => 0usize,
            Addressing::Zones => {
                let Some(first) = raw.peek().copied() else {
                    return Err(invalid("it names the sandbox root, which holds only the zones; use a zone path such as /zone/file"));
                };
                if first == ".." {
                    return Err(outside(" (`..` leaves the sandbox)"));
                }
                let comps: Vec<&str> = raw.clone().collect();
                let found = mounts
                    .iter()
                    .enumerate()
                    .filter_map(|(i, m)| {
                        let n = m.mount_point.split('/').filter(|c| !c.is_empty()).count();
                        let matches = n > 0 && n <= comps.len() && m.mount_point.split('/').filter(|c| !c.is_empty()).eq(comps[..n].iter().copied());
                        matches.then_some((i, n))
                    })
                    .max_by_key(|&(_, n)| n);
                match found {
                    Some((i, n)) => {
                        for _ in 0..n {
                            raw.next();
                        }
                        i
                    }
                    None => return Err(outside(&format!(" (there is no zone named '{}')", show(first)))),
                }
            }
        };
        let mut parts: Vec<&str> = Vec::new();
        for c in raw {
            if c == ".." {
                if parts.is_empty() {
                    return Err(outside(" (`..` leaves the mount)"));
                }
                parts.pop();
            } else {
                parts.push(c);
            }
        }
        if mounts.is_empty() {
            return Err(outside(""));
        }
        Ok(VirtualPath { mount, rel: parts.into_iter().map(str::to_string).collect() })
    }

    /// The canonical sandbox form of a parsed path (`/data/a.txt`).
    pub fn display(&self, vp: &VirtualPath) -> String {
        join_display(&self.mounts()[vp.mount].mount_point, &vp.rel)
    }
}

/// The rest of `path` after `root` when `path` is `root` or lies below it.
fn strip_under<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    let root = root.trim_end_matches('/');
    if root.is_empty() {
        return None;
    }
    let rest = path.strip_prefix(root)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}
