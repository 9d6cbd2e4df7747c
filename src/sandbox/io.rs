//! Built-in file I/O of the sandbox. Every path is opened beneath the handle of the area
//! that allows it; nothing is checked by path and then opened by path.

use std::io::{self, Read, Write};

use cap_std::fs::{Dir, OpenOptions};
use serde::Serialize;

use super::error::show;
use super::path::VirtualPath;
use super::window::NotText;
use super::{Area, PathList, Sandbox, SandboxError};

mod binary;
pub use binary::BytesRead;

/// Text read from a file, possibly a window of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadResult {
    pub content: String,
    /// Characters in the whole file; left out when the file goes on past both the window and
    /// its first 8 MiB, which are not read just to count them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_chars: Option<usize>,
    /// Bytes in the whole file (its size when opened).
    pub total_bytes: u64,
    /// True when more text follows the returned window.
    pub truncated: bool,
    /// Offset to pass to read the next window, when truncated.
    pub next_offset: Option<usize>,
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    Other,
}

/// Metadata of a sandbox path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileStat {
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    /// Seconds since the Unix epoch, when known.
    pub modified: Option<u64>,
    pub writable: bool,
}

/// Largest file `edit` changes in a zone without `max_file_bytes` (16 MiB): an edit holds
/// the whole text and its replacement in memory. Larger files are edited with the shell.
pub const EDIT_MAX_BYTES: u64 = 16 << 20;

/// True when cap-std refused because the path (or a symlink in it) leads out of the handle.
fn is_escape(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

/// An OS error in words, without any path.
pub(crate) fn describe_io(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such file or directory".into(),
        io::ErrorKind::PermissionDenied => "permission denied by the operating system".into(),
        io::ErrorKind::AlreadyExists => "it already exists".into(),
        _ => match e.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code).to_string().split(" (os error").next().unwrap_or("").to_string(),
            None => e.kind().to_string(),
        },
    }
}

pub(crate) fn rel_path(components: &[String]) -> std::path::PathBuf {
    if components.is_empty() {
        std::path::PathBuf::from(".")
    } else {
        components.iter().collect()
    }
}

impl Sandbox {
    pub(crate) fn io_error(&self, op: &'static str, shown: &str, e: &io::Error) -> SandboxError {
        if is_escape(e) {
            return SandboxError::OutsideSandbox {
                path: show(shown),
                detail: " (a symlink leads outside it)".into(),
                readable: PathList(self.readable_roots()),
            };
        }
        if e.kind() == io::ErrorKind::NotFound {
            return SandboxError::NotFound {
                path: show(shown),
                hint: format!(" Use list to see what exists; readable paths: {}.", PathList(self.readable_roots())),
            };
        }
        if e.kind() == io::ErrorKind::PermissionDenied {
            // `Own`: workcell is the worker's user itself.
            let (uid, gid) = match self.identity().user() {
                Some(u) => (u.uid, u.gid),
                None => (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw()),
            };
            let who = format!("the worker's user ({uid}:{gid})");
            return SandboxError::PermissionDenied { op, path: show(shown), who };
        }
        SandboxError::Io { op, path: show(shown), message: describe_io(e) }
    }

