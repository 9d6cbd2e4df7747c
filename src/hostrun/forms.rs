//! The `**/FORM` patterns of protected entries ([`super::Protection`]), matched against a
//! path relative to an area's root. Nearly every form is names and whole-component
//! wildcards (`*`: one name, `**`: any number of them): those are matched here, component by
//! component, with nothing to build. The rest (`*.sh`, `?`, `[ab]`, `{x,y}`, escapes) go into
//! one `globset::GlobSet` — building its regexes was most of a bwrap launch's own work when
//! every form went there.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::Part;

/// One component of a form matched here.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Name(OsString),
    /// `*`: exactly one name, whatever it is.
    One,
    /// `**`: any number of names; at the end of a form, at least one (as globset has it:
    /// `a/**` matches `a/x`, not `a`).
    Any,
}

#[derive(Debug, Clone)]
struct Form {
    segs: Vec<Seg>,
    entry: usize,
    part: Part,
}

/// Every form of a protection.
#[derive(Debug, Clone)]
pub(super) struct Forms {
    /// Forms ending in a name, by that name: a path is only compared with those ending in
    /// its own last name.
    by_last: HashMap<OsString, Vec<Form>>,
    /// Forms ending in `*` or `**`.
    open_ended: Vec<Form>,
    /// The forms with wildcards inside a name, and what each belongs to.
    set: GlobSet,
    owners: Vec<(usize, Part)>,
}

/// A form that cannot be used: its entry's index and the reason.
pub(super) struct BadForm {
    pub entry: usize,
    pub reason: String,
}

impl Forms {
    /// The forms `(form, entry, part)`, each meaning `**/form`.
    pub(super) fn build(forms: impl IntoIterator<Item = (String, usize, Part)>) -> Result<Forms, BadForm> {
        let mut out = Forms { by_last: HashMap::new(), open_ended: Vec::new(), set: GlobSet::empty(), owners: Vec::new() };
        let mut builder = GlobSetBuilder::new();
        for (form, entry, part) in forms {
            match segments(&form) {
                Some(segs) => {
                    let f = Form { segs, entry, part };
                    match f.segs.last() {
                        Some(Seg::Name(last)) => out.by_last.entry(last.clone()).or_default().push(f),
                        _ => out.open_ended.push(f),
                    }
                }
                None => {
                    let glob = GlobBuilder::new(&format!("**/{form}"))
                        .literal_separator(true)
                        .backslash_escape(true)
                        .build()
                        .map_err(|err| BadForm { entry, reason: err.kind().to_string() })?;
                    builder.add(glob);
                    out.owners.push((entry, part));
                }
            }
        }
        if !out.owners.is_empty() {
            out.set = builder.build().map_err(|err| BadForm { entry: out.owners[0].0, reason: err.to_string() })?;
        }
        Ok(out)
    }

    /// The `(entry, part)` of every form `path` matches.
    pub(super) fn matches(&self, path: &Path) -> Vec<(usize, Part)> {
        // The text split at each `/`, empty and `.` names kept: a glob reads the text so
        // (`*` matches the empty name of `x//y`), and so must these forms.
        let comps: Vec<&OsStr> = path.as_os_str().as_bytes().split(|b| *b == b'/').map(OsStr::from_bytes).collect();
        let keyed = comps.last().and_then(|last| self.by_last.get(*last)).map_or(&[][..], Vec::as_slice);
        let mut hits: Vec<(usize, Part)> =
            keyed.iter().chain(&self.open_ended).filter(|f| (0..=comps.len()).any(|k| fits(&f.segs, &comps[k..]))).map(|f| (f.entry, f.part)).collect();
        if !self.owners.is_empty() {
            hits.extend(self.set.matches(path).into_iter().map(|g| self.owners[g]));
        }
        hits
    }
}

/// `form` as components when every one is a name without wildcards, `*` or `**`; `None`
/// when globset must judge it.
fn segments(form: &str) -> Option<Vec<Seg>> {
    form.split('/')
        .map(|c| match c {
            "*" => Some(Seg::One),
            "**" => Some(Seg::Any),
            _ if c.contains(['*', '?', '[', ']', '{', '}', '\\']) => None,
            _ => Some(Seg::Name(OsString::from(c))),
        })
        .collect()
}

/// Whether `segs` match all of `comps`.
fn fits(segs: &[Seg], comps: &[&OsStr]) -> bool {
    match segs.split_first() {
        None => comps.is_empty(),
        Some((Seg::Any, [])) => !comps.is_empty(),
        Some((Seg::Any, rest)) => (0..=comps.len()).any(|k| fits(rest, &comps[k..])),
        Some((Seg::One, rest)) => !comps.is_empty() && fits(rest, &comps[1..]),
        Some((Seg::Name(n), rest)) => comps.first().is_some_and(|c| *c == n.as_os_str()) && fits(rest, &comps[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The forms matched here agree with globset's reading of `**/FORM` (literal separators).
    #[test]
    fn agrees_with_globset() {
        let forms = ["a", "a/b", ".git/worktrees/*/commondir", ".git/modules/**/config", "x/**", "**/y", "a/*", "*", "a/**/b/**"];
        let names = ["a", "b", "x", "y", ".git", "worktrees", "modules", "config", "commondir", "w"];
        // Every path of up to four names from `names`.
        let mut paths: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        for _ in 0..3 {
            let longer: Vec<String> = paths.iter().flat_map(|p| names.iter().map(move |n| format!("{p}/{n}"))).collect();
            paths.extend(longer);
        }
        for form in forms {
            let ours = Forms::build([(form.to_string(), 0, Part::Itself)]).ok().expect("builds");
            assert!(ours.owners.is_empty(), "{form} is matched without globset");
            let theirs = GlobBuilder::new(&format!("**/{form}")).literal_separator(true).backslash_escape(true).build().expect("glob").compile_matcher();
            for p in &paths {
                assert_eq!(!ours.matches(Path::new(p)).is_empty(), theirs.is_match(p), "form {form}, path {p}");
            }
        }
    }

    #[test]
    fn wildcards_inside_a_name_go_to_globset() {
        let f = Forms::build([("build/*.sh".to_string(), 0, Part::Itself), ("[ab]c".to_string(), 1, Part::Itself)]).ok().expect("builds");
        assert_eq!(f.owners.len(), 2);
        assert_eq!(f.matches(Path::new("x/build/run.sh")), [(0, Part::Itself)]);
        assert_eq!(f.matches(Path::new("bc")), [(1, Part::Itself)]);
        assert!(f.matches(Path::new("build/sub/run.sh")).is_empty());
    }
}
