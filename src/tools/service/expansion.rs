//! Dynamic expansion (`dynamic: true`, the `request_access` tool): a directory outside the sandbox granted for the session
//! after a person's consent, and the `zones:` lines that would make it permanent.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::{json, Value};

use super::{ToolError, ToolService};
use crate::sandbox::ZoneMode;
use crate::term::escape;
use crate::tools::approval::{Action, ApprovalRequest};

/// Directories granted during this session by dynamic expansion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Expansion {
    pub host_dir: PathBuf,
    pub zone: String,
    pub mode: ZoneMode,
}

impl ToolService {
    /// Grants access to a directory outside the sandbox for this session, after
    /// consent, read and write separately. Only with `dynamic: true`.
    pub fn request_access(&self, path: &str, mode: &str) -> Result<Value, ToolError> {
        if !self.project.dynamic {
            return Err(ToolError::Refused(
                "access outside the sandbox cannot be granted: this project does not enable dynamic expansion (sandbox.dynamic: true)".into(),
            ));
        }
        let mode = match mode {
            "ro" => ZoneMode::Ro,
            "rw" => ZoneMode::Rw,
            other => return Err(ToolError::Refused(format!("mode '{other}' is not 'ro' or 'rw'"))),
        };
        let p = std::path::Path::new(path);
        if let Some(c) = path.chars().find(|c| c.is_control()) {
            return Err(ToolError::Refused(format!(
                "'{}' contains the control character U+{:04X}; paths cannot contain control characters",
                escape(path),
                c as u32
            )));
        }
        if !p.is_absolute() {
            return Err(ToolError::Refused(format!("'{}' must be an absolute host path", escape(path))));
        }
        // Resolved once, into a handle: the prompt shows the path that handle has, and the
        // grant is that handle, so swapping a link in while the person reads changes nothing.
        // Opened as the worker: a directory its user cannot reach is not granted through us.
        let opened = self
            .sandbox()
            .identity()
            .run(|| crate::sandbox::open_for_expansion(p))
            .map_err(|e| ToolError::Failed(e.to_string()))?
            .map_err(|e| ToolError::Refused(format!("'{}' cannot be used: {e}", escape(path))))?;
        let dir = opened.path.clone();
        if dir.to_string_lossy().chars().any(|c| c.is_control()) {
            return Err(ToolError::Refused(format!("'{}' resolves to a directory whose path contains control characters; it cannot be granted", escape(path))));
        }
        // Before asking: a person's yes does not make `/` or a docker socket's directory safe.
        crate::sandbox::hostdir::check("requested", std::os::fd::AsFd::as_fd(&opened.dir), mode, &dir).map_err(|e| ToolError::Refused(e.to_string()))?;
        let verb = if mode == ZoneMode::Rw { "read and write" } else { "read" };
        self.consent(ApprovalRequest::new(Action::Expand, format!("{} ({verb}) for this session", dir.display()), format!("{}:{mode}", dir.display())))?;
        let zone = format!("granted-{}", self.expansions().len() + 1);
        let mut sb = self.sandbox.write().map_err(|_| ToolError::Failed("the sandbox lock was poisoned".into()))?;
        let expanded = sb.with_extra_mount(&zone, opened, mode).map_err(ToolError::Sandbox)?;
        *sb = expanded;
        if let Ok(mut e) = self.expansions.lock() {
            e.push(Expansion { host_dir: dir.clone(), zone: zone.clone(), mode });
        }
        self.audit
            .record("expansion", json!({"host_dir": dir, "zone": zone, "mode": mode}))
            .map_err(|e| ToolError::Failed(format!("cannot write the audit log: {e}")))?;
        Ok(json!({"granted": format!("/{zone}"), "mode": mode, "note": format!("the directory is reachable at /{zone} for this session")}))
    }

    /// The `zones:` lines that would make this session's expansions permanent.
    pub fn expansion_summary(&self) -> Option<String> {
        let e = self.expansions();
        if e.is_empty() {
            return None;
        }
        let mut s = String::from("To keep the access granted in this session, add to workcell.yaml under sandbox.zones:\n");
        for x in e {
            let path = x.host_dir.to_string_lossy();
            // Quoted: a directory name holding `, mode: rw} #` must not rewrite the line.
            s.push_str(&format!("    {}: {{path: {}, mode: {}}}\n", escape(&x.zone), crate::term::quoted(&path), x.mode));
        }
        Some(s)
    }
}
