//! The configuration files as written: `workcell.yaml` and `workers/NAME.worker` front
//! matter. Unknown keys are refused; values that later checks point at carry their
//! line/column (`Spanned`). `workcell schema` prints the JSON Schema of these types.

use std::collections::BTreeMap;
use std::fmt;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

use crate::sandbox::{Approval, Delivery, ZoneMode};

mod zones;
pub use zones::{RawListedZone, RawZone, RawZones};

/// `workcell.yaml`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "workcell.yaml")]
pub struct RawProject {
    /// Which host directories workers may see, and how.
    pub sandbox: Option<RawSandbox>,
    /// Defaults for every worker (image, backend, limits).
    pub defaults: Option<RawDefaults>,
    /// What `workcell plan --backend kubernetes` renders with: namespace, image, a volume
    /// claim per zone, RuntimeClasses.
    pub kubernetes: Option<super::kubernetes::RawKubernetes>,
}

/// `sandbox:` of the project: exactly one of `zones`, `paths`, `root` (mapping) or `mounts`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    /// `direct` (zones are real directories, the default) or `sandboxed` (zones are created
    /// under `root`, default `.sandbox`).
    #[schemars(with = "Option<SandboxMode>")]
    pub mode: Option<Spanned<SandboxMode>>,
    /// A string: the folder of sandboxed mode. A mapping: the root form (one directory as `/`).
    #[schemars(with = "Option<RootSchema>")]
    pub root: Option<Spanned<RootField>>,
    /// Named zones, mounted at `/<name>`: a mapping by name, or a list of zones each with
    /// its `name` (the form worker files use).
    #[schemars(with = "Option<zones::ZonesSchema>")]
    pub zones: Option<Spanned<RawZones>>,
    /// Named paths, mounted at `/<name>`: zones written with `root:` and approval flags.
    #[schemars(with = "Option<BTreeMap<String, RawPathEntry>>")]
    pub paths: Option<Spanned<IndexMap<Spanned<String>, RawPathEntry>>>,
    /// The normalised form: explicit host directory and mount point.
    #[schemars(with = "Option<Vec<RawMount>>")]
    pub mounts: Option<Spanned<Vec<RawMount>>>,
    /// `false` (default: loopback only), `true` (the host's network, unfiltered), or rules
    /// `{allow, deny, hosts, ask}` enforced by workcell's egress proxy.
    #[schemars(with = "Option<NetworkSchema>")]
    pub network: Option<Spanned<RawNetwork>>,
    /// Refuse to run without an OS or container boundary (default true).
    pub require_os_sandbox: Option<bool>,
    /// Allow access outside the sandbox to be granted during a session (`request_access`).
    pub dynamic: Option<bool>,
    /// Files the host runs, protected in every writable zone in addition to the defaults
    /// (`.git/hooks`, `.git/config`, `.envrc`, `.vscode`, shell start-up files, ...): paths
    /// relative to a zone, matched at any depth, `*` within a name and `**` across names.
    #[schemars(with = "Option<Vec<String>>")]
    pub protect: Option<Vec<Spanned<String>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    Direct,
    Sandboxed,
}

/// Approval settings of a zone or mount.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawApproval {
    pub read: Option<Approval>,
    pub write: Option<Approval>,
    pub delete: Option<Approval>,
}

/// One entry of `paths:`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPathEntry {
    /// Host directory, relative to the project.
    #[schemars(with = "String")]
    pub root: Spanned<String>,
    pub mode: Option<ZoneMode>,
    pub suffixes: Option<Vec<String>>,
    /// Largest file that may be read or written: bytes, or a size such as `10m`.
    #[schemars(with = "Option<SizeSchema>")]
    pub max_file_bytes: Option<Spanned<String>>,
    /// `true` → reads ask; `false` → reads proceed (default false).
    pub read_approval: Option<bool>,
    /// `true` → writes and deletes ask (default); `false` → pre-approved.
    pub write_approval: Option<bool>,
    /// Protected entries to turn off for this zone only, e.g. `[.vscode]`; each must be an
    /// entry in force (a default or one of `sandbox.protect`).
    #[schemars(with = "Option<Vec<String>>")]
    pub unprotect: Option<Vec<Spanned<String>>>,
}

