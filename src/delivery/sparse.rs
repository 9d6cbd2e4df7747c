//! Copying a file's data and not its holes: a sparse file (a disk image, a 4 GiB "document"
//! of zero blocks) stays sparse in the copy, so taking the copy costs what the file holds,
//! not what it claims. The content's hash still covers every byte (holes read as zeros), as
//! the checker hashes the copy when it comes back.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use rustix::fs::SeekFrom;
use rustix::io::Errno;
use sha2::{Digest, Sha256};

const CHUNK: usize = 64 << 10;
static ZEROS: [u8; CHUNK] = [0; CHUNK];

/// Copies the first `size` bytes of `src` into the new, empty `dst`, only its data extents
/// (`SEEK_DATA`/`SEEK_HOLE`; a file system without them is copied whole); returns the
/// SHA-256 of those `size` bytes. A file that shrinks meanwhile is an error.
pub fn copy(src: &File, dst: &File, size: u64) -> io::Result<[u8; 32]> {
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut pos = 0u64;
    while pos < size {
        let data = match rustix::fs::seek(src, SeekFrom::Data(pos)) {
            Ok(d) => d.min(size),
            // No data after `pos`: the rest is a hole.
            Err(Errno::NXIO) => size,
            Err(Errno::INVAL | Errno::OPNOTSUPP) => pos,
            Err(e) => return Err(e.into()),
        };
        zeros(&mut hash, data - pos);
        if data >= size {
            break;
        }
        let hole = match rustix::fs::seek(src, SeekFrom::Hole(data)) {
            Ok(h) => h.clamp(data + 1, size),
            Err(Errno::NXIO | Errno::INVAL | Errno::OPNOTSUPP) => size,
            Err(e) => return Err(e.into()),
        };
        let mut at = data;
        while at < hole {
            let want = usize::try_from(hole - at).unwrap_or(CHUNK).min(CHUNK);
            let k = src.read_at(&mut buf[..want], at)?;
            if k == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the file shrank while it was copied"));
            }
            hash.update(&buf[..k]);
            dst.write_all_at(&buf[..k], at)?;
            at += k as u64;
        }
        pos = hole;
    }
    // The holes at the end, and the file's length.
    dst.set_len(size)?;
    Ok(hash.finalize().into())
}

fn zeros(hash: &mut Sha256, mut n: u64) {
    while n > 0 {
        let k = n.min(CHUNK as u64) as usize;
        hash.update(&ZEROS[..k]);
        n -= k as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn holes_stay_holes_and_the_hash_covers_them() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let src = File::create(&a).unwrap();
        src.write_all_at(b"head", 0).unwrap();
        src.write_all_at(b"tail", 8 << 20).unwrap();
        src.set_len(16 << 20).unwrap();
        let src = File::open(&a).unwrap();
        let dst = File::create(&b).unwrap();
        let hash = copy(&src, &dst, 16 << 20).unwrap();
        let content = std::fs::read(&a).unwrap();
        assert_eq!(hash, <[u8; 32]>::from(Sha256::digest(&content)));
        assert_eq!(std::fs::read(&b).unwrap(), content);
        let meta = std::fs::metadata(&b).unwrap();
        assert_eq!(meta.len(), 16 << 20);
        assert!(meta.blocks() * 512 < 1 << 20, "the copy allocated {} bytes", meta.blocks() * 512);
    }
}
