//! The commands of a fenced block in the docs, as `tests/docs.rs` and `tests/as_root.rs` run
//! them (docs/development.md, "Commands in the docs").

/// The commands of a block's `body`: in a `console` block its `$ ` lines, else every line that
/// is not blank or a comment; a line ending in `\` continues on the next.
pub fn command_lines(body: &[String], console: bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut continued = false;
    for raw in body {
        let line = raw.trim();
        let line = if continued {
            line
        } else if console {
            match line.strip_prefix("$ ") {
                Some(cmd) => cmd,
                None => continue,
            }
        } else if line.is_empty() || line.starts_with('#') {
            continue;
        } else {
            line
        };
        match out.last_mut() {
            Some(last) if continued => last.push_str(&format!(" {}", line.trim_end_matches('\\'))),
            _ => out.push(line.trim_end_matches('\\').to_string()),
        }
        continued = line.ends_with('\\');
    }
    out
}

/// The status a line must exit with: its trailing `# exit N` comment, else 0.
pub fn expected_status(line: &str) -> i32 {
    line.rsplit_once("# exit ").and_then(|(_, n)| n.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()).unwrap_or(0)
}