/// The root form: one directory as virtual `/`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRoot {
    #[schemars(with = "String")]
    pub root: Spanned<String>,
    pub readonly: Option<bool>,
    pub suffixes: Option<Vec<String>>,
    /// Largest file that may be read or written: bytes, or a size such as `10m`.
    #[schemars(with = "Option<SizeSchema>")]
    pub max_file_bytes: Option<Spanned<String>>,
    pub approval: Option<RawApproval>,
    /// Protected entries to turn off for this zone only, e.g. `[.vscode]`; each must be an
    /// entry in force (a default or one of `sandbox.protect`).
    #[schemars(with = "Option<Vec<String>>")]
    pub unprotect: Option<Vec<Spanned<String>>>,
}

/// `root:` is either the sandboxed-mode folder or the root form.
#[derive(Debug)]
pub enum RootField {
    Folder(String),
    Form(RawRoot),
}

/// Schema stand-in for [`RootField`].
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum RootSchema {
    Folder(String),
    Form(RawRoot),
}

impl<'de> Deserialize<'de> for RootField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RootField;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a folder name (sandboxed mode) or a mapping {root, readonly, suffixes, max_file_bytes}")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RootField, E> {
                Ok(RootField::Folder(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RootField, A::Error> {
                RawRoot::deserialize(de::value::MapAccessDeserializer::new(map)).map(RootField::Form)
            }
        }
        d.deserialize_any(V)
    }
}

/// One entry of `mounts:`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = mount_aliases)]
pub struct RawMount {
    /// Host directory, relative to the project (also accepted as `host_path`).
    #[serde(alias = "host_path")]
    #[schemars(with = "String")]
    pub host: Spanned<String>,
    /// Absolute mount point, e.g. `/data` (also accepted as `mount_point`).
    #[serde(alias = "mount_point")]
    #[schemars(with = "String")]
    pub at: Spanned<String>,
    pub mode: Option<ZoneMode>,
    pub suffixes: Option<Vec<String>>,
    /// Largest file that may be read or written: bytes, or a size such as `10m`.
    #[schemars(with = "Option<SizeSchema>")]
    pub max_file_bytes: Option<Spanned<String>>,
    pub approval: Option<RawApproval>,
    pub delivery: Option<Delivery>,
    /// Protected entries to turn off for this zone only, e.g. `[.vscode]`; each must be an
    /// entry in force (a default or one of `sandbox.protect`).
    #[schemars(with = "Option<Vec<String>>")]
    pub unprotect: Option<Vec<Spanned<String>>>,
}

/// The schema of `mounts:` entries with the serde aliases schemars leaves out: `host_path`
/// for `host` and `mount_point` for `at`, exactly one of each pair required.
fn mount_aliases(schema: &mut schemars::Schema) {
    let pairs = [("host", "host_path"), ("at", "mount_point")];
    if let Some(props) = schema.get_mut("properties").and_then(|p| p.as_object_mut()) {
        for (name, alias) in pairs {
            if let Some(mut field) = props.get(name).cloned() {
                field["description"] = format!("Another name for `{name}`.").into();
                props.insert(alias.into(), field);
            }
        }
    }
    schema.remove("required");
    let one_of_each: Vec<serde_json::Value> =
        pairs.iter().map(|(name, alias)| serde_json::json!({ "oneOf": [{ "required": [name] }, { "required": [alias] }] })).collect();
    schema.insert("allOf".into(), one_of_each.into());
}

/// Schema stand-in for sizes: a number of bytes or a size with a unit (`10m`).
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(in crate::config) enum SizeSchema {
    Bytes(u64),
    Text(String),
}

/// `network:` — a switch, or rules enforced by workcell's egress proxy.
#[derive(Debug)]
pub enum RawNetwork {
    Enabled(bool),
    Rules(RawNetworkRules),
}

/// `network: {allow, deny, hosts, ask}`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawNetworkRules {
    /// Destinations the worker may reach: `pypi.org`, `*.pythonhosted.org` (names below it),
    /// `api.example.com:8443`, `10.20.0.7`, `10.20.0.0/16`, `[2001:db8::1]:443`. Without a
    /// port: 80 and 443; `:*` for every port.
    #[schemars(with = "Option<Vec<String>>")]
    pub allow: Option<Vec<Spanned<String>>>,
    /// Destinations refused even when `allow` covers them (same forms; without a port: every
    /// port).
    #[schemars(with = "Option<Vec<String>>")]
    pub deny: Option<Vec<Spanned<String>>>,
    /// Static names, used instead of DNS: `{registry.internal: 10.20.0.7}`. An allow entry
    /// still decides whether the name may be reached; its address may then be a private one.
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub hosts: Option<IndexMap<Spanned<String>, Spanned<String>>>,
    /// `true`: a destination no entry lists asks a person (the run's approvals) instead of
    /// being refused.
    #[schemars(with = "Option<bool>")]
    pub ask: Option<Spanned<bool>>,
}

