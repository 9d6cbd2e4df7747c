//! A zone's tree as a remote engine returns it (`GET /containers/…/archive`), made into the
//! plain relative tar stream the checker ([`super::collect`]) reads.
//!
//! Engines name the entries differently: Docker puts them under the directory's own name
//! (`0/`, `0/a.txt`), Podman under `/` (`/`, `/a.txt`). The first entry names the tree's
//! root; every later one must lie beneath it, or nothing is delivered. Only names, types,
//! modes, sizes and contents pass on: owners, times, PAX records (the worker cannot mark a
//! file as [`super::collect::OVERSIZE_KEY`]) and symbolic links' targets are dropped, links
//! and special files keep their type so that the checker refuses them as it does locally, and
//! a hard link keeps its target (made relative), whose name the checker refuses too.
//!
//! The archive is read once, as the engine sends it: nothing of it is kept but what the
//! checker accepts and stages, so what the host holds is bounded by the zone's limits and
//! the staging's room, and a file over `max_file_bytes` is refused from its header, its
//! content read through and dropped.

use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;

use super::collect::{self, Collected, Staging};
use super::{DeliveryError, Policy};

/// Checks the archive `input` (as the engine sends it, read once, as it arrives) against
/// `policy`, staging what passes; nothing else of it is kept. A hard link keeps its
/// (relative) target, so that the checker refuses every name of such a file.
pub fn collect(input: impl Read + Send, policy: &Policy, staging: &mut Staging) -> Result<Collected, DeliveryError> {
    let (reader, writer) = io::pipe().map_err(DeliveryError::io("open a pipe", ""))?;
    std::thread::scope(|s| {
        let rewriter = s.spawn(move || relative(input, writer));
        let collected = collect::collect_tar(reader, policy, staging);
        let rewritten = rewriter.join().unwrap_or_else(|_| Err(io::Error::other("the archive reader panicked")));
        // The checker stopped early (a limit): its error is the reason, not the broken pipe.
        let collected = collected?;
        rewritten.map_err(DeliveryError::Archive)?;
        Ok(collected)
    })
}

/// The names of the tree's root and beneath it, relative to the root, as bytes (a name that
/// is not UTF-8 reaches the checker as it is, and is refused there as on this host): the
/// first entry names the root; a later one outside it spoils the archive.
#[derive(Default)]
struct Names {
    root: Option<Vec<u8>>,
}

fn trim(raw: &[u8]) -> &[u8] {
    let start = raw.iter().position(|b| *b != b'/').unwrap_or(raw.len());
    let end = raw.iter().rposition(|b| *b != b'/').map_or(start, |e| e + 1).max(start);
    &raw[start..end]
}

impl Names {
    /// `raw` relative to the root; `None` for the root itself.
    fn relative(&mut self, raw: &[u8]) -> io::Result<Option<Vec<u8>>> {
        let name = trim(raw);
        let rel = match &self.root {
            None => {
                self.root = Some(name.to_vec());
                return Ok(None);
            }
            Some(r) if r.is_empty() || r == b"." => name.strip_prefix(b"./").unwrap_or(name),
            Some(r) => match name.strip_prefix(r.as_slice()).and_then(|rest| rest.strip_prefix(b"/")) {
                Some(rest) => rest,
                None if name == r.as_slice() => &[],
                None => {
                    let shown = String::from_utf8_lossy(raw);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, format!("the engine returned {shown:?} outside the zone's tree")));
                }
            },
        };
        Ok((!rel.is_empty()).then(|| rel.to_vec()))
    }
}

