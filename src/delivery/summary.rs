//! What one copy-delivered zone's delivery did (or, before the review, would do), bounded
//! and safe to show: every name comes from the worker, so each is escaped (control, format
//! and bidirectional characters made visible) and cut to [`NAME_SHOWN`] characters when it
//! is kept, and each list keeps at most [`SHOWN`] names and counts the rest. A worker that
//! leaves 30,000 refused names costs a few kilobytes of summary, not gigabytes of terminal
//! and audit log.

use serde::ser::{Serialize, SerializeStruct, Serializer};

use super::Reason;

/// Names a summary keeps per category; the rest are counted ("and 12 more").
pub const SHOWN: usize = 50;
/// Longest name a summary keeps, in characters after escaping; a longer one keeps its head
/// and tail (where the suffix is) around the number of characters left out.
pub const NAME_SHOWN: usize = 200;

/// `raw` escaped for a terminal and cut to [`NAME_SHOWN`] characters.
pub fn display(raw: &str) -> String {
    let e = visible_spacing(&crate::term::escape(raw));
    let n = e.chars().count();
    if n <= NAME_SHOWN {
        return e;
    }
    let (head, tail) = (NAME_SHOWN * 2 / 3, NAME_SHOWN / 3);
    let h: String = e.chars().take(head).collect();
    let t: String = e.chars().skip(n - tail).collect();
    format!("{h}[…{} characters…]{t}", n - head - tail)
}

/// `s` with the spacing a reader cannot see written as escapes: spaces other than the plain
/// one (a no-break space reads as a space), and plain spaces at either end of a component
/// (`README.md ` reads as `README.md`). Spaces inside a component stay.
fn visible_spacing(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        let edge = |j: Option<usize>| j.and_then(|j| chars.get(j)).is_none_or(|n| *n == '/');
        let hidden = if c == ' ' { edge(i.checked_sub(1)) || edge(Some(i + 1)) } else { c.is_whitespace() };
        if hidden {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The first [`SHOWN`] items of a category and how many there were in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed<T> {
    shown: Vec<T>,
    total: usize,
}

impl<T> Default for Listed<T> {
    fn default() -> Self {
        Listed { shown: Vec::new(), total: 0 }
    }
}

impl<T> Listed<T> {
    pub fn push(&mut self, item: T) {
        self.total += 1;
        if self.shown.len() < SHOWN {
            self.shown.push(item);
        }
    }

    /// Counts one more item without keeping it.
    pub fn count(&mut self) {
        self.total += 1;
    }

    /// The items kept (at most [`SHOWN`]).
    pub fn shown(&self) -> &[T] {
        &self.shown
    }

    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.shown.iter()
    }

    /// How many there were in all.
    pub fn total(&self) -> usize {
        self.total
    }

    /// How many were counted but not kept.
    pub fn more(&self) -> usize {
        self.total - self.shown.len()
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

impl<T: Serialize> Serialize for Listed<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.shown.serialize(s)
    }
}

/// Names, already passed through [`display`].
pub type Names = Listed<String>;

impl Names {
    /// Adds `raw` (a worker's name), escaped and cut.
    pub fn name(&mut self, raw: &str) {
        self.total += 1;
        if self.shown.len() < SHOWN {
            self.shown.push(display(raw));
        }
    }
}

/// A file that is (or would be) written to the host: in JSON its name only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileItem {
    /// The name, through [`display`].
    pub path: String,
    pub size: u64,
    /// Published with its execute bits (the person should know before saying yes).
    pub executable: bool,
}

impl Serialize for FileItem {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.path.serialize(s)
    }
}

impl Listed<FileItem> {
    /// Adds the file `raw` (a worker's name), escaped and cut.
    pub fn file(&mut self, raw: &str, size: u64, executable: bool) {
        self.total += 1;
        if self.shown.len() < SHOWN {
            self.shown.push(FileItem { path: display(raw), size, executable });
        }
    }
}

