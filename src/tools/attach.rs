//! Attachments of `call_worker`: checked against the caller's sandbox and the child's policy
//! before a single byte is copied, held as open handles, and streamed into the child's broker
//! directory (a tmpfs: memory). Limits on count and total size are checked on sizes measured
//! on the held handles, before any copy; a process-wide budget bounds what concurrent and
//! nested calls may have staged at once.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

use super::broker::{Broker, BrokerError};
use super::service::ToolError;
use crate::config::Worker;
use crate::sandbox::Sandbox;

/// Attachments per call when the child's `attachment_policy` sets no `max_attachments`.
pub const MAX_ATTACHMENTS: usize = 64;
/// Total attachment bytes per call when the policy sets no `max_total_bytes` (64 MiB).
pub const MAX_ATTACHMENT_BYTES: u64 = 64 << 20;
/// Attachment bytes all child runs of this workcell may have staged at once (256 MiB):
/// parallel or nested `call_worker` calls share it.
pub const STAGED_BUDGET: u64 = 256 << 20;

static STAGED: AtomicU64 = AtomicU64::new(0);

/// Why attachments could not be handed to a child worker.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The process-wide staging budget cannot hold `bytes` more: `held` are staged already.
    #[error(
        "attachments of {bytes} bytes do not fit: child runs of this session already hold {held} bytes of attachments, and at most {STAGED_BUDGET} bytes (256 MiB) may be staged at once. Wait for them to finish or attach less"
    )]
    Budget { bytes: u64, held: u64 },
    #[error("cannot stage the attachment '{0}': not a file name")]
    NotAName(String),
    /// The file's size changed between the check and the copy.
    #[error("the attachment '{name}' changed while it was handed over ({checked} bytes when checked, {copied} read); attach it again")]
    Changed { name: String, checked: u64, copied: u64 },
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// A file handed to a child worker: its name and an open handle to it, taken beneath the
/// caller's sandbox (so a symlink swapped in after the check cannot substitute another
/// file), with its size when checked.
#[derive(Debug)]
pub struct Attachment {
    pub name: String,
    pub file: std::fs::File,
    pub size: u64,
}

/// Bytes reserved in the process-wide staging budget; released when dropped.
#[derive(Debug)]
pub struct Reservation(u64);

impl Reservation {
    /// Reserves `bytes`, or says why not.
    pub fn take(bytes: u64) -> Result<Reservation, AttachError> {
        STAGED
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |now| now.checked_add(bytes).filter(|t| *t <= STAGED_BUDGET))
            .map(|_| Reservation(bytes))
            .map_err(|held| AttachError::Budget { bytes, held })
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        STAGED.fetch_sub(self.0, Ordering::SeqCst);
    }
}

/// Checks `paths` against the caller's sandbox `sb` and `child`'s attachment policy and opens
/// them; nothing is read yet. Count, names, suffixes and the total size are all judged here.
pub fn check(sb: &Sandbox, child: &Worker, paths: &[String]) -> Result<Vec<Attachment>, ToolError> {
    let policy = &child.attachment_policy;
    let max_count = policy.max_attachments.unwrap_or(MAX_ATTACHMENTS);
    if paths.len() > max_count {
        let why = if policy.max_attachments.is_some() { "its attachment_policy.max_attachments" } else { "workcell's default limit" };
        return Err(ToolError::Refused(format!("worker '{}' accepts at most {max_count} attachments ({why}); {} given", child.name, paths.len())));
    }
    let max_total = policy.max_total_bytes.unwrap_or(MAX_ATTACHMENT_BYTES);
    let mut names: Vec<String> = Vec::new();
    // Paths and policy first: nothing is opened for a request that is refused anyway.
    for a in paths {
        sb.resolve(a)?;
        sb.check_suffix(a)?;
        let lower = a.to_lowercase();
        if let Some(allowed) = &policy.allowed_suffixes {
            if !allowed.iter().any(|s| lower.ends_with(&crate::sandbox::normalise_suffix(s))) {
                return Err(ToolError::Refused(format!(
                    "worker '{}' accepts attachments with suffixes {} only; '{a}' is not one",
                    child.name,
                    allowed.join(", ")
                )));
            }
        }
        if let Some(denied) = &policy.denied_suffixes {
            if denied.iter().any(|s| lower.ends_with(&crate::sandbox::normalise_suffix(s))) {
                return Err(ToolError::Refused(format!("worker '{}' does not accept '{a}': suffixes {} are denied", child.name, denied.join(", "))));
            }
        }
        let name = a.trim_end_matches('/').rsplit(['/', ':']).next().unwrap_or("attachment").to_string();
        if name.is_empty() || name == "." || name == ".." {
            return Err(ToolError::Refused(format!("attachment '{a}' does not name a file")));
        }
        if names.contains(&name) {
            return Err(ToolError::Refused(format!("two attachments are named '{name}'; attachments need distinct file names")));
        }
        names.push(name);
    }
    let mut total = 0u64;
    let mut out = Vec::with_capacity(paths.len());
    for (a, name) in paths.iter().zip(names) {
        let (file, size) = sb.open_file(a).map_err(|e| match e {
            crate::sandbox::SandboxError::WrongKind { .. } => ToolError::Refused(format!("attachment '{a}' is not a file")),
            other => other.into(),
        })?;
        total = total.saturating_add(size);
        if total > max_total {
            let why = if policy.max_total_bytes.is_some() { "its attachment_policy.max_total_bytes" } else { "workcell's default limit, 64 MiB" };
            return Err(ToolError::Refused(format!(
                "attachments exceed {max_total} bytes in total, the most worker '{}' accepts ({why}); '{a}' brings the total to {total} bytes",
                child.name
            )));
        }
        out.push(Attachment { name, file, size });
    }
    Ok(out)
}

/// Streams each attachment from its handle into `attachments/` of the broker directory:
/// never more than the size checked (a file that grew since is refused), one piece at a
/// time. On error the caller drops the broker, which removes the directory.
pub fn stage(broker: &Broker, attachments: &[Attachment]) -> Result<(), AttachError> {
    broker.stage_dir("attachments")?;
    for a in attachments {
        // A name only (the last component of the path the caller gave): never `..` or a
        // path, which would leave the attachments directory.
        if a.name.is_empty() || a.name == "." || a.name == ".." || a.name.contains('/') {
            return Err(AttachError::NotAName(a.name.clone()));
        }
        let mut limited = (&a.file).take(a.size.saturating_add(1));
        let copied = broker.stage_from(&format!("attachments/{}", a.name), &mut limited)?;
        if copied != a.size {
            return Err(AttachError::Changed { name: a.name.clone(), checked: a.size, copied });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_budget_is_shared_and_released() {
        let big = Reservation::take(200 << 20).expect("fits");
        let err = Reservation::take(100 << 20).expect_err("over the budget");
        assert!(matches!(err, AttachError::Budget { bytes, .. } if bytes == 100 << 20), "{err}");
        assert!(err.to_string().contains("256 MiB"), "{err}");
        drop(big);
        drop(Reservation::take(100 << 20).expect("fits again"));
    }
}
