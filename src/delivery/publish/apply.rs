//! Writing the accepted changes beneath the zone's handle with the worker's rights.
//!
//! The copy was taken as the worker's user, so in the copy everything is the worker's: a
//! root-owned `0755` folder of the zone is a folder it may fill there. What lands on the host
//! must be what that user could have done to the zone itself (what a bind zone, the tool
//! service and its own shell allow it). So each change is made by hands holding the worker's
//! ids ([`Identity::acting`]), and the kernel refuses what the worker may not do (owner,
//! mode, POSIX ACLs, sticky bits, immutable files, read-only mounts):
//!
//! - a new directory and a new file are made by the worker's user (and so are its own, as
//!   in a bind zone);
//! - a deletion (renamed aside, judged, unlinked) and a directory's removal are the worker's;
//! - a changed file is asked of the kernel as the worker (`faccessat2(AT_EACCESS)` on a
//!   handle of that very file, opened beneath the directory handle the worker opened; a file
//!   the worker owns it may always make writable, so that one is not asked) and
//!   then swapped in by workcell on the same directory handle, so that it keeps its owner and
//!   mode (the worker may write a file it may not replace by rename). Another's file made
//!   executable or not in the copy is refused: that is a `chmod`, which only its owner may
//!   do (a root-owned `0666` file would otherwise come back root's and `0777`). The swap replaces only
//!   the file that was asked about: its inode, size, times and change time are compared again
//!   at the rename (`swap`), and a change of owner, mode or ACL moves the change time.
//!
//! A change the kernel refuses the worker (`EACCES`, `EPERM`) is named in the summary as
//! refused, with the uid; the others still land.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::AtFlags;

use super::{cname, parent, record, Changes, Entry, Op};
use crate::delivery::baseline::Seen;
use crate::delivery::collect::Staging;
use crate::delivery::summary::{Status, Summary};
use crate::delivery::swap::{self, Outcome};
use crate::delivery::Reason;
use crate::identity::{Acting, Identity, SwitchError};

/// The kernel refused the worker's user this change.
fn refused(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// A host entry that moved under the publish (a link or a file where a directory was).
fn moved(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::ELOOP))
}