/// Rewrites `input` with every name relative to its first entry, the tree's root; a hard
/// link's target too.
fn relative(input: impl Read, out: impl Write) -> io::Result<()> {
    let mut archive = tar::Archive::new(input);
    let mut builder = tar::Builder::new(out);
    let mut names = Names::default();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let Some(rel) = names.relative(&entry.path_bytes())? else { continue };
        let kind = entry.header().entry_type();
        if kind == tar::EntryType::Link {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_size(0);
            let target = match entry.link_name_bytes() {
                Some(t) => Names { root: names.root.clone() }.relative(&t)?,
                None => None,
            };
            let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&rel));
            match target {
                Some(t) => builder.append_link(&mut h, path, std::path::Path::new(std::ffi::OsStr::from_bytes(&t)))?,
                None => builder.append_data(&mut h, path, io::empty())?,
            }
            continue;
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(entry.header().mode().unwrap_or(0o644) & 0o7777);
        let mut rel = rel;
        if kind.is_dir() {
            rel.push(b'/');
        }
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&rel));
        if kind.is_file() {
            h.set_size(entry.size());
            builder.append_data(&mut h, path, &mut entry)?;
        } else {
            h.set_size(0);
            builder.append_data(&mut h, path, io::empty())?;
        }
    }
    builder.into_inner()?.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            h.set_uid(0);
            b.append_data(&mut h, name, *data).expect("entry");
        }
        b.into_inner().expect("tar")
    }

    fn names(archive: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        relative(archive, &mut out).expect("rewrites");
        let mut a = tar::Archive::new(out.as_slice());
        a.entries().expect("entries").map(|e| String::from_utf8_lossy(&e.expect("entry").path_bytes()).into_owned()).collect()
    }

    #[test]
    fn docker_and_podman_names_become_relative() {
        use tar::EntryType as T;
        let docker = tar_of(&[("0/", T::Directory, b""), ("0/a.txt", T::Regular, b"a"), ("0/d/", T::Directory, b""), ("0/d/b", T::Regular, b"b")]);
        assert_eq!(names(&docker), ["a.txt", "d/", "d/b"]);
        let podman = tar_of(&[("./", T::Directory, b""), ("./a.txt", T::Regular, b"a")]);
        assert_eq!(names(&podman), ["a.txt"]);
    }

    #[test]
    fn an_entry_outside_the_root_spoils_the_whole_archive() {
        use tar::EntryType as T;
        let bad = tar_of(&[("0/", T::Directory, b""), ("0/a", T::Regular, b"a"), ("01/evil", T::Regular, b"x")]);
        assert!(relative(bad.as_slice(), Vec::new()).is_err());
    }

    #[test]
    fn links_reach_the_checker_as_links_and_are_refused() {
        use tar::EntryType as T;
        let archive = tar_of(&[("0/", T::Directory, b""), ("0/l", T::Symlink, b""), ("0/ok", T::Regular, b"fine")]);
        let c = collected(&archive);
        assert_eq!(c.files.keys().cloned().collect::<Vec<_>>(), vec![vec!["ok".to_string()]]);
        assert!(c.covered_by_refusal(&["l".to_string()]));
    }

    fn collected(archive: &[u8]) -> Collected {
        let mut staging = Staging::new().expect("staging");
        collect(archive, &Policy::default(), &mut staging).expect("collects")
    }

    #[test]
    fn a_name_that_is_not_utf8_reaches_the_checker_as_it_is() {
        let mut b = tar::Builder::new(Vec::new());
        for name in [&b"0/"[..], b"0/bad\xffname", b"0/ok"] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(if name.ends_with(b"/") { tar::EntryType::Directory } else { tar::EntryType::Regular });
            h.set_mode(0o644);
            h.set_size(1);
            let data: &[u8] = if name.ends_with(b"/") { b"" } else { b"x" };
            h.set_size(data.len() as u64);
            b.append_data(&mut h, std::path::Path::new(std::ffi::OsStr::from_bytes(name)), data).expect("entry");
        }
        let c = collected(&b.into_inner().expect("tar"));
        assert_eq!(c.files.keys().cloned().collect::<Vec<_>>(), vec![vec!["ok".to_string()]], "the bad name was renamed into something published");
        assert!(format!("{:?}", c.refusals()).contains("UTF-8"), "{:?}", c.refusals());
    }

    #[test]
    fn every_name_of_a_hard_linked_file_is_refused() {
        use tar::EntryType as T;
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data) in [("0/", T::Directory, &b""[..]), ("0/h.md", T::Regular, b"data"), ("0/ok.md", T::Regular, b"ok")] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, name, data).expect("entry");
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(T::Link);
        h.set_size(0);
        b.append_link(&mut h, "0/hard.md", "0/h.md").expect("link");
        let c = collected(&b.into_inner().expect("tar"));
        assert_eq!(c.files.keys().cloned().collect::<Vec<_>>(), vec![vec!["ok.md".to_string()]]);
        assert!(c.covered_by_refusal(&["h.md".to_string()]) && c.covered_by_refusal(&["hard.md".to_string()]));
    }
}
