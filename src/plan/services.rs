//! What a run's services add to its plan: the tool broker's directory and the exec agent's
//! socket directory and program, each bound read-only by handle, and where they appear in the
//! worker (the agent's paths live here, below `crate::agent`, which re-exports them).

use std::path::Path;
use std::sync::Arc;

use super::{agent_program, Held, LaunchPlan, PlanMount};

/// Where the broker directory (socket, call input, attachments) appears in a worker.
pub const BROKER_MOUNT_POINT: &str = "/run/workcell";

/// The host name a worker sees, on every backend.
pub const WORKER_HOSTNAME: &str = "workcell";

/// Where the exec agent's directory (holding the socket) appears inside the sandbox.
pub const AGENT_SOCKET_DIR: &str = "/run/workcell-agent";
/// The agent's socket's file name in that directory.
pub const AGENT_SOCKET_NAME: &str = "agent.sock";
/// Where the agent's program (this binary, bound read-only) appears inside the sandbox.
pub const AGENT_PROGRAM: &str = "/run/workcell-agent-bin";
/// The agent's tasks while a warm run's command runs (`crate::agent::Request::stdio`): its
/// own thread, the one waiting for the command, the one watching workcell's connection.
/// They count against the sandbox's process limit.
pub const AGENT_STDIO_TASKS: i64 = 3;

impl LaunchPlan {
    /// Mounts the broker directory read-only at [`BROKER_MOUNT_POINT`] and tells the worker
    /// where the socket is and which token to send. (A Unix socket on a read-only mount can
    /// still be connected to.)
    pub fn attach_broker(&mut self, dir: &Path, token: &str) {
        // Bound by handle like the zones (a backend that cannot falls back to the path, which
        // only this process can change: the directory is private).
        let held = std::fs::File::open(dir).ok().map(|f| Held(Arc::new(f.into())));
        self.mounts.push(PlanMount { source: dir.to_path_buf(), target: BROKER_MOUNT_POINT.to_string(), read_only: true, held });
        self.env.insert("WORKCELL_BROKER".to_string(), format!("{BROKER_MOUNT_POINT}/broker.sock"));
        self.env.insert("WORKCELL_TOKEN".to_string(), token.to_string());
    }

    /// Binds the exec agent's socket directory `dir` and this binary (the agent's program)
    /// read-only, both by handle (see `crate::agent`).
    pub fn attach_agent(&mut self, dir: &Path) -> std::io::Result<()> {
        let exe = agent_program::reachable(dir, self.user)?;
        for (source, target) in [(dir.to_path_buf(), AGENT_SOCKET_DIR), (exe, AGENT_PROGRAM)] {
            let held = Held(Arc::new(std::fs::File::open(&source)?.into()));
            self.mounts.push(PlanMount { source, target: target.to_string(), read_only: true, held: Some(held) });
        }
        Ok(())
    }
}
