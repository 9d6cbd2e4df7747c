//! `workcell unverified`: the zones whose check after a run could not finish
//! (`run::unverified`), and, once a person has looked, forgetting one.

use std::path::PathBuf;

use clap::Args;

use super::out::outln;
use super::{Cli, CliError};
use crate::run::unverified::{self, DIR};

/// Arguments of `workcell unverified`.
#[derive(Debug, Args)]
pub struct UnverifiedArgs {
    /// After you have looked at it: runs may use this zone directory again.
    #[arg(long, value_name = "DIR")]
    pub clear: Option<PathBuf>,
}

/// Lists the project's unverified zones, or clears one.
pub fn run(cli: &Cli, args: &UnverifiedArgs) -> Result<i32, CliError> {
    let cwd = std::env::current_dir().map_err(|e| CliError::Usage(format!("cannot read the current directory: {e}")))?;
    // A project's, or for `--zone` runs without one the current directory's (as `run`).
    let project_dir = match (&cli.config, crate::config::find_config(&cwd)) {
        (None, None) => cwd,
        _ => super::load_project(cli.config.as_deref())?.dir,
    };
    if let Some(zone) = &args.clear {
        return match unverified::clear(&project_dir, zone) {
            Ok(true) => {
                outln!("{}: runs may use it again", crate::term::escape(&zone.to_string_lossy()));
                Ok(0)
            }
            Ok(false) => Err(CliError::Usage(format!(
                "{} is not unverified in {} (`workcell unverified` lists those that are)",
                crate::term::escape(&zone.to_string_lossy()),
                crate::term::escape(&project_dir.to_string_lossy())
            ))),
            Err(e) => Err(CliError::Failed(format!("cannot clear {}: {e}", crate::term::escape(&zone.to_string_lossy())))),
        };
    }
    let markers = unverified::list(&project_dir).map_err(|e| CliError::Failed(format!("cannot read {DIR}: {e}")))?;
    if markers.is_empty() {
        outln!("no zone is unverified");
    }
    for (_, m) in markers {
        let host = m.host.as_deref().unwrap_or("(its directory has no name now)");
        outln!(
            "{} (mounted at {}): the check after run {} could not finish: {}",
            crate::term::escape(host),
            crate::term::escape(&m.target),
            crate::term::escape(&m.run_id),
            crate::term::escape(&m.why)
        );
    }
    Ok(0)
}
