//! Grants of directories that do not exist yet (`allow_write: [/out/reports]` before
//! `reports/` is there): the directory is the worker's to create.
//!
//! At load such a grant is accepted when the parent could create the directory (it can
//! write there), and kept *pending*: the handle of the deepest directory that exists, and
//! the names still missing below it. A pending area grants nothing by itself: the tool
//! service and `check` do not see it. At launch ([`Sandbox::materialize`]) each missing
//! name is created beneath the held handle (`mkdirat`, one component at a time) and opened
//! without following links, so a link planted in its place (by a worker, or by a previous
//! run) is refused instead of followed; nothing is created inside the project's control
//! files. It is created as the worker's user ([`crate::identity`]): the worker's own, and
//! only where the worker could have created it itself (a parent it may not write refuses
//! the launch, saying so). The result is an ordinary area whose handle the backends bind.
//!
//! A read-only grant of a missing directory creates nothing: the run is refused, saying
//! what to do (an empty read-only directory would only hide a typo).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use cap_std::fs::Dir;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::error::show;
use super::{minimise, Area, AreaKey, Sandbox, SandboxError};
use crate::identity::Identity;
use crate::identity::UserSpec;

/// A granted directory still to be created at launch.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// The area it will be, once it exists.
    pub key: AreaKey,
    /// The deepest directory of the path that existed when the grant was made (inside a
    /// writable area of the parent).
    pub base: Arc<Dir>,
    /// The names below `base` still to create.
    pub missing: Vec<String>,
    /// Granted for writing (created at launch) or only for reading (refused at launch).
    pub write: bool,
}

impl Sandbox {
    /// Sandbox paths granted but not created yet, with whether each is writable (`plan`
    /// shows them; nothing can be read or written there before a launch creates them).
    pub fn pending_roots(&self) -> Vec<(String, bool)> {
        self.pending.iter().map(|p| (self.area_path(&p.key), p.write)).collect()
    }

