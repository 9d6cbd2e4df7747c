//! A zone that is a home directory. In a home, much more than a project's files is run by the
//! person's own tools: the stock `~/.profile` puts `~/bin` and `~/.local/bin` first on `PATH`
//! when they exist (a planted `~/.local/bin/git` runs at the next `git`), vim runs `~/.vimrc`,
//! tmux `~/.tmux.conf`, the aws CLI the `credential_process` of `~/.aws/config`. The start-up
//! files themselves are protected everywhere (`super::DEFAULTS`); the paths of the tool
//! table's *home* rows ([`entries`], `super::tools`) are protected in a zone only when it is a
//! home, because in a project `bin/` or `.npmrc` is an ordinary file the worker is there to
//! write.
//!
//! A zone is a home when
//! - its directory is a user's home: any passwd entry's home directory, `$HOME` of the
//!   person running workcell, or `SUDO_USER`'s;
//! - it holds such a home beneath it (a zone of a folder of homes);
//! - it, or any directory beneath it, holds a shell's start-up file ([`STARTUP`]): that is
//!   what makes a directory a home to a login shell, whatever passwd says (a home from LDAP,
//!   a `HOME=` pointed at it).
//!
//! The whole zone then gets the home entries, at any depth, like every entry. Protecting
//! only the directory that is the home would need a place for it that the worker cannot
//! move: a worker that renames `alice/` to `x/` and makes a new `alice/` would have its
//! `alice/.local/bin` judged in a directory that was not a home at launch. At any depth the
//! answer does not depend on any name the worker controls; what it costs is that `bin/` in
//! a project that lives inside a home zone is protected too, which a home zone accepts.
//!
//! The start-up files are protected by default, so a worker cannot make a zone a home (nor
//! stop one being one) by writing one; only a person's own file decides.

use std::ffi::CStr;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use rustix::fs::AtFlags;

use super::tools::{expand, Scope, TOOLS};
use super::{EntryError, Protection};

/// What is protected in a home zone besides the defaults: the paths of the tool table's
/// [`Scope::Home`] rows (`super::tools`, where each row says what runs them and when).
pub fn entries() -> Vec<String> {
    TOOLS.iter().filter(|t| t.scope == Scope::Home).flat_map(|t| t.paths.iter().flat_map(|p| expand(p))).collect()
}

/// The start-up files that make a directory a home: what bash, zsh and fish run at login or
/// in each interactive shell (all protected by default: a worker cannot write one).
pub const STARTUP: &[&str] =
    &[".profile", ".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".zshrc", ".zprofile", ".zshenv", ".zlogin", ".config/fish"];

/// Why a zone is treated as a home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Home {
    /// Its directory is this user's home.
    Of(String),
    /// A user's home lies beneath it, at this path relative to the zone.
    Holds(String, PathBuf),
    /// It holds a shell's start-up file at this path relative to the zone.
    Startup(PathBuf),
}

impl std::fmt::Display for Home {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Home::Of(user) => write!(f, "it is the home directory of {}", crate::term::escape(user)),
            Home::Holds(user, rel) => {
                write!(f, "it holds the home directory of {} ({})", crate::term::escape(user), crate::term::escape(&rel.to_string_lossy()))
            }
            Home::Startup(rel) => write!(f, "it holds a shell's start-up file ({})", crate::term::escape(&rel.to_string_lossy())),
        }
    }
}

/// `protection` with the home entries added (those it has already kept).
pub fn widen(protection: &Protection) -> Result<Protection, EntryError> {
    Protection::new(protection.entries().iter().cloned().chain(entries()))
}

/// True when `protection` holds home entries already (the zone was found a home when its
/// configuration was read, and `unprotect:` may have turned some off: not added again). An
/// entry that every zone has by default says nothing.
pub fn widened(protection: &Protection) -> bool {
    let defaults = Protection::default();
    let home = entries();
    protection.entries().iter().any(|e| home.contains(e) && !defaults.entries().contains(e))
}

/// True when `rel` (relative to a zone) is a shell's start-up file, at any depth.
pub fn is_startup(rel: &Path) -> bool {
    STARTUP.iter().any(|s| {
        let s = Path::new(s);
        rel.ends_with(s) && rel.components().count() >= s.components().count()
    })
}

/// Why the zone at the canonical host path `zone` is a home by where it is: it is a user's
/// home, or holds one. `None` when no user's home is it or lies beneath it.
pub fn by_path(zone: &Path) -> Option<Home> {
    let homes = homes();
    if let Some((user, _)) = homes.iter().find(|(_, h)| h == zone) {
        return Some(Home::Of(user.clone()));
    }
    homes.into_iter().find_map(|(user, h)| h.strip_prefix(zone).ok().map(|rel| Home::Holds(user.clone(), rel.to_path_buf())))
}

/// The first of [`STARTUP`] directly in the directory `dir`, when one is there (a link or
/// anything else at the name counts: nothing is followed, a wider answer protects more).
pub fn startup_in(dir: BorrowedFd<'_>) -> Option<PathBuf> {
    STARTUP.iter().find(|s| rustix::fs::statat(dir, **s, AtFlags::SYMLINK_NOFOLLOW).is_ok()).map(PathBuf::from)
}

