//! Name rules. Names of Clusters, SyncSets and tenants follow DNS-1123 labels so they
//! can be used unchanged as Kubernetes names, URL path segments and label values.

/// The longest DNS-1123 label.
pub const MAX_NAME_LEN: usize = 63;

/// A rule a name or a label broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("must not be empty")]
    Empty,
    #[error("must be at most {MAX_NAME_LEN} characters (DNS-1123 label), got {len}")]
    TooLong { len: usize },
    #[error("{name:?} must consist of lowercase letters, digits and '-' (DNS-1123 label)")]
    Characters { name: String },
    #[error("{name:?} must start and end with a letter or digit (DNS-1123 label)")]
    Edges { name: String },
    #[error("label key {key:?} has an invalid prefix (must be a DNS subdomain)")]
    LabelPrefix { key: String },
    /// The name part of a label key broke `rule`.
    #[error("label key {key:?}: {rule}")]
    LabelKey { key: String, rule: LabelPartRule },
    /// A label's value broke `rule`.
    #[error("label value {value:?} of {key:?}: {rule}")]
    LabelValue { key: String, value: String, rule: LabelPartRule },
}

/// The rule a label's name part or value broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelPartRule {
    Length,
    Characters,
}

impl std::fmt::Display for LabelPartRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LabelPartRule::Length => "must be 1 to 63 characters",
            LabelPartRule::Characters => "must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric",
        })
    }
}

/// Checks a DNS-1123 label: 1–63 lowercase alphanumerics or `-`, starting and ending
/// with an alphanumeric. Returns the rule that was broken.
pub fn check_dns1123_label(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong { len: name.len() });
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if !name.chars().all(ok_char) {
        return Err(NameError::Characters { name: name.into() });
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(NameError::Edges { name: name.into() });
    }
    Ok(())
}

/// Checks a label key (`[prefix/]name`) and value the way Kubernetes does, in short:
/// the name part and the value are at most 63 characters of `[A-Za-z0-9._-]` that start
/// and end with an alphanumeric (the value may be empty); the prefix is a DNS subdomain.
pub fn check_label(key: &str, value: &str) -> Result<(), NameError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() || p.len() > 253 || !p.split('.').all(|part| check_dns1123_label(part).is_ok()) {
            return Err(NameError::LabelPrefix { key: key.into() });
        }
    }
    check_label_part(name).map_err(|rule| NameError::LabelKey { key: key.into(), rule })?;
    if !value.is_empty() {
        check_label_part(value).map_err(|rule| NameError::LabelValue { key: key.into(), value: value.into(), rule })?;
    }
    Ok(())
}

fn check_label_part(s: &str) -> Result<(), LabelPartRule> {
    if s.is_empty() || s.len() > MAX_NAME_LEN {
        return Err(LabelPartRule::Length);
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !s.chars().all(ok) || !edge(s.chars().next()) || !edge(s.chars().last()) {
        return Err(LabelPartRule::Characters);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_labels() {
        assert!(check_dns1123_label("cluster-001").is_ok());
        assert!(check_dns1123_label("a").is_ok());
        assert!(check_dns1123_label("").is_err());
        assert!(check_dns1123_label("Upper").is_err());
        assert!(check_dns1123_label("-lead").is_err());
        assert!(check_dns1123_label("trail-").is_err());
        assert!(check_dns1123_label("dot.ted").is_err());
        assert!(check_dns1123_label(&"a".repeat(64)).is_err());
        assert!(check_dns1123_label(&"a".repeat(63)).is_ok());
    }

    #[test]
    fn labels() {
        assert!(check_label("env", "prod").is_ok());
        assert!(check_label("fleetsync.io/region", "eu-west_1.a").is_ok());
        assert!(check_label("env", "").is_ok());
        assert!(check_label("env", "-bad").is_err());
        assert!(check_label("Bad Key", "x").is_err());
        assert!(check_label("/x", "x").is_err());
    }

    #[test]
    fn a_broken_rule_says_which_and_where() {
        assert_eq!(check_dns1123_label(&"a".repeat(64)), Err(NameError::TooLong { len: 64 }));
        assert_eq!(
            check_dns1123_label("Upper").map_err(|e| e.to_string()),
            Err(r#""Upper" must consist of lowercase letters, digits and '-' (DNS-1123 label)"#.into())
        );
        let e = check_label("env", "-bad").expect_err("bad value");
        assert_eq!(e.to_string(), r#"label value "-bad" of "env": must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"#);
        let rule = LabelPartRule::Characters;
        assert_eq!(e, NameError::LabelValue { key: "env".into(), value: "-bad".into(), rule });
    }
}
