//! The shell tool's `cwd`, `env` and `stdin` arguments, checked before the command is judged.

use std::collections::BTreeMap;

use crate::sandbox::{FileKind, Sandbox};

/// Largest `stdin` text (1 MiB).
pub const MAX_STDIN: usize = 1 << 20;

/// Why an argument of a shell call is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    #[error("cwd '{dir}' cannot be used: {why}; give a directory inside a zone (or /tmp)")]
    Cwd { dir: String, why: String },
    #[error("env name '{0}' is not a variable name; names are letters, digits and '_', not starting with a digit")]
    EnvName(String),
    #[error("env variable '{0}' may not be set: {1}")]
    EnvReserved(String, &'static str),
    #[error("env variable '{name}' holds the control character U+{:04X}; values may hold printable characters, spaces and tabs only", *.c as u32)]
    EnvControl { name: String, c: char },
    #[error("stdin is {0} bytes; it may hold at most {MAX_STDIN} bytes (write larger input to a file in a zone and redirect it)")]
    StdinTooLarge(usize),
}

/// The directory a call names, checked to be a directory in the sandbox: a sandbox path, or
/// one relative to the default working directory. `/tmp` is every sandbox's own.
pub fn cwd(dir: &str, default_dir: &str, sb: &Sandbox) -> Result<String, ArgsError> {
    let full = if dir.starts_with('/') { dir.to_string() } else { format!("{}/{dir}", default_dir.trim_end_matches('/')) };
    let fail = |why: String| ArgsError::Cwd { dir: dir.to_string(), why };
    if super::super::shell::check_control_characters(dir).is_err() || dir.contains('\n') {
        return Err(fail("it holds control characters".into()));
    }
    if full == "/tmp" {
        return Ok(full);
    }
    let followed = sb.follow_command_path(&full).map_err(|e| fail(e.to_string()))?;
    let shown = sb.display(&followed.path);
    match sb.stat(&shown) {
        Ok(st) if st.kind == FileKind::Directory => Ok(full),
        Ok(_) => Err(fail("it is not a directory".into())),
        Err(e) => Err(fail(e.to_string())),
    }
}

/// Variables that change what runs (the loader's, the shell's start-up files, git's, which
/// `git_guard` sets) or belong to workcell.
fn reserved(name: &str) -> Option<&'static str> {
    if name.starts_with("LD_") {
        return Some("the loader reads it (it could load any code into any program)");
    }
    if name.starts_with("WORKCELL_") {
        return Some("names starting with WORKCELL_ are workcell's own");
    }
    if name.starts_with("GIT_") {
        return Some("git's variables are set by workcell to keep git from running the repository's programs");
    }
    if crate::tools::shell::script::dangerous_name(name) || name == "PATH" || name == "IFS" {
        return Some("the shell reads it as code or to find programs");
    }
    None
}

/// The call's variables, checked: valid names, none reserved, no control characters.
pub fn env(vars: &BTreeMap<String, String>) -> Result<Vec<(String, String)>, ArgsError> {
    let mut out = Vec::with_capacity(vars.len());
    for (name, value) in vars {
        let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_') && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(ArgsError::EnvName(name.chars().take(64).collect()));
        }
        if let Some(why) = reserved(name) {
            return Err(ArgsError::EnvReserved(name.clone(), why));
        }
        if let Some(c) = value.chars().find(|&c| c != '\t' && (c.is_ascii_control() || ('\u{80}'..='\u{9f}').contains(&c))) {
            return Err(ArgsError::EnvControl { name: name.clone(), c });
        }
        out.push((name.clone(), value.clone()));
    }
    Ok(out)
}

/// The call's standard input, at most [`MAX_STDIN`] bytes.
pub fn stdin(text: Option<&str>) -> Result<Vec<u8>, ArgsError> {
    let bytes = text.unwrap_or_default().as_bytes();
    if bytes.len() > MAX_STDIN {
        return Err(ArgsError::StdinTooLarge(bytes.len()));
    }
    Ok(bytes.to_vec())
}
