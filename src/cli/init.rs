//! `workcell init`: a starter project that `workcell check` and `workcell run` accept as is.

use std::path::{Path, PathBuf};

use clap::Args;

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
# Reference: README.md, "Configuration reference".
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
  network: false
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
command: ["sh", "-c", "wc -l /data/* > /out/line-counts.txt; cat /out/line-counts.txt"]
limits:
  timeout: 30s
---
Count the lines of each input file and write the totals to /out/line-counts.txt.
"#;

/// Writes `bytes` to `path` atomically (temporary file in the same directory, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

pub fn run(args: &InitArgs) -> Result<i32, CliError> {
    let dir = &args.dir;
    let config = dir.join(CONFIG_FILE);
    let worker = dir.join("workers").join("line-count.worker");
    for f in [&config, &worker] {
        if f.exists() && !args.force {
            return Err(CliError::Usage(format!("{} already exists; pass --force to overwrite it", f.display())));
        }
    }
    let fail = |what: &Path, e: std::io::Error| CliError::Failed(format!("cannot write {}: {e}", what.display()));
    for d in [dir.join("data"), dir.join("out"), dir.join("workers")] {
        std::fs::create_dir_all(&d).map_err(|e| fail(&d, e))?;
    }
    write_atomic(&config, STARTER_CONFIG.as_bytes()).map_err(|e| fail(&config, e))?;
    write_atomic(&worker, STARTER_WORKER.as_bytes()).map_err(|e| fail(&worker, e))?;
    println!("wrote {} and {}", config.display(), worker.display());
    println!("next: put files in {}/data, then `workcell check /data` or `workcell run line-count`", dir.display());
    Ok(0)
}