    /// The pending grant for `rel` in the writable area `area` of this (parent) sandbox,
    /// when `rel` does not exist: the deepest existing directory and the missing names.
    /// `None` when `rel` exists after all (the caller's own error then stands).
    pub(super) fn pending_grant(&self, area: &Area, rel: &[String], write: bool) -> Option<Pending> {
        for existing in (0..rel.len()).rev() {
            let base = if existing == 0 { Ok(area.dir.clone()) } else { area.dir.open_dir(super::io::rel_path(&rel[..existing])).map(Arc::new) };
            match base {
                Ok(base) => {
                    let mut prefix = area.key.prefix.clone();
                    prefix.extend(rel.iter().cloned());
                    return Some(Pending { key: AreaKey { mount: area.key.mount, prefix }, base, missing: rel[existing..].to_vec(), write });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// This sandbox with its pending grants made real: every directory granted for writing
    /// created beneath its held parent by `owner`, the worker's user (see `crate::identity`),
    /// every directory granted for reading opened as that user (it must exist by now). Used
    /// at launch, never by `plan` or `check`.
    pub fn materialize(&self, owner: UserSpec) -> Result<Sandbox, SandboxError> {
        self.materialize_undoable(owner).map(|(sandbox, created)| {
            created.keep();
            sandbox
        })
    }

    /// [`Sandbox::materialize`], with the directories it created: they are removed again
    /// (when still empty) if the [`Created`] is dropped without [`Created::keep`], so a
    /// launch refused after this step leaves nothing behind. A failure here removes what
    /// this call created before returning.
    pub fn materialize_undoable(&self, owner: UserSpec) -> Result<(Sandbox, Created), SandboxError> {
        if self.pending.is_empty() {
            return Ok((self.clone(), Created::default()));
        }
        let shown = self.pending_roots().first().map(|(p, _)| p.clone()).unwrap_or_default();
        Identity::of(owner).run(|| self.materialize_here()).map_err(|e| SandboxError::Io { op: "create", path: show(&shown), message: e.to_string() })?
    }

    /// [`Sandbox::materialize_undoable`] on the thread acting as `owner`.
    fn materialize_here(&self) -> Result<(Sandbox, Created), SandboxError> {
        let mut created = Created::default();
        if self.pending.is_empty() {
            return Ok((self.clone(), created));
        }
        let mut readable = self.readable.clone();
        let mut writable = self.writable.clone();
        // Writes first: a read grant inside (or of) a directory granted for writing exists
        // once that one is created.
        let (writes, reads): (Vec<&Pending>, Vec<&Pending>) = self.pending.iter().partition(|p| p.write);
        for p in writes {
            let area = Area { key: p.key.clone(), dir: Arc::new(self.create_pending(p, true, &mut created)?) };
            readable.push(area.clone());
            writable.push(area);
        }
        for p in reads {
            let area = Area { key: p.key.clone(), dir: Arc::new(self.create_pending(p, false, &mut created)?) };
            readable.push(area);
        }
        let mut out = self.clone();
        out.readable = minimise(readable);
        out.writable = minimise(writable);
        out.pending = Vec::new();
        Ok((out, created))
    }

    /// Walks `p.missing` beneath `p.base`, creating each name when `create` says so, and
    /// returns the handle of the last one. Never follows a link; never writes into a
    /// control directory.
    fn create_pending(&self, p: &Pending, create: bool, made: &mut Created) -> Result<Dir, SandboxError> {
        let shown = self.area_path(&p.key);
        let failed = |what: &str, e: Errno| SandboxError::Io { op: "create", path: show(&shown), message: format!("{what} ({})", std::io::Error::from(e)) };
        let mut cur: OwnedFd =
            p.base.as_fd().try_clone_to_owned().map_err(|e| failed("the directory above it cannot be held", Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
        let me = rustix::process::geteuid();
        for name in &p.missing {
            let mut created = false;
            if create {
                let dir = Dir::from_std_file(std::fs::File::from(
                    cur.try_clone().map_err(|e| failed("cannot hold a directory", Errno::from_io_error(&e).unwrap_or(Errno::IO)))?,
                ));
                self.refuse_control(&dir, name, &shown)?;
                match rustix::fs::mkdirat(&cur, name.as_str(), Mode::from_raw_mode(0o755)) {
                    Ok(()) => created = true,
                    Err(Errno::EXIST) => {}
                    Err(e @ (Errno::ACCESS | Errno::PERM)) => return Err(not_permitted(&shown, &cur, e)),
                    Err(e) => return Err(failed("the granted directory cannot be created", e)),
                }
            }
            let next = match rustix::fs::openat(&cur, name.as_str(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
                Ok(fd) => fd,
                // ELOOP: a symbolic link stands where the directory should be; ENOTDIR: a file.
                Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                    return Err(SandboxError::Io {
                        op: "create",
                        path: show(&shown),
                        message: format!(
                            "'{}' is a symbolic link or a file, not a directory; links are never followed here: remove it, then run again",
                            show(name)
                        ),
                    })
                }
                Err(Errno::NOENT) if !create => return Err(SandboxError::MissingReadOnly { path: show(&shown) }),
                Err(e) => return Err(failed("the granted directory cannot be opened", e)),
            };
            if created {
                // Between mkdirat and openat a worker sharing the zone can rename another
                // directory into this name (RENAME_EXCHANGE): one of the zone's directories
                // it may move but not change, root's say. Only a directory that is the
                // worker's own (this thread made it as the worker) and empty becomes the
                // grant. Anything else means the name changed under us: refuse the launch.
                if !rustix::fs::fstat(&next).is_ok_and(|st| st.st_uid == me.as_raw()) || !is_empty(&next) {
                    return Err(SandboxError::Io {
                        op: "create",
                        path: show(&shown),
                        message: format!("'{}' was replaced while it was being created; nothing was given to the worker: run again", show(name)),
                    });
                }
                // Ours: removed again if the launch is refused.
                if let (Ok(parent), Ok(st)) = (cur.try_clone(), rustix::fs::fstat(&next)) {
                    made.dirs.push((parent, name.clone(), (st.st_dev, st.st_ino)));
                }
            }
            cur = next;
        }
        Ok(Dir::from_std_file(std::fs::File::from(cur)))
    }
}

/// The refusal of a granted directory whose parent `parent` the worker's user (this
/// thread's ids) may not write, naming the parent's owner and mode and what to change.
fn not_permitted(shown: &str, parent: &OwnedFd, e: Errno) -> SandboxError {
    let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
    let parent = match rustix::fs::fstat(parent) {
        Ok(st) => format!("its parent directory (owner {}:{}, mode {:o})", st.st_uid, st.st_gid, st.st_mode & 0o7777),
        Err(_) => "its parent directory".into(),
    };
    SandboxError::Io {
        op: "create",
        path: show(shown),
        message: format!(
            "the worker's user ({uid}:{gid}) may not create it in {parent} ({}), and workcell creates nothing the worker could not create itself: give that directory to the worker's user (chown {uid}:{gid}), or create the granted directory before the run",
            std::io::Error::from(e)
        ),
    }
}

/// True when the open directory `dir` has no entry but `.` and `..` (read through its own
/// handle, never by name).
fn is_empty(dir: &OwnedFd) -> bool {
    let Ok(mut entries) = rustix::fs::Dir::read_from(dir) else { return false };
    entries.all(|e| e.is_ok_and(|e| matches!(e.file_name().to_bytes(), b"." | b"..")))
}

/// Directories a launch created, removed again unless [`Created::keep`] is called.
#[derive(Debug, Default)]
pub struct Created {
    /// In creation order: the held parent, the name, and the identity of what was made.
    dirs: Vec<(OwnedFd, String, (u64, u64))>,
}

impl Created {
    /// The launch went ahead: the directories stay.
    pub fn keep(mut self) {
        self.dirs.clear();
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        // Deepest first; beneath the held parent, never by path; only the directory this
        // launch made (same identity), and only while empty (rmdir refuses anything else),
        // so nothing anyone wrote is ever removed.
        for (parent, name, id) in self.dirs.drain(..).rev() {
            let same = rustix::fs::statat(&parent, name.as_str(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| (st.st_dev, st.st_ino) == id);
            if same {
                let _ = rustix::fs::unlinkat(&parent, name.as_str(), rustix::fs::AtFlags::REMOVEDIR);
            }
        }
    }
}
