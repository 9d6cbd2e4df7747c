//! `sandbox.zones:` of the project as written: a mapping of zones by name, or the list form
//! worker files use (`- {name: data, mode: ro}`), each entry naming its zone. Both read into
//! the same entries, in the order written, so every later check is the same for either form.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

use super::{RawApproval, SizeSchema};
use crate::sandbox::{Delivery, ZoneMode};

/// One zone of `zones:`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawZone {
    /// Host directory, relative to the project (default `./<name>`).
    #[schemars(with = "Option<String>")]
    pub path: Option<Spanned<String>>,
    /// `ro` (default) or `rw`.
    pub mode: Option<ZoneMode>,
    pub approval: Option<RawApproval>,
    /// Allowed suffixes, e.g. `[.md, .pdf]` (case-insensitive).
    pub suffixes: Option<Vec<String>>,
    /// Largest file that may be read or written: bytes, or a size such as `10m`.
    #[schemars(with = "Option<SizeSchema>")]
    pub max_file_bytes: Option<Spanned<String>>,
    /// `bind` (default) or `copy`.
    pub delivery: Option<Delivery>,
    /// Protected entries to turn off for this zone only, e.g. `[.vscode]`; each must be an
    /// entry in force (a default or one of `sandbox.protect`).
    #[schemars(with = "Option<Vec<String>>")]
    pub unprotect: Option<Vec<Spanned<String>>>,
}

// The same keys as `RawZone` and a name: serde cannot flatten a struct that refuses unknown
// keys, hence the fields twice.
/// One zone of the list form: its `name`, then the keys of a zone.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawListedZone {
    /// The zone's name, mounted at `/<name>`.
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    /// Host directory, relative to the project (default `./<name>`).
    #[schemars(with = "Option<String>")]
    pub path: Option<Spanned<String>>,
    /// `ro` (default) or `rw`.
    pub mode: Option<ZoneMode>,
    pub approval: Option<RawApproval>,
    /// Allowed suffixes, e.g. `[.md, .pdf]` (case-insensitive).
    pub suffixes: Option<Vec<String>>,
    /// Largest file that may be read or written: bytes, or a size such as `10m`.
    #[schemars(with = "Option<SizeSchema>")]
    pub max_file_bytes: Option<Spanned<String>>,
    /// `bind` (default) or `copy`.
    pub delivery: Option<Delivery>,
    /// Protected entries to turn off for this zone only, e.g. `[.vscode]`; each must be an
    /// entry in force (a default or one of `sandbox.protect`).
    #[schemars(with = "Option<Vec<String>>")]
    pub unprotect: Option<Vec<Spanned<String>>>,
}

impl From<RawListedZone> for (Spanned<String>, RawZone) {
    fn from(z: RawListedZone) -> Self {
        let zone = RawZone {
            path: z.path,
            mode: z.mode,
            approval: z.approval,
            suffixes: z.suffixes,
            max_file_bytes: z.max_file_bytes,
            delivery: z.delivery,
            unprotect: z.unprotect,
        };
        (z.name, zone)
    }
}

/// The zones in the order written, each with its name (a mapping's key or a list entry's
/// `name`). A name given twice is refused by the project's loader, where its line is known.
#[derive(Debug, Default)]
pub struct RawZones(pub Vec<(Spanned<String>, RawZone)>);

// Schema stand-in for `RawZones`.
/// Zones by name, or a list of zones each with its `name`.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(in crate::config) enum ZonesSchema {
    /// `{data: {path: ./data, mode: ro}}`
    Mapping(BTreeMap<String, RawZone>),
    /// `[{name: data, path: ./data, mode: ro}]`, as in worker files.
    List(Vec<RawListedZone>),
}

impl<'de> Deserialize<'de> for RawZones {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawZones;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("zones by name ({data: {path: ./data, mode: ro}}) or a list of zones each with its name ([{name: data, path: ./data, mode: ro}])")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawZones, A::Error> {
                let mut out = Vec::new();
                while let Some((name, zone)) = map.next_entry::<Spanned<String>, RawZone>()? {
                    out.push((name, zone));
                }
                Ok(RawZones(out))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawZones, A::Error> {
                let mut out = Vec::new();
                while let Some(z) = seq.next_element::<RawListedZone>()? {
                    out.push(z.into());
                }
                Ok(RawZones(out))
            }
        }
        d.deserialize_any(V)
    }
}
