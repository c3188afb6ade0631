//! Name rules. Names of Clusters, SyncSets and tenants follow DNS-1123 labels so they
//! can be used unchanged as Kubernetes names, URL path segments and label values.
//!
//! The resources inside SyncSets follow Kubernetes' own rules (apimachinery's
//! `IsDNS1123Label`, `IsDNS1123Subdomain` and `IsValidPathSegmentName`), chosen by
//! kind in [`NameRule::for_kind`]; on top of Kubernetes, a path segment name (RBAC
//! objects' names) holds only the characters a URL path carries unescaped (RFC 3986's
//! unreserved characters, `:` and `@`), so that no name can reach past its own segment
//! of a target's URL, need escaping there, or carry markup or spaces.

/// The longest DNS-1123 label.
pub const MAX_NAME_LEN: usize = 63;
/// The longest DNS-1123 subdomain, and the longest name of any resource.
pub const MAX_SUBDOMAIN_LEN: usize = 253;

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
    /// A resource's name is longer than its kind allows.
    #[error("must be at most {} characters ({rule}), got {len}", rule.max_len())]
    Long { rule: NameRule, len: usize },
    /// A resource's name breaks the rule of its kind.
    #[error("{name:?} is not a valid name: {}", rule.describe())]
    Invalid { name: String, rule: NameRule },
    /// An `apiVersion` that is not `[group/]version`.
    #[error("{value:?} must be a version (`v1`) or a DNS-1123 subdomain group and a version (`apps/v1`)")]
    ApiVersion { value: String },
    /// A `kind` that is not an identifier.
    #[error(
        "{value:?} must be 1 to 63 letters, digits or '-', starting with a letter and ending with a letter or digit"
    )]
    Kind { value: String },
}

/// Which of Kubernetes' name rules a resource's name follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// At most 63 lowercase alphanumerics or `-`, starting and ending with an alphanumeric.
    Dns1123Label,
    /// At most 253 lowercase alphanumerics, `-` or `.`, each `.`-separated part
    /// starting and ending with an alphanumeric.
    Dns1123Subdomain,
    /// Anything but `.` and `..`, without `/` or `%` (Kubernetes), and, in fleetsync,
    /// only ASCII letters, digits and `-._~:@` (what a URL path carries unescaped); at
    /// most 253 bytes.
    PathSegment,
}

impl NameRule {
    /// The rule Kubernetes applies to the name of a resource of this `apiVersion` and
    /// `kind`: labels for Namespaces and Services, path segment names for RBAC
    /// (whose names carry `:`, e.g. `system:controller:x`) and certificate signing
    /// requests, subdomains for everything else, custom resources included.
    pub fn for_kind(api_version: &str, kind: &str) -> NameRule {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        match (group, kind) {
            ("", "Namespace" | "Service") => NameRule::Dns1123Label,
            ("rbac.authorization.k8s.io", _) | ("certificates.k8s.io", "CertificateSigningRequest") => {
                NameRule::PathSegment
            }
            _ => NameRule::Dns1123Subdomain,
        }
    }

    /// Checks `name` against this rule.
    pub fn check(self, name: &str) -> Result<(), NameError> {
        if name.is_empty() {
            return Err(NameError::Empty);
        }
        if name.len() > self.max_len() {
            return Err(NameError::Long { rule: self, len: name.len() });
        }
        let ok = match self {
            NameRule::Dns1123Label => is_label_part(name),
            NameRule::Dns1123Subdomain => name.split('.').all(is_label_part),
            NameRule::PathSegment => name != "." && name != ".." && name.chars().all(is_path_char),
        };
        if ok {
            Ok(())
        } else {
            Err(NameError::Invalid { name: name.into(), rule: self })
        }
    }

    /// The longest name this rule allows, in bytes.
    pub fn max_len(self) -> usize {
        match self {
            NameRule::Dns1123Label => MAX_NAME_LEN,
            NameRule::Dns1123Subdomain | NameRule::PathSegment => MAX_SUBDOMAIN_LEN,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            NameRule::Dns1123Label => "a DNS-1123 label is lowercase letters, digits and '-', starting and ending with a letter or digit",
            NameRule::Dns1123Subdomain => {
                "a DNS-1123 subdomain is lowercase letters, digits, '-' and '.', each '.'-separated part starting and ending with a letter or digit"
            }
            NameRule::PathSegment => {
                "a path segment name is ASCII letters, digits, '-', '.', '_', '~', ':' and '@' (what a URL path carries unescaped), and not '.' or '..'"
            }
        }
    }
}

impl std::fmt::Display for NameRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NameRule::Dns1123Label => "DNS-1123 label",
            NameRule::Dns1123Subdomain => "DNS-1123 subdomain",
            NameRule::PathSegment => "path segment name",
        })
    }
}

/// A character a path segment name may hold: RFC 3986's unreserved characters, `:` and
/// `@` (no `/`, `%`, `?`, `#`, space, quote or angle bracket).
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | ':' | '@')
}

