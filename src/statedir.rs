//! Folders of the project's `.workcell/` that workcell keeps its own state in (the zones it
//! could not check, the walks' records). No worker can reach them: `.workcell/` is bound
//! read-only over itself in every writable mount that holds the project and refused to the
//! tool service, and a zone that contains the project directory or lies inside `.workcell/`
//! is refused (`plan::control`). They are still opened one component at a time beneath the
//! project directory, no link followed, and files in them are replaced whole.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
use rustix::io::Errno;

/// The folder `rel` (like `.workcell/unverified`) beneath `project_dir`, opened one component
/// at a time without following a link; made (0700) when `create`.
pub fn open(project_dir: &Path, rel: &str, create: bool) -> std::io::Result<OwnedFd> {
    let mut dir = rustix::fs::open(project_dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    for part in rel.split('/') {
        if create {
            match rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        dir = rustix::fs::openat(&dir, part, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    }
    Ok(dir)
}

/// The first `max` bytes of the regular file `name` beneath `dir` (no link followed); `None`
/// when there is none.
pub fn read(dir: BorrowedFd<'_>, name: &str, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let fd = match rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    if rustix::fs::fstat(&fd).map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode))? != rustix::fs::FileType::RegularFile {
        return Err(std::io::Error::other(format!("{name} is not a regular file")));
    }
    let mut text = Vec::new();
    std::fs::File::from(fd).take(max).read_to_end(&mut text)?;
    Ok(Some(text))
}

/// Replaces the file `name` beneath `dir` with `bytes`, whole: written to a new file of
/// its own (0600), then renamed over the old one. With `sync`, on disk before the rename.
pub fn replace(dir: BorrowedFd<'_>, name: &str, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let tmp = format!(".{name}.{}.{}.tmp", std::process::id(), unique());
    let tmp_c = CString::new(tmp.as_str()).map_err(std::io::Error::other)?;
    let fd = rustix::fs::openat(dir, &tmp_c, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::from_raw_mode(0o600))?;
    let mut f = std::fs::File::from(fd);
    let written = f.write_all(bytes).and_then(|()| if sync { f.sync_all() } else { Ok(()) });
    let renamed = written.and_then(|()| Ok(rustix::fs::renameat_with(dir, &tmp_c, dir, name, RenameFlags::empty())?));
    if renamed.is_err() {
        let _ = rustix::fs::unlinkat(dir, &tmp_c, AtFlags::empty());
    }
    renamed
}

/// A number no other call of this process has used.
fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
