//! Reading a worker's tree (as a tar stream) into checked, staged files. Nothing here
//! touches the zone: files that pass are copied into a private staging directory, and
//! [`super::publish`] takes them from there.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{self, Read};
use std::os::fd::AsFd;

use rustix::fs::{Mode, OFlags};
use sha2::{Digest, Sha256};

use super::scratch::ScratchDir;
use super::summary::{Listed, Refusal};
use super::{name, DeliveryError, Policy, Reason};

/// A private directory (mode 0700, owned by workcell's user) holding accepted contents by
/// number until they are published; removed when dropped, at any depth, and by `workcell
/// gc` when its run died ([`super::scratch`]). What it may hold is bounded by the free space
/// of its file system when it was made, less a margin ([`margin`]): a worker's files never
/// fill the host's temporary directory. Runs of zero bytes are left as holes, so a sparse
/// file costs here what its data does.
#[derive(Debug)]
pub struct Staging {
    dir: ScratchDir,
    next: u64,
    /// Bytes of data it may still take.
    room: u64,
}

/// Space the staging leaves free on its file system: a twentieth of it, at most 64 MiB,
/// so that whatever else uses the temporary directory keeps working.
fn margin(fs_size: u64) -> u64 {
    (fs_size / 20).min(64 << 20)
}

impl Staging {
    pub fn new() -> io::Result<Staging> {
        let dir = ScratchDir::new("workcell-delivery-")?;
        let st = rustix::fs::fstatvfs(dir.fd())?;
        let free = st.f_bavail.saturating_mul(st.f_frsize);
        let room = free.saturating_sub(margin(st.f_blocks.saturating_mul(st.f_frsize)));
        Ok(Staging { dir, next: 0, room })
    }

    /// Takes `n` bytes of the room left, or says there is none.
    fn take_room(&mut self, n: u64) -> Result<(), DeliveryError> {
        self.room = self.room.checked_sub(n).ok_or_else(|| DeliveryError::NoRoom { dir: self.dir.path().parent().unwrap_or(self.dir.path()).to_path_buf() })?;
        Ok(())
    }

    /// Removes a staged content that will not be published.
    fn discard(&self, name: &str) {
        let _ = rustix::fs::unlinkat(self.dir.fd(), name, rustix::fs::AtFlags::empty());
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

    /// Refuses `path`; the content it had staged, if any, goes.
    fn refuse_staged(&mut self, path: Vec<String>, reason: Reason, staging: &Staging) {
        if let Some(f) = self.files.get(&path) {
            staging.discard(&f.staged);
        }
        self.refuse(path, reason);
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

/// The name a hard link entry points at, when it has a clean one.
fn link_target<R: Read>(entry: &tar::Entry<'_, R>) -> Option<Vec<String>> {
    entry.link_name_bytes().and_then(|t| name::components(&t).ok())
}

/// Reads the tar stream `input`, checks every entry against `policy` and the rules of a
/// plain tree, and stages the contents of accepted files. An unreadable archive, one over
/// the entry or byte limits, or accepted contents over the staging's room are an error:
/// then nothing is delivered.
///
/// A hard link entry that names its target (an engine's tar names a file's first name as a
/// plain file and the later ones as links to it) gets the target refused too, before or
/// after it was read: every name of such a file is refused, as on this host, where the walk
/// marks each name of a file with more than one.
pub fn collect_tar<R: Read>(input: R, policy: &Policy, staging: &mut Staging) -> Result<Collected, DeliveryError> {
    let mut archive = tar::Archive::new(input);
    let mut out = Collected::default();
    let (mut entries, mut total) = (0u64, 0u64);
    // Targets of hard links not read yet (bounded by the entry limit).
    let mut linked: HashSet<Vec<String>> = HashSet::new();
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
        if let (Kind::Refused(Reason::HardLink), Some(target)) = (&kind, link_target(&entry)) {
            if out.files.contains_key(&target) {
                out.refuse_staged(target, Reason::HardLink, staging);
            } else {
                linked.insert(target);
            }
        }
        match kind {
            Kind::Refused(reason) => out.refuse(path, if seen_dir { Reason::TypeClash } else { reason }),
            Kind::File if linked.contains(&path) => out.refuse(path, Reason::HardLink),
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
                let (staged, file) = staging.create().map_err(DeliveryError::io("stage a file", ""))?;
                let sha256 = stage(&mut entry, size, &file, staging)?;
                for n in 1..path.len() {
                    out.dirs.insert(path[..n].to_vec());
                }
                out.files.insert(path, FileOut { staged, size, executable: mode & 0o111 != 0, sha256, bits_dropped: mode & 0o7000 != 0 });
            }
        }
    }
    Ok(out)
}

/// Copies the `size` bytes of `content` into the staged `file` and returns their SHA-256.
/// Whole blocks of zeros are skipped (holes), and each written block takes its bytes of the
/// staging's room first.
fn stage(content: impl Read, size: u64, file: &std::fs::File, staging: &mut Staging) -> Result<[u8; 32], DeliveryError> {
    use std::os::unix::fs::FileExt;
    const BLOCK: usize = 64 << 10;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BLOCK];
    let mut at = 0u64;
    let mut limited = content.take(size);
    loop {
        let n = fill(&mut limited, &mut buf).map_err(DeliveryError::Archive)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        if buf[..n].iter().any(|b| *b != 0) {
            staging.take_room(n as u64)?;
            file.write_all_at(&buf[..n], at).map_err(DeliveryError::io("stage a file", ""))?;
        }
        at += n as u64;
    }
    if at != size {
        return Err(DeliveryError::Archive(io::Error::new(io::ErrorKind::UnexpectedEof, "a file's content ends early")));
    }
    // The holes at the end, and the file's length.
    file.set_len(size).map_err(DeliveryError::io("stage a file", ""))?;
    Ok(hasher.finalize().into())
}

