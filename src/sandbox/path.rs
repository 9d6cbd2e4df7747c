//! Parsing of sandbox paths into a mount and normalised components. Purely lexical: the
//! file system is consulted later, beneath a directory handle.

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
        let invalid = |reason: &str| SandboxError::InvalidPath {
            path: path.escape_debug().to_string(),
            reason: reason.to_string(),
            readable: self.readable_list(),
        };
        let outside = |detail: &str| SandboxError::OutsideSandbox {
            path: path.to_string(),
            detail: detail.to_string(),
            readable: self.readable_list(),
        };
        if path.contains('\0') {
            return Err(invalid("it contains a NUL byte"));
        }
        if path.trim().is_empty() {
            return Err(invalid("it is empty"));
        }
        if path.starts_with('~') {
            return Err(invalid("home directories (~) are not part of the sandbox; use a sandbox path"));
        }
        let mounts = self.mounts();
        let zone_colon = match self.addressing() {
            Addressing::Zones => path.split_once(':').filter(|(zone, _)| {
                !zone.contains('/') && !zone.contains('\\') && mounts.iter().any(|m| m.name == *zone)
            }),
            Addressing::Root => None,
        };
        if zone_colon.is_none() && is_drive_letter(path) {
            return Err(invalid("drive letters are not sandbox paths; use a sandbox path"));
        }
        let unified: String = match zone_colon {
            Some((zone, rest)) => format!("/{zone}/{rest}"),
            None => path.replace('\\', "/"),
        };
        // A path naming a mount's host directory is a host path: the worker must use the
        // sandbox path instead. The message does not repeat which host path matched.
        if unified.starts_with('/') && mounts.iter().any(|m| m.mount_point != m.host_path.to_string_lossy() && is_under(&unified, &m.host_path.to_string_lossy())) {
            return Err(invalid("it is a host path; address files by their sandbox path"));
        }

        let mut parts: Vec<&str> = Vec::new();
        let mut raw = unified.split('/').filter(|c| !c.is_empty() && *c != ".");
        // Zones addressing: the first component picks the mount, and `..` may never pop it.
        let (mount, floor) = match self.addressing() {
            Addressing::Root => (0usize, 0usize),
            Addressing::Zones => {
                let Some(first) = raw.next() else {
                    return Err(invalid("it names the sandbox root, which holds only the zones; use a zone path such as /zone/file"));
                };
                if first == ".." {
                    return Err(outside(" (`..` leaves the sandbox)"));
                }
                match mounts.iter().position(|m| m.name == first) {
                    Some(i) => (i, 0),
                    None => return Err(outside(&format!(" (there is no zone named '{}')", first.escape_debug()))),
                }
            }
        };
        for c in raw {
            if c == ".." {
                if parts.len() <= floor {
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

fn is_under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    !root.is_empty() && (path == root || path.starts_with(&format!("{root}/")))
}
