//! Attachments of `call_worker`: checked against the caller's sandbox and the child's policy
//! before a single byte is copied, held as open handles, and streamed into the child's broker
//! directory (a tmpfs: memory). Limits on count and total size are checked on sizes measured
//! on the held handles, before any copy; a process-wide budget bounds what concurrent and
//! nested calls may have staged at once.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};

use super::broker::{Broker, BrokerError};
/// The check and the type it yields belong to the tool service, which calls it (below this
/// module and the broker); re-exported here with the staging.
pub use super::service::attachments::{check, Attachment, MAX_ATTACHMENTS, MAX_ATTACHMENT_BYTES};

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
