//! Comparing a checked tree with the zone and writing the difference beneath the zone's
//! handle. Every path is reached one component at a time with `O_NOFOLLOW | O_DIRECTORY`
//! from the handle; a file is written under a temporary name and renamed over its place, so
//! a reader of the zone sees the old file or the new one, never half of one. A host file
//! that is no longer what the copy was taken from is a conflict, left as it is.

use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, Stat};

use super::baseline::Baseline;
use super::collect::{Collected, FileOut, Staging};
use super::walk::open_dir;
use super::{DeliveryError, Reason, Refusal, Summary};
use crate::hostrun::{Kind, Protection};

/// What a publish will do, and its summary.
#[derive(Debug, Default)]
pub struct Changes {
    pub summary: Summary,
    writes: Vec<(Vec<String>, FileOut)>,
    mkdirs: Vec<Vec<String>>,
    deletes: Vec<Vec<String>>,
    rmdirs: Vec<Vec<String>>,
    baseline: Baseline,
}

/// One component as the kernel takes it. The checker has refused these already; refusing
/// them again here keeps a mistake there from turning into a walk out of the zone.
fn cname(s: &str) -> io::Result<CString> {
    if s.is_empty() || s == "." || s == ".." || s.contains('/') {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    CString::new(s).map_err(|_| io::Error::other("a name with a NUL byte"))
}

/// The parent directory of `path` beneath `zone`, opened without following links; created
/// (owned like the zone) when `create` says so.
fn parent(zone: BorrowedFd<'_>, path: &[String], create: Option<&Stat>) -> io::Result<OwnedFd> {
    let mut dir = rustix::fs::openat(zone, c".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    for c in &path[..path.len().saturating_sub(1)] {
        let c = cname(c)?;
        dir = match open_dir(&dir, &c) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && create.is_some() => {
                rustix::fs::mkdirat(&dir, &c, Mode::from_raw_mode(0o755))?;
                let d = open_dir(&dir, &c)?;
                let owner = create.expect("checked");
                std::os::unix::fs::fchown(&d, Some(owner.st_uid), Some(owner.st_gid))?;
                d
            }
            other => other?,
        };
    }
    Ok(dir)
}

