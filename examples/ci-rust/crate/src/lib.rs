//! A tiny crate for the CI recipe: counting words.

/// The number of whitespace-separated words in `text`.
pub fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// The longest word of `text`, the first one on a tie.
pub fn longest(text: &str) -> Option<&str> {
    text.split_whitespace().fold(None, |best: Option<&str>, w| match best {
        Some(b) if b.len() >= w.len() => Some(b),
        _ => Some(w),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_words() {
        assert_eq!(words("one two  three\nfour"), 4);
        assert_eq!(words(""), 0);
    }

    #[test]
    fn finds_the_longest() {
        assert_eq!(longest("a bbb cc ddd"), Some("bbb"));
        assert_eq!(longest("   "), None);
    }
}