    /// Components of `vp` below `area`.
    pub(super) fn inner<'a>(area: &Area, vp: &'a VirtualPath) -> &'a [String] {
        &vp.rel[area.key.prefix.len()..]
    }

    /// Checks that the existing part of `vp` does not lead out of `area` through symlinks
    /// (looked at with the worker's rights: a directory it cannot search ends the check,
    /// and the operation itself is then refused).
    pub(super) fn check_beneath(&self, area: &Area, vp: &VirtualPath, shown: &str) -> Result<(), SandboxError> {
        self.as_worker("resolve", shown, || self.check_beneath_here(area, vp, shown))?
    }

    fn check_beneath_here(&self, area: &Area, vp: &VirtualPath, shown: &str) -> Result<(), SandboxError> {
        let inner = Self::inner(area, vp);
        for end in (0..=inner.len()).rev() {
            match area.dir.metadata(rel_path(&inner[..end])) {
                Ok(_) => return Ok(()),
                Err(e) if is_escape(&e) => return Err(self.io_error("resolve", shown, &e)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                // ENOTDIR and the like: nothing outside was reached; the operation will say.
                Err(_) => return Ok(()),
            }
        }
        Ok(())
    }

    fn open_read(&self, path: &str) -> Result<(VirtualPath, cap_std::fs::File), SandboxError> {
        let vp = self.parse(path)?;
        let area = self.readable_area(&vp, path)?;
        let inner = Self::inner(area, &vp);
        // Non-blocking: opening a FIFO a worker made would otherwise wait for a writer, and
        // hang the tool service (and `workcell mcp`) with it.
        let mut opts = cap_std::fs::OpenOptions::new();
        cap_std::fs::OpenOptionsExt::custom_flags(opts.read(true), rustix::fs::OFlags::NONBLOCK.bits() as i32);
        let file = area.dir.open_with(rel_path(inner), &opts).map_err(|e| self.io_error("read", path, &e))?;
        let meta = file.metadata().map_err(|e| self.io_error("read", path, &e))?;
        if !meta.is_dir() && !meta.is_file() {
            return Err(SandboxError::WrongKind { op: "read", path: show(path), found: "special file", expected: "regular file" });
        }
        Ok((vp, file))
    }

    /// Reads a text file: `max_chars` characters from character `offset`.
    pub fn read(&self, path: &str, max_chars: usize, offset: usize) -> Result<ReadResult, SandboxError> {
        self.as_worker("read", path, || self.read_here(path, max_chars, offset))?
    }

    fn read_here(&self, path: &str, max_chars: usize, offset: usize) -> Result<ReadResult, SandboxError> {
        let vp = self.parse(path)?;
        if let Err(e) = self.check_suffix_vp(&vp, path) {
            // A directory has no suffix to judge: say what it is instead, so the reader
            // lists it rather than hunting for an allowed suffix.
            if self.stat(path).is_ok_and(|s| s.kind == FileKind::Directory) {
                return Err(SandboxError::WrongKind { op: "read", path: show(path), found: "directory", expected: "file" });
            }
            return Err(e);
        }
        let (vp, file) = self.open_read(path)?;
        let meta = file.metadata().map_err(|e| self.io_error("read", path, &e))?;
        if meta.is_dir() {
            return Err(SandboxError::WrongKind { op: "read", path: show(path), found: "directory", expected: "file" });
        }
        self.check_size_vp(&vp, path, meta.len(), "read")?;
        // At most limit+1 bytes: the file may grow after fstat.
        let cap = self.mounts()[vp.mount].max_file_bytes.map(|l| l.saturating_add(1)).unwrap_or(u64::MAX);
        let w = super::window::read_window(file.take(cap), offset, max_chars).map_err(|e| match e {
            NotText::Nul => SandboxError::NotText { path: show(path), detail: "it contains NUL bytes, so it looks binary".into() },
            NotText::Utf8 { at } => SandboxError::NotText { path: show(path), detail: format!("invalid UTF-8 at byte {at}") },
            NotText::Io(e) => self.io_error("read", path, &e),
        })?;
        self.check_size_vp(&vp, path, w.bytes_read, "read")?;
        let end = offset.saturating_add(max_chars);
        let truncated = w.more;
        Ok(ReadResult {
            content: w.content,
            total_chars: w.reached_end.then_some(w.chars_seen),
            total_bytes: meta.len(),
            truncated,
            next_offset: truncated.then_some(end),
        })
    }

    /// The whole text of a file for `edit`, after the suffix, size and text checks: at most
    /// the zone's `max_file_bytes`, or [`EDIT_MAX_BYTES`] where the zone sets none (an edit
    /// holds the file, and its new text, in memory).
    fn read_all(&self, path: &str) -> Result<String, SandboxError> {
        let (vp, mut file) = self.open_read(path)?;
        self.check_suffix_vp(&vp, path)?;
        let meta = file.metadata().map_err(|e| self.io_error("read", path, &e))?;
        if meta.is_dir() {
            return Err(SandboxError::WrongKind { op: "read", path: show(path), found: "directory", expected: "file" });
        }
        self.check_size_vp(&vp, path, meta.len(), "read")?;
        let zone_limit = self.mounts()[vp.mount].max_file_bytes;
        let too_big = |size: u64| SandboxError::EditTooLarge { path: show(path), size, limit: EDIT_MAX_BYTES };
        if zone_limit.is_none() && meta.len() > EDIT_MAX_BYTES {
            return Err(too_big(meta.len()));
        }
        // Read at most limit+1 bytes: the file may grow after fstat.
        let cap = zone_limit.unwrap_or(EDIT_MAX_BYTES).saturating_add(1);
        let mut bytes = Vec::with_capacity(meta.len().min(1 << 24) as usize);
        (&mut file).take(cap).read_to_end(&mut bytes).map_err(|e| self.io_error("read", path, &e))?;
        self.check_size_vp(&vp, path, bytes.len() as u64, "read")?;
        if zone_limit.is_none() && bytes.len() as u64 > EDIT_MAX_BYTES {
            return Err(too_big(bytes.len() as u64));
        }
        if bytes.contains(&0) {
            return Err(SandboxError::NotText { path: show(path), detail: "it contains NUL bytes, so it looks binary".into() });
        }
        String::from_utf8(bytes)
            .map_err(|e| SandboxError::NotText { path: show(path), detail: format!("invalid UTF-8 at byte {}", e.utf8_error().valid_up_to()) })
    }

    /// The directory that will contain `vp` (created beneath the area if missing) and the
    /// file name inside it.
    fn parent_dir(&self, area: &Area, vp: &VirtualPath, shown: &str, op: &'static str, create: bool) -> Result<(Dir, String), SandboxError> {
        let inner = Self::inner(area, vp);
        let Some((name, parent)) = inner.split_last() else {
            return Err(SandboxError::WrongKind { op, path: show(shown), found: "directory", expected: "file" });
        };
        let parent_rel = rel_path(parent);
        // The deepest directory that existed, held, with the piece of a git directory the
        // directories made in it may be (`objects/`): judged again once they are there.
        let mut made_in = None;
        if create && !parent.is_empty() {
            // Nothing is created inside a control directory, nor one of their names in the
            // project: judged on the deepest directory that exists already.
            let mut existing = 0;
            while existing < parent.len() && area.dir.open_dir(rel_path(&parent[..=existing])).is_ok() {
                existing += 1;
            }
            if existing < parent.len() {
                let base = area.dir.open_dir(rel_path(&parent[..existing])).map_err(|e| self.io_error(op, shown, &e))?;
                self.refuse_control(&base, &parent[existing], shown)?;
                // Nor a directory on the way to a file the host runs (`.vscode/`, `sub/.git/`).
                self.refuse_hostrun(vp, &base, area.key.prefix.len() + existing, op, shown)?;
                // Nor the directory that would make `base` a repository (`objects/`).
                let piece = self.refuse_git_piece(vp, &base, area.key.prefix.len() + existing, &parent[existing], op, shown)?;
                made_in = Some((base, piece));
            }
            if let Err(e) = area.dir.create_dir_all(&parent_rel) {
                // "Already exists" means something that is not a directory beneath the
                // handle is in the way (a file, or a symlink leading outside); opening it
                // below says which, in the sandbox's words, or succeeds if it is a
                // directory after all.
                if e.kind() != io::ErrorKind::AlreadyExists {
                    return Err(self.io_error(op, shown, &e));
                }
            }
            if let Some((base, piece)) = made_in {
                self.recheck_git_piece(vp, &base, piece, op, shown)?;
            }
        }
        let dir = area.dir.open_dir(&parent_rel).map_err(|e| self.io_error(op, shown, &e))?;
        // Judged on the directory actually opened, whatever name led there.
        self.refuse_control(&dir, name, shown)?;
        Ok((dir, name.clone()))
    }

    /// Writes a text file atomically: a temporary file beside it, then a rename. A failure
    /// leaves the old content in place. Done as the worker: the file (and any directory
    /// made on the way) is the worker's.
    pub fn write(&self, path: &str, content: &str) -> Result<(), SandboxError> {
        self.write_bytes(path, content.as_bytes())
    }

    /// [`Sandbox::write`] of any bytes (`write_file` with `encoding: "base64"`): the same
    /// checks and limits, whatever the content.
    pub fn write_bytes(&self, path: &str, content: &[u8]) -> Result<(), SandboxError> {
        self.as_worker("write", path, || self.write_here(path, content))?
    }

    fn write_here(&self, path: &str, content: &[u8]) -> Result<(), SandboxError> {
        let vp = self.parse(path)?;
        let area = self.writable_area(&vp, path)?;
        self.check_suffix_vp(&vp, path)?;
        self.check_size_vp(&vp, path, content.len() as u64, "write")?;
        // Only for the message: the operations below stay beneath the area's handle anyway,
        // but a parent that is a symlink to outside should be refused as outside the
        // sandbox (as `can_write` says), not fail with whatever the OS reports.
        self.check_beneath(area, &vp, path)?;
        let (dir, name) = self.parent_dir(area, &vp, path, "write", true)?;
        if let Ok(meta) = dir.symlink_metadata(&name) {
            if meta.is_dir() {
                return Err(SandboxError::WrongKind { op: "write", path: show(path), found: "directory", expected: "file" });
            }
        }
        // Judged on the directory actually opened, wherever it really is in the zone.
        self.refuse_hostrun(&vp, &dir, vp.rel.len() - 1, "write", path)?;
        // Judged as the directory will be with the file in it, and again once it is.
        let piece = self.refuse_git_piece(&vp, &dir, vp.rel.len() - 1, &name, "write", path)?;
        write_atomic(&dir, &name, content).map_err(|e| self.io_error("write", path, &e))?;
        self.recheck_git_piece(&vp, &dir, piece, "write", path)
    }

    /// The file's text, when `old` occurs in it exactly once (so an edit can happen); the
    /// file is read within the edit bound (see [`EDIT_MAX_BYTES`]).
    pub fn check_edit(&self, path: &str, old: &str) -> Result<String, SandboxError> {
        self.as_worker("edit", path, || self.check_edit_here(path, old))?
    }

    fn check_edit_here(&self, path: &str, old: &str) -> Result<String, SandboxError> {
        // Check writability first: an edit of a read-only file is refused before reading.
        let vp = self.parse(path)?;
        self.writable_area(&vp, path)?;
        let text = self.read_all(path)?;
        let count = if old.is_empty() { 0 } else { text.matches(old).count() };
        if count != 1 {
            let advice = if count == 0 {
                "Read the file again and copy the exact text, including whitespace."
            } else {
                "Include more surrounding text so that it matches one place only."
            };
            return Err(SandboxError::EditMismatch { path: show(path), count, advice });
        }
        Ok(text)
    }

    /// Replaces `old` with `new` where `old` occurs exactly once.
    pub fn edit(&self, path: &str, old: &str, new: &str) -> Result<(), SandboxError> {
        self.as_worker("edit", path, || {
            let text = self.check_edit_here(path, old)?;
            self.write_here(path, text.replacen(old, new, 1).as_bytes())
        })?
    }

    /// Deletes a file (not a directory). A symlink is removed itself, never its target.
    pub fn delete(&self, path: &str) -> Result<(), SandboxError> {
        self.prepare_delete(path)?.remove()
    }

    /// Everything [`Sandbox::delete`] checks, without deleting: the file's directory is held,
    /// so a person can be asked in between and the entry removed is in the directory that
    /// was checked. The last component is not followed (a link is removed itself, wherever
    /// it points).
    pub fn prepare_delete(&self, path: &str) -> Result<PendingDelete<'_>, SandboxError> {
        let (dir, name) = self.as_worker("delete", path, || self.delete_target(path))??;
        Ok(PendingDelete { sandbox: self, dir, name, shown: path.to_string() })
    }

    fn delete_target(&self, path: &str) -> Result<(Dir, String), SandboxError> {
        let vp = self.parse(path)?;
        let area = self.writable_area(&vp, path)?;
        let (dir, name) = self.parent_dir(area, &vp, path, "delete", false)?;
        let meta = dir.symlink_metadata(&name).map_err(|e| self.io_error("delete", path, &e))?;
        if meta.is_dir() {
            return Err(SandboxError::WrongKind { op: "delete", path: show(path), found: "directory", expected: "file" });
        }
        self.refuse_hostrun(&vp, &dir, vp.rel.len() - 1, "delete", path)?;
        Ok((dir, name))
    }

    /// Whether something exists at a readable path.
    pub fn exists(&self, path: &str) -> Result<bool, SandboxError> {
        self.as_worker("stat", path, || self.exists_here(path))?
    }

    fn exists_here(&self, path: &str) -> Result<bool, SandboxError> {
        let vp = self.parse(path)?;
        let area = self.readable_area(&vp, path)?;
        match area.dir.metadata(rel_path(Self::inner(area, &vp))) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.io_error("stat", path, &e)),
        }
    }

    /// Metadata of a readable path (symlinks inside the area are followed).
    pub fn stat(&self, path: &str) -> Result<FileStat, SandboxError> {
        self.as_worker("stat", path, || self.stat_here(path))?
    }

    fn stat_here(&self, path: &str) -> Result<FileStat, SandboxError> {
        let vp = self.parse(path)?;
        let area = self.readable_area(&vp, path)?;
        let meta = area.dir.metadata(rel_path(Self::inner(area, &vp))).map_err(|e| self.io_error("stat", path, &e))?;
        let kind = kind_of(meta.file_type());
        let modified = meta.modified().ok().and_then(|t| t.into_std().duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_secs());
        Ok(FileStat { path: self.display(&vp), kind, size: meta.len(), modified, writable: self.writable_area(&vp, path).is_ok() })
    }
}

