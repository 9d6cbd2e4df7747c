//! Raw bytes of a readable file, opened beneath its area's handle (attachments, which may be
//! binary).

use std::io::Read;

use super::{Sandbox, SandboxError};

impl Sandbox {
    /// Reads a whole file as bytes after the suffix and size checks.
    pub fn read_bytes(&self, path: &str) -> Result<Vec<u8>, SandboxError> {
        let vp = self.parse(path)?;
        let area = self.readable_area(&vp, path)?;
        self.check_suffix_vp(&vp, path)?;
        let rel = super::io::rel_path(&vp.rel[area.key.prefix.len()..]);
        let mut file = area.dir.open(rel).map_err(|e| self.io_error("read", path, &e))?;
        let meta = file.metadata().map_err(|e| self.io_error("read", path, &e))?;
        if meta.is_dir() {
            return Err(SandboxError::WrongKind { op: "read", path: path.into(), found: "directory", expected: "file" });
        }
        self.check_size_vp(&vp, path, meta.len(), "read")?;
        let cap = self.mounts()[vp.mount].max_file_bytes.map(|l| l.saturating_add(1)).unwrap_or(u64::MAX);
        let mut bytes = Vec::new();
        (&mut file).take(cap).read_to_end(&mut bytes).map_err(|e| self.io_error("read", path, &e))?;
        self.check_size_vp(&vp, path, bytes.len() as u64, "read")?;
        Ok(bytes)
    }
}
