//! `defaults.env`: environment variables for every worker of the project, in the forms of a
//! worker's `env:` (`NAME: value`, or `NAME:` alone to pass the host's value through). A run
//! applies them first, then the worker's `env:`, then `--env`, each overriding the last.

use indexmap::IndexMap;
use serde_saphyr::Spanned;

use super::{ConfigError, Diag};

/// A name a process environment can hold and a shell can set: letters, digits and `_`, not
/// starting with a digit (the rule `--env` applies too).
pub fn valid_env_name(k: &str) -> bool {
    !k.is_empty() && !k.starts_with(|c: char| c.is_ascii_digit()) && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `defaults.env` checked: every name valid, no value holding a NUL (which no environment
/// can carry: the variable would be cut short without a word).
pub(crate) fn env_from(raw: Option<&IndexMap<Spanned<String>, Option<String>>>, diag: &Diag) -> Result<IndexMap<String, Option<String>>, ConfigError> {
    let mut out = IndexMap::new();
    for (name, value) in raw.into_iter().flatten() {
        if !valid_env_name(&name.value) {
            return Err(diag.spanned(
                name,
                format!(
                    "'{}' is not an environment variable name: use letters, digits and '_', not starting with a digit, like PYTHONDONTWRITEBYTECODE",
                    name.value.escape_debug()
                ),
            ));
        }
        if value.as_deref().is_some_and(|v| v.contains('\0')) {
            return Err(diag.spanned(name, format!("the value of {} contains a NUL character, which no environment variable can hold", name.value)));
        }
        out.insert(name.value.clone(), value.clone());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["PATH", "_X", "a1", "PYTHONDONTWRITEBYTECODE"] {
            assert!(valid_env_name(good), "{good}");
        }
        for bad in ["", "1A", "A-B", "A=B", "A B", "É"] {
            assert!(!valid_env_name(bad), "{bad:?}");
        }
    }
}