/// Reads until `buf` is full or `input` ends (a pipe gives what it has; blocks stay aligned,
/// so a skipped block is a real hole).
fn fill(mut input: impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn archive(name: &str, data: &[u8]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, data).expect("entry");
        b.into_inner().expect("tar")
    }

    #[test]
    fn zero_blocks_are_staged_as_holes_and_data_takes_the_room() {
        let mut data = vec![0u8; 8 << 20];
        data[..4].copy_from_slice(b"head");
        let mut staging = Staging::new().expect("staging");
        let c = collect_tar(archive("f", &data).as_slice(), &Policy::default(), &mut staging).expect("collects");
        let f = &c.files[&vec!["f".to_string()]];
        assert_eq!(f.sha256, <[u8; 32]>::from(Sha256::digest(&data)), "the hash covers the holes");
        let mut staged = Vec::new();
        staging.open(&f.staged).expect("staged").read_to_end(&mut staged).expect("read");
        assert_eq!(staged, data);
        let meta = staging.open(&f.staged).expect("staged").metadata().expect("metadata");
        assert!(meta.blocks() * 512 < 1 << 20, "8 MiB of zeros took {} bytes", meta.blocks() * 512);
        // Data beyond the room withholds the whole archive.
        staging.room = 100 << 10;
        let dense = vec![1u8; 1 << 20];
        match collect_tar(archive("g", &dense).as_slice(), &Policy::default(), &mut staging) {
            Err(DeliveryError::NoRoom { .. }) => {}
            other => panic!("staged past the room: {other:?}"),
        }
    }

    #[test]
    fn a_hard_link_refuses_its_target_read_before_or_after_it() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Link);
        h.set_size(0);
        b.append_link(&mut h, "early", "later").expect("link");
        for name in ["later", "first", "ok"] {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_size(1);
            b.append_data(&mut h, name, &b"x"[..]).expect("file");
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Link);
        h.set_size(0);
        b.append_link(&mut h, "second", "first").expect("link");
        let mut staging = Staging::new().expect("staging");
        let c = collect_tar(b.into_inner().expect("tar").as_slice(), &Policy::default(), &mut staging).expect("collects");
        assert_eq!(c.files.keys().cloned().collect::<Vec<_>>(), vec![vec!["ok".to_string()]]);
        for name in ["early", "later", "first", "second"] {
            assert!(c.covered_by_refusal(&[name.to_string()]), "{name} not refused");
        }
    }
}