#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum NetworkSchema {
    Enabled(bool),
    Rules(RawNetworkRules),
}

impl<'de> Deserialize<'de> for RawNetwork {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawNetwork;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("true, false, or {allow: [...], deny: [...], hosts: {name: address}, ask: false}")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<RawNetwork, E> {
                Ok(RawNetwork::Enabled(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawNetwork, A::Error> {
                RawNetworkRules::deserialize(de::value::MapAccessDeserializer::new(map)).map(RawNetwork::Rules)
            }
        }
        d.deserialize_any(V)
    }
}

/// Which boundary runs a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, JsonSchema, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// Docker if the daemon answers, else bwrap, else Seatbelt on macOS.
    #[default]
    Auto,
    Docker,
    Bwrap,
    Seatbelt,
    /// No isolation; only when explicitly chosen.
    None,
    /// Rendered only (`workcell plan --backend kubernetes`): no run uses it, and the config
    /// files do not take it (a run would always be refused).
    #[serde(skip_deserializing)]
    Kubernetes,
}

/// `defaults:` of the project.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDefaults {
    /// `host` (default: the host's own tools, read-only) or a local image name.
    #[schemars(with = "Option<String>")]
    pub image: Option<Spanned<String>>,
    pub backend: Option<BackendChoice>,
    pub limits: Option<RawLimits>,
    /// The host user workers run as when workcell runs as root: `UID` or `UID:GID`, never 0
    /// (default: the owner of the project directory, or 65534:65534 when root owns it).
    #[schemars(with = "Option<String>")]
    pub user: Option<Spanned<String>>,
    /// The Docker runtime workers run under, e.g. `runsc` (gVisor); any runtime the daemon
    /// lists (`workcell doctor`). Unset: the daemon's default (usually runc). Docker only.
    #[schemars(with = "Option<RuntimeSchema>")]
    pub runtime: Option<Spanned<String>>,
    /// Environment for every worker, under the worker's own `env:` and `--env`. A `null`
    /// value (`NAME:` alone) passes the host's variable through.
    #[schemars(with = "Option<IndexMap<String, Option<String>>>")]
    pub env: Option<IndexMap<Spanned<String>, Option<String>>>,
}

// Schema stand-in for a runtime name, with the characters `config::parse_runtime` accepts.
/// A Docker runtime name as the daemon lists it (`workcell doctor`).
#[derive(JsonSchema)]
#[allow(dead_code)]
struct RuntimeSchema(#[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"))] String);

// Numbers are read as text and checked by `config::limits`, the parsers the command-line
// flags use too, so that both refuse the same values with the same words.
/// Resource limits. Durations like `30s`, `5m`; sizes like `512m`, `2g`.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub memory: Option<Spanned<String>>,
    /// A number of CPUs, from 0.01 to 1024.
    #[schemars(with = "Option<f64>")]
    pub cpus: Option<Spanned<String>>,
    /// Processes, from 1 to 4194304.
    #[schemars(with = "Option<i64>")]
    pub pids: Option<Spanned<String>>,
}

