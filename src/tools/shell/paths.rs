//! `sandbox_paths` of a shell rule: every word after the pattern that could name a file is
//! taken as one, relative to the command's working directory, walked as the kernel would walk
//! it (symlinks read beneath the zones' handles), and must land inside an allowed prefix.

use crate::sandbox::{FollowError, Sandbox, VirtualPath};

/// Longest option word whose attached value is checked position by position.
const MAX_OPTION_WORD: usize = 256;

/// Why the words of a command do not pass its rule's `sandbox_paths`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathsError {
    /// `0` is the option's first 32 characters.
    #[error("the option '{0}…' is too long to check against sandbox_paths")]
    OptionTooLong(String),
    #[error(
        "the argument '{arg}' is outside the paths this command may use: {}{detail}. Every word after the pattern is checked as a path (relative ones from the working directory {workdir})",
        allowed.join(", ")
    )]
    Outside { arg: String, allowed: Vec<String>, workdir: String, detail: OutsideDetail },
}

/// What more is known about an argument outside the allowed paths.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutsideDetail {
    /// The path could not be walked (a loop, a link out of the zones…).
    #[error(" ({0})")]
    Unfollowable(#[source] FollowError),
    /// A symlink leads it to the sandbox path shown.
    #[error(" (it leads to {0})")]
    LeadsTo(String),
    #[error("")]
    None,
}

/// The texts of `args` that may name files: non-options (everything after `--`), the value
/// of `--opt=value`, for a short option with attached text (`-o/path`, `-xo../p`) every
/// tail from its third character on, since which letters take a value is the program's, and
/// in all of these the text after each `=` (`if=/path`).
pub fn path_candidates(args: &[String]) -> Result<Vec<String>, PathsError> {
    let mut out = Vec::new();
    let mut options_done = false;
    for a in args {
        if options_done || !a.starts_with('-') || a == "-" {
            out.push(a.clone());
        } else if a == "--" {
            options_done = true;
        } else if let Some(long) = a.strip_prefix("--") {
            if let Some((_, value)) = long.split_once('=') {
                out.push(value.to_string());
            }
        } else if a.len() > 2 {
            if a.len() > MAX_OPTION_WORD {
                return Err(PathsError::OptionTooLong(a.chars().take(32).collect()));
            }
            out.extend(a.char_indices().skip(2).map(|(i, _)| a[i..].to_string()));
        }
    }
    // `NAME=VALUE` words name files after the `=` (`dd if=/x of=/y`): every text after an
    // `=` is a candidate too.
    let values: Vec<String> = out.iter().flat_map(|c| c.match_indices('=').map(move |(i, _)| c[i + 1..].to_string())).collect();
    out.extend(values);
    Ok(out)
}

/// Checks every candidate of `args` (the words after the rule's pattern) against `allowed`.
pub fn check(args: &[String], allowed: &[String], sandbox: &Sandbox, workdir: &str) -> Result<(), PathsError> {
    let prefixes: Vec<VirtualPath> = allowed.iter().filter_map(|p| sandbox.parse_for_compare(p).ok()).collect();
    let outside = |arg: &str, detail| PathsError::Outside { arg: arg.into(), allowed: allowed.to_vec(), workdir: workdir.into(), detail };
    for c in path_candidates(args)? {
        // `-` is standard input or output, not a file.
        if c == "-" {
            continue;
        }
        let full = if c.starts_with('/') { c.clone() } else { format!("{}/{c}", workdir.trim_end_matches('/')) };
        let followed = sandbox.follow_command_path(&full).map_err(|e| outside(&c, OutsideDetail::Unfollowable(e)))?;
        let vp = followed.path;
        if !prefixes.iter().any(|p| p.mount == vp.mount && vp.rel.starts_with(&p.rel)) {
            let shown = sandbox.display(&vp);
            let detail = if shown != c { OutsideDetail::LeadsTo(shown) } else { OutsideDetail::None };
            return Err(outside(&c, detail));
        }
    }
    Ok(())
}
