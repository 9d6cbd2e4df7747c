//! Bytes of a file, for `read_file` with `encoding: "base64"`: a window by byte offset,
//! checked like a text read (suffix, size limit, beneath the area's handle).

use std::io::{Read, Seek, SeekFrom};

use super::super::error::show;
use super::{FileKind, Sandbox, SandboxError};

/// A window of a file's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BytesRead {
    pub bytes: Vec<u8>,
    /// Bytes in the whole file (its size when opened).
    pub total_bytes: u64,
    /// True when more bytes follow the returned window.
    pub truncated: bool,
    /// Offset to pass to read the next window, when truncated.
    pub next_offset: Option<u64>,
}

impl Sandbox {
    /// Reads at most `max_bytes` bytes from byte `offset`, whatever they are.
    pub fn read_bytes(&self, path: &str, max_bytes: usize, offset: u64) -> Result<BytesRead, SandboxError> {
        self.as_worker("read", path, || self.read_bytes_here(path, max_bytes, offset))?
    }

    fn read_bytes_here(&self, path: &str, max_bytes: usize, offset: u64) -> Result<BytesRead, SandboxError> {
        let vp = self.parse(path)?;
        if let Err(e) = self.check_suffix_vp(&vp, path) {
            if self.stat(path).is_ok_and(|s| s.kind == FileKind::Directory) {
                return Err(SandboxError::WrongKind { op: "read", path: show(path), found: "directory", expected: "file" });
            }
            return Err(e);
        }
        let (vp, mut file) = self.open_read(path)?;
        let meta = file.metadata().map_err(|e| self.io_error("read", path, &e))?;
        if meta.is_dir() {
            return Err(SandboxError::WrongKind { op: "read", path: show(path), found: "directory", expected: "file" });
        }
        // The zone's limit is on the file, as for a text read: a window of a larger file is
        // refused too, so base64 is no way around `max_file_bytes`.
        self.check_size_vp(&vp, path, meta.len(), "read")?;
        file.seek(SeekFrom::Start(offset)).map_err(|e| self.io_error("read", path, &e))?;
        // One byte more than the window says whether more follows (the file may have grown).
        let mut bytes = Vec::with_capacity(max_bytes.min(1 << 20) + 1);
        (&mut file).take(max_bytes as u64 + 1).read_to_end(&mut bytes).map_err(|e| self.io_error("read", path, &e))?;
        let truncated = bytes.len() > max_bytes;
        bytes.truncate(max_bytes);
        self.check_size_vp(&vp, path, offset.saturating_add(bytes.len() as u64), "read")?;
        let next_offset = truncated.then(|| offset + bytes.len() as u64);
        Ok(BytesRead { bytes, total_bytes: meta.len(), truncated, next_offset })
    }
}