/// One refused entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Refusal {
    /// The name as the worker wrote it, through [`display`].
    pub path: String,
    #[serde(flatten)]
    pub reason: Reason,
}

impl Listed<Refusal> {
    /// Adds the refusal of `raw` (a worker's name), escaped and cut.
    pub fn refuse(&mut self, raw: &str, reason: Reason) {
        self.total += 1;
        if self.shown.len() < SHOWN {
            self.shown.push(Refusal { path: display(raw), reason });
        }
    }
}

/// An accepted change that did not reach the host because the write failed (a full file
/// system, a directory the host removed meanwhile): the host keeps what it had there.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failed {
    /// Through [`display`]; directories end in `/`.
    pub path: String,
    pub error: String,
}

impl Listed<Failed> {
    pub fn fail(&mut self, raw: &str, error: String) {
        self.total += 1;
        if self.shown.len() < SHOWN {
            self.shown.push(Failed { path: display(raw), error: display(&error) });
        }
    }
}

/// How a delivery ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Checked, not yet published (what a review shows).
    #[default]
    Pending,
    /// The worker changed nothing that could be published.
    NoChanges,
    /// Every accepted change is on the host.
    Published,
    /// Some accepted changes are on the host, others are not (`failed` says which and why).
    Partial,
    /// Nothing was published (`withheld` says why).
    Withheld,
}

/// What one copy-delivered zone's delivery did (or would do). Lists hold at most [`SHOWN`]
/// names each; `counts` in JSON has the totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub zone: String,
    pub status: Status,
    pub added: Listed<FileItem>,
    pub changed: Listed<FileItem>,
    pub deleted: Names,
    /// Directories created (names end in `/`).
    pub dirs_added: Names,
    /// Directories removed (names end in `/`).
    pub dirs_deleted: Names,
    /// Files the worker changed that also changed on the host during the run (or while it
    /// was published): left as the host has them.
    pub conflicts: Names,
    /// Accepted changes that did not land, and why.
    pub failed: Listed<Failed>,
    /// Changes the reviewer declined one by one.
    pub declined: Names,
    pub refused: Listed<Refusal>,
    /// Files published without the set-uid, set-gid or sticky bit the worker gave them.
    pub bits_dropped: Names,
    /// What the worker's user could not read when the copy was taken, so it was not copied
    /// (and is never deleted or overwritten on publish); directories end in `/`.
    pub not_copied: Names,
    /// Files over the zone's `max_file_bytes` when the copy was taken: not copied (and never
    /// deleted or overwritten on publish).
    pub too_large: Names,
    /// Why nothing was published, when nothing was.
    pub withheld: Option<String>,
}

impl Summary {
    pub fn new(zone: &str) -> Summary {
        Summary { zone: zone.to_string(), ..Summary::default() }
    }

    /// A delivery that published nothing, and why.
    pub fn withheld(zone: &str, why: String) -> Summary {
        Summary { zone: zone.to_string(), status: Status::Withheld, withheld: Some(why), ..Summary::default() }
    }

    /// True once some accepted change is on the host.
    pub fn published(&self) -> bool {
        matches!(self.status, Status::Published | Status::Partial)
    }

    /// True when publishing would change (or changed) nothing on the host.
    pub fn is_empty(&self) -> bool {
        [self.added.total(), self.changed.total(), self.deleted.total(), self.dirs_added.total(), self.dirs_deleted.total()].iter().all(|n| *n == 0)
    }

    /// True when something the worker left did not reach the host as it left it: refused,
    /// withheld (with its changes listed, or whole), in conflict, failed or declined (a run
    /// then ends with its own exit status).
    pub fn held_back(&self) -> bool {
        self.withheld.is_some() || !self.refused.is_empty() || !self.conflicts.is_empty() || !self.failed.is_empty() || !self.declined.is_empty()
    }