/// The host entry at `path` now (`None` when there is none); an error when a directory on
/// the way is a link or not a directory.
fn host_state(zone: BorrowedFd<'_>, path: &[String]) -> io::Result<Option<Stat>> {
    let dir = match parent(zone, path, None) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        other => other?,
    };
    match rustix::fs::statat(&dir, cname(&path[path.len() - 1])?.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Compares the checked tree with the baseline and the zone as it is now.
pub fn diff(zone_name: &str, zone: impl AsFd, baseline: &Baseline, collected: &Collected) -> Changes {
    let zone = zone.as_fd();
    let mut c = Changes { summary: Summary { zone: zone_name.to_string(), refused: collected.refusals(), ..Summary::default() }, ..Changes::default() };
    c.summary.set_not_copied(baseline);
    let show = |p: &[String]| p.join("/");
    for (path, f) in &collected.files {
        // The worker never had what it could not read: nothing it leaves there replaces it.
        if baseline.beneath_not_copied(path) {
            c.summary.refused.push(super::Refusal { path: show(path), reason: super::Reason::NotCopied });
            continue;
        }
        let before = baseline.files.get(path);
        if before.is_some_and(|s| s.sha256 == f.sha256 && s.executable == f.executable) {
            continue;
        }
        let now = host_state(zone, path);
        let unchanged = match (before, &now) {
            (Some(seen), Ok(Some(st))) => seen.same(st),
            (None, Ok(None)) => true,
            _ => false,
        };
        if !unchanged {
            c.summary.conflicts.push(show(path));
            continue;
        }
        if f.bits_dropped {
            c.summary.bits_dropped.push(show(path));
        }
        if before.is_some() { &mut c.summary.changed } else { &mut c.summary.added }.push(show(path));
        c.writes.push((path.clone(), f.clone()));
    }
    for path in collected.dirs.iter().filter(|d| !baseline.dirs.contains(*d)) {
        if baseline.beneath_not_copied(path) {
            c.summary.refused.push(super::Refusal { path: format!("{}/", show(path)), reason: super::Reason::NotCopied });
            continue;
        }
        c.mkdirs.push(path.clone());
    }
    for (path, seen) in &baseline.files {
        if collected.files.contains_key(path) || collected.dirs.contains(path) || collected.covered_by_refusal(path) {
            continue;
        }
        match host_state(zone, path) {
            Ok(Some(st)) if seen.same(&st) => {
                c.summary.deleted.push(show(path));
                c.deletes.push(path.clone());
            }
            Ok(None) => {}
            _ => c.summary.conflicts.push(show(path)),
        }
    }
    // Directories the worker removed, deepest first; one the host filled meanwhile stays.
    let mut gone: Vec<_> = baseline.dirs.iter().filter(|d| !collected.dirs.contains(*d) && !collected.covered_by_refusal(d)).cloned().collect();
    gone.sort_by_key(|d| std::cmp::Reverse(d.len()));
    c.rmdirs = gone;
    c.baseline = baseline.clone();
    c
}

impl Changes {
    /// Withholds every change to a file the host runs (`crate::hostrun`): a new or changed
    /// protected file is not published, a protected directory not created, and a protected
    /// file or directory the worker deleted in its copy stays on the host; each is named in
    /// the summary's refusals. A git directory counts as `.git` whatever it is called (what
    /// git itself looks for: `HEAD` and `objects` or `commondir`), so a repository renamed in
    /// the copy, or a bare one, keeps its hooks and config protected; names are also judged
    /// in lower case (`.Git/CONFIG` is `.git/config` on a case-insensitive file system).
    pub fn withhold_hostrun(&mut self, collected: &Collected, protection: &Protection) {
        if protection.entries().is_empty() {
            return;
        }
        let base = &self.baseline;
        let is_git = |d: &[String]| {
            let with = |n: &str| d.iter().cloned().chain([n.to_string()]).collect::<Vec<_>>();
            let file = |n: &str| collected.files.contains_key(&with(n)) || base.files.contains_key(&with(n));
            let dir = |n: &str| collected.dirs.contains(&with(n)) || base.dirs.contains(&with(n));
            file("HEAD") && (dir("objects") || file("commondir"))
        };
        // The entry that covers `path` (a directory when `dir`), judging git directories on
        // the way as `.git`.
        let entry = |path: &[String], dir: bool| -> Option<String> {
            let mut judged = std::path::PathBuf::new();
            if is_git(&[]) {
                judged.push(".git");
            }
            for (i, c) in path.iter().enumerate() {
                let last = i + 1 == path.len();
                judged.push(if !last && is_git(&path[..=i]) { ".git" } else { c.as_str() });
            }
            crate::sandbox::matches_any_case(protection, &judged, if dir { Kind::Dir } else { Kind::Other }).map(str::to_string)
        };
        let show = |p: &[String]| p.join("/");
        let mut refused = Vec::new();
        let mut withheld: Vec<String> = Vec::new();
        self.writes.retain(|(path, _)| match entry(path, false) {
            Some(entry) => {
                withheld.push(show(path));
                refused.push(Refusal { path: show(path), reason: Reason::Protected { entry } });
                false
            }
            None => true,
        });
        self.mkdirs.retain(|path| match entry(path, true) {
            Some(entry) => {
                refused.push(Refusal { path: format!("{}/", show(path)), reason: Reason::Protected { entry } });
                false
            }
            None => true,
        });
        self.deletes.retain(|path| match entry(path, false) {
            Some(entry) => {
                withheld.push(show(path));
                refused.push(Refusal { path: show(path), reason: Reason::ProtectedDelete { entry } });
                false
            }
            None => true,
        });
        self.rmdirs.retain(|path| match entry(path, true) {
            Some(entry) => {
                refused.push(Refusal { path: format!("{}/", show(path)), reason: Reason::ProtectedDelete { entry } });
                false
            }
            None => true,
        });
        let s = &mut self.summary;
        for list in [&mut s.added, &mut s.changed, &mut s.deleted, &mut s.bits_dropped] {
            list.retain(|p| !withheld.contains(p));
        }
        s.refused.extend(refused);
    }

    /// Writes the accepted changes beneath `zone`. A file whose host entry changed since the
    /// diff is left alone and reported as a conflict.
    pub fn publish(&mut self, zone: impl AsFd, staging: &Staging) -> Result<(), DeliveryError> {
        let zone = zone.as_fd();
        let name = self.summary.zone.clone();
        let err = |op| DeliveryError::io(op, &name);
        let mut conflicts = Vec::new();
        let zst = rustix::fs::fstat(zone).map_err(|e| err("read the zone")(e.into()))?;
        for path in &self.mkdirs {
            let mut full = path.clone();
            full.push(".".into());
            // A directory whose place the host filled with something else meanwhile.
            if parent(zone, &full, Some(&zst)).is_err() {
                conflicts.push(format!("{}/", path.join("/")));
            }
        }
        for (path, f) in &self.writes {
            let seen = self.baseline.files.get(path);
            match write_one(zone, path, f, seen, &zst, staging) {
                Ok(true) => {}
                Ok(false) => conflicts.push(path.join("/")),
                Err(e) => return Err(err("write a file")(e)),
            }
        }
        for path in &self.deletes {
            let seen = &self.baseline.files[path];
            let dir = parent(zone, path, None).map_err(err("delete a file"))?;
            let n = cname(&path[path.len() - 1]).map_err(err("delete a file"))?;
            match rustix::fs::statat(&dir, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if seen.same(&st) => rustix::fs::unlinkat(&dir, n.as_c_str(), AtFlags::empty()).map_err(|e| err("delete a file")(e.into()))?,
                _ => conflicts.push(path.join("/")),
            }
        }
        for path in &self.rmdirs {
            if let Ok(dir) = parent(zone, path, None) {
                if let Ok(n) = cname(&path[path.len() - 1]) {
                    if rustix::fs::unlinkat(&dir, n.as_c_str(), AtFlags::REMOVEDIR).is_ok() {
                        self.summary.deleted.push(format!("{}/", path.join("/")));
                    }
                }
            }
        }
        for p in conflicts {
            self.summary.added.retain(|x| *x != p);
            self.summary.changed.retain(|x| *x != p);
            self.summary.deleted.retain(|x| *x != p);
            self.summary.conflicts.push(p);
        }
        self.summary.published = true;
        Ok(())
    }
}

/// Writes one file; `Ok(false)` when its host entry is no longer what the diff saw.
fn write_one(zone: BorrowedFd<'_>, path: &[String], f: &FileOut, seen: Option<&super::baseline::Seen>, zst: &Stat, staging: &Staging) -> io::Result<bool> {
    let dir = match parent(zone, path, Some(zst)) {
        Ok(d) => d,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::ELOOP)) => return Ok(false),
        Err(e) => return Err(e),
    };
    let n = cname(&path[path.len() - 1])?;
    let now = match rustix::fs::statat(&dir, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Some(st),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => return Err(e.into()),
    };
    let (uid, gid, mode) = match (seen, &now) {
        (Some(s), Some(st)) if s.same(st) => {
            let mut mode = st.st_mode & 0o777;
            if f.executable {
                mode |= (mode & 0o444) >> 2;
            } else {
                mode &= !0o111;
            }
            (st.st_uid, st.st_gid, mode)
        }
        (None, None) => (zst.st_uid, zst.st_gid, if f.executable { 0o755 } else { 0o644 }),
        _ => return Ok(false),
    };
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|e| io::Error::other(e.to_string()))?;
    let tmp = cname(&format!(".workcell-publish-{}", random.iter().map(|b| format!("{b:02x}")).collect::<String>()))?;
    let fd = rustix::fs::openat(
        &dir,
        tmp.as_c_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut out = std::fs::File::from(fd);
    let result = (|| {
        let mut src = staging.open(&f.staged)?.take(f.size);
        io::copy(&mut src, &mut out)?;
        out.flush()?;
        std::os::unix::fs::fchown(&out, Some(uid), Some(gid))?;
        rustix::fs::fchmod(&out, Mode::from_raw_mode(mode))?;
        rustix::fs::renameat(&dir, tmp.as_c_str(), &dir, n.as_c_str())?;
        Ok(())
    })();
    if result.is_err() {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_c_str(), AtFlags::empty());
    }
    result.map(|()| true)
}
