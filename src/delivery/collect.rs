//! Reading a worker's tree (as a tar stream) into checked, staged files. Nothing here
//! touches the zone: files that pass are copied into a private staging directory, and
//! [`super::publish`] takes them from there.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;

use rustix::fs::{Mode, OFlags};
use sha2::{Digest, Sha256};

use super::scratch::ScratchDir;
use super::summary::{Listed, Refusal};
use super::{name, DeliveryError, Policy, Reason};

/// A private directory (mode 0700, owned by workcell's user) holding accepted contents by
/// number until they are published; removed when dropped, at any depth, and by `workcell
/// gc` when its run died ([`super::scratch`]).
#[derive(Debug)]
pub struct Staging {
    dir: ScratchDir,
    next: u64,
}

impl Staging {
    pub fn new() -> io::Result<Staging> {
        Ok(Staging { dir: ScratchDir::new("workcell-delivery-")?, next: 0 })
    }

    /// Opens the staged content `name` for reading.
    pub fn open(&self, name: &str) -> io::Result<std::fs::File> {
        let fd = rustix::fs::openat(self.dir.fd(), name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
        Ok(std::fs::File::from(fd))
    }

    fn create(&mut self) -> io::Result<(String, std::fs::File)> {
        let name = self.next.to_string();
        self.next += 1;
        let fd = rustix::fs::openat(
            self.dir.fd(),
            &name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        Ok((name, std::fs::File::from(fd)))
    }

    pub fn fd(&self) -> impl AsFd + '_ {
        self.dir.fd()
    }
}

/// One accepted file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOut {
    /// Name of its content in the staging directory.
    pub staged: String,
    pub size: u64,
    pub executable: bool,
    pub sha256: [u8; 32],
    /// The worker set a set-uid, set-gid or sticky bit; it is not published.
    pub bits_dropped: bool,
}

/// A worker's tree after checking: what passed and what was refused.
#[derive(Debug, Default)]
pub struct Collected {
    pub files: BTreeMap<Vec<String>, FileOut>,
    /// Directories, named or implied by the files beneath them.
    pub dirs: BTreeSet<Vec<String>>,
    /// Refused entries with a valid name, by a hash of the name (their host paths are left
    /// as they are): a worker's 100,000 refused 4 KB names cost 3 MB here, not 400 MB.
    refused_at: HashSet<[u8; 32]>,
    /// Every refusal, bad names included, bounded for the summary.
    refused: Listed<Refusal>,
}

/// The keys of `path`'s leading parts, shortest first ([`Collected::refused_at`]).
fn keys(path: &[String]) -> impl Iterator<Item = [u8; 32]> + '_ {
    let mut h = Sha256::new();
    path.iter().map(move |c| {
        h.update(c.as_bytes());
        h.update(b"/");
        h.clone().finalize().into()
    })
}

impl Collected {
    /// True when `path` or a directory above it was refused (the host keeps what it has there).
    pub fn covered_by_refusal(&self, path: &[String]) -> bool {
        keys(path).any(|k| self.refused_at.contains(&k))
    }

    fn is_refused(&self, path: &[String]) -> bool {
        keys(path).last().is_some_and(|k| self.refused_at.contains(&k))
    }

    /// Every refusal, bounded for the summary.
    pub fn refusals(&self) -> Listed<Refusal> {
        self.refused.clone()
    }

    fn refuse(&mut self, path: Vec<String>, reason: Reason) {
        self.files.remove(&path);
        if self.refused_at.insert(keys(&path).last().expect("a name has a component")) {
            self.refused.refuse(&path.join("/"), reason);
        }
    }
}

enum Kind {
    File,
    Dir,
    Refused(Reason),
}

fn kind_of(t: tar::EntryType) -> Kind {
    use tar::EntryType as T;
    match t {
        T::Regular | T::Continuous => Kind::File,
        T::Directory => Kind::Dir,
        T::Symlink => Kind::Refused(Reason::Symlink),
        T::Link => Kind::Refused(Reason::HardLink),
        T::Char | T::Block => Kind::Refused(Reason::Device),
        T::Fifo => Kind::Refused(Reason::Fifo),
        _ => Kind::Refused(Reason::Special),
    }
}

/// The PAX key with which [`super::walk`] marks a file too large to deliver, sent without
/// its content. From any other source it can only get an entry refused, never accepted.
pub const OVERSIZE_KEY: &str = "WORKCELL.size";

