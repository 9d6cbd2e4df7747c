//! workcell's own words about a run (warnings, why it ended): on workcell's stderr for a run
//! on the terminal, after the worker's own stderr for a captured run, so that the caller who
//! reads the output reads them too.

use super::Output;
use crate::backend::capture::Bounded;
use crate::backend::outcome::Explained;

/// The notes of one run.
#[derive(Debug)]
pub struct Notes {
    output: Output,
    /// A captured run's notes, appended to its stderr at the end. Bounded by what workcell
    /// says (a few lines), never by the worker.
    held: Vec<u8>,
}

impl Notes {
    pub fn new(output: Output) -> Notes {
        Notes { output, held: Vec::new() }
    }

    /// Says `line` (a newline is added).
    pub fn say(&mut self, line: &str) {
        match self.output {
            Output::Inherit => eprintln!("{}", crate::style::note_for_stderr(line)),
            Output::Capture => {
                self.held.extend_from_slice(line.as_bytes());
                self.held.push(b'\n');
            }
        }
    }

    /// Says why the run ended; returns the exit status for it.
    pub fn explain(&mut self, why: &Explained) -> i32 {
        let message = why.message();
        self.say(message.strip_suffix('\n').unwrap_or(&message));
        why.code()
    }

    /// Appends the held notes to a captured stderr, past its cap: they are workcell's, and
    /// the caller must see them even after a flood of output.
    pub fn append_to(self, stderr: &mut Bounded) {
        stderr.kept.extend_from_slice(&self.held);
    }
}
