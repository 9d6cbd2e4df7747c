//! `runtime:`: the name of a Docker runtime (`runsc` for gVisor, `kata`, ...). The name is
//! only checked for its shape here; whether the daemon has such a runtime is asked before
//! each run (`backend::docker::runtimes`), since the daemon's configuration can change.

/// The longest runtime name accepted.
pub const MAX_RUNTIME_NAME: usize = 64;

/// Why a runtime name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{}' is not a runtime name: use the name the Docker daemon lists for it (`workcell doctor`), like runsc; letters, digits, '.', '_' and '-', starting with a letter or digit, at most {MAX_RUNTIME_NAME} characters",
    name.escape_debug()
)]
pub struct RuntimeNameError {
    pub name: String,
}

/// Checks a runtime name from a config file or `--runtime`. The characters are those of a key
/// of the daemon's `runtimes` table in practice; anything else (a path, spaces, control
/// characters) would only ever be refused by the daemon, later and in its own words.
pub fn parse_runtime(name: &str) -> Result<String, RuntimeNameError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_RUNTIME_NAME
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(name.to_string())
    } else {
        Err(RuntimeNameError { name: name.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["runsc", "runc", "kata-runtime", "io.containerd.runc.v2", "runsc_kvm"] {
            assert_eq!(parse_runtime(good).as_deref(), Ok(good));
        }
        for bad in ["", "-x", "/usr/bin/runsc", "run sc", "runsc\n", &"a".repeat(65)] {
            assert!(parse_runtime(bad).is_err(), "{bad:?}");
        }
    }
}
