//! Raw files of the sandbox, opened beneath their area's handle and handed on as the open
//! handle (attachments, which may be binary and are streamed, never held in memory).

use super::{Sandbox, SandboxError};

impl Sandbox {
    /// Opens a readable regular file after the suffix and size checks; returns the handle and
    /// its size at the time of the check (measured on the handle, so a file swapped in after
    /// the check is not what is sized). Non-blocking, so a FIFO swapped in cannot hang us.
    pub fn open_file(&self, path: &str) -> Result<(std::fs::File, u64), SandboxError> {
        // Opened as the worker: a file it may not read is not handed on.
        self.as_worker("read", path, || self.open_file_here(path))?
    }

    fn open_file_here(&self, path: &str) -> Result<(std::fs::File, u64), SandboxError> {
        use cap_std::fs::OpenOptionsExt;
        let vp = self.parse(path)?;
        let area = self.readable_area(&vp, path)?;
        self.check_suffix_vp(&vp, path)?;
        let rel = super::io::rel_path(&vp.rel[area.key.prefix.len()..]);
        let mut opts = cap_std::fs::OpenOptions::new();
        opts.read(true).custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
        let file = area.dir.open_with(rel, &opts).map_err(|e| self.io_error("read", path, &e))?;
        let meta = file.metadata().map_err(|e| self.io_error("read", path, &e))?;
        if meta.is_dir() {
            return Err(SandboxError::WrongKind { op: "read", path: path.into(), found: "directory", expected: "file" });
        }
        if !meta.is_file() {
            return Err(SandboxError::WrongKind { op: "read", path: path.into(), found: "special file", expected: "regular file" });
        }
        self.check_size_vp(&vp, path, meta.len(), "read")?;
        Ok((file.into_std(), meta.len()))
    }
}
