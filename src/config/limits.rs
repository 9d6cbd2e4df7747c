//! Resource limits: one parser and one validation per limit, used by `limits:` in the YAML
//! files and by the `workcell run` flags (`--timeout`, `--memory`, `--cpus`, `--pids`, as
//! clap value parsers) alike, so a value means the same and is refused with the same words
//! wherever it is written. File sizes of zones (`max_file_bytes`) and attachment limits go
//! through the same size and count parsers.
//!
//! Values that a backend would silently read as "no limit" are refused: Docker takes a
//! pids limit of 0 (or less) and a CPU limit of 0 as unlimited, and a memory limit above
//! `i64::MAX` cannot be passed to it at all.

use std::time::Duration;

use super::raw::RawLimits;
use super::{ConfigError, Diag};

/// Why a limit value is refused. The message says what is allowed; the caller names the
/// value and where it came from (`file:line:column` or the flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("not {expected}; use {example}")]
    Malformed { expected: &'static str, example: &'static str },
    #[error("unknown unit '{unit}'; sizes take b, k, m, g or t (powers of 1024), such as 512m or 2g")]
    UnknownUnit { unit: String },
    #[error("must be at least {min}{why}; use {example}")]
    TooSmall { min: &'static str, why: &'static str, example: &'static str },
    #[error("must be at most {max}{why}")]
    TooLarge { max: &'static str, why: &'static str },
}

/// The most processes Linux allows (`PID_MAX_LIMIT` on 64-bit); the cgroup pids controller
/// refuses larger limits.
pub const MAX_PIDS: i64 = 4 << 20;
/// Docker's smallest memory limit (6 MiB).
pub const MIN_MEMORY: u64 = 6 << 20;
/// The smallest CPU share Docker takes and the kernel's CFS quota can express (1 ms per
/// 100 ms period).
pub const MIN_CPUS: f64 = 0.01;
/// A bound well beyond any host, so that nothing overflows on the way to a backend.
pub const MAX_CPUS: f64 = 1024.0;
/// The longest timeout: a year (a deadline much further out overflows clocks).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// `--pids` and `limits.pids`: a whole number of processes from 1 to [`MAX_PIDS`].
pub fn parse_pids(text: &str) -> Result<i64, LimitError> {
    let n: i128 = text.trim().parse().map_err(|_| LimitError::Malformed { expected: "a whole number of processes", example: "a number such as 512" })?;
    if n < 1 {
        return Err(LimitError::TooSmall {
            min: "1",
            why: " (the worker itself is a process, and Docker would read 0 or less as no limit at all)",
            example: "a number such as 512",
        });
    }
    if n > i128::from(MAX_PIDS) {
        return Err(LimitError::TooLarge { max: "4194304", why: ", the most processes Linux allows" });
    }
    Ok(n as i64)
}

/// `--cpus` and `limits.cpus`: a finite number of CPUs from 0.01 to 1024.
pub fn parse_cpus(text: &str) -> Result<f64, LimitError> {
    let example = "a number of CPUs such as 0.5 or 2";
    // YAML spells the non-finite floats `.nan` and `.inf`; they read as text here.
    let yaml_non_finite = [".nan", ".inf", "+.inf", "-.inf"].iter().any(|s| text.trim().eq_ignore_ascii_case(s));
    let c: f64 = if yaml_non_finite { f64::NAN } else { text.trim().parse().map_err(|_| LimitError::Malformed { expected: "a number", example })? };
    if !c.is_finite() {
        return Err(LimitError::Malformed { expected: "a finite number", example });
    }
    if c < MIN_CPUS {
        return Err(LimitError::TooSmall {
            min: "0.01",
            why: " (Docker and the kernel's CPU quota take no smaller share, and Docker would read 0 as no limit at all)",
            example,
        });
    }
    if c > MAX_CPUS {
        return Err(LimitError::TooLarge { max: "1024", why: "" });
    }
    Ok(c)
}

