//! Kubernetes' rules for names, label values and quantities, and the escaping of text the
//! kubelet would otherwise expand. Pure; the config checks names with these too, so that a
//! name the API server would refuse is refused with its line instead.

/// Why a name cannot be used as a Kubernetes object name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("is empty")]
    Empty,
    #[error("is longer than {max} characters")]
    TooLong { max: usize },
    #[error("may hold only lowercase letters, digits and '-'{dots}, and must start and end with a letter or digit")]
    Characters { dots: &'static str },
}

/// A DNS-1123 label (namespaces): at most 63 of `a-z0-9-`, alphanumeric at both ends.
pub fn check_label(name: &str) -> Result<(), NameError> {
    check(name, 63, false)
}

/// A DNS-1123 subdomain (claims, RuntimeClasses): at most 253 of `a-z0-9-.`, each
/// dot-separated part alphanumeric at both ends.
pub fn check_subdomain(name: &str) -> Result<(), NameError> {
    check(name, 253, true)
}

fn check(name: &str, max: usize, dots: bool) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > max {
        return Err(NameError::TooLong { max });
    }
    let part_ok = |p: &str| {
        let ends = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        ends(p.chars().next()) && ends(p.chars().last()) && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let ok = if dots { name.split('.').all(part_ok) } else { part_ok(name) };
    if ok {
        Ok(())
    } else {
        Err(NameError::Characters { dots: if dots { " and '.'" } else { "" } })
    }
}

/// `text` as a DNS label part of at most `max` characters: lowercase, every other character
/// as '-', runs of '-' folded, no '-' at either end. May be empty.
pub fn to_label_part(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let c = if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    out.truncate(max);
    out.trim_end_matches('-').to_string()
}

/// `text` as a label value (at most 63 of `A-Za-z0-9-_.`, alphanumeric at both ends): other
/// characters become '-'. `None` when nothing is left.
pub fn to_label_value(text: &str) -> Option<String> {
    let mapped: String = text.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' }).collect();
    let mut v: String = mapped.chars().take(63).collect();
    while v.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        v.pop();
    }
    let v = v.trim_start_matches(|c: char| !c.is_ascii_alphanumeric()).to_string();
    (!v.is_empty()).then_some(v)
}

/// A byte count as a quantity: `128Mi` when a binary unit divides it exactly, else bytes.
pub fn bytes_quantity(n: u64) -> String {
    for (shift, unit) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if n != 0 && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

/// CPUs as a quantity in millicores (`0.5` → `500m`); the config allows 0.01 to 1024, so
/// the rounded value is never 0.
pub fn cpu_quantity(cpus: f64) -> String {
    format!("{}m", ((cpus * 1000.0).round() as u64).max(1))
}

/// Literal text for a container's `command`, `args` or an `env` value: the kubelet expands
/// `$(NAME)` there and reads `$$` as `$`, so every `$` is doubled and the worker gets exactly
/// the text the plan holds.
pub fn literal(text: &str) -> String {
    text.replace('$', "$$")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        assert!(check_label("team-a").is_ok());
        assert!(check_label("Team").is_err());
        assert!(check_label("-a").is_err());
        assert!(check_label(&"a".repeat(64)).is_err());
        assert!(check_label("a.b").is_err());
        assert!(check_subdomain("data.claim-1").is_ok());
        assert!(check_subdomain("a..b").is_err());
        assert_eq!(check_label(""), Err(NameError::Empty));
    }

    #[test]
    fn names_made_from_text() {
        assert_eq!(to_label_part("My_Worker.v2", 63), "my-worker-v2");
        assert_eq!(to_label_part("--x--", 63), "x");
        assert_eq!(to_label_part("abcdef", 3), "abc");
        assert_eq!(to_label_part("ab-cd", 3), "ab");
        assert_eq!(to_label_value("/home/u/my project"), Some("home-u-my-project".into()));
        assert_eq!(to_label_value("///"), None);
        assert_eq!(to_label_value(&"x".repeat(80)).map(|v| v.len()), Some(63));
    }

    #[test]
    fn quantities() {
        assert_eq!(bytes_quantity(128 << 20), "128Mi");
        assert_eq!(bytes_quantity(2 << 30), "2Gi");
        assert_eq!(bytes_quantity(1000), "1000");
        assert_eq!(cpu_quantity(0.5), "500m");
        assert_eq!(cpu_quantity(0.01), "10m");
        assert_eq!(cpu_quantity(2.0), "2000m");
    }

    #[test]
    fn dollars_are_literal() {
        assert_eq!(literal("echo $(HOME) $$ $x"), "echo $$(HOME) $$$$ $$x");
    }
}
