//! `encoding: "base64"` for `read_file` and `write_file`: binary files travel as base64 of
//! their bytes, within the same windows and limits as text.

use base64::Engine;
use serde_json::{json, Value};

use super::super::approval::Action;
use super::{ToolError, ToolService, DEFAULT_MAX_CHARS};

/// How many bytes `content` (standard base64, padded) stands for, from its length alone:
/// exact for valid base64, and what the size limits judge before anything is decoded.
pub(super) fn decoded_len(content: &str) -> u64 {
    let text = content.trim().as_bytes();
    let padding = text.iter().rev().take(2).take_while(|b| **b == b'=').count();
    let partial = match text.len() % 4 {
        2 => 1,
        3 => 2,
        _ => 0,
    };
    ((text.len() / 4 * 3 + partial) as u64).saturating_sub(padding as u64)
}

/// The bytes `content` (standard base64, padded) stands for, or a refusal naming the path.
pub(super) fn decode(path: &str, content: &str) -> Result<Vec<u8>, ToolError> {
    base64::engine::general_purpose::STANDARD.decode(content.trim()).map_err(|e| {
        ToolError::Refused(format!(
            "cannot write '{}': the content is not valid base64 ({e}); with encoding \"base64\" send the bytes as standard base64 with padding (RFC 4648), or leave encoding out to write text",
            crate::term::escape(path)
        ))
    })
}

impl ToolService {
    /// `write_file` with `encoding: "base64"`: the decoded size is judged against the zone's
    /// `max_file_bytes` from the text's length, before any of it is decoded.
    pub fn write_file_base64(&self, path: &str, content: &str) -> Result<Value, ToolError> {
        self.tool_allowed("write_file")?;
        self.sandbox().check_write_size(path, decoded_len(content))?;
        self.write_file_bytes(path, &decode(path, content)?)
    }

    /// `read_file` with `encoding: "base64"`: at most `max_bytes` (and never more than the
    /// text window, 200 000) bytes from byte `offset`.
    pub fn read_file_base64(&self, path: &str, max_bytes: usize, offset: usize) -> Result<Value, ToolError> {
        self.tool_allowed("read_file")?;
        let sb = self.sandbox();
        sb.resolve(path)?;
        self.gate(sb.mount_of(path), Action::Read, path)?;
        let r = sb.read_bytes(path, max_bytes.min(DEFAULT_MAX_CHARS), offset as u64)?;
        Ok(json!({
            "encoding": "base64",
            "content": base64::engine::general_purpose::STANDARD.encode(&r.bytes),
            "bytes": r.bytes.len(),
            "total_bytes": r.total_bytes,
            "truncated": r.truncated,
            "next_offset": r.next_offset,
        }))
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;

    #[test]
    fn decoded_len_is_the_decoded_size() {
        for n in 0..40 {
            let text = base64::engine::general_purpose::STANDARD.encode(vec![1u8; n]);
            assert_eq!(super::decoded_len(&text), n as u64, "{text}");
            assert_eq!(super::decoded_len(&format!(" {text}\n")), n as u64);
        }
    }
}
