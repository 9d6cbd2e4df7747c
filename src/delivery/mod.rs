//! `delivery: copy`: a zone the worker sees as a private copy taken when the run starts, and
//! whose changes reach the host only after they are checked.
//!
//! The flow: [`baseline::copy_in`] copies the zone (beneath its held handle) into a private
//! directory and records what each file was; the worker runs on the copy; after a normal
//! exit [`walk::archive`] streams the copy as a tar archive into [`collect::collect_tar`],
//! which refuses everything that is not a plain file or directory with a clean name inside
//! the zone's policy and stages what passes; [`publish::diff`] compares that with the
//! baseline and the host as it is now; [`publish::Changes::publish`] writes the result
//! beneath the zone's handle, one temporary file and rename per file, with the worker's
//! rights (only what its own user could change on the host lands). The checker only ever sees a tar
//! stream, so the proptest of hostile archives drives the very code a run uses.

pub mod baseline;
pub mod collect;
mod copytree;
pub mod name;
pub mod publish;
pub mod scratch;
pub mod shipped;
pub mod sparse;
pub mod summary;
mod swap;
pub mod walk;

pub use summary::{Refusal, Status, Summary};

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
    /// A socket, a tar "sparse" entry (the walk never makes one) or an entry type tar has no
    /// plain meaning for.
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
    /// At or beneath one of the project's control files (`workcell.yaml`, `workers/`,
    /// `.workcell/`, a `build:` folder), shipped to a remote engine with the zone.
    Control {
        path: String,
    },
    /// A file the host runs that the worker deleted in its copy: kept on the host.
    ProtectedDelete {
        entry: String,
    },
    /// At or beneath a host entry the worker's user could not read, so it was not copied:
    /// the host's stays as it is.
    NotCopied,
    /// At a host file that was over the zone's `max_file_bytes` when the copy was taken, so
    /// it was not copied: the host's stays as it is.
    TooLargeToCopy {
        size: u64,
        max: u64,
    },
    /// A change the worker's own user could not make on the host (the directory or the file
    /// refuses that uid: owner, mode, ACL, sticky bit): its copy let it, the host keeps its own.
    WorkerMayNotWrite {
        uid: u32,
    },
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::BadName { detail } => write!(f, "invalid name: {detail}"),
            Reason::Symlink => f.write_str("a symbolic link (only files and directories are delivered)"),
            Reason::HardLink => f.write_str("a hard link (only files and directories are delivered)"),
            Reason::Device => f.write_str("a device node (only files and directories are delivered)"),
            Reason::Fifo => f.write_str("a fifo (only files and directories are delivered)"),
            Reason::Special => f.write_str("a socket or other special entry (only files and directories are delivered)"),
            Reason::Suffix { allowed } => write!(f, "suffix not allowed in this zone (allowed: {})", allowed.join(", ")),
            Reason::TooLarge { size, max } => write!(f, "{size} bytes, larger than the zone's max_file_bytes ({max})"),
            Reason::Duplicate => f.write_str("the name appears twice"),
            Reason::TypeClash => f.write_str("a file where a directory is, or beneath a file"),
            Reason::BeneathRefused => f.write_str("beneath a refused entry"),
            Reason::Protected { entry } => write!(
                f,
                "a file the host runs (protected by '{entry}': git, direnv, editors and shells run such files on the host, outside the sandbox); not published. A person allows it with `unprotect: ['{entry}']` on the zone in workcell.yaml"
            ),
            Reason::Control { path } => write!(
                f,
                "the project's control file '{path}' (it decides what the next run may do); changes to it are never published from a worker"
            ),
            Reason::ProtectedDelete { entry } => {
                write!(f, "deleted in the worker's copy, but a file the host runs (protected by '{entry}'); the deletion is not applied, the host keeps it")
            }
            Reason::NotCopied => f.write_str("the host has an entry here the worker's user cannot read, so it was not copied; it is left as the host has it"),
            Reason::TooLargeToCopy { size, max } => write!(
                f,
                "the host has a file here too large to copy ({size} bytes, over the zone's max_file_bytes, {max}), so the worker never had it; it is left as the host has it"
            ),
            Reason::WorkerMayNotWrite { uid } => write!(
                f,
                "the worker (uid {uid}) may not write here on the host (nor could it in a bind zone); the host keeps what it has. To publish such a change, give uid {uid} write access there (chown, chmod or an ACL), or run the worker as a user who has it (defaults.user)"
            ),
        }
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
    #[error(
        "the worker's files that passed the checks do not fit in the free space of {} (workcell keeps a margin free there); nothing is delivered. Free space there, or set TMPDIR to a directory on a file system with more room, and run the worker again",
        dir.display()
    )]
    NoRoom { dir: std::path::PathBuf },
    #[error("cannot bring the zone back from the engine: {0}; nothing is delivered")]
    Download(#[source] std::io::Error),
    #[error(
        "zone {zone} holds more than {max} entries (files, directories and other names together): a copy-delivered zone is copied whole before the worker starts, and this is its limit, so the run is refused. Point the zone's path at a smaller directory, or drop `delivery: copy` from the zone (a bind zone has no such limit)"
    )]
    ZoneTooManyEntries { zone: String, max: u64 },
    #[error(
        "zone {zone} holds {found} bytes in files to copy, more than the {max} a copy-delivered zone may hold (files over the zone's max_file_bytes are not copied and do not count; a sparse file counts its full size): the run is refused. Point the zone's path at a smaller directory, set a lower max_file_bytes, or drop `delivery: copy` from the zone"
    )]
    ZoneTooManyBytes { zone: String, max: u64, found: u64 },
    #[error(
        "zone {zone} needs {needed} bytes for its private copy, but only {free} are free in {}: the run is refused before copying. Free space there, or set TMPDIR to a directory on a file system with more room",
        dir.display()
    )]
    NoSpace { zone: String, needed: u64, free: u64, dir: std::path::PathBuf },
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