/// Why the zone whose directory is `dir`, at the canonical host path `zone`, is a home,
/// judged without a walk: by where it is, or a start-up file at its top.
pub fn at_top(dir: BorrowedFd<'_>, zone: &Path) -> Option<Home> {
    by_path(zone).or_else(|| startup_in(dir).map(Home::Startup))
}

/// Longest `/etc/passwd` read.
const MAX_PASSWD: u64 = 4 << 20;

/// Every user's home this host knows, canonical, with the user's name: `/etc/passwd`'s
/// entries, `$HOME`, and `SUDO_USER`'s home as the system's user database has it. A home of
/// `/` (system accounts) or one that does not exist is left out: every zone would hold the
/// first, none the second.
fn homes() -> Vec<(String, PathBuf)> {
    use std::io::Read;
    let mut out: Vec<(String, String)> = Vec::new();
    let mut text = String::new();
    if let Ok(f) = std::fs::File::open("/etc/passwd") {
        let _ = f.take(MAX_PASSWD).read_to_string(&mut text);
    }
    for line in text.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if let (Some(name), Some(home)) = (fields.first(), fields.get(5)) {
            out.push((name.to_string(), home.to_string()));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        out.push(("the person running workcell".into(), home.to_string_lossy().into_owned()));
    }
    if let Some(user) = std::env::var_os("SUDO_USER").and_then(|u| u.into_string().ok()) {
        if let Some(home) = home_of(&user) {
            out.push((user, home));
        }
    }
    out.into_iter()
        .filter_map(|(user, home)| {
            let canonical = std::fs::canonicalize(&home).ok()?;
            (canonical != Path::new("/") && canonical.is_dir()).then_some((user, canonical))
        })
        .collect()
}

/// `user`'s home directory as the system's user database (NSS: files, LDAP, …) has it.
fn home_of(user: &str) -> Option<String> {
    let name = std::ffi::CString::new(user).ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: zeroed is a valid `passwd` (null pointers, zero ids); it is only read after
    // getpwnam_r said it filled it.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the strings it writes into `pwd` point
    // into `buf`, which outlives their use below.
    let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut pwd, buf.as_mut_ptr().cast(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_dir.is_null() {
        return None;
    }
    // SAFETY: `pw_dir` is a NUL-terminated string in `buf`, set by getpwnam_r.
    Some(unsafe { CStr::from_ptr(pwd.pw_dir) }.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hostrun::Kind;

    #[test]
    fn start_up_files_at_any_depth() {
        assert!(is_startup(Path::new(".profile")));
        assert!(is_startup(Path::new("alice/.bashrc")));
        assert!(is_startup(Path::new("a/.config/fish")));
        assert!(!is_startup(Path::new("fish")));
        assert!(!is_startup(Path::new("x.profile")));
        assert!(!is_startup(Path::new(".profile/x")));
    }

    #[test]
    fn widened_protection_covers_the_home_entries() {
        let p = widen(&Protection::default()).expect("valid entries");
        assert!(widened(&p));
        assert!(!widened(&Protection::default()));
        let m = |rel: &str| p.matches_any_case(Path::new(rel), Kind::Other).map(str::to_string);
        // `bin` at any depth covers `.local/bin` and `go/bin` too.
        assert_eq!(m(".local/bin/git").as_deref(), Some("bin"));
        assert_eq!(m(".cargo/env").as_deref(), Some(".cargo/env"));
        assert_eq!(m("bin/ls").as_deref(), Some("bin"));
        assert_eq!(m("alice/.vimrc").as_deref(), Some(".vimrc"));
        assert_eq!(m(".aws/config").as_deref(), Some(".aws"));
        assert_eq!(m(".profile").as_deref(), Some(".profile"));
        assert_eq!(m("src/main.rs"), None);
        // A link at `.local` would lead `~/.local/bin` elsewhere.
        assert_eq!(p.matches_any_case(Path::new(".local"), Kind::Other), Some(".local/bin"));
        // Turned off by the zone: not added back.
        let off = p.without(&[".vimrc".into()]).expect("in force");
        assert!(widened(&off));
    }

    #[test]
    fn every_entry_is_valid() {
        let home = entries();
        assert!(home.contains(&".local/bin".to_string()) && home.contains(&".aws".to_string()));
        for e in home {
            assert!(Protection::new([e.clone()]).is_ok(), "{e}");
        }
    }

    #[test]
    fn a_home_by_path() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let tmp = std::fs::canonicalize(tmp.path()).expect("canonical");
        assert_eq!(by_path(&tmp), None, "nobody's home");
        assert!(matches!(by_path(Path::new("/")), Some(Home::Holds(..))), "/ holds every home");
        let Some(h) = std::env::var_os("HOME").and_then(|h| std::fs::canonicalize(h).ok()).filter(|h| h != Path::new("/")) else { return };
        assert!(matches!(by_path(&h), Some(Home::Of(_))), "{h:?}");
        if let Some(parent) = h.parent().filter(|p| *p != Path::new("/")) {
            assert!(matches!(by_path(parent), Some(Home::Holds(..))), "{parent:?}");
        }
    }
}
