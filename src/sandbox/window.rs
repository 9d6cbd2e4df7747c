//! `read_file`'s window, read in pieces: the file is decoded as UTF-8 while it streams in,
//! characters before the window are counted and dropped, and once the window is full the rest
//! is only counted (for `total_chars`) up to [`COUNT_AHEAD`] bytes into the file; beyond that
//! reading stops. Memory stays at the window plus one piece, whatever the file's size.

use std::io::{self, Read};

/// Bytes read per piece.
const PIECE: usize = 64 << 10;
/// How far into a file reading goes, once the window is full, to count its characters.
pub(super) const COUNT_AHEAD: u64 = 8 << 20;

/// The characters `[offset, offset + max_chars)` of a text stream.
#[derive(Debug, Default)]
pub(super) struct Window {
    pub content: String,
    /// Characters seen (the whole file's count when `reached_end`).
    pub chars_seen: usize,
    /// Bytes read from the stream.
    pub bytes_read: u64,
    /// The stream was read to its end.
    pub reached_end: bool,
    /// Text follows the window.
    pub more: bool,
}

/// Why the stream is not text.
#[derive(Debug)]
pub(super) enum NotText {
    Nul,
    Utf8 { at: u64 },
    Io(io::Error),
}

/// Reads the window `[offset, offset + max_chars)` (in characters) of `r`.
pub(super) fn read_window(mut r: impl Read, offset: usize, max_chars: usize) -> Result<Window, NotText> {
    let end = offset.saturating_add(max_chars);
    let mut w = Window::default();
    let mut buf = vec![0u8; PIECE];
    // Bytes of a character split across two pieces (at most 3), carried to the next one.
    let mut work: Vec<u8> = Vec::with_capacity(PIECE + 4);
    loop {
        let n = match r.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(NotText::Io(e)),
        };
        if n == 0 {
            if !work.is_empty() {
                // The stream ends inside a character.
                return Err(NotText::Utf8 { at: w.bytes_read - work.len() as u64 });
            }
            w.reached_end = true;
            return Ok(w);
        }
        let start_of_work = w.bytes_read - work.len() as u64;
        w.bytes_read += n as u64;
        work.extend_from_slice(&buf[..n]);
        if work.contains(&0) {
            return Err(NotText::Nul);
        }
        let valid = match std::str::from_utf8(&work) {
            Ok(_) => work.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(e) => return Err(NotText::Utf8 { at: start_of_work + e.valid_up_to() as u64 }),
        };
        let text = std::str::from_utf8(&work[..valid]).unwrap_or_default();
        let here = text.chars().count();
        if w.chars_seen + here <= offset || w.chars_seen >= end {
            w.more |= w.chars_seen >= end && here > 0;
            w.chars_seen += here;
        } else {
            for c in text.chars() {
                if w.chars_seen >= end {
                    w.more = true;
                } else if w.chars_seen >= offset {
                    w.content.push(c);
                }
                w.chars_seen += 1;
            }
        }
        work.drain(..valid);
        if w.more && w.bytes_read >= COUNT_AHEAD {
            return Ok(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out one byte at a time, so every character is split.
    struct Trickle<'a>(&'a [u8]);
    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let Some((first, rest)) = self.0.split_first() else { return Ok(0) };
            buf[0] = *first;
            self.0 = rest;
            Ok(1)
        }
    }

    #[test]
    fn windows_count_characters_across_split_pieces() {
        let text = "aé€😀b".repeat(3);
        for (offset, max) in [(0, 2), (1, 3), (4, 100), (14, 1), (15, 5), (0, 15)] {
            let w = read_window(Trickle(text.as_bytes()), offset, max).unwrap();
            let expected: String = text.chars().skip(offset).take(max).collect();
            assert_eq!(w.content, expected, "{offset} {max}");
            assert_eq!(w.more, offset + max < 15, "{offset} {max}");
            assert!(w.reached_end);
            assert_eq!(w.chars_seen, 15);
        }
    }

    #[test]
    fn counting_stops_after_count_ahead() {
        let big = std::io::repeat(b'x').take(COUNT_AHEAD * 4);
        let w = read_window(big, 10, 5).unwrap();
        assert_eq!((w.content.as_str(), w.more, w.reached_end), ("xxxxx", true, false));
        assert!(w.bytes_read < COUNT_AHEAD + PIECE as u64 * 2);
    }

    #[test]
    fn binary_and_broken_text_are_refused() {
        assert!(matches!(read_window(&b"ab\0c"[..], 0, 1), Err(NotText::Nul)));
        assert!(matches!(read_window(&b"ab\xffc"[..], 0, 1), Err(NotText::Utf8 { at: 2 })));
        assert!(matches!(read_window(Trickle(b"abc\xe2\x82"), 0, 10), Err(NotText::Utf8 { at: 3 })));
    }
}
