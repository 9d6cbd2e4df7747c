//! Captured output that cannot grow without bound: a worker controls how much its commands
//! print, so every stream is read as it comes, kept up to [`OUTPUT_CAP`] bytes, and the rest
//! is read and thrown away (the writer never blocks on a full pipe) and only counted. The
//! supervision loop ([`super::supervise`]) and the docker runner fill them.

use super::Finished;

/// Bytes kept per captured stream (stdout and stderr each): what the shell tool returns, and
/// what a child worker's output may be. Anything beyond is counted in `*_cut`, not kept.
pub const OUTPUT_CAP: usize = 50_000;

/// A buffer that keeps the first `cap` bytes pushed into it and counts the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bounded {
    pub kept: Vec<u8>,
    pub cut: u64,
    cap: usize,
}

impl Bounded {
    pub fn new(cap: usize) -> Bounded {
        Bounded { kept: Vec::new(), cut: 0, cap }
    }

    pub fn push(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len());
        let take = room.min(bytes.len());
        self.kept.extend_from_slice(&bytes[..take]);
        self.cut += (bytes.len() - take) as u64;
    }
}

/// Both streams of a run, bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streams {
    pub stdout: Bounded,
    pub stderr: Bounded,
}

impl Default for Streams {
    fn default() -> Self {
        Streams { stdout: Bounded::new(OUTPUT_CAP), stderr: Bounded::new(OUTPUT_CAP) }
    }
}

impl Streams {
    pub fn into_finished(self, exit_code: i32, timed_out: bool) -> Finished {
        Finished { exit_code, stdout: self.stdout.kept, stderr: self.stderr.kept, stdout_cut: self.stdout.cut, stderr_cut: self.stderr.cut, timed_out }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_cap_and_counts_the_rest() {
        let mut b = Bounded::new(10);
        b.push(b"12345");
        b.push(b"67890abc");
        b.push(b"def");
        assert_eq!(b.kept, b"1234567890");
        assert_eq!(b.cut, 6);
    }
}
