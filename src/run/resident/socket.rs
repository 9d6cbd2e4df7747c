//! The agent's one connection: `crate::agent::host` (shared with `pool::warm`), its errors
//! told as a session sandbox's.

pub(super) use crate::agent::host::agent_pidfd;
use crate::agent::host::SocketError;
pub(crate) use crate::agent::host::{verify_agent, AgentSocket};

use super::ResidentError;

impl From<SocketError> for ResidentError {
    fn from(e: SocketError) -> ResidentError {
        match e {
            SocketError::Socket(e) => ResidentError::Socket(e),
            SocketError::StartTimeout => ResidentError::StartTimeout,
            SocketError::Agent(e) => ResidentError::Agent(e),
            SocketError::Impostor { uid, pid } => ResidentError::Impostor { uid, pid },
        }
    }
}
