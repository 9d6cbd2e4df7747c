//! `workcell completions SHELL` and `workcell man`: shell completion scripts and a man page,
//! both generated from the command line's own definition, so they cannot drift from it.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::{Cli, CliError};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Prints the completion script of `args.shell`.
pub fn completions(args: &CompletionsArgs) -> Result<i32, CliError> {
    let mut cmd = without_hidden(Cli::command());
    // Generated into memory first: clap_complete panics when its writer fails, and a
    // closed stdout must end workcell quietly (see `out`).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "workcell", &mut script);
    super::out::write_all(&script);
    Ok(0)
}

/// Prints workcell's man page (section 1, roff).
pub fn man() -> Result<i32, CliError> {
    let mut page = Vec::new();
    clap_mangen::Man::new(Cli::command()).render(&mut page).map_err(|e| CliError::Failed(format!("cannot render the man page: {e}")))?;
    super::out::write_all(&page);
    Ok(0)
}

/// workcell's command line without its hidden subcommands (`__agent`, `__reap`: workcell
/// runs them itself). Bash's generator lists every subcommand, hidden or not, and clap
/// cannot remove one, so the top level is rebuilt from its visible parts (only it has any).
fn without_hidden(cmd: clap::Command) -> clap::Command {
    let visible: Vec<clap::Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned().collect();
    clap::Command::new("workcell")
        .version(env!("WORKCELL_VERSION"))
        .about(cmd.get_about().cloned().unwrap_or_default())
        .args(cmd.get_arguments().cloned())
        .subcommand_required(cmd.is_subcommand_required_set())
        .subcommands(visible)
}