fn oversize<R: Read>(entry: &mut tar::Entry<'_, R>) -> Result<Option<u64>, DeliveryError> {
    let Some(pax) = entry.pax_extensions().map_err(DeliveryError::Archive)? else { return Ok(None) };
    for ext in pax {
        let ext = ext.map_err(DeliveryError::Archive)?;
        if ext.key_bytes() == OVERSIZE_KEY.as_bytes() {
            // Unparsable counts as huge: the entry is refused either way.
            return Ok(Some(std::str::from_utf8(ext.value_bytes()).ok().and_then(|v| v.parse().ok()).unwrap_or(u64::MAX)));
        }
    }
    Ok(None)
}

/// Reads the tar stream `input`, checks every entry against `policy` and the rules of a
/// plain tree, and stages the contents of accepted files. An unreadable archive or one over
/// the entry or byte limits is an error: then nothing is delivered.
pub fn collect_tar<R: Read>(input: R, policy: &Policy, staging: &mut Staging) -> Result<Collected, DeliveryError> {
    let mut archive = tar::Archive::new(input);
    let mut out = Collected::default();
    let (mut entries, mut total) = (0u64, 0u64);
    for entry in archive.entries().map_err(DeliveryError::Archive)? {
        let mut entry = entry.map_err(DeliveryError::Archive)?;
        entries += 1;
        if entries > policy.max_entries {
            return Err(DeliveryError::TooManyEntries { max: policy.max_entries });
        }
        let raw = entry.path_bytes().into_owned();
        let path = match name::components(&raw) {
            Ok(p) => p,
            Err(detail) => {
                out.refused.refuse(&String::from_utf8_lossy(&raw), Reason::BadName { detail });
                continue;
            }
        };
        let kind = kind_of(entry.header().entry_type());
        // What lies above this entry must be directories that passed.
        if let Some(n) = (1..path.len()).find(|&n| out.is_refused(&path[..n]) || out.files.contains_key(&path[..n])) {
            let reason = if out.files.contains_key(&path[..n]) { Reason::TypeClash } else { Reason::BeneathRefused };
            out.refuse(path, reason);
            continue;
        }
        let seen_dir = out.dirs.contains(&path);
        if out.is_refused(&path) || out.files.contains_key(&path) {
            out.refuse(path, Reason::Duplicate);
            continue;
        }
        match kind {
            Kind::Refused(reason) => out.refuse(path, if seen_dir { Reason::TypeClash } else { reason }),
            Kind::Dir => {
                for n in 1..=path.len() {
                    out.dirs.insert(path[..n].to_vec());
                }
            }
            Kind::File if seen_dir => out.refuse(path, Reason::TypeClash),
            Kind::File => {
                // Every byte that comes through counts, refused files' too: reading them
                // through is the cost a worker could otherwise make unbounded.
                let oversize = oversize(&mut entry)?;
                let size = oversize.unwrap_or(entry.size()).max(entry.size());
                total = total.saturating_add(entry.size());
                if total > policy.max_total_bytes {
                    return Err(DeliveryError::TooManyBytes { max: policy.max_total_bytes });
                }
                if let Some(max) = policy.max_file_bytes.filter(|m| size > *m) {
                    out.refuse(path, Reason::TooLarge { size, max });
                    continue;
                }
                if size > policy.max_total_bytes {
                    return Err(DeliveryError::TooManyBytes { max: policy.max_total_bytes });
                }
                if let Some(allowed) = policy.suffixes.as_ref().filter(|s| !name::suffix_allowed(&path[path.len() - 1], s)) {
                    out.refuse(path, Reason::Suffix { allowed: allowed.clone() });
                    continue;
                }
                let mode = entry.header().mode().unwrap_or(0o644);
                let (staged, mut file) = staging.create().map_err(DeliveryError::io("stage a file", ""))?;
                let mut hasher = Sha256::new();
                let mut buf = vec![0u8; 64 << 10];
                let mut copied = 0u64;
                let mut limited = (&mut entry).take(size);
                loop {
                    let n = limited.read(&mut buf).map_err(DeliveryError::Archive)?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                    file.write_all(&buf[..n]).map_err(DeliveryError::io("stage a file", ""))?;
                    copied += n as u64;
                }
                if copied != size {
                    return Err(DeliveryError::Archive(io::Error::new(io::ErrorKind::UnexpectedEof, "a file's content ends early")));
                }
                for n in 1..path.len() {
                    out.dirs.insert(path[..n].to_vec());
                }
                let sha256: [u8; 32] = hasher.finalize().into();
                out.files.insert(path, FileOut { staged, size, executable: mode & 0o111 != 0, sha256, bits_dropped: mode & 0o7000 != 0 });
            }
        }
    }
    Ok(out)
}
