//! `delivery: copy`: a zone the worker sees as a private copy taken when the run starts, and
//! whose changes reach the host only after they are checked.
//!
//! The flow: [`baseline::copy_in`] copies the zone (beneath its held handle) into a private
//! directory and records what each file was; the worker runs on the copy; after a normal
//! exit [`walk::archive`] streams the copy as a tar archive into [`collect::collect_tar`],
//! which refuses everything that is not a plain file or directory with a clean name inside
//! the zone's policy and stages what passes; [`publish::diff`] compares that with the
//! baseline and the host as it is now; [`publish::publish`] writes the result beneath the
//! zone's handle, one temporary file and rename per file. The checker only ever sees a tar
//! stream, so the proptest of hostile archives drives the very code a run uses.

pub mod baseline;
pub mod collect;
pub mod name;
pub mod publish;
pub mod walk;

use serde::Serialize;

/// Entries a worker may leave in one copy-delivered zone.
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// Bytes a worker may leave in one copy-delivered zone (all files together).
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 4 << 30;

/// What the checker enforces on a worker's tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Allowed suffixes (lowercase, with dot); `None` allows every suffix.
    pub suffixes: Option<Vec<String>>,
    /// Largest single file; larger ones are refused.
    pub max_file_bytes: Option<u64>,
    /// More entries than this and nothing is delivered.
    pub max_entries: u64,
    /// More bytes than this (accepted files together) and nothing is delivered.
    pub max_total_bytes: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { suffixes: None, max_file_bytes: None, max_entries: DEFAULT_MAX_ENTRIES, max_total_bytes: DEFAULT_MAX_TOTAL_BYTES }
    }
}

/// Why one entry of the worker's tree is not published.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Reason {
    /// The name is absolute, has `..`, `.`, empty or overlong parts, or control characters.
    BadName {
        detail: &'static str,
    },
    Symlink,
    HardLink,
    Device,
    Fifo,
    /// A socket, a sparse file or an entry type tar has no plain meaning for.
    Special,
    Suffix {
        allowed: Vec<String>,
    },
    TooLarge {
        size: u64,
        max: u64,
    },
    /// The same name appears twice in the archive.
    Duplicate,
    /// A name that is a directory elsewhere in the archive, or lies beneath a file.
    TypeClash,
    /// Beneath an entry that was refused (a link or special file in its place).
    BeneathRefused,
    /// A new or changed file the host runs (`crate::hostrun`), covered by `entry`.
    Protected {
        entry: String,
    },
    /// A file the host runs that the worker deleted in its copy: kept on the host.
    ProtectedDelete {
        entry: String,
    },
    /// At or beneath a host entry the worker's user could not read, so it was not copied:
    /// the host's stays as it is.
    NotCopied,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::BadName { detail } => write!(f, "invalid name: {detail}"),
            Reason::Symlink => f.write_str("a symbolic link (only files and directories are delivered)"),
            Reason::HardLink => f.write_str("a hard link (only files and directories are delivered)"),
            Reason::Device => f.write_str("a device node (only files and directories are delivered)"),
            Reason::Fifo => f.write_str("a fifo (only files and directories are delivered)"),
            Reason::Special => f.write_str("a socket, sparse file or other special entry (only files and directories are delivered)"),
            Reason::Suffix { allowed } => write!(f, "suffix not allowed in this zone (allowed: {})", allowed.join(", ")),
            Reason::TooLarge { size, max } => write!(f, "{size} bytes, larger than the zone's max_file_bytes ({max})"),
            Reason::Duplicate => f.write_str("the name appears twice"),
            Reason::TypeClash => f.write_str("a file where a directory is, or beneath a file"),
            Reason::BeneathRefused => f.write_str("beneath a refused entry"),
            Reason::Protected { entry } => write!(
                f,
                "a file the host runs (protected by '{entry}': git, direnv, editors and shells run such files on the host, outside the sandbox); not published. A person allows it with `unprotect: ['{entry}']` on the zone in workcell.yaml"
            ),
            Reason::ProtectedDelete { entry } => {
                write!(f, "deleted in the worker's copy, but a file the host runs (protected by '{entry}'); the deletion is not applied, the host keeps it")
            }
            Reason::NotCopied => f.write_str("the host has an entry here the worker's user cannot read, so it was not copied; it is left as the host has it"),
        }
    }
}

/// One refused entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// The name as the worker wrote it, escaped for display.
    pub path: String,
    #[serde(flatten)]
    pub reason: Reason,
}

