//! The words of a parsed command line: the literal text a word stands for (when the shell
//! would not expand it), and the commands hidden in its expansions (`$(…)`, backticks,
//! `${x:-$(…)}`), which are walked like the rest of the script.

use brush_parser::word::{self, ParameterExpr as P, WordPiece, WordPieceWithSource};

use super::script::{options, Cwd, Walker};

/// Characters arithmetic may hold without reading a variable: bash evaluates a variable's
/// value as arithmetic again, and `a[$(cmd)]` there runs `cmd`.
fn arithmetic_is_constant(expr: &str) -> bool {
    expr.chars().all(|c| c.is_ascii_digit() || c.is_ascii_whitespace() || "+-*/%<>=!&|^~?:(),".contains(c))
}

/// True when unquoted `text` is a pattern (`*`, `?`, `[…]`) or a brace expansion (`{a,b}`,
/// `{1..3}`), which the shell replaces by other words.
fn expands(text: &str) -> bool {
    let bracket = text.find('[').is_some_and(|i| text[i + 1..].contains(']'));
    let brace = text.find('{').is_some_and(|i| text[i..].find('}').is_some_and(|j| text[i..i + j].contains(',') || text[i..i + j].contains("..")));
    text.contains(['*', '?']) || bracket || brace
}

/// The text of an escape sequence (`\x`): outside double quotes the character; inside them
/// only `\$`, `` \` ``, `\"`, `\\` and a newline lose their backslash.
fn unescape(seq: &str, quoted: bool) -> String {
    let rest = seq.strip_prefix('\\').unwrap_or(seq);
    if rest == "\n" {
        return String::new();
    }
    if !quoted || rest.starts_with(['$', '`', '"', '\\']) {
        rest.to_string()
    } else {
        seq.to_string()
    }
}

