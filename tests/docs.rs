//! The commands in the docs run, or say why not. Every fenced block whose info string's first
//! word is a shell (`sh`, `bash`, `shell`, `console`, `zsh`, `fish`) in README.md, docs/*.md
//! and examples/*/README.md carries one mark after that word (docs/development.md, "Commands
//! in the docs"):
//!
//! - `run` or `run=DIR`: this test runs it, each line a command (`console`: each `$ ` line),
//!   in a fresh empty directory or a fresh copy of DIR, with the `workcell` under test first
//!   on `PATH` and `HOME` a fresh directory. A line must exit 0, or what its trailing comment
//!   says (`# exit 1: …`). `needs=docker` skips the block where Docker is not available (a
//!   failure when `WORKCELL_REQUIRE_DOCKER=1`).
//! - `tested-by=tests/FILE.rs`: another test runs it; that file must exist and name the doc.
//! - `no_run: WHY`: not run, with the reason right there.
//!
//! Other blocks (YAML, JSON, output) are not commands and need no mark.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Info-string first words that make a block a command block.
const SHELLS: &[&str] = &["sh", "bash", "shell", "console", "zsh", "fish"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fenced block: where it starts (1-based line of its opening fence), its info string and
/// its body.
#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    info: String,
    body: Vec<String>,
}

impl Block {
    fn lang(&self) -> &str {
        self.info.split_whitespace().next().unwrap_or("")
    }

    fn is_command(&self) -> bool {
        SHELLS.contains(&self.lang())
    }

    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

#[derive(Debug, PartialEq)]
enum Mark {
    Run { dir: Option<String>, needs_docker: bool },
    TestedBy(String),
    NoRun(String),
}

/// The fenced blocks of `text` (`file` names it in messages). A fence may be indented (a block
/// in a list item); it closes at a line of the same fence characters.
fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(String, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence: String = trimmed.chars().take_while(|c| *c == '`' || *c == '~').collect();
        match open.take() {
            Some((f, block)) if trimmed.trim_end() == f => out.push(block),
            Some((f, mut block)) => {
                block.body.push(line.to_string());
                open = Some((f, block));
            }
            None if fence.len() >= 3 => {
                let info = trimmed[fence.len()..].trim().to_string();
                open = Some((fence, Block { file: file.to_string(), line: i + 1, info, body: Vec::new() }));
            }
            None => {}
        }
    }
    assert!(open.is_none(), "{file}: a fenced block is never closed");
    out
}

/// What to write, for a block that is not marked right.
fn how_to_mark(b: &Block) -> String {
    let lang = b.lang();
    format!(
        "{}: mark this `{lang}` block after its first word: `{lang} run` (or `{lang} run=examples/NAME`) to have tests/docs.rs run it, \
         `{lang} tested-by=tests/FILE.rs` when another test runs it, or `{lang} no_run: WHY` (see docs/development.md, \"Commands in the docs\")",
        b.at()
    )
}

/// The mark of a command block, or what is wrong with it.
fn mark(b: &Block) -> Result<Mark, String> {
    let rest = b.info[b.lang().len()..].trim();
    if let Some(after) = rest.strip_prefix("no_run") {
        return match after.strip_prefix(':').map(str::trim) {
            Some(why) if !why.is_empty() => Ok(Mark::NoRun(why.to_string())),
            _ => Err(format!("{}: `no_run` needs its reason after a colon: `{} no_run: needs macOS`", b.at(), b.lang())),
        };
    }
    let (mut run, mut tested_by, mut needs_docker) = (None, None, false);
    for word in rest.split_whitespace() {
        match word.split_once('=') {
            None if word == "run" => run = Some(None),
            Some(("run", dir)) if !dir.is_empty() => run = Some(Some(dir.to_string())),
            Some(("tested-by", file)) if !file.is_empty() => tested_by = Some(file.to_string()),
            Some(("needs", "docker")) => needs_docker = true,
            _ => return Err(format!("{}: unknown mark `{word}`. {}", b.at(), how_to_mark(b))),
        }
    }
    match (run, tested_by) {
        (Some(dir), None) => Ok(Mark::Run { dir, needs_docker }),
        (None, Some(file)) if !needs_docker => Ok(Mark::TestedBy(file)),
        (None, None) => Err(how_to_mark(b)),
        _ => Err(format!("{}: one of `run`, `tested-by=` or `no_run:` per block (`needs=` goes with `run`)", b.at())),
    }
}

