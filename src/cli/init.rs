//! `workcell init`: a starter project that `workcell check` and `workcell run` accept as is.

use std::path::{Path, PathBuf};

use cap_std::fs::Dir;

use clap::Args;

use super::out::outln;
use super::CliError;
use crate::config::CONFIG_FILE;

#[derive(Debug, Args)]
pub struct InitArgs {
    /// Directory to initialise (default: the current one).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// Overwrite an existing workcell.yaml and example worker.
    #[arg(long)]
    pub force: bool,
}

pub const STARTER_CONFIG: &str = r#"# workcell project: which host directories workers may see.
# Reference: docs/configuration.md in workcell's repository.
sandbox:
  zones:
    data:                 # mounted at /data, read-only
      path: ./data
      mode: ro
    out:                  # mounted at /out; writes need no prompt
      path: ./out
      mode: rw
      approval:
        write: preApproved
        delete: preApproved
  network: false          # or true, or rules: {allow: [pypi.org, "*.pythonhosted.org"]}
  require_os_sandbox: true
defaults:
  image: host             # the host's own tools, read-only; no registry needed
  limits:
    timeout: 5m
    memory: 1g
    pids: 256
"#;

pub const STARTER_WORKER: &str = r#"---
description: Counts the lines of every file in /data and writes a report to /out.
sandbox:
  zones:
    - name: data
      mode: ro
    - name: out
      mode: rw
command: ["sh", "-c", "wc -l /data/* > /out/line-counts.txt && cat /out/line-counts.txt"]
limits:
  timeout: 30s
---
Count the lines of each input file and write the totals to /out/line-counts.txt.
"#;

/// Writes `bytes` to `name` in `dir` atomically: a new temporary file (`O_EXCL`, random
/// name) beside it, then a rename. Both beneath `dir`'s handle, so a symlink planted in the
/// project (by a worker whose zone it is) cannot lead the write outside.
pub fn write_atomic(dir: &Dir, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    let mut attempt = 0;
    let (tmp, mut file) = loop {
        let mut r = [0u8; 8];
        getrandom::fill(&mut r).map_err(|e| std::io::Error::other(e.to_string()))?;
        let tmp = format!(".{name}.{}.tmp", r.iter().map(|b| format!("{b:02x}")).collect::<String>());
        match dir.open_with(&tmp, &opts) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 10 => attempt += 1,
            Err(e) => return Err(e),
        }
    };
    let result = file.write_all(bytes).and_then(|_| file.sync_all()).and_then(|_| dir.rename(&tmp, dir, name));
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}

/// As root: the user workers will run as, and why — the owner of the directory when it is
/// not root (the person whose project it is), else nobody. `None` as a normal user.
fn as_root_worker(root: &Dir) -> Option<(crate::plan::UserSpec, &'static str)> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let st = rustix::fs::fstat(root).ok();
    Some(match st {
        Some(st) if st.st_uid != 0 && st.st_gid != 0 => (crate::plan::UserSpec { uid: st.st_uid, gid: st.st_gid }, "the owner of this directory"),
        Some(st) if st.st_uid != 0 => (crate::plan::UserSpec { uid: st.st_uid, gid: crate::plan::FALLBACK_USER.gid }, "the owner of this directory"),
        _ => (crate::plan::FALLBACK_USER, "nobody: this directory is root's"),
    })
}

/// Gives the directory `name`, just made by us, to `user`: through a handle opened without
/// following links, so a link planted in its place is not followed.
fn give(root: &Dir, name: &str, user: crate::plan::UserSpec) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::openat(root, name, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(user.uid)), Some(rustix::fs::Gid::from_raw(user.gid)))?;
    Ok(())
}

pub fn run(args: &InitArgs) -> Result<i32, CliError> {
    let dir = &args.dir;
    let config = dir.join(CONFIG_FILE);
    let worker = dir.join("workers").join("line-count.worker");
    let fail = |what: &Path, e: std::io::Error| CliError::Failed(format!("cannot write {}: {e}", what.display()));
    // The directory named is the user's; everything in it is reached beneath its handle.
    std::fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    let root = Dir::open_ambient_dir(dir, cap_std::ambient_authority()).map_err(|e| fail(dir, e))?;
    for (f, rel) in [(&config, Path::new(CONFIG_FILE)), (&worker, Path::new("workers/line-count.worker"))] {
        if root.symlink_metadata(rel).is_ok() && !args.force {
            return Err(CliError::Usage(format!("{} already exists; pass --force to overwrite it", f.display())));
        }
    }
    // As root, workers run as another user (never 0): named in the YAML, and the zone
    // directories made here are theirs. The control files (workcell.yaml, workers/) stay ours.
    let worker_user = as_root_worker(&root);
    for d in ["data", "out", "workers"] {
        let made = match root.create_dir(d) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(fail(&dir.join(d), e)),
        };
        if let (true, Some((u, _)), true) = (made, worker_user, d != "workers") {
            give(&root, d, u).map_err(|e| fail(&dir.join(d), e))?;
        }
    }
    let workers = root.open_dir("workers").map_err(|e| fail(&dir.join("workers"), e))?;
    let config_text = match worker_user {
        Some((u, why)) => STARTER_CONFIG.replacen(
            "defaults:\n",
            &format!(
                "defaults:\n  user: \"{}:{}\"        # workcell runs as root: workers run as this host user ({why}); it owns data/ and out/\n",
                u.uid, u.gid
            ),
            1,
        ),
        None => STARTER_CONFIG.to_string(),
    };
    write_atomic(&root, CONFIG_FILE, config_text.as_bytes()).map_err(|e| fail(&config, e))?;
    write_atomic(&workers, "line-count.worker", STARTER_WORKER.as_bytes()).map_err(|e| fail(&worker, e))?;
    outln!("wrote {} and {}", config.display(), worker.display());
    outln!("next: put files in {}/data, then `workcell check /data` or `workcell run line-count`", dir.display());
    Ok(0)
}