/// `--memory` and `limits.memory`: a size from 6 MiB to 8 EiB (Docker's range).
pub fn parse_memory(text: &str) -> Result<u64, LimitError> {
    let n = parse_size(text)?;
    if n < u128::from(MIN_MEMORY) {
        return Err(LimitError::TooSmall {
            min: "6m",
            why: " (Docker's minimum; a worker needs a few megabytes to start)",
            example: "a size such as 512m or 2g",
        });
    }
    if n > i64::MAX as u128 {
        return Err(LimitError::TooLarge { max: "8 EiB (8388607t)", why: ", the largest limit Docker and the kernel take" });
    }
    Ok(n as u64)
}

/// `max_file_bytes`, `max_total_bytes`: a size from 1 byte to 16 EiB.
pub fn parse_file_size(text: &str) -> Result<u64, LimitError> {
    let n = parse_size(text)?;
    if n < 1 {
        return Err(LimitError::TooSmall { min: "1 byte", why: "", example: "a size such as 10m, or a number of bytes" });
    }
    u64::try_from(n).map_err(|_| LimitError::TooLarge { max: "16 EiB (18446744073709551615 bytes)", why: "" })
}

/// `max_attachments`: a whole number, 0 or more.
pub fn parse_count(text: &str) -> Result<usize, LimitError> {
    let n: i128 = text.trim().parse().map_err(|_| LimitError::Malformed { expected: "a whole number", example: "a number such as 10" })?;
    if n < 0 {
        return Err(LimitError::TooSmall { min: "0", why: "", example: "a number such as 10" });
    }
    usize::try_from(n).map_err(|_| LimitError::TooLarge { max: "18446744073709551615", why: "" })
}

/// `--timeout` and `limits.timeout`: a duration such as `30s`, `500ms`, `5m` or `1h30m`
/// (a bare number means seconds), more than zero and at most a year.
pub fn parse_timeout(text: &str) -> Result<Duration, LimitError> {
    let t = text.trim();
    let malformed = LimitError::Malformed { expected: "a duration", example: "a duration such as 30s, 5m or 1h30m (a bare number means seconds)" };
    let d = match t.parse::<u128>() {
        Ok(secs) => u64::try_from(secs).map(Duration::from_secs).unwrap_or(Duration::MAX),
        Err(_) if t.starts_with(|c: char| c.is_ascii_digit()) => match humantime::parse_duration(t) {
            Ok(d) => d,
            Err(humantime::DurationError::NumberOverflow) => Duration::MAX,
            Err(_) => return Err(malformed),
        },
        Err(_) => return Err(malformed),
    };
    if d < Duration::from_millis(1) {
        return Err(LimitError::TooSmall {
            min: "1ms",
            why: " (a zero timeout would stop the worker before it starts)",
            example: "a duration such as 30s or 5m",
        });
    }
    if d > MAX_TIMEOUT {
        return Err(LimitError::TooLarge { max: "365 days", why: "; leave the timeout out for none" });
    }
    Ok(d)
}

/// A size in bytes, exactly: a number (with an optional fraction) and an optional binary
/// unit `b`, `k`, `m`, `g`, `t` (also `kb`/`kib` and so on, case-insensitive), as Docker
/// reads `--memory`. No range check.
fn parse_size(text: &str) -> Result<u128, LimitError> {
    let malformed = LimitError::Malformed { expected: "a size", example: "a size such as 512m or 2g (b, k, m, g, t: powers of 1024)" };
    let t = text.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let shift = match unit.trim() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ if num.is_empty() => return Err(malformed),
        other => return Err(LimitError::UnknownUnit { unit: other.to_string() }),
    };
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return Err(malformed);
    }
    // Integer arithmetic, so that `99999999999999999999999` is "too large", not a rounded
    // float; digits beyond 30 cannot fit any limit.
    let too_large = || LimitError::TooLarge { max: "16 EiB", why: "" };
    if whole.trim_start_matches('0').len() > 30 {
        return Err(too_large());
    }
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| malformed.clone())? };
    let frac = &frac[..frac.len().min(18)];
    let frac_value: u128 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| malformed.clone())? };
    let bytes = whole.checked_shl(shift).filter(|b| b >> shift == whole).ok_or_else(too_large)?;
    let frac_bytes = (frac_value << shift) / 10u128.pow(frac.len() as u32);
    Ok(bytes + frac_bytes)
}