/// README.md, docs/*.md and examples/*/README.md, as paths relative to the repository.
fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    let mut listed = |dir: &str, keep: &dyn Fn(&Path) -> Option<PathBuf>| {
        let mut found: Vec<String> = std::fs::read_dir(root().join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .flatten()
            .filter_map(|e| keep(&e.path()))
            .filter(|p| p.is_file())
            .map(|p| p.strip_prefix(root()).expect("inside the repository").display().to_string())
            .collect();
        found.sort();
        files.extend(found);
    };
    listed("docs", &|p| (p.extension().is_some_and(|e| e == "md")).then(|| p.to_path_buf()));
    listed("examples", &|p| Some(p.join("README.md")));
    files
}

/// Every command block of the docs with its mark (or what is wrong with it).
fn command_blocks() -> Vec<(Block, Result<Mark, String>)> {
    doc_files()
        .into_iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(root().join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            blocks(&file, &text)
        })
        .filter(Block::is_command)
        .map(|b| {
            let m = mark(&b);
            (b, m)
        })
        .collect()
}

#[test]
fn every_command_block_is_marked() {
    let all = command_blocks();
    assert!(all.len() >= 10, "found only {} command blocks: is the doc list right?", all.len());
    let wrong: Vec<String> = all.iter().filter_map(|(_, m)| m.as_ref().err().cloned()).collect();
    assert!(wrong.is_empty(), "command blocks that are not marked right:\n{}", wrong.join("\n"));
}

#[test]
fn tested_by_names_a_test_that_names_the_doc() {
    for (b, m) in command_blocks() {
        let Ok(Mark::TestedBy(test)) = m else { continue };
        assert!(test.starts_with("tests/") && test.ends_with(".rs"), "{}: tested-by={test} is not a test file (tests/NAME.rs)", b.at());
        let text = std::fs::read_to_string(root().join(&test)).unwrap_or_else(|e| panic!("{}: tested-by={test}: {e}", b.at()));
        assert!(text.contains(&b.file), "{}: tested-by={test}, but {test} never names {}: say there which doc block it runs", b.at(), b.file);
    }
}

/// The quick start is the README's first `sh` block, which tests/as_root.rs runs
/// (`support::first_sh_block_lines`).
#[test]
fn the_quick_start_is_the_readmes_first_sh_block() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let first = blocks("README.md", &text).into_iter().find(|b| b.lang() == "sh").expect("README.md has an sh block");
    assert_eq!(mark(&first), Ok(Mark::TestedBy("tests/as_root.rs".into())), "{}", first.at());
    let lines = support::first_sh_block_lines(&root().join("README.md"));
    assert_eq!(
        lines,
        support::doc_lines::command_lines(&first.body, first.lang() == "console"),
        "support::first_sh_block_lines reads the block this test found"
    );
    assert!(lines.iter().any(|l| l.contains("workcell run line-count")), "{lines:?}");
}

/// The marks are read strictly: an unmarked, misspelt or unexplained block is an error.
#[test]
fn marks_are_read_strictly() {
    let text = "```sh\nls\n```\n```sh no_run\nls\n```\n```sh no_run: needs macOS\nls\n```\n```bash run=examples/report needs=docker\nls\n```\n\
                ```console tested-by=tests/egress.rs\n$ ls\n```\n```sh runn\nls\n```\n```sh run tested-by=tests/x.rs\nls\n```\n```yaml\na: 1\n```\n";
    let found: Vec<_> = blocks("t.md", text).into_iter().filter(Block::is_command).map(|b| mark(&b)).collect();
    assert_eq!(found.len(), 7, "{found:?}");
    assert!(found[0].as_ref().is_err_and(|e| e.contains("t.md:1:") && e.contains("`sh no_run: WHY`")), "{:?}", found[0]);
    assert!(found[1].as_ref().is_err_and(|e| e.contains("needs its reason")), "{:?}", found[1]);
    assert_eq!(found[2], Ok(Mark::NoRun("needs macOS".into())));
    assert_eq!(found[3], Ok(Mark::Run { dir: Some("examples/report".into()), needs_docker: true }));
    assert_eq!(found[4], Ok(Mark::TestedBy("tests/egress.rs".into())));
    assert!(found[5].as_ref().is_err_and(|e| e.contains("unknown mark `runn`")), "{:?}", found[5]);
    assert!(found[6].is_err(), "{:?}", found[6]);
}

