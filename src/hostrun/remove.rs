//! Removing a tree a worker made, beneath a handle, with bounded resources: no link is
//! followed, at most [`MAX_DEPTH`](super::quarantine::MAX_DEPTH) directories are open at
//! once, and a directory deeper than that is moved up to be a child of the tree's top and
//! emptied on a later pass (so a chain of any depth is cut into pieces of bounded depth).
//! The number of entries handled is bounded too, against a tree that grows while it is
//! removed.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Dir, FileType, RenameFlags};
use rustix::io::Errno;

use super::quarantine::{list, open_dir, MAX_DEPTH, MAX_ENTRIES};

/// Removes `name` beneath `parent` (a file, a link, or a directory and all it holds).
pub fn remove_tree(parent: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR | Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    let top = open_dir(parent, name)?;
    let mut budget = MAX_ENTRIES;
    let mut spilled = 0u64;
    loop {
        match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => return Ok(()),
            Err(Errno::NOTEMPTY | Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let before = budget;
        empty_once(&top, &mut budget, &mut spilled)?;
        if budget == 0 || budget == before {
            return Err(io::Error::other("the directory could not be emptied (it holds too many entries, or keeps growing)"));
        }
    }
}

/// One pass over `top`: removes what it can depth-first; directories deeper than the bound
/// are moved beneath `top` for the next pass.
fn empty_once(top: &OwnedFd, budget: &mut u64, spilled: &mut u64) -> io::Result<()> {
    let mut stack: Vec<(Dir, Option<std::ffi::CString>)> = vec![(list(top.as_fd())?, None)];
    loop {
        let depth = stack.len();
        let Some((dir, _)) = stack.last_mut() else { break };
        let Some(entry) = dir.read() else {
            // Listed to the end: the directory itself goes, from its parent.
            if let (Some((_, Some(name))), Some((parent, _))) = (stack.pop(), stack.last()) {
                let _ = rustix::fs::unlinkat(parent.fd()?, &name, AtFlags::REMOVEDIR);
            }
            continue;
        };
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        if *budget == 0 {
            return Ok(());
        }
        *budget -= 1;
        let fd = dir.fd()?;
        if entry.file_type() != FileType::Directory {
            match rustix::fs::unlinkat(fd, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => continue,
                Err(Errno::ISDIR | Errno::PERM) => {}
                Err(e) => return Err(e.into()),
            }
        }
        match rustix::fs::unlinkat(fd, name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => continue,
            Err(Errno::NOTEMPTY | Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        if depth < MAX_DEPTH {
            let child = Dir::new(open_dir(fd, name)?)?;
            let name = name.to_owned();
            stack.push((child, Some(name)));
        } else {
            *spilled += 1;
            let to = format!(".spill-{spilled}");
            rustix::fs::renameat_with(fd, name, top.as_fd(), to.as_str(), RenameFlags::NOREPLACE)?;
        }
    }
    Ok(())
}