/// Resource limits of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Limits {
    #[serde(serialize_with = "serialize_duration")]
    pub timeout: Option<Duration>,
    pub memory_bytes: Option<u64>,
    pub cpus: Option<f64>,
    pub pids: Option<i64>,
}

/// Durations read as people write them (`"30s"`, `"5m"`), not as `{secs, nanos}`.
fn serialize_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_some(&humantime::format_duration(*d).to_string()),
        None => s.serialize_none(),
    }
}

impl Limits {
    /// `self` where set, else `base`.
    pub fn or(self, base: Limits) -> Limits {
        Limits {
            timeout: self.timeout.or(base.timeout),
            memory_bytes: self.memory_bytes.or(base.memory_bytes),
            cpus: self.cpus.or(base.cpus),
            pids: self.pids.or(base.pids),
        }
    }
}

/// Parses one YAML value with `parse`, locating a refusal at the value.
pub(crate) fn located<T>(
    value: Option<&serde_saphyr::Spanned<String>>,
    what: &str,
    parse: fn(&str) -> Result<T, LimitError>,
    diag: &Diag,
) -> Result<Option<T>, ConfigError> {
    value.map(|v| parse(&v.value).map_err(|e| diag.spanned(v, format!("invalid {what} '{}': {e}", v.value.escape_debug())))).transpose()
}

pub(crate) fn limits_from(raw: &RawLimits, diag: &Diag) -> Result<Limits, ConfigError> {
    Ok(Limits {
        timeout: located(raw.timeout.as_ref(), "timeout", parse_timeout, diag)?,
        memory_bytes: located(raw.memory.as_ref(), "memory", parse_memory, diag)?,
        cpus: located(raw.cpus.as_ref(), "cpus", parse_cpus, diag)?,
        pids: located(raw.pids.as_ref(), "pids", parse_pids, diag)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_memory("512m"), Ok(512 << 20));
        assert_eq!(parse_memory("2G"), Ok(2 << 30));
        assert_eq!(parse_memory("1GiB"), Ok(1 << 30));
        assert_eq!(parse_memory("1.5g"), Ok(3 << 29));
        assert_eq!(parse_file_size("100"), Ok(100));
        assert_eq!(parse_file_size("18446744073709551615"), Ok(u64::MAX));
        assert!(matches!(parse_file_size("18446744073709551616"), Err(LimitError::TooLarge { .. })));
        assert!(matches!(parse_file_size("99999999999999999999999"), Err(LimitError::TooLarge { .. })));
        assert!(matches!(parse_file_size("0"), Err(LimitError::TooSmall { .. })));
        assert!(matches!(parse_memory("9000000t"), Err(LimitError::TooLarge { .. })));
        assert!(matches!(parse_memory("0"), Err(LimitError::TooSmall { .. })));
        assert!(matches!(parse_memory("1m"), Err(LimitError::TooSmall { .. })));
        assert!(matches!(parse_memory("lots"), Err(LimitError::Malformed { .. })));
        assert!(matches!(parse_memory("5x"), Err(LimitError::UnknownUnit { .. })));
        assert!(matches!(parse_memory("-5m"), Err(LimitError::Malformed { .. })));
        assert!(matches!(parse_memory("1.2.3m"), Err(LimitError::Malformed { .. })));
        assert!(matches!(parse_memory(".m"), Err(LimitError::Malformed { .. })));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_timeout("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_timeout("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_timeout("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_timeout("10"), Ok(Duration::from_secs(10)));
        for bad in ["soon", "0", "0s", "-5s", "99999999999999999999999", "999999999999999h", "400d", ""] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cpus_and_pids() {
        assert_eq!(parse_cpus("0.5"), Ok(0.5));
        assert_eq!(parse_pids("512"), Ok(512));
        for bad in ["0", "-1", "NaN", "nan", "inf", "-inf", ".nan", "0.001", "1e9", ""] {
            assert!(parse_cpus(bad).is_err(), "{bad}");
        }
        for bad in ["0", "-1", "1.5", "99999999999999999999999", "4194305", "x", ""] {
            assert!(parse_pids(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_count("0"), Ok(0));
        assert!(parse_count("-1").is_err());
    }
}
