//! The kinds every simulated cluster serves, and the discovery documents that
//! announce them (`/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`).
//!
//! The catalogue is fixed: the simulator exists to exercise an applier and
//! fleetsync's own custom resources (`fleetsync.io/v1` Cluster and SyncSet, with a
//! `status` subresource), not to host arbitrary ones. Documents are rendered once, because kube-rs clients rediscover
//! often (per new client, and after every 404 of an unknown kind).

use axum::body::Bytes;
use serde_json::{json, Value};
use std::collections::HashMap;

/// One kind of resource a cluster serves.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// `""` for the core group.
    pub group: &'static str,
    pub version: &'static str,
    /// `v1` for core, `group/version` otherwise: what objects carry as `apiVersion`.
    pub api_version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    /// Whether `.status` is written only through the `status` subresource (custom
    /// resources here); main-resource writes then leave it alone.
    pub status_subresource: bool,
}

const fn rt(
    group: &'static str,
    version: &'static str,
    api_version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> ResourceType {
    ResourceType { group, version, api_version, plural, singular, kind, namespaced, status_subresource: false }
}

/// The same kind with a `status` subresource (its `status` written only through it).
const fn with_status(r: ResourceType) -> ResourceType {
    ResourceType { status_subresource: true, ..r }
}

/// A fleetsync custom resource: namespaced, with a `status` subresource.
const fn crd(plural: &'static str, singular: &'static str, kind: &'static str) -> ResourceType {
    with_status(rt("fleetsync.io", "v1", "fleetsync.io/v1", plural, singular, kind, true))
}

/// Every served kind; an object's position here is its compact type id.
pub const CATALOGUE: &[ResourceType] = &[
    rt("", "v1", "v1", "namespaces", "namespace", "Namespace", false),
    rt("", "v1", "v1", "configmaps", "configmap", "ConfigMap", true),
    rt("", "v1", "v1", "secrets", "secret", "Secret", true),
    rt("", "v1", "v1", "services", "service", "Service", true),
    rt("", "v1", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true),
    with_status(rt("apps", "v1", "apps/v1", "deployments", "deployment", "Deployment", true)),
    rt("rbac.authorization.k8s.io", "v1", "rbac.authorization.k8s.io/v1", "roles", "role", "Role", true),
    rt(
        "rbac.authorization.k8s.io",
        "v1",
        "rbac.authorization.k8s.io/v1",
        "rolebindings",
        "rolebinding",
        "RoleBinding",
        true,
    ),
    rt(
        "rbac.authorization.k8s.io",
        "v1",
        "rbac.authorization.k8s.io/v1",
        "clusterroles",
        "clusterrole",
        "ClusterRole",
        false,
    ),
    rt(
        "rbac.authorization.k8s.io",
        "v1",
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        false,
    ),
    crd("clusters", "cluster", "Cluster"),
    crd("syncsets", "syncset", "SyncSet"),
    crd("gitrepositories", "gitrepository", "GitRepository"),
    crd("ocirepositories", "ocirepository", "OCIRepository"),
];

/// The verbs the simulator implements for every kind.
const VERBS: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];
/// The verbs of a `status` subresource.
const STATUS_VERBS: &[&str] = &["get", "patch", "update"];

/// Finds a kind by its API version (`v1`, `apps/v1`) and plural.
pub fn lookup(api_version: &str, plural: &str) -> Option<(u8, &'static ResourceType)> {
    CATALOGUE
        .iter()
        .enumerate()
        .find(|(_, r)| r.api_version == api_version && r.plural == plural)
        .and_then(|(i, r)| Some((u8::try_from(i).ok()?, r)))
}

/// The kind with type id `id` (see [`lookup`]).
pub fn by_id(id: u8) -> Option<&'static ResourceType> {
    CATALOGUE.get(usize::from(id))
}

/// The pre-rendered discovery documents (`Bytes`: answering one copies nothing).
#[derive(Debug)]
pub struct Discovery {
    pub core_versions: Bytes,
    pub groups: Bytes,
    /// API version (`v1`, `apps/v1`) → its `APIResourceList`.
    pub resources: HashMap<&'static str, Bytes>,
    pub version: Bytes,
}

impl Discovery {
    pub fn new() -> Self {
        let core_versions = json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:443"}],
        });
        let mut groups: Vec<Value> = Vec::new();
        let mut resources: HashMap<&'static str, Vec<Value>> = HashMap::new();
        for r in CATALOGUE {
            resources.entry(r.api_version).or_default().push(json!({
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": VERBS,
            }));
            if r.status_subresource {
                resources.entry(r.api_version).or_default().push(json!({
                    "name": format!("{}/status", r.plural),
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": STATUS_VERBS,
                }));
            }
            let known = groups.iter().any(|g| g["name"] == r.group);
            if !r.group.is_empty() && !known {
                let gv = json!({"groupVersion": r.api_version, "version": r.version});
                groups.push(json!({"name": r.group, "versions": [gv.clone()], "preferredVersion": gv}));
            }
        }
        let resources = resources
            .into_iter()
            .map(|(gv, list)| {
                let doc = json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list});
                (gv, Bytes::from(doc.to_string()))
            })
            .collect();
        let groups = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups});
        let version = json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-fleetsync-sim", "gitCommit": "",
            "gitTreeState": "clean", "buildDate": "2025-01-01T00:00:00Z", "goVersion": "none",
            "compiler": "rustc", "platform": "linux/amd64",
        });
        let bytes = |v: Value| Bytes::from(v.to_string());
        Self { core_versions: bytes(core_versions), groups: bytes(groups), resources, version: bytes(version) }
    }
}

impl Default for Discovery {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_api_version_and_plural() {
        let (id, r) = lookup("apps/v1", "deployments").expect("deployments");
        assert_eq!((r.kind, r.namespaced), ("Deployment", true));
        assert_eq!(by_id(id), Some(r));
        assert!(lookup("v1", "deployments").is_none(), "deployments are not core");
        assert!(lookup("v1", "widgets").is_none());
    }

    #[test]
    fn every_group_version_has_a_resource_list() {
        let d = Discovery::new();
        let groups: Value = serde_json::from_slice(&d.groups).expect("json");
        let names: Vec<&str> =
            groups["groups"].as_array().into_iter().flatten().filter_map(|g| g["name"].as_str()).collect();
        assert_eq!(names, ["apps", "rbac.authorization.k8s.io", "fleetsync.io"]);
        for gv in ["v1", "apps/v1", "rbac.authorization.k8s.io/v1", "fleetsync.io/v1"] {
            let list: Value = serde_json::from_slice(&d.resources[gv]).expect("json");
            assert_eq!(list["groupVersion"], gv);
        }
    }
}