#[test]
fn expected_statuses_come_from_the_comment() {
    assert_eq!(support::doc_lines::expected_status("workcell check a b   # exit 1: b is in no zone"), 1);
    assert_eq!(support::doc_lines::expected_status("workcell run x   # run a worker"), 0);
    assert_eq!(support::doc_lines::expected_status("true"), 0);
}

/// Runs one `run` block in a fresh directory with `backend` the one `auto` picks (for bwrap,
/// `DOCKER_HOST` names a socket that does not exist); panics with the block's place and the
/// output of the line that did not exit as documented.
fn run_block(b: &Block, dir: Option<&str>, backend: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(tmp.path()).expect("canonical tempdir");
    // Workers (as root: the test worker) pass every directory above a zone on bwrap.
    std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let home = base.join("home");
    std::fs::create_dir(&home).expect("home");
    let work = match dir {
        Some(dir) => {
            let src = root().join(dir);
            assert!(src.is_dir(), "{}: run={dir} is not a directory of the repository", b.at());
            let to = base.join(src.file_name().expect("a named directory"));
            let st = Command::new("cp").arg("-r").arg(&src).arg(&to).status().expect("cp");
            assert!(st.success(), "cp -r {}", src.display());
            to
        }
        None => {
            let to = base.join("work");
            std::fs::create_dir(&to).expect("work dir");
            to
        }
    };
    support::give_to_worker(&work);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_workcell"));
    let path = format!("{}:{}", bin.parent().expect("bin dir").display(), std::env::var("PATH").unwrap_or_default());
    let lines = support::doc_lines::command_lines(&b.body, b.lang() == "console");
    assert!(!lines.is_empty(), "{}: a run block without commands", b.at());
    for line in &lines {
        let mut cmd = assert_cmd::Command::new("sh");
        if backend == "bwrap" {
            cmd.env("DOCKER_HOST", format!("unix://{}/no-docker.sock", base.display()));
        }
        let out = cmd
            .args(["-c", line])
            .current_dir(&work)
            .env("PATH", &path)
            .env("HOME", &home)
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("XDG_DATA_HOME")
            .timeout(std::time::Duration::from_secs(600))
            .output()
            .expect("sh");
        let want = support::doc_lines::expected_status(line);
        let shown = format!(
            "{} ({backend}): `{line}` exited {:?}, the doc says {want}\nstdout:\n{}\nstderr:\n{}",
            b.at(),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("{shown}");
        assert_eq!(out.status.code(), Some(want), "{shown}");
    }
}

#[test]
fn run_blocks_run_as_written() {
    // Non-short-circuit: both gates apply (a required backend that is missing fails here).
    let (docker, bwrap) = (support::backend_ready("docker"), support::backend_ready("bwrap"));
    let mut ran = 0;
    // Each block runs on every backend that works here: as `auto` picks docker when it
    // answers, bwrap is reached by hiding docker.
    for (backend, ready) in [("docker", docker), ("bwrap", bwrap)] {
        if !ready {
            continue;
        }
        for (b, m) in command_blocks() {
            let Ok(Mark::Run { dir, needs_docker }) = m else { continue };
            if needs_docker && backend != "docker" {
                continue;
            }
            run_block(&b, dir.as_deref(), backend);
            ran += 1;
        }
    }
    assert!(ran > 0 || !(docker | bwrap), "no run block was run");
}