/// Whether user `uid` (the calling thread's) may write the file `name` beneath `dir`, asked
/// of the kernel on a handle of it: `Ok(false)` when it is no longer the file `seen`
/// describes. Its owner may: it could make the file writable (`chmod`), as in a bind zone.
/// Another's file it may at most write: making it executable or not (`executable`, the
/// staged file's) is a `chmod`, its owner's alone (`EPERM`).
#[cfg(target_os = "linux")]
fn may_write(dir: BorrowedFd<'_>, name: &CString, seen: &Seen, uid: u32, executable: bool) -> io::Result<bool> {
    use rustix::fs::{Mode, OFlags};
    // O_PATH: a handle for the question, no open for writing (which would break leases and
    // tell a watcher the file was written).
    let fd = rustix::fs::openat(dir, name.as_c_str(), OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    if !seen.same(&st) {
        return Ok(false);
    }
    if st.st_uid != uid {
        if swap::is_executable(st.st_mode) != executable {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        crate::identity::access_fd(fd.as_fd(), libc::W_OK)?;
    }
    Ok(true)
}

/// Elsewhere (macOS) workcell is the worker's user: opening the file for writing asks.
#[cfg(not(target_os = "linux"))]
fn may_write(dir: BorrowedFd<'_>, name: &CString, seen: &Seen, uid: u32, executable: bool) -> io::Result<bool> {
    use rustix::fs::{Mode, OFlags};
    let st = rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)?;
    if !seen.same(&st) {
        return Ok(false);
    }
    if st.st_uid != uid {
        if swap::is_executable(st.st_mode) != executable {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        let fd = rustix::fs::openat(dir, name.as_c_str(), OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())?;
        return Ok(seen.same(&rustix::fs::fstat(&fd)?));
    }
    Ok(true)
}

/// Whether user `uid` (the calling thread's) may remove `name` from `dir`: the directory
/// writable and searchable, and under a sticky bit the entry or the directory its own.
fn may_delete(dir: BorrowedFd<'_>, name: &CString, uid: u32) -> io::Result<bool> {
    match rustix::fs::accessat(dir, c".", rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK, AtFlags::EACCESS) {
        Ok(()) => {}
        Err(e) if refused(&e.into()) => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    let d = rustix::fs::fstat(dir)?;
    if !rustix::fs::Mode::from_raw_mode(d.st_mode).contains(rustix::fs::Mode::SVTX) || d.st_uid == uid {
        return Ok(true);
    }
    let st = rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(st.st_uid == uid)
}

/// What the publish has done so far.
#[derive(Default)]
struct Progress {
    landed: usize,
    /// A write met a host change at its rename.
    conflicted: bool,
    /// A write the worker's user may not make.
    refused: bool,
}

impl Changes {
    /// Writes the accepted changes beneath `zone` as `identity` (the worker's user), each on
    /// its own: a change that fails is named with its error, one the worker's user may not
    /// make is refused, and the others still land. Deletions are made only when every write
    /// landed: a file the worker moved must not vanish because its new name could not be
    /// written, whether the write failed, was refused, or met a host change made during the
    /// publish (a conflict). The summary says exactly what is on the host.
    pub fn publish(self, zone: impl AsFd, staging: &Staging, identity: Identity) -> Summary {
        let zone = zone.as_fd();
        let mut s = self.fixed();
        if let Err(e) = rustix::fs::fstat(zone) {
            return Summary { status: Status::Withheld, withheld: Some(format!("cannot read the zone: {e}")), ..s };
        }
        let uid = identity.user().map_or_else(|| rustix::process::geteuid().as_raw(), |u| u.uid);
        let mut done = Progress::default();
        let acted = identity.acting(|hands| self.apply(zone, staging, hands, uid, &mut s, &mut done));
        match acted {
            // The worker's ids could not be taken: nothing was done.
            Err(e) => return Summary { status: Status::Withheld, withheld: Some(format!("nothing could be published: {e}")), ..s },
            Ok(Err(e)) => s.failed.fail("(the changes not named above)", format!("not published: {e}")),
            Ok(Ok(())) => {}
        }
        s.status = match (done.landed, s.failed.is_empty()) {
            (_, true) if s.is_empty() => Status::NoChanges,
            (_, true) => Status::Published,
            (0, false) => {
                s.withheld = Some("no change could be written (see failed)".into());
                Status::Withheld
            }
            (_, false) => Status::Partial,
        };
        s
    }

    /// Every change in turn; an error when the worker's hands are gone.
    fn apply<'e>(
        &'e self,
        zone: BorrowedFd<'e>,
        staging: &Staging,
        hands: &Acting<'e>,
        uid: u32,
        s: &mut Summary,
        done: &mut Progress,
    ) -> Result<(), SwitchError> {
        let show = |p: &[String], dir: bool| format!("{}{}", p.join("/"), if dir { "/" } else { "" });
        let may_not = Reason::WorkerMayNotWrite { uid };
        for path in &self.mkdirs {
            let mut full = path.clone();
            full.push(".".into());
            match hands.run(move || parent(zone, &full, true))? {
                Ok(_) => {
                    s.dirs_added.name(&show(path, true));
                    done.landed += 1;
                }
                // The host put something else in its place meanwhile.
                Err(e) if moved(&e) => s.conflicts.name(&show(path, true)),
                Err(e) if refused(&e) => s.refused.refuse(&show(path, true), may_not.clone()),
                Err(e) => s.failed.fail(&show(path, true), e.to_string()),
            }
        }
        for (path, f) in &self.writes {
            let seen = self.baseline.files.get(path);
            // The staged content is workcell's (its staging directory is private): opened
            // here and handed over.
            let result = match staging.open(&f.staged) {
                Err(e) => Err(e),
                Ok(src) => match seen {
                    None => hands.run(move || {
                        let dir = parent(zone, path, true)?;
                        swap::write(dir.as_fd(), &cname(&path[path.len() - 1])?, f, None, src)
                    })?,
                    Some(seen) => match hands.run(move || -> io::Result<_> {
                        let dir = parent(zone, path, true)?;
                        let name = cname(&path[path.len() - 1])?;
                        Ok(may_write(dir.as_fd(), &name, seen, uid, f.executable)?.then_some((dir, name)))
                    })? {
                        Ok(Some((dir, name))) => swap::write(dir.as_fd(), &name, f, Some(seen), src),
                        Ok(None) => Ok(Outcome::Conflict),
                        Err(e) => Err(e),
                    },
                },
            };
            match result {
                Ok(Outcome::Landed) => {
                    record(s, &Entry { op: if seen.is_some() { Op::Change } else { Op::Add }, path, file: Some(f) });
                    done.landed += 1;
                }
                Ok(Outcome::Conflict) => {
                    done.conflicted = true;
                    s.conflicts.name(&show(path, false))
                }
                Err(e) if moved(&e) => {
                    done.conflicted = true;
                    s.conflicts.name(&show(path, false))
                }
                Err(e) if refused(&e) => {
                    done.refused = true;
                    s.refused.refuse(&show(path, false), may_not.clone())
                }
                Err(e) => s.failed.fail(&show(path, false), e.to_string()),
            }
        }
        let hold = if !s.failed.is_empty() {
            Some("another change did not land")
        } else if done.refused {
            Some("another change was refused")
        } else if done.conflicted {
            Some("another change met a host change during the publish")
        } else {
            None
        };
        for path in &self.deletes {
            let seen = &self.baseline.files[path];
            if let Some(why) = hold {
                // One the worker may not make anyway is said as such.
                let may = hands.run(move || {
                    let dir = parent(zone, path, false)?;
                    may_delete(dir.as_fd(), &cname(&path[path.len() - 1])?, uid)
                })?;
                match may {
                    Ok(false) => s.refused.refuse(&show(path, false), may_not.clone()),
                    Err(e) if refused(&e) => s.refused.refuse(&show(path, false), may_not.clone()),
                    _ => s.failed.fail(&show(path, false), format!("not deleted: {why}, and the worker may have moved this file there")),
                }
                continue;
            }
            let result = hands.run(move || {
                let dir = parent(zone, path, false)?;
                swap::delete(dir.as_fd(), &cname(&path[path.len() - 1])?, seen)
            })?;
            match result {
                Ok(Outcome::Landed) => {
                    s.deleted.name(&show(path, false));
                    done.landed += 1;
                }
                Ok(Outcome::Conflict) => s.conflicts.name(&show(path, false)),
                Err(e) if moved(&e) || e.raw_os_error() == Some(libc::ENOENT) => s.conflicts.name(&show(path, false)),
                Err(e) if refused(&e) => s.refused.refuse(&show(path, false), may_not.clone()),
                Err(e) => s.failed.fail(&show(path, false), e.to_string()),
            }
        }
        for path in &self.rmdirs {
            if let Some(why) = hold {
                s.failed.fail(&show(path, true), format!("not removed: {why}"));
                continue;
            }
            let result = hands.run(move || -> io::Result<()> {
                let dir = parent(zone, path, false)?;
                Ok(rustix::fs::unlinkat(&dir, cname(&path[path.len() - 1])?.as_c_str(), AtFlags::REMOVEDIR)?)
            })?;
            match result {
                Ok(()) => {
                    s.dirs_deleted.name(&show(path, true));
                    done.landed += 1;
                }
                // Filled or removed by the host meanwhile, or holding what was refused: it stays.
                Err(e) if moved(&e) || matches!(e.raw_os_error(), Some(libc::ENOTEMPTY) | Some(libc::ENOENT)) => {}
                Err(e) if refused(&e) => s.refused.refuse(&show(path, true), may_not.clone()),
                Err(e) => s.failed.fail(&show(path, true), e.to_string()),
            }
        }
        Ok(())
    }
}
