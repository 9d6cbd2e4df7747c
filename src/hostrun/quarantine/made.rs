//! Making this run's quarantine directory beneath an area, one component at a time, never
//! following what a worker put in the way.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, RenameFlags};
use rustix::io::Errno;

use super::{open_dir, Made};

/// `.workcell/quarantine/RUN_ID` beneath `root`, one component at a time, owned like `root`.
pub(super) fn make_quarantine(root: BorrowedFd<'_>, run_id: &str) -> io::Result<Made> {
    let st = rustix::fs::fstat(root)?;
    let owner = (st.st_uid, st.st_gid);
    let run = CString::new(run_id).map_err(io::Error::other)?;
    let workcell = dir_beneath(root, c".workcell", owner, false, run_id)?;
    let quarantine = dir_beneath(workcell.as_fd(), c"quarantine", owner, false, run_id)?;
    let dir = dir_beneath(quarantine.as_fd(), &run, owner, true, run_id)?;
    let st = rustix::fs::fstat(&dir)?;
    Ok((dir, (st.st_dev, st.st_ino)))
}

/// The directory `name` beneath `parent`: an existing one is used unless `fresh`; anything
/// else there (a link or file the worker planted, or for `fresh` a directory it made
/// ahead) is set aside first, never followed.
fn dir_beneath(parent: BorrowedFd<'_>, name: &CStr, owner: (u32, u32), fresh: bool, run_id: &str) -> io::Result<OwnedFd> {
    for _ in 0..3 {
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) => {
                let fd = open_dir(parent, name)?;
                // Made by workcell (perhaps as root): the area's owner can look and clean up.
                let _ = rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(owner.0)), Some(rustix::fs::Gid::from_raw(owner.1)));
                return Ok(fd);
            }
            Err(Errno::EXIST) if !fresh => match open_dir(parent, name) {
                Ok(fd) => return Ok(fd),
                Err(Errno::LOOP | Errno::NOTDIR) => set_aside(parent, name, run_id)?,
                Err(e) => return Err(e.into()),
            },
            Err(Errno::EXIST) => set_aside(parent, name, run_id)?,
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::other("it kept being replaced while it was made"))
}

/// Renames `name` to `NAME.moved-RUN_ID` beside itself (a link is renamed, not followed); a
/// non-directory that cannot be renamed is unlinked.
fn set_aside(parent: BorrowedFd<'_>, name: &CStr, run_id: &str) -> io::Result<()> {
    let mut aside = name.to_bytes().to_vec();
    aside.extend_from_slice(format!(".moved-{run_id}").as_bytes());
    let aside = CString::new(aside).map_err(io::Error::other)?;
    match rustix::fs::renameat_with(parent, name, parent, &aside, RenameFlags::NOREPLACE) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(_) => Ok(rustix::fs::unlinkat(parent, name, AtFlags::empty())?),
    }
}
