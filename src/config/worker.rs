//! Worker files: `workers/NAME.worker`, YAML front matter between `---` lines, then the
//! instructions. Each worker's sandbox declaration is applied to the project sandbox at load
//! time, so an impossible declaration is refused with its line and column.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_saphyr::Spanned;

use super::raw::{BackendChoice, RawCommand, RawWorker, RawWorkerSandbox};
use super::text::{check_printable, check_prose};
use super::{limits_from, located, parse_count, parse_file_size, runtime_from, ConfigError, Diag, ImageRef, Limits, Project};
use crate::sandbox::{DeriveSpec, Sandbox, SandboxError, ZoneMode, ZoneRequest};

/// How a worker declares the sandbox it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxDecl {
    /// Nothing declared: no file access.
    None,
    /// `zones: [{name, mode}]`: only these zones, at most the parent's mode.
    Zones(Vec<ZoneRequest>),
    /// `{inherit, allow_read, allow_write, readonly}`: allowlists inside the parent's areas.
    Derive(DeriveSpec),
}

impl SandboxDecl {
    /// The sandbox a worker with this declaration gets when run (or called) from `parent`.
    pub fn apply(&self, parent: &Sandbox) -> Result<Sandbox, SandboxError> {
        match self {
            SandboxDecl::None => Ok(parent.empty_like()),
            SandboxDecl::Zones(z) => parent.derive_zones(z),
            SandboxDecl::Derive(spec) => parent.derive(spec),
        }
    }
}

/// A shell rule: a command pattern and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellRule {
    pub pattern: String,
    pub sandbox_paths: Vec<String>,
    pub approval_required: bool,
    pub allowed: bool,
}

/// An `allowed` / `approval_required` pair (`shell_default`, `tool_rules.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Rule {
    pub allowed: Option<bool>,
    pub approval_required: Option<bool>,
}

/// Limits on files passed to a child worker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttachmentPolicy {
    pub max_attachments: Option<usize>,
    pub max_total_bytes: Option<u64>,
    pub allowed_suffixes: Option<Vec<String>>,
    pub denied_suffixes: Option<Vec<String>>,
}

/// A validated worker definition with its effective sandbox under the project.
#[derive(Debug, Clone)]
pub struct Worker {
    pub name: String,
    pub file: PathBuf,
    pub description: Option<String>,
    pub image: Option<ImageRef>,
    pub command: Option<Vec<String>>,
    /// `None` values pass the host variable through.
    pub env: IndexMap<String, Option<String>>,
    pub workdir: Option<String>,
    pub decl: SandboxDecl,
    /// The worker's sandbox when run directly from the project.
    pub sandbox: Sandbox,
    pub backend: Option<BackendChoice>,
    /// The worker's own `runtime:` (the project's `defaults.runtime` applies when unset).
    pub runtime: Option<String>,
    pub workers: Vec<String>,
    pub shell_rules: Vec<ShellRule>,
    pub shell_default: Rule,
    pub tool_rules: IndexMap<String, Rule>,
    /// The worker's own limits merged over the project defaults.
    pub limits: Limits,
    pub attachment_policy: AttachmentPolicy,
    /// The body of the file: instructions handed to the worker.
    pub instructions: String,
}

/// Splits `---\n<yaml>\n---\n<body>`; returns (yaml, line offset of the yaml, body).
fn split_front_matter(text: &str) -> Option<(&str, u64, &str)> {
    let rest = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n"))?;
    let mut offset = 0usize;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            let yaml = &rest[..offset];
            let body = &rest[offset + line.len()..];
            return Some((yaml, 1, body));
        }
        offset += line.len();
    }
    None
}

/// Loads every `workers/*.worker` of the project, sorted by name: the workers that load,
/// and, by file stem, the refusal of each file that does not. One broken file stops only
/// the commands that use that worker.
pub(super) fn load_all(project: &Project) -> (BTreeMap<String, Worker>, BTreeMap<String, ConfigError>, BTreeMap<String, PathBuf>) {
    let dir = project.dir.join("workers");
    let mut out = BTreeMap::new();
    let mut broken = BTreeMap::new();
    let mut broken_builds = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(&dir) else { return (out, broken, broken_builds) };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "worker")).collect();
    files.sort();
    for f in files {
        match load(&f, project) {
            Ok(w) => {
                out.insert(w.name.clone(), w);
            }
            Err(e) => {
                let stem = f.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                if let Some(b) = build_of_refused(&f) {
                    broken_builds.insert(stem.clone(), project.dir.join(b));
                }
                broken.insert(stem, e);
            }
        }
    }
    (out, broken, broken_builds)
}