/// What one copy-delivered zone's publish did (or would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub zone: String,
    pub added: Vec<String>,
    pub changed: Vec<String>,
    pub deleted: Vec<String>,
    pub refused: Vec<Refusal>,
    /// Files the worker changed that also changed on the host during the run: left as the
    /// host has them.
    pub conflicts: Vec<String>,
    /// Files published without the set-uid, set-gid or sticky bit the worker gave them.
    pub bits_dropped: Vec<String>,
    /// What the worker's user could not read when the copy was taken, so it was not copied
    /// (and is never deleted or overwritten on publish): at most [`NOT_COPIED_SHOWN`]
    /// names, directories ending in `/`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_copied: Vec<String>,
    /// How many entries were not copied in all.
    #[serde(skip_serializing_if = "is_zero")]
    pub not_copied_total: usize,
    /// True once the accepted changes are on the host.
    pub published: bool,
    /// Why nothing was published, when nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withheld: Option<String>,
}

/// Names of entries not copied that a summary lists; the rest are counted.
pub const NOT_COPIED_SHOWN: usize = 20;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Summary {
    /// Records what `baseline` did not copy because the worker's user cannot read it.
    pub fn set_not_copied(&mut self, baseline: &baseline::Baseline) {
        self.not_copied_total = baseline.not_copied.len();
        self.not_copied = baseline
            .not_copied
            .iter()
            .take(NOT_COPIED_SHOWN)
            .map(|(p, dir)| if p.is_empty() { "./".into() } else { format!("{}{}", p.join("/"), if *dir { "/" } else { "" }) })
            .collect();
    }

    /// `not copied: 2 files the worker cannot read: a, b/`, when anything was not copied.
    pub fn not_copied_line(&self) -> Option<String> {
        if self.not_copied_total == 0 {
            return None;
        }
        let n = self.not_copied_total;
        let what = if self.not_copied.iter().any(|p| p.ends_with('/')) { "files or directories" } else { "files" };
        let names: Vec<String> = self.not_copied.iter().map(|p| crate::term::escape(p).into_owned()).collect();
        let more = n.saturating_sub(self.not_copied.len());
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        Some(format!("not copied: {n} {what} the worker cannot read: {}{more}", names.join(", ")))
    }

    /// True when publishing would change nothing on the host.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.deleted.is_empty()
    }

    /// The summary as a person reads it (names escaped: they come from the worker).
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let e = crate::term::escape;
        let mut s = format!("workcell: delivery of zone {}:", e(&self.zone));
        for (label, list) in [("added", &self.added), ("changed", &self.changed), ("deleted", &self.deleted)] {
            for p in list {
                let _ = write!(s, "\n  {label:<9} {}", e(p));
            }
        }
        for p in &self.conflicts {
            let _ = write!(s, "\n  conflict  {} (changed on the host during the run; left as the host has it)", e(p));
        }
        for p in &self.bits_dropped {
            let _ = write!(s, "\n  mode      {} (set-uid/set-gid/sticky bit dropped)", e(p));
        }
        for r in &self.refused {
            let _ = write!(s, "\n  refused   {}: {}", e(&r.path), r.reason);
        }
        if let Some(line) = self.not_copied_line() {
            let _ = write!(s, "\n  {line}");
        }
        if self.is_empty() && self.refused.is_empty() && self.conflicts.is_empty() {
            s.push_str("\n  no changes");
        }
        match (&self.withheld, self.published) {
            (Some(why), _) => {
                let _ = write!(s, "\n  nothing published: {why}");
            }
            (None, true) => s.push_str("\n  published"),
            (None, false) => {}
        }
        s
    }
}

/// Why a delivery failed as a whole (nothing, or only part, was published).
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("the worker's tree is not a readable archive: {0}")]
    Archive(#[source] std::io::Error),
    #[error("the worker left more than {max} entries in the zone; nothing is delivered")]
    TooManyEntries { max: u64 },
    #[error("the worker left more than {max} bytes in the zone; nothing is delivered")]
    TooManyBytes { max: u64 },
    #[error("cannot {op} while delivering zone {zone}: {source}")]
    Io {
        op: &'static str,
        zone: String,
        #[source]
        source: std::io::Error,
    },
}

impl DeliveryError {
    pub(crate) fn io<'a>(op: &'static str, zone: &'a str) -> impl FnOnce(std::io::Error) -> DeliveryError + 'a {
        move |source| DeliveryError::Io { op, zone: zone.to_string(), source }
    }
}