    /// True when nothing of the zone was published and nothing is listed: its delivery failed
    /// before any change could be judged (an archive over the bounds or unreadable, a failed
    /// download, a run that did not end by itself). Whatever the worker left is lost, which
    /// is never "no changes".
    pub fn withheld_whole(&self) -> bool {
        self.status == Status::Withheld
            && self.is_empty()
            && self.refused.is_empty()
            && self.conflicts.is_empty()
            && self.failed.is_empty()
            && self.declined.is_empty()
    }

    /// `not copied: 2 files the worker cannot read: a, b/`, when anything was not copied.
    pub fn not_copied_line(&self) -> Option<String> {
        if self.not_copied.is_empty() {
            return None;
        }
        let n = self.not_copied.total();
        let what = if self.not_copied.iter().any(|p| p.ends_with('/')) { "files or directories" } else { "files" };
        Some(format!("not copied: {n} {what} the worker cannot read: {}{}", self.not_copied.shown().join(", "), more(self.not_copied.more())))
    }

    /// `not copied: 1 file too large to copy (over the zone's max_file_bytes): big.img`.
    pub fn too_large_line(&self) -> Option<String> {
        if self.too_large.is_empty() {
            return None;
        }
        let n = self.too_large.total();
        Some(format!(
            "not copied: {n} file{} too large to copy (over the zone's max_file_bytes): {}{}",
            if n == 1 { "" } else { "s" },
            self.too_large.shown().join(", "),
            more(self.too_large.more())
        ))
    }

    /// The summary as a person reads it (names were escaped when they were kept).
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = format!("workcell: delivery of zone {}:", crate::term::escape(&self.zone));
        let mut lines = |label: &str, items: Vec<String>, left: usize| {
            for i in items {
                let _ = write!(s, "\n  {label:<9} {i}");
            }
            if left > 0 {
                let _ = write!(s, "\n  {label:<9} … and {left} more");
            }
        };
        let files =
            |l: &Listed<FileItem>| l.iter().map(|f| format!("{} ({}{})", f.path, size(f.size), if f.executable { ", executable" } else { "" })).collect();
        lines("added", files(&self.added), self.added.more());
        lines("changed", files(&self.changed), self.changed.more());
        lines("deleted", self.deleted.shown().to_vec(), self.deleted.more());
        lines("new dir", self.dirs_added.shown().to_vec(), self.dirs_added.more());
        lines("dir gone", self.dirs_deleted.shown().to_vec(), self.dirs_deleted.more());
        let conflicts = self.conflicts.iter().map(|p| format!("{p} (changed on the host during the run; left as the host has it)")).collect();
        lines("conflict", conflicts, self.conflicts.more());
        lines("failed", self.failed.iter().map(|f| format!("{}: {} (the host keeps what it had)", f.path, f.error)).collect(), self.failed.more());
        lines("declined", self.declined.iter().map(|p| format!("{p} (the reviewer said no)")).collect(), self.declined.more());
        lines("mode", self.bits_dropped.iter().map(|p| format!("{p} (set-uid/set-gid/sticky bit dropped)")).collect(), self.bits_dropped.more());
        lines("refused", self.refused.iter().map(|r| format!("{}: {}", r.path, r.reason)).collect(), self.refused.more());
        for line in [self.not_copied_line(), self.too_large_line()].into_iter().flatten() {
            let _ = write!(s, "\n  {line}");
        }
        if self.withheld_whole() {
            let why = crate::term::escape_lines(self.withheld.as_deref().unwrap_or(""));
            let _ = write!(s, "\n  zone withheld whole (its changes were not judged); nothing published: {why}");
            return s;
        }
        if self.is_empty() && self.refused.is_empty() && self.conflicts.is_empty() && self.failed.is_empty() && self.declined.is_empty() {
            s.push_str("\n  no changes");
        }
        match self.status {
            Status::Withheld => {
                let _ = write!(s, "\n  nothing published: {}", crate::term::escape_lines(self.withheld.as_deref().unwrap_or("")));
            }
            Status::Published => s.push_str("\n  published"),
            Status::Partial => {
                let _ = write!(s, "\n  published in part: {} change(s) did not land (see failed)", self.failed.total());
            }
            Status::Pending | Status::NoChanges => {}
        }
        s
    }
}

