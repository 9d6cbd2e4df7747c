//! `check --stdin`: paths read in bounded chunks, judged on every core with one shared
//! [`Querier`] (its verdicts are [`Sandbox::verdict`]'s), printed in input order.
//!
//! Memory stays bounded however long the stream: a chunk holds at most [`CHUNK_LINES`]
//! lines and about [`CHUNK_BYTES`] bytes of input (one line at most [`MAX_LINE`]), and its
//! verdicts are written before the next chunk is read. A chunk is also judged as soon as
//! standard input has nothing more to give right now, so a slow producer sees its verdicts
//! without waiting for a full chunk.

use std::io::{BufRead, BufReader, Read, Write};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::Style;
use crate::cli::CliError;
use crate::sandbox::{Querier, Sandbox, SandboxError};

/// Longest line `--stdin` reads (a path is at most a few KiB; PATH_MAX is 4096).
const MAX_LINE: usize = 64 * 1024;
/// Lines judged together: enough to keep the cores busy between two reads.
const CHUNK_LINES: usize = 16384;
/// Lines a thread takes at a time within a chunk.
const BATCH: usize = 128;
/// Input bytes judged together (the verdicts printed for them are a small multiple).
const CHUNK_BYTES: usize = 1 << 20;
/// Fewer lines than this are judged on the reading thread alone (a thread costs more).
const PARALLEL_MIN: usize = 64;
/// Threads at most, whatever the machine says.
const MAX_THREADS: usize = 16;

/// A failed write of verdicts: the process ends quietly if stdout's reader went away.
pub(super) fn write_failed(e: std::io::Error) -> CliError {
    crate::cli::out::quit_if_closed(&e);
    CliError::Failed(format!("cannot write the verdicts: {e}"))
}

/// The lines of one chunk: their bytes one after the other, and where each is.
#[derive(Default)]
struct Chunk {
    bytes: Vec<u8>,
    lines: Vec<Range<usize>>,
}

impl Chunk {
    fn is_full(&self) -> bool {
        self.lines.len() >= CHUNK_LINES || self.bytes.len() >= CHUNK_BYTES
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.lines.clear();
    }

    fn line(&self, i: usize) -> &str {
        // Checked as UTF-8 when it was read.
        std::str::from_utf8(&self.bytes[self.lines[i].clone()]).unwrap_or_default()
    }
}

/// Judges every line of standard input, printing one verdict per line in input order.
/// Returns whether any path was refused; a line too long or not UTF-8 ends the stream with
/// a usage error after the verdicts of the lines before it.
pub(super) fn check_all(sandbox: &Sandbox, write: bool, style: Style, out: &mut impl Write) -> Result<bool, CliError> {
    let querier = Querier::new(sandbox, write);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, MAX_THREADS);
    let mut input = BufReader::with_capacity(64 * 1024, std::io::stdin().lock());
    let mut chunk = Chunk::default();
    let mut refused = false;
    let mut judge = |chunk: &mut Chunk, out: &mut dyn Write| -> Result<(), CliError> {
        refused |= judge(&querier, chunk, threads, style, out)?;
        chunk.clear();
        Ok(())
    };
    loop {
        let start = chunk.bytes.len();
        // Bounded: the paths piped in may come from a worker, which could send one endless
        // line.
        let n = (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut chunk.bytes)
            .map_err(|e| CliError::Usage(format!("cannot read standard input: {e}")))?;
        if n == 0 {
            break;
        }
        let line = &chunk.bytes[start..];
        if line.len() > MAX_LINE && line.last() != Some(&b'\n') {
            chunk.bytes.truncate(start);
            judge(&mut chunk, out)?;
            return Err(CliError::Usage(format!("a line of standard input is longer than {MAX_LINE} bytes; give one path per line")));
        }
        if std::str::from_utf8(line).is_err() {
            chunk.bytes.truncate(start);
            judge(&mut chunk, out)?;
            return Err(CliError::Usage("standard input is not UTF-8 text".into()));
        }
        let mut end = chunk.bytes.len();
        for ending in [b'\n', b'\r'] {
            if end > start && chunk.bytes[end - 1] == ending {
                end -= 1;
            }
        }
        if end > start {
            chunk.lines.push(start..end);
        } else {
            chunk.bytes.truncate(start);
        }
        let idle = input.buffer().is_empty() && !readable_now();
        if chunk.is_full() || idle {
            judge(&mut chunk, out)?;
            if idle {
                out.flush().map_err(write_failed)?;
            }
        }
    }
    judge(&mut chunk, out)?;
    Ok(refused)
}

/// Whether standard input has bytes (or its end) to give without waiting.
fn readable_now() -> bool {
    let stdin = std::io::stdin();
    let mut fds = [rustix::event::PollFd::new(&stdin, rustix::event::PollFlags::IN)];
    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    // An error: say yes, and the next read tells what it is.
    rustix::event::poll(&mut fds, Some(&zero)).map_or(true, |n| n > 0)
}

/// Judges one chunk on up to `threads` threads and writes its verdicts in input order.
/// Returns whether any was refused. The threads (the reading thread among them) take small
/// batches of lines in turn, so one thread the scheduler set aside holds back at most one
/// batch, not half the chunk.
fn judge(querier: &Querier<'_>, chunk: &Chunk, threads: usize, style: Style, out: &mut dyn Write) -> Result<bool, CliError> {
    let n = chunk.lines.len();
    if n == 0 {
        return Ok(false);
    }
    let batches = n.div_ceil(BATCH);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let b = next.fetch_add(1, Ordering::Relaxed);
            if b >= batches {
                return done;
            }
            done.push((b, render(querier, chunk, b * BATCH..((b + 1) * BATCH).min(n), style)));
        }
    };
    let helpers = if n < PARALLEL_MIN { 0 } else { threads.saturating_sub(1).min(batches - 1) };
    let mut rendered: Vec<(usize, (Vec<u8>, bool))> = std::thread::scope(|s| {
        // A thread that cannot be started leaves its batches to the others.
        let spawned: Vec<_> = (0..helpers).filter_map(|_| std::thread::Builder::new().name("workcell-check".into()).spawn_scoped(s, work).ok()).collect();
        let mut all = work();
        for h in spawned {
            all.extend(h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        }
        all
    });
    rendered.sort_unstable_by_key(|(b, _)| *b);
    let mut refused = false;
    for (_, (bytes, any)) in rendered {
        refused |= any;
        out.write_all(&bytes).map_err(write_failed)?;
    }
    Ok(refused)
}

/// The verdict lines of `lines` of the chunk, and whether any was refused.
fn render(querier: &Querier<'_>, chunk: &Chunk, lines: Range<usize>, style: Style) -> (Vec<u8>, bool) {
    let paths: Vec<&str> = lines.map(|i| chunk.line(i)).collect();
    let verdicts: Vec<Result<(), SandboxError>> = querier.verdicts(&paths);
    let mut out = Vec::with_capacity(paths.len() * 48);
    let mut refused = false;
    for (path, result) in paths.iter().zip(&verdicts) {
        refused |= result.is_err();
        style.render(&mut out, path, result);
    }
    (out, refused)
}
