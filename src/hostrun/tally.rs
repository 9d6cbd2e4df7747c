//! What the walks of a zone count, and where they stop: the sweep after a run
//! ([`super::quarantine`]) and the launch walk (`plan::protected`) use the same tally, so a
//! zone one accepts the other does not refuse.
//!
//! A bound that a worker can reach cheaply is a way to hide a plant past it, so what is
//! counted is what costs the worker something:
//!
//! - **Objects, not names.** A non-directory is counted once by its inode, however many
//!   names (hard links) it has: a hard link costs no inode, so four million links of one
//!   file would otherwise fill the bound for free. The inode number comes with the
//!   directory listing (`d_ino`): no `stat` per file. The inodes remembered are bounded
//!   ([`INODES_KEPT`], about 20 MB at most); past that, each name counts again (fail
//!   closed: the bound is reached sooner, never later).
//! - **Names, too, but many more.** Names are still work to read: at most [`NAMES_PER_ENTRY`]
//!   names per counted entry are looked at in all.
//! - **A crowded directory is a finding by itself.** One directory with more than
//!   [`max_dir_entries`] names is not read to its end: the sweep moves it whole into the
//!   quarantine, the launch walk refuses it. Few people keep a million files in one folder,
//!   and a worker that does is hiding something or filling a disk.
//!
//! `WORKCELL_SWEEP_MAX_ENTRIES` (for tests only: reaching four million entries in a test is
//! not practical) can only lower [`MAX_ENTRIES`], never raise it, so it cannot weaken a
//! check; the other bounds follow from it.

use std::collections::HashSet;
use std::sync::OnceLock;

/// How many entries (directories and distinct non-directories) the walk looks at in one run.
pub const MAX_ENTRIES: u64 = 4_000_000;
/// How many names (hard links included) per counted entry are read, at most.
pub const NAMES_PER_ENTRY: u64 = 4;
/// How many names one directory may hold before it is a finding of its own, at most.
pub const MAX_DIR_ENTRIES: u64 = 1_000_000;
/// How many inodes the tally remembers (below a power of two's load limit, so the set
/// does not grow past 2^20 buckets).
pub const INODES_KEPT: usize = 900_000;
/// The testing-only variable that lowers [`MAX_ENTRIES`].
pub const LOWER_ENV: &str = "WORKCELL_SWEEP_MAX_ENTRIES";

/// The entry bound in force: [`MAX_ENTRIES`], or lower when [`LOWER_ENV`] says so.
pub fn max_entries() -> u64 {
    static BOUND: OnceLock<u64> = OnceLock::new();
    *BOUND.get_or_init(|| {
        let lowered = std::env::var(LOWER_ENV).ok().and_then(|v| v.trim().parse::<u64>().ok());
        lowered.filter(|n| (1..MAX_ENTRIES).contains(n)).unwrap_or(MAX_ENTRIES)
    })
}

/// The names one directory may hold before it is a finding: [`MAX_DIR_ENTRIES`], a quarter
/// of a lowered entry bound.
pub fn max_dir_entries() -> u64 {
    MAX_DIR_ENTRIES.min((max_entries() / 4).max(1))
}

/// Which bound a walk reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// More entries (directories, distinct files) than [`max_entries`].
    Entries(u64),
    /// More names (hard links included) than [`NAMES_PER_ENTRY`] per entry.
    Names(u64),
}

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Over::Entries(n) => write!(f, "more than {n} files and directories (hard links counted once)"),
            Over::Names(n) => write!(f, "more than {n} names (hard links counted each)"),
        }
    }
}

/// The count of one run's walks.
#[derive(Debug)]
pub struct Tally {
    entries: u64,
    names: u64,
    max_entries: u64,
    inodes: HashSet<(u64, u64)>,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally { entries: 0, names: 0, max_entries: max_entries(), inodes: HashSet::new() }
    }
}

impl Tally {
    /// Counts one name: a directory, or a non-directory with inode `ino` on device `dev`
    /// (counted only the first time, while the remembered inodes have room).
    pub fn count(&mut self, dev: u64, ino: u64, dir: bool) -> Result<(), Over> {
        self.names += 1;
        if self.names > self.max_entries.saturating_mul(NAMES_PER_ENTRY) {
            return Err(Over::Names(self.max_entries.saturating_mul(NAMES_PER_ENTRY)));
        }
        if dir || self.first_sight(dev, ino) {
            self.entries += 1;
            if self.entries > self.max_entries {
                return Err(Over::Entries(self.max_entries));
            }
        }
        Ok(())
    }

    /// Counts `n` names of a directory not listed again (`super::looked`): each as an entry
    /// of its own (hard links among them are not known: the bound comes sooner, not later).
    pub fn count_unlisted(&mut self, n: u64) -> Result<(), Over> {
        self.names += n;
        if self.names > self.max_entries.saturating_mul(NAMES_PER_ENTRY) {
            return Err(Over::Names(self.max_entries.saturating_mul(NAMES_PER_ENTRY)));
        }
        self.entries += n;
        if self.entries > self.max_entries {
            return Err(Over::Entries(self.max_entries));
        }
        Ok(())
    }

    /// Whether this inode was not seen before (noted, while there is room: one that could
    /// not be noted counts again at its next name).
    fn first_sight(&mut self, dev: u64, ino: u64) -> bool {
        if self.inodes.contains(&(dev, ino)) {
            return false;
        }
        if self.inodes.len() < INODES_KEPT {
            self.inodes.insert((dev, ino));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hard_links_count_once_and_names_are_still_bounded() {
        let mut t = Tally { max_entries: 10, ..Tally::default() };
        for _ in 0..40 {
            t.count(1, 7, false).unwrap();
        }
        assert_eq!(t.entries, 1);
        assert_eq!(t.count(1, 7, false), Err(Over::Names(40)));
    }

    #[test]
    fn distinct_inodes_and_directories_reach_the_entry_bound() {
        let mut t = Tally { max_entries: 3, ..Tally::default() };
        t.count(1, 1, false).unwrap();
        t.count(2, 1, false).unwrap();
        t.count(0, 0, true).unwrap();
        assert_eq!(t.count(1, 2, false), Err(Over::Entries(3)));
    }
}
