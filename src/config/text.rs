//! Text from the configuration that is later shown to a person (paths, mount points, worker
//! names, descriptions, in prompts, plans and the audit log) or handed to workers in
//! `WORKCELL_ZONES`: control characters are refused when the file is read, with the
//! character named, so that no value can redraw a prompt (an escape sequence), forge a line
//! (a newline), or read differently than it runs (a bidirectional override).

/// The first character of `s` that may not appear in configuration text, if any.
pub fn forbidden_char(s: &str) -> Option<char> {
    s.chars().find(|&c| c.is_control() || is_bidi_control(c))
}

/// Unicode's invisible direction controls (the "Trojan Source" characters).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `U+001B (escape)`: the code point and, for the common ones, its name.
pub fn describe(c: char) -> String {
    let name = match c {
        '\0' => "NUL",
        '\u{7}' => "bell",
        '\u{8}' => "backspace",
        '\t' => "tab",
        '\n' => "newline",
        '\u{b}' => "vertical tab",
        '\u{c}' => "form feed",
        '\r' => "carriage return",
        '\u{1b}' => "escape",
        '\u{7f}' => "delete",
        '\u{9b}' => "control sequence introducer",
        c if is_bidi_control(c) => "a bidirectional text control",
        _ => "a control character",
    };
    format!("U+{:04X} ({name})", c as u32)
}

/// A value of the configuration holds a character it may not; `what` names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error(
        "{what} contains the control character {}; control characters are not allowed here (they could disguise what a prompt or a plan shows)",
        describe(*.found)
    )]
    Control { what: String, found: char },
    /// In prose (a description), where newlines and tabs are fine.
    #[error("{what} contains the control character {}; only newlines and tabs are allowed in it", describe(*.found))]
    ProseControl { what: String, found: char },
}

/// Refuses `s` when it holds a control character: "`what` contains the control character
/// U+001B (escape); ...".
pub fn check_printable(what: &str, s: &str) -> Result<(), TextError> {
    match forbidden_char(s) {
        None => Ok(()),
        Some(found) => Err(TextError::Control { what: what.into(), found }),
    }
}

/// Like [`check_printable`] for multi-line prose (`description`): newlines and tabs are
/// fine there, other controls are not.
pub fn check_prose(what: &str, s: &str) -> Result<(), TextError> {
    match s.chars().find(|&c| c != '\n' && c != '\t' && (c.is_control() || is_bidi_control(c))) {
        None => Ok(()),
        Some(found) => Err(TextError::ProseControl { what: what.into(), found }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(describe('\u{1b}'), "U+001B (escape)");
        assert_eq!(describe('\n'), "U+000A (newline)");
        assert_eq!(describe('\u{202e}'), "U+202E (a bidirectional text control)");
        assert!(check_printable("x", "/data/a b-é").is_ok());
        let err = check_printable("x", "a\u{1b}[2Jb").unwrap_err();
        assert_eq!(err, TextError::Control { what: "x".into(), found: '\u{1b}' });
        assert!(err.to_string().contains("U+001B (escape)"), "{err}");
        assert!(check_prose("d", "line\n\tmore").is_ok());
        assert!(check_prose("d", "a\rb").is_err());
    }
}
