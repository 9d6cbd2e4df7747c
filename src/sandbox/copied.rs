//! A run's sandbox as its tool service and nested runs see it when zones are copy-delivered.
//!
//! A run with `delivery: copy` binds a private copy in place of each such zone (see
//! `run::delivery`); the person's review at the end of the run decides what of it reaches the
//! host. Everything else the run does in that zone must go into the same copy, or it would
//! skip that review: the broker's `write_file`, `edit_file` and `delete_file`, its reads
//! (which must see what the worker wrote), and the shell commands and child workers it starts.
//! [`Sandbox::on_copies`] gives them that sandbox: each area of a copied zone held through the
//! copy's handle instead of the host's, and the zone marked as copied, so a nested run binds
//! the copy read-write as it is (no second copy, no publish of its own: its changes are the
//! run's, reviewed once at the run's end).

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use cap_std::fs::Dir;

use super::{hostfiles, Area, AreaKey, Sandbox, SandboxError};

/// One copy a run made: the sandbox path of the area it stands for, and its directory.
#[derive(Debug)]
pub struct CopiedArea<'a> {
    pub sandbox_path: String,
    pub root: BorrowedFd<'a>,
}

impl Sandbox {
    /// This sandbox with `copies` in place of their areas. Every area of a copied zone that
    /// no copy stands for is left out (less access, never the host's directory by mistake),
    /// and so are grants in those zones still to be created.
    pub fn on_copies(&self, copies: &[CopiedArea<'_>]) -> Result<Sandbox, SandboxError> {
        let mut next = self.clone();
        let mut copied: Vec<usize> = self.copied.to_vec();
        let mut replaced: Vec<(AreaKey, Arc<Dir>)> = Vec::new();
        for c in copies {
            let vp = self.parse(&c.sandbox_path)?;
            let key = AreaKey { mount: vp.mount, prefix: vp.rel };
            let fd = c.root.try_clone_to_owned().map_err(|e| self.io_error("open", &c.sandbox_path, &e))?;
            replaced.push((key, Arc::new(Dir::from_std_file(std::fs::File::from(fd)))));
            if !copied.contains(&vp.mount) {
                copied.push(vp.mount);
            }
        }
        let swap = |areas: &mut Vec<Area>| {
            areas.retain_mut(|a| match replaced.iter().find(|(k, _)| *k == a.key) {
                Some((_, dir)) => {
                    a.dir = dir.clone();
                    true
                }
                None => !copied.contains(&a.key.mount),
            })
        };
        swap(&mut next.readable);
        swap(&mut next.writable);
        // A writable copy inside a read-only one (`ro` zone area, `rw` area below it) is a
        // mount of its own: reads beneath it see that copy, as the worker does.
        for w in &next.writable {
            if !next.readable.iter().any(|r| r.key == w.key) {
                next.readable.push(w.clone());
            }
        }
        next.pending.retain(|p| !copied.contains(&p.key.mount));
        // The files the host runs are judged inside each writable copy, from its own root.
        let mut files =
            hostfiles::HostFiles { roots: self.hostfiles.roots.clone(), pinned: self.hostfiles.pinned.clone(), copies: self.hostfiles.copies.clone() };
        for w in next.writable.iter().filter(|w| copied.contains(&w.key.mount)) {
            if let Some(id) = hostfiles::root_identity(&w.dir) {
                files.copies.retain(|(k, _)| *k != w.key);
                files.copies.push((w.key.clone(), id));
            }
        }
        next.hostfiles = Arc::new(files);
        next.copied = Arc::new(copied);
        Ok(next)
    }

    /// True when zone `name` of this sandbox is a run's private copy already (see
    /// [`Sandbox::on_copies`]): a run in this sandbox works on it directly.
    pub fn is_copied(&self, name: &str) -> bool {
        self.mounts().iter().position(|m| m.name == name).is_some_and(|i| self.copied.contains(&i))
    }
}