/// A checked deletion, carried out by [`PendingDelete::remove`].
#[derive(Debug)]
pub struct PendingDelete<'a> {
    sandbox: &'a Sandbox,
    dir: Dir,
    name: String,
    shown: String,
}

impl PendingDelete<'_> {
    /// Removes the entry, as the worker: its write permission on the directory decides.
    pub fn remove(self) -> Result<(), SandboxError> {
        let PendingDelete { sandbox, dir, name, shown } = self;
        sandbox.as_worker("delete", &shown, || dir.remove_file(&name).map_err(|e| sandbox.io_error("delete", &shown, &e)))?
    }
}

fn kind_of(ft: cap_std::fs::FileType) -> FileKind {
    if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Directory
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

/// Writes `bytes` to `name` in `dir` through a temporary file and a rename, so readers see
/// the old or the new content, never a part.
pub(crate) fn write_atomic(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    let mut attempt = 0u32;
    let (tmp_name, mut file) = loop {
        let tmp_name = format!(".{name}.workcell-{}-{attempt}.tmp", std::process::id());
        match dir.open_with(&tmp_name, &opts) {
            Ok(f) => break (tmp_name, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
            Err(e) => return Err(e),
        }
    };
    let result = file.write_all(bytes).and_then(|_| file.sync_all()).and_then(|_| dir.rename(&tmp_name, dir, name));
    if result.is_err() {
        let _ = dir.remove_file(&tmp_name);
    }
    result
}
