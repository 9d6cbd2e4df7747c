//! Property tests for what reaches a person's terminal: whatever path or command line a
//! worker chooses, the approval prompt carries no control or layout character of its, and
//! two different requests never look the same.

use proptest::prelude::*;
use workcell::term::{escape, escape_lines};
use workcell::tools::approval::{prompt_text, Action, ApprovalRequest};

/// Characters a terminal acts on or that reorder text, defined here independently of the
/// code under test.
fn dangerous(c: char) -> bool {
    let u = c as u32;
    u < 0x20 || (0x7f..=0x9f).contains(&u) || (0x200b..=0x200f).contains(&u) || (0x2028..=0x202e).contains(&u) || (0x2060..=0x2069).contains(&u) || u == 0xfeff
}

/// Hostile text: any characters, weighted towards escapes, CSI, carriage returns, bidi
/// overrides and backslashes (to try forging an escape).
fn hostile() -> impl Strategy<Value = String> {
    let special = prop::sample::select(vec![
        '\u{1b}', '\r', '\n', '\t', '\u{7}', '\u{8}', '\u{7f}', '\u{9b}', '\u{85}', '\u{202e}', '\u{2066}', '\u{200b}', '\u{feff}', '\\', 'e', 'x', 'u', '{',
        '}', '[', '/',
    ]);
    prop::collection::vec(prop_oneof![3 => special, 2 => any::<char>()], 0..48).prop_map(|v| v.into_iter().collect())
}

/// Reverses [`escape`]; `None` when the text is not something escape could have produced.
fn unescape(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next()? {
            '\\' => out.push('\\'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'e' => out.push('\u{1b}'),
            'x' => {
                let hex: String = [it.next()?, it.next()?].iter().collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
            }
            'u' => {
                if it.next()? != '{' {
                    return None;
                }
                let hex: String = it.by_ref().take_while(|&c| c != '}').collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
            }
            _ => return None,
        }
    }
    Some(out)
}

fn action() -> impl Strategy<Value = Action> {
    prop::sample::select(vec![Action::Read, Action::Write, Action::Delete, Action::Shell, Action::Delegate, Action::Expand])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_prompt_carries_no_control_character(action in action(), subject in hostile(), scope in hostile()) {
        let text = prompt_text(&ApprovalRequest::new(action, subject.clone(), scope.clone()));
        prop_assert!(!text.chars().any(dangerous), "{text:?}");
        // The person sees exactly what is asked for, in a form that maps back to it.
        prop_assert!(text.contains(&*escape(&subject)));
        let covers = format!("covers {})", escape(&scope));
        prop_assert!(text.contains(&covers));
    }

    #[test]
    fn file_prompts_are_safe_too(action in action(), path in hostile()) {
        let text = prompt_text(&ApprovalRequest::file(action, &path));
        prop_assert!(!text.chars().any(dangerous), "{text:?}");
    }

    #[test]
    fn escaping_is_reversible(s in hostile()) {
        let shown = escape(&s);
        prop_assert!(!shown.chars().any(dangerous));
        prop_assert_eq!(unescape(&shown), Some(s));
    }

    #[test]
    fn multi_line_messages_keep_only_newlines(s in hostile()) {
        let shown = escape_lines(&s);
        prop_assert!(!shown.chars().any(|c| dangerous(c) && c != '\n'));
        prop_assert_eq!(shown.matches('\n').count(), s.matches('\n').count());
    }
}