/// The inside of a backquoted substitution as the shell parses it: `\\`, `` \` `` and `\$`
/// lose their backslash.
fn unbackquote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek().is_some_and(|n| matches!(n, '\\' | '`' | '$')) {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

impl Walker {
    /// Walks the expansions of `w` (source text); returns its literal text when the shell
    /// would not change it.
    pub(super) fn word(&mut self, w: &str, cwd: &Cwd) -> Option<String> {
        match word::parse(w, &options()) {
            Ok(pieces) => self.pieces(&pieces, false, cwd),
            Err(e) => {
                self.opaque(format!("the word '{w}' cannot be parsed ({e})"));
                None
            }
        }
    }

    pub(super) fn pieces(&mut self, pieces: &[WordPieceWithSource], quoted: bool, cwd: &Cwd) -> Option<String> {
        let mut literal = Some(String::new());
        for p in pieces {
            self.posix_piece(&p.piece, quoted);
            let part = match &p.piece {
                WordPiece::Text(t) => (quoted || !expands(t)).then(|| t.clone()),
                WordPiece::SingleQuotedText(t) => Some(t.clone()),
                // `$'…'`: escapes a plain sh may not read the same way.
                WordPiece::AnsiCQuotedText(_) | WordPiece::TildeExpansion(_) => None,
                WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => self.pieces(inner, true, cwd),
                WordPiece::ParameterExpansion(e) => {
                    self.parameter(e, cwd);
                    None
                }
                WordPiece::CommandSubstitution(s) => {
                    self.nested(s, cwd, "the command substitution");
                    None
                }
                WordPiece::BackquotedCommandSubstitution(s) => {
                    self.nested(&unbackquote(s), cwd, "the backquoted command");
                    None
                }
                WordPiece::EscapeSequence(s) => Some(unescape(s, quoted)),
                WordPiece::ArithmeticExpression(e) => {
                    self.arithmetic(&e.value);
                    None
                }
            };
            literal = match (literal, part) {
                (Some(mut a), Some(b)) => {
                    a.push_str(&b);
                    Some(a)
                }
                _ => None,
            };
        }
        literal
    }

    pub(super) fn arithmetic(&mut self, expr: &str) {
        if !arithmetic_is_constant(expr) {
            self.opaque(format!(
                "the arithmetic '{expr}' reads variables or expansions, whose values bash evaluates as arithmetic again (which can run commands)"
            ));
        }
    }

    fn parameter(&mut self, e: &P, cwd: &Cwd) {
        use word::Parameter as Param;
        let (parameter, indirect) = match e {
            P::Parameter { parameter, indirect }
            | P::UseDefaultValues { parameter, indirect, .. }
            | P::AssignDefaultValues { parameter, indirect, .. }
            | P::IndicateErrorIfNullOrUnset { parameter, indirect, .. }
            | P::UseAlternativeValue { parameter, indirect, .. }
            | P::ParameterLength { parameter, indirect }
            | P::RemoveSmallestSuffixPattern { parameter, indirect, .. }
            | P::RemoveLargestSuffixPattern { parameter, indirect, .. }
            | P::RemoveSmallestPrefixPattern { parameter, indirect, .. }
            | P::RemoveLargestPrefixPattern { parameter, indirect, .. }
            | P::Substring { parameter, indirect, .. }
            | P::Transform { parameter, indirect, .. }
            | P::UppercaseFirstChar { parameter, indirect, .. }
            | P::UppercasePattern { parameter, indirect, .. }
            | P::LowercaseFirstChar { parameter, indirect, .. }
            | P::LowercasePattern { parameter, indirect, .. }
            | P::ReplaceSubstring { parameter, indirect, .. } => (parameter, *indirect),
            P::VariableNames { .. } | P::MemberKeys { .. } => return,
        };
        if indirect {
            self.opaque(format!("the indirect expansion '${{!{parameter}}}' reads a variable named by a value (bash evaluates a subscript in it)"));
        }
        if let Param::NamedWithIndex { index, .. } = parameter {
            if index != "@" && index != "*" {
                self.arithmetic(index);
            }
        }
        let texts: Vec<&String> = match e {
            P::UseDefaultValues { default_value: v, .. } | P::AssignDefaultValues { default_value: v, .. } => v.iter().collect(),
            P::IndicateErrorIfNullOrUnset { error_message: v, .. } | P::UseAlternativeValue { alternative_value: v, .. } => v.iter().collect(),
            P::RemoveSmallestSuffixPattern { pattern: v, .. }
            | P::RemoveLargestSuffixPattern { pattern: v, .. }
            | P::RemoveSmallestPrefixPattern { pattern: v, .. }
            | P::RemoveLargestPrefixPattern { pattern: v, .. }
            | P::UppercaseFirstChar { pattern: v, .. }
            | P::UppercasePattern { pattern: v, .. }
            | P::LowercaseFirstChar { pattern: v, .. }
            | P::LowercasePattern { pattern: v, .. } => v.iter().collect(),
            P::ReplaceSubstring { pattern, replacement, .. } => std::iter::once(pattern).chain(replacement.iter()).collect(),
            _ => Vec::new(),
        };
        for t in texts {
            self.word(t, cwd);
        }
        if let P::AssignDefaultValues { parameter: Param::Named(n), .. } = e {
            let n = n.clone();
            self.out.assigns.push(format!("'${{{n}:=…}}' sets {n}"));
            if super::script::dangerous_name(&n) {
                self.opaque(format!("'${{{n}:=…}}' sets {n}, which the shell or the loader reads as code"));
            }
        }
        if let P::Substring { offset, length, .. } = e {
            self.arithmetic(&offset.value);
            if let Some(l) = length {
                self.arithmetic(&l.value);
            }
        }
        if let P::Transform { op: word::ParameterTransformOp::PromptExpand, .. } = e {
            self.opaque(format!("'${{{parameter}@P}}' expands a value as a prompt, which runs the commands in it"));
        }
    }
}
