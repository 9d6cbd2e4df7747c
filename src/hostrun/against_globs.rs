//! The matcher against the one it replaced: every entry as `**/E`, `**/E/**` and `**/PREFIX`
//! globs in one set (commit cf618da). The new matcher must protect every path the old one
//! did, with the same entry; where it protects more, the test below says why that is wanted.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::{Kind, Protection, DEFAULTS, GIT_POINTER};

#[derive(Clone, Copy, PartialEq, Eq)]
enum OldPart {
    Itself,
    Beneath,
    OnTheWay,
}

/// The old matcher, as it was.
struct Old {
    entries: Vec<String>,
    set: GlobSet,
    owners: Vec<(usize, OldPart)>,
}

impl Old {
    fn new(entries: &[String]) -> Old {
        let mut builder = GlobSetBuilder::new();
        let mut owners = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let mut forms = vec![(format!("**/{e}"), OldPart::Itself), (format!("**/{e}/**"), OldPart::Beneath)];
            let names: Vec<&str> = e.split('/').collect();
            for k in 1..names.len() {
                if names[k - 1] != "**" {
                    forms.push((format!("**/{}", names[..k].join("/")), OldPart::OnTheWay));
                }
            }
            for (form, part) in forms {
                builder.add(GlobBuilder::new(&form).literal_separator(true).backslash_escape(true).build().unwrap());
                owners.push((i, part));
            }
        }
        Old { entries: entries.to_vec(), set: builder.build().unwrap(), owners }
    }

    fn matches(&self, rel: &Path, kind: Kind) -> Option<&str> {
        if rel.as_os_str().is_empty() {
            return None;
        }
        let mut best: Option<usize> = None;
        for g in self.set.matches(rel) {
            let (entry, part) = self.owners[g];
            if self.entries[entry] == GIT_POINTER && (part == OldPart::Beneath || kind == Kind::Dir) {
                continue;
            }
            if part == OldPart::OnTheWay && kind == Kind::Dir {
                continue;
            }
            best = Some(best.map_or(entry, |b| b.min(entry)));
        }
        best.map(|i| self.entries[i].as_str())
    }
}

/// Names the paths are made of: every name of the default entries, of the user entries below,
/// near misses, and a name that is not UTF-8.
const NAMES: &[&[u8]] = &[
    b".git",
    b"hooks",
    b"config",
    b"modules",
    b"worktrees",
    b"x",
    b".config",
    b"git",
    b"commondir",
    b"config.worktree",
    b".envrc",
    b".bashrc",
    b"fish",
    b".ssh",
    b"build",
    b"a.sh",
    b"a",
    b"ac",
    b"x*y",
    b"qz",
    b"m",
    b"k",
    b"!bang",
    b"^caret",
    b"a,b",
    b"Makefile",
    b"sub",
    b"\xff\xfe",
    b".vscode",
];

/// User entries: globs of every kind globset knows, escapes, and literals with characters
/// that are special to some glob dialects but not to globset (`!`, `^`, `,`).
const USER: &[&str] = &[
    "build/*.sh",
    "**/x",
    "a/**",
    "[ab]c",
    "x\\*y",
    "q?",
    "{m,n}/k",
    "!bang",
    "^caret",
    "a,b",
    "Makefile",
    "x/git",
    ".config",
    ".git/hooks",
    "git/x/config",
    "sub/**/hooks/*",
    "[!a]c/x",
    "x/*",
];

/// A small deterministic generator (no dependency, same paths every run).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Paths as the callers make them (names joined by single `/`): every path of up to three
/// names, and random deeper ones.
fn clean_paths() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let join = |names: &[&[u8]]| names.join(&b'/');
    for a in NAMES {
        out.push(join(&[a]));
        for b in NAMES {
            out.push(join(&[a, b]));
            for c in NAMES {
                out.push(join(&[a, b, c]));
            }
        }
    }
    let mut rng = Lcg(7);
    for _ in 0..20_000 {
        let len = 4 + rng.next(5);
        let names: Vec<&[u8]> = (0..len).map(|_| NAMES[rng.next(NAMES.len())]).collect();
        out.push(join(&names));
    }
    // Every entry below a few prefixes, with a few suffixes.
    for e in DEFAULTS.iter().map(String::as_str).chain(USER.iter().copied()) {
        let e = e.replace("**", "d/e").replace('*', "w").replace('?', "z");
        for pre in ["", "sub/", "a/b/", ".git/modules/s/"] {
            for suf in ["", "/x", "/hooks/pre-commit", "/config"] {
                out.push(format!("{pre}{e}{suf}").into_bytes());
            }
        }
    }
    out
}

/// Paths no caller makes but a file system takes: `.`, `..` and empty names, a trailing `/`.
fn odd_paths() -> Vec<Vec<u8>> {
    let odd: &[&[u8]] = &[b".", b"..", b""];
    let mut rng = Lcg(11);
    let mut out = Vec::new();
    for _ in 0..20_000 {
        let len = 1 + rng.next(6);
        let mut names: Vec<&[u8]> = (0..len).map(|_| NAMES[rng.next(NAMES.len())]).collect();
        let at = rng.next(len + 1);
        names.insert(at, odd[rng.next(odd.len())]);
        let mut p = names.join(&b'/');
        if rng.next(4) == 0 {
            p.push(b'/');
        }
        out.push(p);
    }
    for p in [&b".git/"[..], b".git/.", b".config/", b".git/worktrees//commondir", b"x//y", b".git/worktrees/w/commondir/", b"./.git", b".git/hooks/."] {
        out.push(p.to_vec());
    }
    out
}

fn protections() -> Vec<Protection> {
    let user: Vec<String> = USER.iter().map(|s| s.to_string()).collect();
    vec![
        Protection::default(),
        Protection::with_added(&user).unwrap(),
        Protection::new(user.clone()).unwrap(),
        Protection::with_added(&user).unwrap().without(&[".git".into(), ".git/hooks".into(), ".config/git".into()]).unwrap(),
        Protection::new(["**".to_string(), "*".to_string()]).unwrap(),
    ]
}

#[test]
fn hostrun_matcher_agrees_with_the_old_globs_on_clean_paths() {
    let paths = clean_paths();
    for p in protections() {
        let old = Old::new(p.entries());
        for raw in &paths {
            let rel = Path::new(OsStr::from_bytes(raw));
            for kind in [Kind::Dir, Kind::Other] {
                assert_eq!(p.matches(rel, kind), old.matches(rel, kind), "{rel:?} {kind:?} with {:?}", p.entries());
            }
        }
    }
}

/// On paths with `.`, `..` or empty names, or a trailing `/`, the new matcher protects every
/// path the old one did, and may protect more: names are compared as the file system resolves
/// them (`.git/hooks/./x` is beneath `.git/hooks`; `sub/.git/` as a file is the pointer `.git`),
/// where the old globs compared text. More is the safe side.
#[test]
fn hostrun_matcher_protects_at_least_what_the_old_globs_did_on_odd_paths() {
    let paths = odd_paths();
    for p in protections() {
        let old = Old::new(p.entries());
        for raw in &paths {
            let rel = Path::new(OsStr::from_bytes(raw));
            for kind in [Kind::Dir, Kind::Other] {
                if let Some(was) = old.matches(rel, kind) {
                    assert!(p.matches(rel, kind).is_some(), "{rel:?} {kind:?}: was protected by {was}, with {:?}", p.entries());
                }
            }
        }
    }
}