/// The `build:` of a refused worker file, read leniently (whatever else is wrong with it):
/// its folder stays protected while the file waits to be fixed.
fn build_of_refused(file: &Path) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct OnlyBuild {
        build: Option<String>,
    }
    let text = std::fs::read_to_string(file).ok()?;
    let (yaml, _, _) = split_front_matter(&text)?;
    match serde_saphyr::from_str::<OnlyBuild>(yaml) {
        Ok(only) => only.build,
        // Not even YAML (a file half edited): a top-level `build:` line still counts.
        Err(_) => {
            yaml.lines().find_map(|l| l.strip_prefix("build:")).map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_string()).filter(|v| !v.is_empty())
        }
    }
}

/// Parses one worker file against the project.
pub fn load(file: &Path, project: &Project) -> Result<Worker, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
        file: file.to_path_buf(),
        line: 0,
        column: 0,
        message: format!("cannot read the worker file: {e}"),
    })?;
    parse(&text, file, project)
}

/// Parses worker text as if read from `file`.
pub fn parse(text: &str, file: &Path, project: &Project) -> Result<Worker, ConfigError> {
    let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let (yaml, line_offset, body) = split_front_matter(text).ok_or_else(|| ConfigError {
        file: file.to_path_buf(),
        line: 1,
        column: 1,
        message: "a worker file starts with a '---' line, then YAML front matter, then a closing '---' line".into(),
    })?;
    let diag = Diag { file: file.to_path_buf(), line_offset };
    let raw: RawWorker = if yaml.trim().is_empty() { RawWorker::default() } else { diag.parse(yaml)? };

    // Text a person later reads (prompts, plans, the audit log) holds no control characters.
    if let Some(c) = super::text::forbidden_char(&stem) {
        return Err(diag.whole(format!("the worker's file name contains the control character {}; rename the file", super::text::describe(c))));
    }
    let printable = |what: &str, v: &Spanned<String>| check_printable(what, &v.value).map_err(|m| diag.spanned(v, m));
    for (what, v) in [("the worker name", &raw.name), ("image", &raw.image), ("build", &raw.build), ("workdir", &raw.workdir)] {
        if let Some(v) = v {
            printable(what, v)?;
        }
    }
    if let Some(d) = &raw.description {
        check_prose("the description", &d.value).map_err(|m| diag.spanned(d, m))?;
    }
    for w in raw.workers.iter().flatten() {
        printable("a name in workers", w)?;
    }
    if let Some(sb) = &raw.sandbox {
        for e in sb.value.allow_read.iter().chain(sb.value.allow_write.iter()).flatten() {
            printable("the path", e)?;
        }
    }
    let name = match &raw.name {
        Some(n) if n.value != stem => {
            return Err(diag.spanned(n, format!("worker name '{}' differs from its file name '{stem}.worker'; they must match", n.value)))
        }
        _ => stem,
    };
    let command = match &raw.command {
        None => None,
        Some(RawCommand::Args(a)) if a.is_empty() => return Err(diag.whole("command is an empty list; give at least the program")),
        Some(RawCommand::Args(a)) => Some(a.clone()),
        Some(RawCommand::Line(l)) => Some(
            shlex::split(l)
                .filter(|a| !a.is_empty())
                .ok_or_else(|| diag.whole(format!("command '{l}' cannot be split into arguments (unbalanced quotes?)")))?,
        ),
    };
    let decl = declaration(raw.sandbox.as_ref(), &diag, &project.sandbox)?;
    let access = super::network::worker_access(raw.network.as_ref(), &diag, project.sandbox.network_access())?;
    // Each entry was checked on its own above, where its refusal points at it; what is left
    // (the entries together) points at the declaration.
    let sandbox = decl
        .apply(&project.sandbox)
        .map_err(|e| match &raw.sandbox {
            Some(sb) => diag.spanned(sb, e),
            None => diag.whole(e),
        })?
        .network_narrowed_by(&access);
    let own_limits = raw.limits.as_ref().map(|l| limits_from(l, &diag)).transpose()?.unwrap_or_default();
    let attachment_policy = match raw.attachment_policy {
        Some(a) => AttachmentPolicy {
            max_attachments: located(a.max_attachments.as_ref(), "max_attachments", parse_count, &diag)?,
            max_total_bytes: located(a.max_total_bytes.as_ref(), "max_total_bytes", parse_file_size, &diag)?,
            allowed_suffixes: a.allowed_suffixes,
            denied_suffixes: a.denied_suffixes,
        },
        None => AttachmentPolicy::default(),
    };
    let image = match (&raw.image, &raw.build) {
        (Some(_), Some(b)) => return Err(diag.spanned(b, "give either image or build, not both")),
        (Some(i), None) => Some(ImageRef::from_name(&i.value)),
        (None, Some(b)) => Some(ImageRef::Build(project.dir.join(&b.value))),
        (None, None) => None,
    };
    Ok(Worker {
        name,
        file: file.to_path_buf(),
        description: raw.description.map(|d| d.value),
        image,
        command,
        env: super::env::env_from(raw.env.as_ref(), &diag)?,
        workdir: raw.workdir.map(|w| w.value),
        decl,
        sandbox,
        backend: raw.backend,
        runtime: worker_runtime(raw.runtime.as_ref(), project.defaults.runtime.as_deref(), &diag)?,
        workers: raw.workers.unwrap_or_default().into_iter().map(|w| w.value).collect(),
        shell_rules: raw
            .shell_rules
            .unwrap_or_default()
            .into_iter()
            .map(|r| ShellRule { pattern: r.pattern, sandbox_paths: r.sandbox_paths, approval_required: r.approval_required, allowed: r.allowed })
            .collect(),
        shell_default: raw.shell_default.map(|r| Rule { allowed: r.allowed, approval_required: r.approval_required }).unwrap_or_default(),
        tool_rules: raw
            .tool_rules
            .unwrap_or_default()
            .into_iter()
            .map(|(k, r)| (k, Rule { allowed: r.allowed, approval_required: r.approval_required }))
            .collect(),
        limits: own_limits.or(project.defaults.limits),
        attachment_policy,
        instructions: body.to_string(),
    })
}

