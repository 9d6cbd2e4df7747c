//! A small reader for SBPL, the s-expression language of Seatbelt profiles: enough to look at
//! a rendered profile as rules (`(allow OPERATION... FILTER...)`) instead of as text, so that
//! checks on it ([`super::audit`]) cannot be fooled by spacing, line breaks or comments.

/// One expression of a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sexp {
    /// A symbol or number: `allow`, `file-read*`, `1`.
    Atom(String),
    /// A string, `"..."`, unescaped.
    Str(String),
    /// A regular expression literal, `#"..."`.
    Regex(String),
    /// `( ... )`.
    List(Vec<Sexp>),
}

impl Sexp {
    /// The symbol, if this is one.
    pub fn atom(&self) -> Option<&str> {
        match self {
            Sexp::Atom(a) => Some(a),
            _ => None,
        }
    }

    /// The items of a list whose head is the symbol `head`.
    pub fn form(&self, head: &str) -> Option<&[Sexp]> {
        match self {
            Sexp::List(items) if items.first().and_then(Sexp::atom) == Some(head) => Some(&items[1..]),
            _ => None,
        }
    }
}

/// Why a profile could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SexpError {
    #[error("unbalanced ')' at byte {0}")]
    UnexpectedClose(usize),
    #[error("'(' at byte {0} is never closed")]
    Unclosed(usize),
    #[error("string starting at byte {0} is never closed")]
    UnclosedString(usize),
}

/// Reads every top-level expression of `text`. `;` starts a comment to the end of the line.
pub fn parse(text: &str) -> Result<Vec<Sexp>, SexpError> {
    let bytes = text.as_bytes();
    let mut stack: Vec<(usize, Vec<Sexp>)> = vec![(0, Vec::new())];
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b';' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' => {
                stack.push((i, Vec::new()));
                i += 1;
            }
            b')' => {
                if stack.len() == 1 {
                    return Err(SexpError::UnexpectedClose(i));
                }
                let (_, items) = stack.pop().unwrap_or_default();
                if let Some((_, parent)) = stack.last_mut() {
                    parent.push(Sexp::List(items));
                }
                i += 1;
            }
            b'"' => {
                let (s, next) = string(text, i + 1).ok_or(SexpError::UnclosedString(i))?;
                push(&mut stack, Sexp::Str(s));
                i = next;
            }
            b'#' if bytes.get(i + 1) == Some(&b'"') => {
                let (s, next) = string(text, i + 2).ok_or(SexpError::UnclosedString(i))?;
                push(&mut stack, Sexp::Regex(s));
                i = next;
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                let start = i;
                while i < bytes.len() && !bytes[i].is_ascii_whitespace() && !matches!(bytes[i], b'(' | b')' | b'"' | b';') {
                    i += 1;
                }
                push(&mut stack, Sexp::Atom(text[start..i].to_string()));
            }
        }
    }
    match stack.len() {
        1 => Ok(stack.pop().map(|(_, items)| items).unwrap_or_default()),
        _ => Err(SexpError::Unclosed(stack.last().map(|(at, _)| *at).unwrap_or(0))),
    }
}

fn push(stack: &mut [(usize, Vec<Sexp>)], e: Sexp) {
    if let Some((_, items)) = stack.last_mut() {
        items.push(e);
    }
}

/// The string body starting at byte `from` (after the quote), with `\x` unescaped; and the
/// byte after the closing quote.
fn string(text: &str, from: usize) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut chars = text[from..].char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Some((out, from + at + 1)),
            '\\' => out.push(chars.next()?.1),
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_forms_strings_regexes_and_comments() {
        let got = parse("(version 1) ; a comment (allow default)\n(allow file-read* (regex #\"^/dev/ttys[0-9]+$\") (literal \"/a \\\"b\\\"\"))").unwrap();
        assert_eq!(got.len(), 2);
        let allow = got[1].form("allow").unwrap();
        assert_eq!(allow[0], Sexp::Atom("file-read*".into()));
        assert_eq!(allow[1], Sexp::List(vec![Sexp::Atom("regex".into()), Sexp::Regex("^/dev/ttys[0-9]+$".into())]));
        assert_eq!(allow[2], Sexp::List(vec![Sexp::Atom("literal".into()), Sexp::Str("/a \"b\"".into())]));
    }

    #[test]
    fn refuses_unbalanced_text() {
        assert_eq!(parse("(allow"), Err(SexpError::Unclosed(0)));
        assert_eq!(parse("())"), Err(SexpError::UnexpectedClose(2)));
        assert_eq!(parse("(literal \"x)"), Err(SexpError::UnclosedString(9)));
    }
}
