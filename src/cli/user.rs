//! `--user UID[:GID]`: the worker's host user for one run, as `defaults.user` in the YAML.

use super::CliError;
use crate::config::Project;
use crate::plan::UserSpec;

/// Why `--user` cannot be used here.
#[derive(Debug, thiserror::Error)]
pub enum UserFlagError {
    /// A normal user cannot give its workers another uid: the kernel would not let it.
    #[error("--user {}:{} cannot be used as a normal user: workers run as you ({}:{}); only workcell run as root can give them another user", want.uid, want.gid, me.uid, me.gid)]
    NotRoot { want: UserSpec, me: UserSpec },
}

/// Applies `--user` to `project`, so that the run, its shell commands and its child workers
/// all run as that user. As a normal user it may only name yourself (a no-op).
pub fn apply(project: &mut Project, flag: Option<UserSpec>) -> Result<(), CliError> {
    let Some(want) = flag else { return Ok(()) };
    let me = UserSpec { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw() };
    if me.uid != 0 && want != me {
        return Err(CliError::Usage(UserFlagError::NotRoot { want, me }.to_string()));
    }
    project.defaults.user = Some(want);
    Ok(())
}