fn more(n: usize) -> String {
    if n > 0 {
        format!(" and {n} more")
    } else {
        String::new()
    }
}

/// `1.2 MiB`, `512 B`.
fn size(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let (mut v, mut u) = (n as f64, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl Serialize for Summary {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let counts = serde_json::json!({
            "added": self.added.total(), "changed": self.changed.total(), "deleted": self.deleted.total(),
            "dirs_added": self.dirs_added.total(), "dirs_deleted": self.dirs_deleted.total(),
            "conflicts": self.conflicts.total(), "failed": self.failed.total(), "declined": self.declined.total(),
            "refused": self.refused.total(), "bits_dropped": self.bits_dropped.total(), "not_copied": self.not_copied.total(),
            "too_large": self.too_large.total(),
        });
        let mut st = s.serialize_struct("Summary", 17)?;
        st.serialize_field("zone", &self.zone)?;
        st.serialize_field("status", &self.status)?;
        st.serialize_field("published", &self.published())?;
        st.serialize_field("added", &self.added)?;
        st.serialize_field("changed", &self.changed)?;
        st.serialize_field("deleted", &self.deleted)?;
        st.serialize_field("dirs_added", &self.dirs_added)?;
        st.serialize_field("dirs_deleted", &self.dirs_deleted)?;
        st.serialize_field("conflicts", &self.conflicts)?;
        st.serialize_field("failed", &self.failed)?;
        st.serialize_field("declined", &self.declined)?;
        st.serialize_field("refused", &self.refused)?;
        st.serialize_field("bits_dropped", &self.bits_dropped)?;
        st.serialize_field("not_copied", &self.not_copied)?;
        st.serialize_field("too_large", &self.too_large)?;
        st.serialize_field("counts", &counts)?;
        if let Some(w) = &self.withheld {
            st.serialize_field("withheld", w)?;
        }
        st.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_keep_a_bounded_number_of_cut_escaped_names() {
        let mut s = Summary::new("z");
        for i in 0..30_000 {
            s.refused.refuse(&format!("{}\u{202e}{i}", "x".repeat(17_000)), Reason::Symlink);
        }
        assert_eq!(s.refused.total(), 30_000);
        assert_eq!(s.refused.shown().len(), SHOWN);
        let text = s.text();
        assert!(text.len() < 64 << 10, "{}", text.len());
        assert!(text.contains("… and 29950 more"));
        assert!(!text.contains('\u{202e}'));
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.len() < 64 << 10);
        assert!(json.contains("\"refused\":30000"));
    }

    #[test]
    fn a_zone_withheld_whole_is_held_back_and_never_no_changes() {
        let s = Summary::withheld("out", "the worker left more than 100000 entries in the zone; nothing is delivered".into());
        assert!(s.withheld_whole() && s.held_back());
        let text = s.text();
        assert!(!text.contains("no changes"), "{text}");
        assert!(text.contains("zone withheld whole") && text.contains("more than 100000 entries"), "{text}");
        let mut listed = Summary::withheld("out", "--strict".into());
        listed.added.file("a.md", 1, false);
        assert!(!listed.withheld_whole() && listed.held_back());
        assert!(listed.text().contains("nothing published: --strict"));
        assert!(!Summary::new("out").held_back(), "nothing left and nothing withheld is not held back");
    }

    #[test]
    fn long_names_keep_their_suffix() {
        let d = display(&format!("{}.exe", "a".repeat(1000)));
        assert!(d.ends_with("a.exe") && d.contains("[…"), "{d}");
        assert!(d.chars().count() < NAME_SHOWN + 30);
    }
}