/// The worker's own `runtime:`. Under a project `defaults.runtime` it may only repeat that
/// one (`inherit`): refused here already, with its location.
fn worker_runtime(raw: Option<&Spanned<String>>, default: Option<&str>, diag: &Diag) -> Result<Option<String>, ConfigError> {
    let named = runtime_from(raw, diag)?;
    if let (Some(r), Some(default)) = (raw, default) {
        if let Err(e) = super::inherit::inherit(None, named.clone(), default, super::inherit::Floor::Defaults) {
            return Err(diag.spanned(
                r,
                format!(
                    "runtime '{}' replaces the project's defaults.runtime '{default}'; a worker may repeat it, never replace it (workcell cannot tell whether '{}' isolates as well). Remove this line, or set it to '{default}'",
                    e.wanted, e.wanted
                ),
            ));
        }
    }
    Ok(named)
}

/// Validates a sandbox declaration against the project, pointing at the offending value.
fn declaration(spanned: Option<&Spanned<RawWorkerSandbox>>, diag: &Diag, project: &Sandbox) -> Result<SandboxDecl, ConfigError> {
    let Some(spanned) = spanned else { return Ok(SandboxDecl::None) };
    let raw = &spanned.value;
    let derive_form = raw.inherit.is_some() || raw.allow_read.is_some() || raw.allow_write.is_some() || raw.readonly.is_some();
    if let Some(zones) = &raw.zones {
        if derive_form {
            return Err(diag.spanned(spanned, "sandbox declares both zones and inherit/allow_read/allow_write/readonly; use one form"));
        }
        let defined: Vec<&str> = project.mounts().iter().map(|m| m.name.as_str()).collect();
        let mut reqs = Vec::new();
        for z in zones {
            let mode = z.mode.as_ref().map(|m| m.value).unwrap_or(ZoneMode::Ro);
            let Some(mount) = project.mounts().iter().find(|m| m.name == z.name.value) else {
                return Err(diag.spanned(
                    &z.name,
                    format!("worker declares zone '{}', which the project does not define; defined zones: {}", z.name.value, defined.join(", ")),
                ));
            };
            if mode == ZoneMode::Rw && mount.mode == ZoneMode::Ro {
                let at = z.mode.as_ref().map(|m| m.referenced).unwrap_or(z.name.referenced);
                return Err(diag.at(at, format!("worker requests 'rw' on zone '{}' but the project only has 'ro'; use mode: ro", z.name.value)));
            }
            if reqs.iter().any(|r: &ZoneRequest| r.name == z.name.value) {
                return Err(diag.spanned(&z.name, format!("zone '{}' is declared twice", z.name.value)));
            }
            reqs.push(ZoneRequest { name: z.name.value.clone(), mode });
        }
        return Ok(SandboxDecl::Zones(reqs));
    }
    if let Some(ro) = raw.readonly.as_ref().filter(|r| !r.value) {
        let spec = DeriveSpec { inherit: false, allow_read: None, allow_write: None, readonly: Some(false) };
        if let Err(e) = project.derive(&spec) {
            return Err(diag.spanned(ro, e));
        }
    }
    // Check each allowlist entry on its own so the error points at it.
    for (list, write) in [(&raw.allow_read, false), (&raw.allow_write, true)] {
        for entry in list.iter().flatten() {
            let spec = DeriveSpec {
                inherit: false,
                allow_read: Some(vec![entry.value.clone()]),
                allow_write: write.then(|| vec![entry.value.clone()]),
                readonly: None,
            };
            if let Err(e) = project.derive(&spec) {
                return Err(diag.spanned(entry, e.to_string()));
            }
        }
    }
    let strings = |l: &Option<Vec<serde_saphyr::Spanned<String>>>| l.as_ref().map(|v| v.iter().map(|s| s.value.clone()).collect());
    Ok(SandboxDecl::Derive(DeriveSpec {
        inherit: raw.inherit.unwrap_or(false),
        allow_read: strings(&raw.allow_read),
        allow_write: strings(&raw.allow_write),
        readonly: raw.readonly.as_ref().map(|r| r.value),
    }))
}
