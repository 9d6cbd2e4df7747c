//! Refusals of the sandbox, written for the reader who has to act on them: often an LLM.
//!
//! Every message says what was asked and what *is* allowed. Messages name sandbox paths
//! (`/data/report.md`) and never the host paths behind mount points.

use std::fmt;

/// A list of sandbox paths shown in an error ("Readable paths: /data, /out").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathList(pub Vec<String>);

impl fmt::Display for PathList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&self.0.join(", "))
        }
    }
}

/// Why the sandbox refused an operation. One variant per kind of refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The path is not a sandbox path at all (NUL, `~`, drive letter, host path).
    #[error("Cannot use '{path}': {reason}.\nReadable paths: {readable}")]
    InvalidPath { path: String, reason: String, readable: PathList },

    /// The path resolves outside every readable area (`..`, symlinks, unknown zone).
    #[error("Cannot access '{path}': path is outside the sandbox{detail}.\nReadable paths: {readable}")]
    OutsideSandbox { path: String, detail: String, readable: PathList },

    /// The path is readable but not writable.
    #[error("Cannot write to '{path}': path is read-only.\nWritable paths: {writable}")]
    NotWritable { path: String, writable: PathList },

    /// The file's suffix is not in the mount's suffix list.
    #[error("Cannot access '{path}': suffix not allowed.\nAllowed suffixes: {allowed}")]
    SuffixNotAllowed { path: String, allowed: PathList },

    /// The file (or the content to write) exceeds the mount's `max_file_bytes`.
    #[error("Cannot {op} '{path}': file too large ({size} bytes).\nMaximum allowed: {limit} bytes (the max_file_bytes setting of its zone)")]
    TooLarge { op: &'static str, path: String, size: u64, limit: u64 },

    /// `edit` of a file larger than it holds in memory, in a zone without `max_file_bytes`.
    #[error("Cannot edit '{path}': the file is {size} bytes, more than edit_file changes ({limit} bytes, 16 MiB, where the zone sets no max_file_bytes). Use the shell tool (e.g. sed) to change it; read_file with offset and max_chars reads it in windows.")]
    EditTooLarge { path: String, size: u64, limit: u64 },

    /// A derived sandbox asked for more than its parent has.
    #[error("Cannot create child sandbox with {requested}: {reason}. Child sandboxes may only restrict access.\nParent can read: {parent_readable}\nParent can write: {parent_writable}")]
    Escalation { requested: String, reason: String, parent_readable: PathList, parent_writable: PathList },

    /// A directory granted only for reading does not exist at launch.
    #[error("Cannot grant read access to '{path}': the directory does not exist, and a read-only grant does not create it. Create it before the run, or grant it in allow_write (a written grant is created at launch, owned by the worker's user).")]
    MissingReadOnly { path: String },

    /// Nothing exists at the path.
    #[error("Cannot access '{path}': no such file or directory.{hint}")]
    NotFound { path: String, hint: String },

    /// `edit` needs the old text to occur exactly once.
    #[error("Cannot edit '{path}': the text to replace occurs {count} times; it must occur exactly once. {advice}")]
    EditMismatch { path: String, count: usize, advice: &'static str },

    /// The file is binary or not UTF-8.
    #[error("Cannot read '{path}' as text: it is not a UTF-8 text file ({detail}). Read it with encoding \"base64\" to get its bytes.")]
    NotText { path: String, detail: String },

    /// The operation needs a file but found a directory (or the reverse).
    #[error("Cannot {op} '{path}': it is a {found}, not a {expected}.")]
    WrongKind { op: &'static str, path: String, found: &'static str, expected: &'static str },

    /// A `list` pattern that could leave the listed directory.
    #[error("Cannot list with pattern '{pattern}': {reason}. Patterns are relative globs such as '*.md' or '**/*.txt'.")]
    InvalidPattern { pattern: String, reason: String },

    /// The operating system refused the worker's user (owner, mode, the directory's write
    /// permission), as it would refuse the worker's own commands.
    #[error("Cannot {op} '{path}': permission denied: the operating system refuses this to {who}, as it would to the worker's own commands (the file's or its directory's owner and mode decide). If the worker needs it, its owner changes the mode or gives it to the worker's user (chown).")]
    PermissionDenied { op: &'static str, path: String, who: String },

    /// The operating system refused or failed; the message names the sandbox path only.
    #[error("Cannot {op} '{path}': {message}")]
    Io { op: &'static str, path: String, message: String },
    /// A zone's host directory is a system directory or holds a container engine socket
    /// (for the person configuring: it names host paths).
    #[error("{0}")]
    UnsafeZone(#[from] super::hostdir::UnsafeZone),
    /// The path is one of the project's control files, which no worker may change.
    #[error("Cannot change '{path}': it is part of the project's own configuration (workcell.yaml, workers/, .workcell/ or a build: folder), which workers may not change.")]
    Protected { path: String },
    /// The path is a file the host runs (`crate::hostrun`): git hooks and config, direnv's
    /// `.envrc`, editor and shell settings. `physical` is where it really is in its zone
    /// (whatever name was asked), `entry` the protected entry that covers it, `zone` where a
    /// person turns it off (`zone NAME`, or `the root: entry`).
    #[error(
        "Cannot {op} '{path}': it is '{physical}' in {zone}, protected by the entry '{entry}'. Files like it are run by the person's own tools on the host, outside the sandbox (git runs hooks and config, direnv runs .envrc, editors run their task files, shells their start-up files), so workers may not write or delete them; reading them is allowed. Only the person can allow it: `unprotect: ['{entry}']` on {zone} in workcell.yaml (their choice, not the worker's)."
    )]
    HostRuns { op: &'static str, path: String, physical: String, entry: String, zone: String },
    /// The write would add the piece (`HEAD`, `objects`, `commondir`) that makes a plain
    /// directory a git directory while it holds what git runs (`sandbox::gitmaker`).
    #[error(
        "Cannot {} '{}': it would make '{}' a git repository (its '{}' with what is there already), whose '{}' the person's own git then reads and runs on the host, outside the sandbox (a `git status` there runs its config's commands, a `git commit` its hooks); files like it in a git directory are protected by the entry '{}'. Workers may not assemble a repository around a config or hooks: keep these files in a directory git does not take for a repository, or leave out the config and hooks. Only the person can allow it: `unprotect: ['{}']` on {} in workcell.yaml (their choice, not the worker's).",
        .0.op, .0.path, .0.dir, .0.piece, .0.inside, .0.entry, .0.entry, .0.zone
    )]
    CompletesGitDir(Box<GitPiece>),
}

/// A refused piece of a git directory ([`SandboxError::CompletesGitDir`]): `path` as asked,
/// `dir` the directory it would make a repository, `piece` what it adds there (`HEAD`,
/// `objects`, `commondir`), `inside` what git would then run from it (`config`, `hooks`, …),
/// `entry` the protected entry that covers that, `zone` where a person turns it off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitPiece {
    pub op: &'static str,
    pub path: String,
    pub dir: String,
    pub piece: &'static str,
    pub inside: &'static str,
    pub entry: String,
    pub zone: String,
}

impl SandboxError {
    /// A stable, machine-readable name of the refusal kind.
    pub fn kind(&self) -> &'static str {
        match self {
            SandboxError::InvalidPath { .. } => "invalid_path",
            SandboxError::OutsideSandbox { .. } => "outside_sandbox",
            SandboxError::NotWritable { .. } => "not_writable",
            SandboxError::SuffixNotAllowed { .. } => "suffix_not_allowed",
            SandboxError::TooLarge { .. } | SandboxError::EditTooLarge { .. } => "too_large",
            SandboxError::Escalation { .. } => "permission_escalation",
            SandboxError::NotFound { .. } | SandboxError::MissingReadOnly { .. } => "not_found",
            SandboxError::EditMismatch { .. } => "edit_mismatch",
            SandboxError::NotText { .. } => "not_text",
            SandboxError::WrongKind { .. } => "wrong_kind",
            SandboxError::InvalidPattern { .. } => "invalid_pattern",
            SandboxError::Io { .. } => "io",
            SandboxError::PermissionDenied { .. } => "permission_denied",
            SandboxError::Protected { .. } => "not_writable",
            SandboxError::UnsafeZone(_) => "unsafe_zone",
            SandboxError::HostRuns { .. } | SandboxError::CompletesGitDir(_) => "protected",
        }
    }
}

/// A path as shown in a message: control characters escaped (so a path cannot forge extra
/// lines such as a fake "Readable paths:"), everything else as given — notably backslashes,
/// which `escape_debug` would double (`C:\x` must read `C:\x`).
pub(crate) fn show(path: &str) -> String {
    crate::term::escape_quoted(path).into_owned()
}
