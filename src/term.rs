//! Text a worker can influence, made safe to show a person on a terminal.
//!
//! A path or command line chosen by a worker reaches the approval prompt, the audit display
//! and run summaries. Printed raw, `ESC[2K\r` erases the line and rewrites it to read as a
//! harmless request, and a right-to-left override reorders what the person reads. So every
//! such string passes through [`escape`]: control characters (C0, DEL, C1) and Unicode
//! formatting characters that change how text is laid out become visible escapes, and the
//! backslash itself is doubled so an escape can never be forged by the text.

use std::borrow::Cow;
use std::fmt::Write;

/// Characters that change layout without being control characters: bidirectional
/// embeddings, overrides and isolates, zero-width joiners and marks, line/paragraph separators,
/// and the byte-order mark.
fn is_layout_format(c: char) -> bool {
    // Every format character (Unicode category Cf: bidirectional controls, zero-width ones,
    // the soft hyphen, tag characters, shaping controls, annotation anchors…) and the
    // fillers and joiners that draw nothing (Hangul fillers, the combining grapheme joiner,
    // Khmer inherent vowels): each can make one name read as another. Variation selectors
    // stay: they are part of ordinary emoji.
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
}

/// True for characters [`escape`] rewrites.
pub fn needs_escape(c: char) -> bool {
    c == '\\' || c.is_control() || is_layout_format(c)
}

/// `s` with control and layout characters written as escapes (`\n`, `\r`, `\t`, `\e`, `\x7f`,
/// `\u{202e}`) and `\` as `\\`; unchanged (borrowed) when there is nothing to escape.
pub fn escape(s: &str) -> Cow<'_, str> {
    escape_with(s, Keep::Nothing)
}

/// Like [`escape`] but keeps newlines: for multi-line messages of our own that may quote a
/// worker's text. A quoted newline can at most start a new line; it cannot move the cursor.
pub fn escape_lines(s: &str) -> Cow<'_, str> {
    escape_with(s, Keep::Newlines)
}

/// Like [`escape`] but leaves backslashes single: for messages that quote a caller's path
/// back to it (`C:\x` must read `C:\x`), where no escape needs to be unambiguous.
pub fn escape_quoted(s: &str) -> Cow<'_, str> {
    escape_with(s, Keep::Backslashes)
}

/// `s` as a double-quoted string that reads the same in YAML and JSON, for text a person is
/// told to paste into a config file: quotes, `#`, `,`, `}` cannot end the value early, and
/// control and layout characters are `\uXXXX` escapes (all of them are in the BMP).
pub fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON line safe to print: serde_json escapes C0 controls but leaves DEL, C1 controls and
/// layout characters raw. They only occur inside strings, where `\uXXXX` means the same.
pub fn json_for_terminal(line: &str) -> String {
    line.chars()
        .map(|c| if needs_escape(c) && c != '\\' { c.encode_utf16(&mut [0; 2]).iter().map(|u| format!("\\u{u:04x}")).collect() } else { c.to_string() })
        .collect()
}

/// Undoes what a worker may have left set on the terminal before workcell shows something a
/// person decides on: a scrolling region that keeps our lines in a corner (`ESC[r`), the
/// alternate screen (`ESC[?1049l`), attributes such as invisible text (`ESC[0m`), a hidden
/// cursor (`ESC[?25h`), autowrap off (`ESC[?7h`), origin mode (`ESC[?6l`) and a line-drawing
/// character set (`ESC(B`). First of all a string terminator (`ESC \`) and a cancel (`CAN`):
/// an OSC or DCS string the worker opened and never ended would otherwise swallow all of it
/// (a title or a device string instead of the summary), and a half-written sequence would eat
/// its first bytes. Then a separator line, so what follows is visibly workcell's and not a
/// worker's drawing above it. Only for a terminal: pipes and files get none of it.
pub const TERMINAL_RESET: &str = "\x1b\\\x18\x1b[r\x1b[?1049l\x1b[0m\x1b[?25h\x1b[?7h\x1b[?6l\x1b(B";

/// [`TERMINAL_RESET`], then a fresh line and the separator naming workcell and `what`.
pub fn reset_and_separate(what: &str) -> String {
    format!("{TERMINAL_RESET}\r\n──── workcell: {} ────\r\n", escape(what))
}

/// [`TERMINAL_RESET`], then every line of the screen scrolled up into the terminal's
/// history (`rows` high), then the separator: what the worker drew (a fake summary, a fake
/// question) is no longer on the screen beside a question a person answers, and is still
/// in the scrollback to read.
pub fn reset_and_clear(what: &str, rows: u16) -> String {
    format!("{TERMINAL_RESET}\x1b[{rows};1H{}{}", "\r\n".repeat(usize::from(rows)), &reset_and_separate(what)[TERMINAL_RESET.len()..])
}

/// The height of the terminal `fd` is, when it says (a terminal of 0 rows counts as 24).
pub fn rows(fd: impl std::os::fd::AsFd) -> u16 {
    rustix::termios::tcgetwinsize(fd).map(|w| w.ws_row).ok().filter(|r| *r > 0).unwrap_or(24)
}

/// True when standard error is a terminal (where [`reset_and_separate`] belongs).
pub fn stderr_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}

/// What an escaping variant leaves as it is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    Nothing,
    Newlines,
    Backslashes,
}

fn escape_with(s: &str, keep: Keep) -> Cow<'_, str> {
    let rewrite = |c: char| needs_escape(c) && !(keep == Keep::Newlines && c == '\n') && !(keep == Keep::Backslashes && c == '\\');
    if !s.chars().any(rewrite) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !rewrite(c) {
            out.push(c);
            continue;
        }
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{1b}' => out.push_str("\\e"),
            c if (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed() {
        assert!(matches!(escape("/data/report.md"), Cow::Borrowed(_)));
        assert!(matches!(escape("/données/rapport é 文件"), Cow::Borrowed(_)));
    }

    #[test]
    fn control_and_layout_characters_become_visible() {
        assert_eq!(escape("/data/a\u{1b}[2K\rgit status"), "/data/a\\e[2K\\rgit status");
        assert_eq!(escape("a\u{202e}txt.exe"), "a\\u{202e}txt.exe");
        assert_eq!(escape("a\u{7f}\u{85}b"), "a\\x7f\\x85b");
        assert_eq!(escape("a\\eb"), "a\\\\eb");
        assert_eq!(escape_lines("line one\nline\rtwo"), "line one\nline\\rtwo");
    }

    #[test]
    fn a_review_starts_on_a_reset_cleared_terminal() {
        let r = reset_and_clear("review", 3);
        assert!(r.starts_with(TERMINAL_RESET), "{r:?}");
        assert!(r.contains("\x1b[r") && r.contains("\x1b[?6l") && r.contains("\x1b[?1049l"), "{r:?}");
        assert!(r.ends_with("\x1b[3;1H\r\n\r\n\r\n\r\n──── workcell: review ────\r\n"), "{r:?}");
        assert!(!reset_and_separate("a\u{1b}[2J").contains("\u{1b}[2J"), "the label is escaped");
    }

    #[test]
    fn quoted_strings_are_json() {
        for s in ["/a/d, mode: rw} #", "q\"uote\\", "e\u{1b}[2J\u{202e}\u{85}x"] {
            let q = quoted(s);
            assert_eq!(serde_json::from_str::<String>(&q).expect("json"), s, "{q}");
            assert!(!q.chars().any(|c| c.is_control() || is_layout_format(c)), "{q}");
        }
    }
}
