//! A person's review of one copy-delivered zone's changes (`--review`, or a zone whose writes
//! ask): the pending summary on a terminal reset from whatever the worker left set, then one
//! question: publish all (`y`), none (`n`), go through the changes one by one (`p`), or look
//! at the start of a staged file first (`v NAME`). There is no session choice: the answer
//! covers this delivery and nothing after it.

use std::collections::HashSet;
use std::io::Read;

use crate::delivery::collect::Staging;
use crate::delivery::publish::{Changes, Entry, Op};
use crate::delivery::summary::display;
use crate::delivery::Summary;
use crate::tools::approval::{Ask, PromptError};

/// How much of a staged file `v NAME` shows: the first lines of its first bytes.
pub const PREVIEW_LINES: usize = 20;
pub const PREVIEW_BYTES: u64 = 2048;

/// Why a delivery's changes were not published (the summary's `withheld`).
#[derive(Debug, thiserror::Error)]
pub(super) enum Withheld {
    #[error("the zone's writes need approval and --strict denies every approval")]
    Strict,
    #[error("the reviewer said no")]
    SaidNo,
    #[error("nobody could be asked: {0}")]
    NobodyToAsk(#[from] PromptError),
}

/// Shows `pending` (what `changes` would do) and asks; on `Ok` the changes left in `changes`
/// are the ones to publish (those declined one by one were taken out).
/// `rows` is the terminal's height: the worker's last screen is scrolled away first.
pub(super) fn review(tty: &mut dyn Ask, rows: u16, changes: &mut Changes, staging: &Staging, pending: &Summary) -> Result<(), Withheld> {
    // The worker wrote to this terminal last: what it drew or left set must not frame, hide
    // or stand beside ours as if it were workcell's.
    tty.say(&format!("{}{}\n", crate::term::reset_and_clear("review of what the worker left", rows), pending.text()))?;
    loop {
        let Some(answer) = tty.ask(&question(pending))? else { return Err(Withheld::SaidNo) };
        match answer.as_str() {
            "y" | "yes" => return Ok(()),
            "" | "n" | "no" => return Err(Withheld::SaidNo),
            "p" | "per change" => return one_by_one(tty, changes, staging),
            a if a == "v" || a.starts_with("v ") => {
                let name = match a.strip_prefix("v ") {
                    Some(n) => n.to_string(),
                    None => match tty.ask("workcell: name of the file to view: ")? {
                        Some(n) => n,
                        None => return Err(Withheld::SaidNo),
                    },
                };
                let shown = match changes.entries().find(|e| e.file.is_some() && names(e, &name)) {
                    Some(e) => preview(staging, &e),
                    None => format!("workcell: no added or changed file is called {}\n", display(&name)),
                };
                tty.say(&shown)?;
            }
            _ => {}
        }
    }
}

/// The question about the whole delivery, saying what it does: a review of deletions only
/// asks to delete.
pub(super) fn question(s: &Summary) -> String {
    let zone = crate::term::escape(&s.zone);
    let (added, changed, deleted) = (s.added.total(), s.changed.total(), s.deleted.total());
    let (dirs_added, dirs_gone) = (s.dirs_added.total(), s.dirs_deleted.total());
    let what = if added + changed + dirs_added == 0 {
        let dirs = if dirs_gone > 0 { format!(" and {dirs_gone} directory(ies)") } else { String::new() };
        format!("delete {deleted} file(s){dirs} from zone {zone}, as the worker did")
    } else {
        let dirs = if dirs_added + dirs_gone > 0 { format!(", {dirs_added} new dir(s), {dirs_gone} dir(s) gone") } else { String::new() };
        format!("publish these changes ({added} added, {changed} changed, {deleted} deleted{dirs}) into zone {zone}")
    };
    format!("workcell: {what}? [y]es, all / [n]o / [p]er change / [v]iew NAME: ")
}

/// True when `name` (as typed) is the entry's name, raw or as the summary shows it.
fn names(e: &Entry<'_>, name: &str) -> bool {
    let raw = e.path.join("/");
    raw == name || display(&raw) == name
}

/// Asks about each change; `n` (or an empty answer) declines it, and a declined directory
/// takes what would go beneath it along without asking. End of input declines everything.
fn one_by_one(tty: &mut dyn Ask, changes: &mut Changes, staging: &Staging) -> Result<(), Withheld> {
    let mut no: HashSet<(Op, Vec<String>)> = HashSet::new();
    let mut dirs_no: Vec<Vec<String>> = Vec::new();
    for e in changes.entries() {
        if dirs_no.iter().any(|d| e.path.starts_with(d) && d.len() < e.path.len()) {
            continue;
        }
        loop {
            let Some(answer) = tty.ask(&entry_question(&e))? else { return Err(Withheld::SaidNo) };
            match answer.as_str() {
                "y" | "yes" => break,
                "" | "n" | "no" => {
                    no.insert((e.op, e.path.to_vec()));
                    if matches!(e.op, Op::MakeDir) {
                        dirs_no.push(e.path.to_vec());
                    }
                    break;
                }
                "v" => tty.say(&preview(staging, &e))?,
                _ => {}
            }
        }
    }
    changes.decline(|e| !no.contains(&(e.op, e.path.to_vec())));
    Ok(())
}

/// `workcell: add notes/run.sh (120 bytes, executable)? [y]es / [n]o / [v]iew: `.
fn entry_question(e: &Entry<'_>) -> String {
    let name = display(&e.path.join("/"));
    let (verb, slash) = match e.op {
        Op::Add => ("add", ""),
        Op::Change => ("change", ""),
        Op::Delete => ("delete", ""),
        Op::MakeDir => ("create the directory", "/"),
        Op::RemoveDir => ("remove the directory", "/"),
    };
    match e.file {
        Some(f) => {
            let x = if f.executable { ", executable" } else { "" };
            format!("workcell: {verb} {name} ({} bytes{x})? [y]es / [n]o / [v]iew: ", f.size)
        }
        None => format!("workcell: {verb} {name}{slash}? [y]es / [n]o: "),
    }
}

/// The first [`PREVIEW_LINES`] lines of the first [`PREVIEW_BYTES`] of a staged file, each
/// escaped (the worker wrote them), between lines naming what is shown.
pub(super) fn preview(staging: &Staging, e: &Entry<'_>) -> String {
    let name = display(&e.path.join("/"));
    let Some(f) = e.file else { return format!("workcell: {name} has no content to show (only added or changed files have)\n") };
    let mut head = Vec::new();
    if let Err(err) = staging.open(&f.staged).and_then(|file| file.take(PREVIEW_BYTES).read_to_end(&mut head)) {
        return format!("workcell: cannot read the staged content of {name}: {err}\n");
    }
    let text = String::from_utf8_lossy(&head);
    let mut out = format!("──── workcell: start of {name} ({} bytes in all) ────\n", f.size);
    let mut shown = 0;
    for line in text.split('\n').take(PREVIEW_LINES) {
        out.push_str(&crate::term::escape(line));
        out.push('\n');
        shown += line.len() + 1;
    }
    if (shown as u64) < f.size {
        out.push_str("…\n");
    }
    out.push_str("──── workcell: end of the preview ────\n");
    out
}