/// Front matter of `workers/NAME.worker`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "NAME.worker front matter")]
pub struct RawWorker {
    #[schemars(with = "Option<String>")]
    pub name: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub description: Option<Spanned<String>>,
    /// `host` or a local image name.
    #[schemars(with = "Option<String>")]
    pub image: Option<Spanned<String>>,
    /// A folder with a Dockerfile, relative to the project.
    #[schemars(with = "Option<String>")]
    pub build: Option<Spanned<String>>,
    /// The command to run: a list of arguments, or one string split like a shell would.
    #[schemars(with = "Option<CommandSchema>")]
    pub command: Option<RawCommand>,
    /// Environment for the worker, over `defaults.env`. A `null` value passes the host's variable through.
    #[schemars(with = "Option<IndexMap<String, Option<String>>>")]
    pub env: Option<IndexMap<Spanned<String>, Option<String>>>,
    /// Working directory inside the sandbox (default: the first writable zone, else `/tmp`).
    #[schemars(with = "Option<String>")]
    pub workdir: Option<Spanned<String>>,
    /// What the worker needs; no declaration means no file access.
    #[schemars(with = "Option<RawWorkerSandbox>")]
    pub sandbox: Option<Spanned<RawWorkerSandbox>>,
    /// `false` turns the network off for this worker; `true` keeps the project's network;
    /// rules `{allow, deny, hosts, ask}` narrow it (never widen: each allow entry must be
    /// covered by the project's).
    #[schemars(with = "Option<NetworkSchema>")]
    pub network: Option<Spanned<RawNetwork>>,
    pub backend: Option<BackendChoice>,
    /// The Docker runtime this worker runs under (e.g. `runsc`). Under a project
    /// `defaults.runtime` a worker may only repeat that one; a child worker runs under its
    /// caller's runtime and may not name another.
    #[schemars(with = "Option<RuntimeSchema>")]
    pub runtime: Option<Spanned<String>>,
    /// Workers this one may call (`*` for any).
    #[schemars(with = "Option<Vec<String>>")]
    pub workers: Option<Vec<Spanned<String>>>,
    pub shell_rules: Option<Vec<RawShellRule>>,
    pub shell_default: Option<RawRule>,
    pub tool_rules: Option<IndexMap<String, RawRule>>,
    pub limits: Option<RawLimits>,
    pub attachment_policy: Option<RawAttachmentPolicy>,
}

/// A worker's sandbox declaration: zone requests (`zones:`) or allowlists (`allow_read`, `allow_write`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawWorkerSandbox {
    pub zones: Option<Vec<RawZoneRequest>>,
    pub inherit: Option<bool>,
    #[schemars(with = "Option<Vec<String>>")]
    pub allow_read: Option<Vec<Spanned<String>>>,
    #[schemars(with = "Option<Vec<String>>")]
    pub allow_write: Option<Vec<Spanned<String>>>,
    #[schemars(with = "Option<bool>")]
    pub readonly: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawZoneRequest {
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    /// `ro` (default) or `rw`.
    #[schemars(with = "Option<ZoneMode>")]
    pub mode: Option<Spanned<ZoneMode>>,
}

/// A shell rule: a command pattern and what it may do.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawShellRule {
    /// Command prefix, matched on whole words (`git status`).
    pub pattern: String,
    /// Path arguments of a matching command must lie inside these sandbox paths.
    #[serde(default)]
    pub sandbox_paths: Vec<String>,
    #[serde(default = "yes")]
    pub approval_required: bool,
    #[serde(default = "yes")]
    pub allowed: bool,
}

fn yes() -> bool {
    true
}

/// `allowed` / `approval_required` pair of `shell_default` and `tool_rules`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    pub allowed: Option<bool>,
    pub approval_required: Option<bool>,
}

/// Limits on files passed to a child worker.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawAttachmentPolicy {
    #[schemars(with = "Option<usize>")]
    pub max_attachments: Option<Spanned<String>>,
    #[schemars(with = "Option<SizeSchema>")]
    pub max_total_bytes: Option<Spanned<String>>,
    pub allowed_suffixes: Option<Vec<String>>,
    pub denied_suffixes: Option<Vec<String>>,
}

/// `command:` as a list or a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawCommand {
    Line(String),
    Args(Vec<String>),
}

#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum CommandSchema {
    Line(String),
    Args(Vec<String>),
}

impl<'de> Deserialize<'de> for RawCommand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawCommand;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a command line string or a list of arguments")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawCommand, E> {
                Ok(RawCommand::Line(v.to_string()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawCommand, A::Error> {
                let mut args = Vec::new();
                while let Some(a) = seq.next_element::<String>()? {
                    args.push(a);
                }
                Ok(RawCommand::Args(args))
            }
        }
        d.deserialize_any(V)
    }
}

/// The JSON Schemas of both file kinds, as `workcell schema` prints them.
pub fn schemas() -> serde_json::Value {
    serde_json::json!({
        "workcell.yaml": schemars::schema_for!(RawProject),
        "worker": schemars::schema_for!(RawWorker),
    })
}
