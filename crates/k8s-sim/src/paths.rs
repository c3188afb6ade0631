//! What a path under `/clusters/{cluster}/` names.
//!
//! Parsed by hand rather than with one axum route per shape: the Kubernetes path
//! grammar has overlapping shapes (`/api/v1/namespaces/{name}` is a namespace,
//! `/api/v1/namespaces/{ns}/configmaps` a collection) that a router with static
//! priority cannot tell apart without backtracking.

/// A request target inside one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target<'a> {
    /// `/api`: the core API versions.
    CoreVersions,
    /// `/apis`: the API groups.
    Groups,
    /// `/api/v1` or `/apis/{group}/{version}`: the resources of one API version.
    Resources { api_version: String },
    /// `/version`: the server version.
    Version,
    /// An object (`name` is some), one of its subresources, or a collection (`name`
    /// is none).
    Object(ObjectPath<'a>),
}

/// A path to an object or a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectPath<'a> {
    pub api_version: String,
    pub namespace: Option<&'a str>,
    pub plural: &'a str,
    pub name: Option<&'a str>,
    /// `status` in `.../{name}/status`; whether the kind has it is checked later.
    pub subresource: Option<&'a str>,
}

/// Parses `rest`, the path after `/clusters/{cluster}/`; `None` if no shape fits.
pub fn parse(rest: &str) -> Option<Target<'_>> {
    let segments: Vec<&str> = rest.trim_matches('/').split('/').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return None;
    }
    let (api_version, tail) = match segments.as_slice() {
        ["version"] => return Some(Target::Version),
        ["api"] => return Some(Target::CoreVersions),
        ["apis"] => return Some(Target::Groups),
        ["api", version, tail @ ..] => (version.to_string(), tail),
        ["apis", group, version, tail @ ..] => (format!("{group}/{version}"), tail),
        _ => return None,
    };
    // `namespaces/{ns}/{plural}` is a collection, never a namespace's subresource.
    let (namespace, plural, name, subresource) = match tail {
        [] => return Some(Target::Resources { api_version }),
        [plural] => (None, *plural, None, None),
        [plural, name] => (None, *plural, Some(*name), None),
        ["namespaces", ns, plural] => (Some(*ns), *plural, None, None),
        [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), None),
        ["namespaces", ns, plural, name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
        _ => return None,
    };
    Some(Target::Object(ObjectPath { api_version, namespace, plural, name, subresource }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object<'a>(gv: &str, ns: Option<&'a str>, plural: &'a str, name: Option<&'a str>) -> Option<Target<'a>> {
        Some(Target::Object(ObjectPath { api_version: gv.into(), namespace: ns, plural, name, subresource: None }))
    }

    #[test]
    fn discovery_paths() {
        assert_eq!(parse("api"), Some(Target::CoreVersions));
        assert_eq!(parse("/apis/"), Some(Target::Groups));
        assert_eq!(parse("api/v1"), Some(Target::Resources { api_version: "v1".into() }));
        assert_eq!(parse("apis/apps/v1"), Some(Target::Resources { api_version: "apps/v1".into() }));
        assert_eq!(parse("version"), Some(Target::Version));
    }

    #[test]
    fn object_and_collection_paths() {
        assert_eq!(parse("api/v1/namespaces/app"), object("v1", None, "namespaces", Some("app")));
        assert_eq!(parse("api/v1/namespaces"), object("v1", None, "namespaces", None));
        assert_eq!(parse("api/v1/namespaces/app/configmaps"), object("v1", Some("app"), "configmaps", None));
        assert_eq!(parse("api/v1/namespaces/app/configmaps/a"), object("v1", Some("app"), "configmaps", Some("a")));
        assert_eq!(
            parse("apis/apps/v1/namespaces/app/deployments/web"),
            object("apps/v1", Some("app"), "deployments", Some("web"))
        );
        assert_eq!(parse("apis/rbac.authorization.k8s.io/v1/clusterroles/r"), {
            object("rbac.authorization.k8s.io/v1", None, "clusterroles", Some("r"))
        });
    }

    #[test]
    fn subresource_paths() {
        let status = |ns| {
            let (api_version, plural, name) = ("fleetsync.io/v1".into(), "syncsets", Some("s"));
            Some(Target::Object(ObjectPath { api_version, namespace: ns, plural, name, subresource: Some("status") }))
        };
        assert_eq!(parse("apis/fleetsync.io/v1/namespaces/t/syncsets/s/status"), status(Some("t")));
        assert_eq!(parse("apis/fleetsync.io/v1/syncsets/s/status"), status(None));
    }

    #[test]
    fn other_shapes_are_not_served() {
        for p in ["", "healthz", "api/v1/namespaces/app/configmaps/a/status/x", "api//v1", "apis/apps"] {
            assert_eq!(parse(p), None, "{p}");
        }
    }
}
