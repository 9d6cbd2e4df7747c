//! Names in a worker's archive: only plain relative names inside the zone pass.

/// Longest name of one path component (Linux's `NAME_MAX`).
pub const MAX_COMPONENT: usize = 255;
/// Longest whole name.
pub const MAX_PATH: usize = 4096;
/// Deepest nesting.
pub const MAX_DEPTH: usize = 64;

/// The components of `raw`, a name from the archive, or why it is refused. One trailing `/`
/// (how tar marks directories) is allowed; everything else must already be normal: no
/// leading `/`, no empty, `.` or `..` component, valid UTF-8 without control characters.
pub fn components(raw: &[u8]) -> Result<Vec<String>, &'static str> {
    let raw = raw.strip_suffix(b"/").unwrap_or(raw);
    if raw.is_empty() {
        return Err("empty");
    }
    if raw.len() > MAX_PATH {
        return Err("longer than 4096 bytes");
    }
    if raw[0] == b'/' {
        return Err("absolute");
    }
    let text = std::str::from_utf8(raw).map_err(|_| "not UTF-8")?;
    if text.chars().any(|c| c.is_control()) {
        return Err("control character");
    }
    // Bidirectional overrides and zero-width characters make a name read as another one.
    if text.chars().any(|c| c != '\\' && crate::term::needs_escape(c)) {
        return Err("a format character (bidirectional control, zero-width or line separator)");
    }
    let mut out = Vec::new();
    for part in text.split('/') {
        match part {
            "" => return Err("empty component (// or trailing /)"),
            "." => return Err("'.' component"),
            ".." => return Err("'..' component"),
            p if p.len() > MAX_COMPONENT => return Err("a component longer than 255 bytes"),
            p => out.push(p.to_string()),
        }
    }
    if out.len() > MAX_DEPTH {
        return Err("nested deeper than 64 directories");
    }
    Ok(out)
}

/// True when `file`'s name ends with one of `suffixes` (compared in lowercase).
pub fn suffix_allowed(file: &str, suffixes: &[String]) -> bool {
    let lower = file.to_lowercase();
    suffixes.iter().any(|s| lower.len() > s.len() && lower.ends_with(s.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_pass() {
        assert_eq!(components(b"a/b.md").unwrap(), ["a", "b.md"]);
        assert_eq!(components(b"dir/").unwrap(), ["dir"]);
    }

    #[test]
    fn escapes_and_oddities_are_refused() {
        for bad in [
            &b"/etc/passwd"[..],
            b"../x",
            b"a/../../x",
            b"./a",
            b"a//b",
            b"a/./b",
            b"",
            b"/",
            b"a\nb",
            "txt\u{202e}exe.md".as_bytes(),
            "a\u{200b}b".as_bytes(),
            b"a\0b",
            b"\xff",
            b"a//",
        ] {
            assert!(components(bad).is_err(), "{bad:?}");
        }
        assert!(components(&[b'a'; 256]).is_err());
        assert!(components("a/".repeat(65).as_bytes()).is_err());
    }

    #[test]
    fn suffixes_compare_in_lowercase() {
        let s = vec![".md".to_string()];
        assert!(suffix_allowed("A.MD", &s));
        assert!(!suffix_allowed("a.exe", &s));
        assert!(!suffix_allowed(".md", &s));
    }
}