/// Lowercase alphanumerics and `-`, starting and ending with an alphanumeric (any length).
fn is_label_part(s: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && edge(s.chars().next())
        && edge(s.chars().last())
}

/// Checks a resource's `apiVersion`: a version (a DNS-1123 label, e.g. `v1beta1`), after
/// a DNS-1123 subdomain group and `/` unless the group is the core one.
pub fn check_api_version(value: &str) -> Result<(), NameError> {
    let (group, version) = value.rsplit_once('/').unwrap_or(("", value));
    let group_ok = !value.starts_with('/') && (group.is_empty() || NameRule::Dns1123Subdomain.check(group).is_ok());
    if group_ok && check_dns1123_label(version).is_ok() {
        return Ok(());
    }
    Err(NameError::ApiVersion { value: value.into() })
}

/// Checks a resource's `kind` the way Kubernetes checks a custom resource's: in
/// lowercase, a DNS-1035 label (a letter, then letters, digits or `-`, at most 63).
pub fn check_kind(value: &str) -> Result<(), NameError> {
    let lower = value.to_ascii_lowercase();
    let starts = lower.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    if starts && check_dns1123_label(&lower).is_ok() {
        return Ok(());
    }
    Err(NameError::Kind { value: value.into() })
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
            LabelPartRule::Characters => {
                "must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
            }
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
    fn resource_names_follow_the_rule_of_their_kind() {
        use NameRule::*;
        assert_eq!(NameRule::for_kind("v1", "Namespace"), Dns1123Label);
        assert_eq!(NameRule::for_kind("v1", "Service"), Dns1123Label);
        assert_eq!(NameRule::for_kind("v1", "ConfigMap"), Dns1123Subdomain);
        assert_eq!(NameRule::for_kind("example.com/v1", "Service"), Dns1123Subdomain, "only the core Service");
        assert_eq!(NameRule::for_kind("rbac.authorization.k8s.io/v1", "ClusterRole"), PathSegment);
        assert_eq!(NameRule::for_kind("certificates.k8s.io/v1", "CertificateSigningRequest"), PathSegment);
        for ok in ["cfg", "my.app-1", "0a", &"a".repeat(253)] {
            assert_eq!(Dns1123Subdomain.check(ok), Ok(()), "{ok}");
        }
        for bad in ["", "Cfg", "a..b", ".a", "a.", "-a", "a_b", "x\0y", "x\u{0}y", "../x", "a?b", &"a".repeat(254)] {
            assert!(Dns1123Subdomain.check(bad).is_err(), "{bad:?}");
        }
        assert!(Dns1123Label.check("my.app").is_err());
        assert_eq!(Dns1123Label.check(&"a".repeat(64)), Err(NameError::Long { rule: Dns1123Label, len: 64 }));
        for ok in [
            "system:controller:job-controller",
            "system:kube-scheduler",
            "AdminRole",
            "a.b",
            "user@example.com",
            "x_y~1",
        ] {
            assert_eq!(PathSegment.check(ok), Ok(()), "{ok}");
        }
        let bad_ones =
            ["", ".", "..", "a/b", "a%2f", "x\0y", "x\u{0}y", "x\ny", "a?confirm=yes", "a#frag", "../../admin"];
        for bad in bad_ones.into_iter().chain(["Admin Role", "<b>admin</b>", "a\"b", "it's", "rôle", "a&b", "a\tb"]) {
            assert!(PathSegment.check(bad).is_err(), "{bad:?}");
        }
        let e = Dns1123Subdomain.check("x\u{0}y").expect_err("NUL").to_string();
        assert!(e.starts_with(r#""x\0y" is not a valid name: a DNS-1123 subdomain is"#), "{e}");
    }

    #[test]
    fn api_versions_and_kinds() {
        for ok in ["v1", "apps/v1", "rbac.authorization.k8s.io/v1", "example.com/v1beta1"] {
            assert_eq!(check_api_version(ok), Ok(()), "{ok}");
        }
        for bad in ["", "/v1", "apps/", "Apps/v1", "a/b/v1", "../v1", "v1?x", "v\u{0}1"] {
            assert!(check_api_version(bad).is_err(), "{bad:?}");
        }
        for ok in ["ConfigMap", "A", "HorizontalPodAutoscaler", "My-Kind2"] {
            assert_eq!(check_kind(ok), Ok(()), "{ok}");
        }
        for bad in ["", "1Kind", "Config Map", "Kind/x", "Kind-", "K\u{0}"] {
            assert!(check_kind(bad).is_err(), "{bad:?}");
        }
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
        assert_eq!(
            e.to_string(),
            r#"label value "-bad" of "env": must be alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"#
        );
        let rule = LabelPartRule::Characters;
        assert_eq!(e, NameError::LabelValue { key: "env".into(), value: "-bad".into(), rule });
    }
}
