//! Attachments of `call_worker`, as the tool service checks them: against the caller's
//! sandbox and the child's policy before a single byte is copied, held as open handles
//! (`tools::attach` stages them into the child's broker directory).

use super::ToolError;
use crate::config::Worker;
use crate::sandbox::Sandbox;

/// Attachments per call when the child's `attachment_policy` sets no `max_attachments`.
pub const MAX_ATTACHMENTS: usize = 64;
/// Total attachment bytes per call when the policy sets no `max_total_bytes` (64 MiB).
pub const MAX_ATTACHMENT_BYTES: u64 = 64 << 20;

/// A file handed to a child worker: its name and an open handle to it, taken beneath the
/// caller's sandbox (so a symlink swapped in after the check cannot substitute another
/// file), with its size when checked.
#[derive(Debug)]
pub struct Attachment {
    pub name: String,
    pub file: std::fs::File,
    pub size: u64,
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
