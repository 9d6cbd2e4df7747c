//! The JSON arguments of each tool, as both transports (broker, MCP) receive them; their doc
//! comments become the MCP schema's descriptions.

use serde::Deserialize;

/// A `read_file` request.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct ReadArgs {
    /// Sandbox path, e.g. /data/report.md.
    pub path: String,
    /// Characters to return (default and at most 200000); bytes with encoding "base64".
    pub max_chars: Option<usize>,
    /// Character offset to start from (default 0); a byte offset with encoding "base64".
    pub offset: Option<usize>,
    /// "utf-8" (default): the file as text; "base64": its bytes, base64-encoded (for binary files).
    #[serde(default)]
    pub encoding: Encoding,
}

/// How file content travels in a tool call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
pub enum Encoding {
    /// Text, as it is in the file.
    #[default]
    #[serde(rename = "utf-8")]
    Utf8,
    /// The file's bytes, standard base64 with padding.
    #[serde(rename = "base64")]
    Base64,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct WriteArgs {
    pub path: String,
    /// The file's new content: text, or base64 of its bytes with encoding "base64".
    pub content: String,
    /// "utf-8" (default) or "base64" (content is the base64 of the bytes to write).
    #[serde(default)]
    pub encoding: Encoding,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct EditArgs {
    pub path: String,
    /// Text that occurs exactly once in the file.
    pub old_text: String,
    pub new_text: String,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct PathArgs {
    pub path: String,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct ListArgs {
    /// Directory to list (default "/": the zones).
    pub path: Option<String>,
    /// Glob relative to it; '*' stays within one directory, '**' crosses them (default "*").
    pub pattern: Option<String>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct ShellArgs {
    /// A command line in POSIX shell syntax: pipelines, `&&`, `||`, `;`, redirections,
    /// subshells and `cd` are allowed; every program it runs is judged by the shell rules.
    pub command: String,
    /// Seconds before the command is killed (default 30).
    pub timeout: Option<u64>,
    /// Sandbox directory the command starts in, absolute or relative to the default (default:
    /// the sandbox's working directory); it must exist.
    pub cwd: Option<String>,
    /// Environment variables added for this command only (names of letters, digits and '_';
    /// not PATH, IFS, LD_*, GIT_*, WORKCELL_* or the shell's start-up variables).
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Text given to the command on its standard input, at most 1 MiB (default: an empty input).
    pub stdin: Option<String>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct CallWorkerArgs {
    /// Worker name (one this worker may call).
    pub name: String,
    /// Input text handed to the child.
    #[serde(default)]
    pub input: String,
    /// Sandbox paths of files the child receives read-only.
    #[serde(default)]
    pub attachments: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct AccessArgs {
    /// A host path outside the sandbox (absolute).
    pub path: String,
    /// "ro" or "rw".
    pub mode: String,
}
