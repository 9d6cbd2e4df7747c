//! Colour for workcell's own words on a terminal: errors, refusals, warnings, headings and
//! doctor's ok/fail marks. The few styles are here, used everywhere.
//!
//! `--color` decides (`auto` by default): `always` and `never` are taken as they are; `auto`
//! follows anstream's conventions per stream (stdout and stderr each): `NO_COLOR` set and
//! non-empty turns colour off, else `CLICOLOR_FORCE` set and non-empty turns it on, else
//! `CLICOLOR=0` turns it off, else colour is on when that stream is a terminal and `TERM` is
//! set and not `dumb` (or `CLICOLOR` is set, or `CI` is). The same choice goes to clap, for
//! its help and usage errors.
//!
//! Output is never routed through anstream's stripping stream: when colour is off, nothing
//! is added, so every byte is what it was without colour (stripping would also remove what
//! workcell writes on purpose, such as `term::TERMINAL_RESET`). When it is on, a style
//! only wraps text: text a worker influenced is escaped (`term`) before it is painted, and
//! a worker's own output (inherited, or captured and printed) never passes through here.

use std::ffi::OsString;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use anstyle::{AnsiColor, Style};
use clap::ColorChoice;

/// Whether workcell's own words on stdout / stderr get colour (off until [`init`]).
static STDOUT: AtomicBool = AtomicBool::new(false);
static STDERR: AtomicBool = AtomicBool::new(false);

/// What a piece of text is, and so how it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `workcell:` before an error: red, bold.
    Error,
    /// `warning:`: yellow, bold.
    Warning,
    /// A refusal or a denial (`refused:`, `unavailable`, a zone the worker cannot use): red.
    Denied,
    /// A mark that something works (`ok`, `allowed:`): green.
    Ok,
    /// A heading or a label in a listing: bold.
    Heading,
}

impl Role {
    fn style(self) -> Style {
        match self {
            Role::Error => AnsiColor::Red.on_default().bold(),
            Role::Warning => AnsiColor::Yellow.on_default().bold(),
            Role::Denied => AnsiColor::Red.on_default(),
            Role::Ok => AnsiColor::Green.on_default(),
            Role::Heading => Style::new().bold(),
        }
    }

    /// `text` for standard output.
    pub fn out<T: fmt::Display>(self, text: T) -> Painted<T> {
        Painted { style: self.style(), text, on: STDOUT.load(Ordering::Relaxed) }
    }

    /// `text` for standard error.
    pub fn err<T: fmt::Display>(self, text: T) -> Painted<T> {
        Painted { style: self.style(), text, on: STDERR.load(Ordering::Relaxed) }
    }
}

/// Text in a style when its stream has colour; the text alone, byte for byte, when not.
/// Width and alignment (`{:<8}`) apply to the text, inside the style.
#[derive(Debug)]
pub struct Painted<T> {
    style: Style,
    text: T,
    on: bool,
}

impl<T: fmt::Display> fmt::Display for Painted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.on {
            return self.text.fmt(f);
        }
        write!(f, "{}", self.style.render())?;
        self.text.fmt(f)?;
        write!(f, "{}", self.style.render_reset())
    }
}

/// `workcell:`, as an error starts on stderr.
pub fn error_prefix() -> Painted<&'static str> {
    Role::Error.err("workcell:")
}

/// `workcell: warning:`, as a warning starts on stderr.
pub fn warning_prefix() -> String {
    format!("workcell: {}", Role::Warning.err("warning:"))
}

/// A note of workcell's for the terminal's stderr: its `workcell: warning:` painted. Notes
/// held for a captured run's stderr never come here: a caller reads those, not a terminal.
pub fn note_for_stderr(line: &str) -> std::borrow::Cow<'_, str> {
    match line.strip_prefix("workcell: warning: ") {
        Some(rest) if stderr_has_color() => format!("{} {rest}", warning_prefix()).into(),
        _ => line.into(),
    }
}

/// True when standard error gets colour (for the log lines too).
pub fn stderr_has_color() -> bool {
    STDERR.load(Ordering::Relaxed)
}

/// The choice `--color` makes, read from the arguments before clap parses them, so that
/// clap's own help and usage errors follow it too. The last `--color WHEN` or
/// `--color=WHEN` before a `--` counts; an unknown value is left for clap to refuse. After a
/// successful parse [`init`] takes the parsed value (a `--color` that was a worker's
/// argument is then not workcell's).
pub fn early_choice(args: impl IntoIterator<Item = OsString>) -> ColorChoice {
    let mut choice = ColorChoice::Auto;
    let mut args = args.into_iter().skip(1).take_while(|a| a != "--");
    while let Some(arg) = args.next() {
        let value = match arg.to_str() {
            Some("--color") => args.next(),
            Some(s) => s.strip_prefix("--color=").map(OsString::from),
            None => None,
        };
        if let Some(c) = value.as_ref().and_then(|v| v.to_str()).and_then(|v| <ColorChoice as clap::ValueEnum>::from_str(v, false).ok()) {
            choice = c;
        }
    }
    choice
}

/// Applies `choice` to clap's output (anstream's global choice, which clap's `auto`
/// consults) and decides for workcell's own stdout and stderr.
pub fn init(choice: ColorChoice) {
    let global = match choice {
        ColorChoice::Auto => anstream::ColorChoice::Auto,
        ColorChoice::Always => anstream::ColorChoice::Always,
        ColorChoice::Never => anstream::ColorChoice::Never,
    };
    global.write_global();
    let on = |choice: anstream::ColorChoice| choice != anstream::ColorChoice::Never;
    STDOUT.store(on(anstream::AutoStream::choice(&std::io::stdout())), Ordering::Relaxed);
    STDERR.store(on(anstream::AutoStream::choice(&std::io::stderr())), Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        std::iter::once("workcell").chain(a.iter().copied()).map(OsString::from).collect()
    }

    #[test]
    fn the_early_choice_reads_both_spellings_and_stops_at_the_separator() {
        assert_eq!(early_choice(args(&["doctor"])), ColorChoice::Auto);
        assert_eq!(early_choice(args(&["--color", "always", "doctor"])), ColorChoice::Always);
        assert_eq!(early_choice(args(&["plan", "--color=never"])), ColorChoice::Never);
        assert_eq!(early_choice(args(&["--color=never", "--color", "always"])), ColorChoice::Always);
        assert_eq!(early_choice(args(&["run", "--", "ls", "--color=always"])), ColorChoice::Auto);
        assert_eq!(early_choice(args(&["--color", "sometimes"])), ColorChoice::Auto);
    }

    #[test]
    fn painted_text_is_the_text_alone_when_off() {
        let p = Painted { style: Role::Heading.style(), text: "zones:", on: false };
        assert_eq!(format!("{p:<8}|"), "zones:  |");
        let p = Painted { style: Role::Denied.style(), text: "refused:", on: true };
        assert_eq!(format!("{p}"), "\u{1b}[31mrefused:\u{1b}[0m");
    }
}
