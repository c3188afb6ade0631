//! A resource manifest: a full Kubernetes-style object kept as JSON, opaque to
//! fleetsync except for the fields that identify it, whose names follow Kubernetes'
//! rules ([`NameRule`]) so that they can go into a target's URLs and the store as they are.

use crate::error::FieldError;
use crate::names::{check_api_version, check_dns1123_label, check_kind, NameRule};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A full manifest (`apiVersion`, `kind`, `metadata.name`, and whatever else the
/// target understands). Validated by [`Manifest::resource_ref`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Manifest(pub serde_json::Value);

/// Any object: Kubernetes keeps every field of a manifest as it is.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Manifest {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Manifest".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A full manifest (apiVersion, kind, metadata.name, and whatever else the target understands).",
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

/// What identifies a resource on a target: `apiVersion`, `kind`, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl ResourceRef {
    /// Checks the identity the way Kubernetes would: `apiVersion` and `kind` are
    /// identifiers, the namespace a DNS-1123 label, the name follows the rule of its kind
    /// ([`NameRule::for_kind`]). Returns the field (`apiVersion`, `kind`, `namespace`,
    /// `name`) and the rule it broke.
    pub fn validate(&self) -> Result<(), FieldError> {
        fn named(field: &'static str) -> impl Fn(crate::names::NameError) -> FieldError {
            move |e| FieldError::new(field, e.to_string())
        }
        check_api_version(&self.api_version).map_err(named("apiVersion"))?;
        check_kind(&self.kind).map_err(named("kind"))?;
        if let Some(ns) = &self.namespace {
            check_dns1123_label(ns).map_err(named("namespace"))?;
        }
        NameRule::for_kind(&self.api_version, &self.kind).check(&self.name).map_err(named("name"))
    }
}

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{} {}/{}", self.api_version, self.kind, ns, self.name),
            None => write!(f, "{}/{} {}", self.api_version, self.kind, self.name),
        }
    }
}

impl Manifest {
    /// The identity of this manifest, or the field that is missing or breaks a name
    /// rule ([`ResourceRef::validate`]), e.g. `metadata.name`, and the rule.
    pub fn resource_ref(&self) -> Result<ResourceRef, FieldError> {
        let obj = self.0.as_object().ok_or_else(|| FieldError::message("must be a mapping"))?;
        let text = |field: &str, v: Option<&serde_json::Value>| -> Result<String, FieldError> {
            match v.and_then(|v| v.as_str()) {
                Some(s) if !s.is_empty() => Ok(s.to_string()),
                _ => Err(FieldError::new(field, "is required and must be a non-empty string")),
            }
        };
        let meta = obj.get("metadata");
        let namespace = match meta.and_then(|m| m.get("namespace")) {
            None | Some(serde_json::Value::Null) => None,
            v => Some(text("metadata.namespace", v)?),
        };
        let r = ResourceRef {
            api_version: text("apiVersion", obj.get("apiVersion"))?,
            kind: text("kind", obj.get("kind"))?,
            namespace,
            name: text("metadata.name", meta.and_then(|m| m.get("name")))?,
        };
        r.validate().map_err(|e| match e.field.as_str() {
            "namespace" | "name" => FieldError::new(format!("metadata.{}", e.field), e.message),
            _ => e,
        })?;
        Ok(r)
    }

    /// Size of the manifest as compact JSON, the form in which it is stored and sent.
    pub fn encoded_len(&self) -> usize {
        serde_json::to_vec(&self.0).map(|v| v.len()).unwrap_or(usize::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identity_of_a_namespaced_manifest() {
        let m =
            Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}));
        let r = m.resource_ref().expect("valid");
        assert_eq!(r.to_string(), "v1/ConfigMap ns/a");
    }

    #[test]
    fn missing_name_is_named() {
        let m = Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}));
        assert_eq!(m.resource_ref().expect_err("invalid").field, "metadata.name");
        let m = Manifest(json!({"kind": "ConfigMap", "metadata": {"name": "a"}}));
        assert_eq!(m.resource_ref().expect_err("invalid").field, "apiVersion");
    }

    #[test]
    fn names_follow_kubernetes_rules() {
        let m = |v: serde_json::Value| Manifest(v).resource_ref();
        let field = |v: serde_json::Value| m(v).expect_err("invalid").field;
        assert_eq!(
            field(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x\u{0}y"}})),
            "metadata.name"
        );
        let steer = "../../../../admin/x?confirm=yes#";
        assert_eq!(
            field(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": steer}})),
            "metadata.name"
        );
        let role =
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": steer}});
        assert_eq!(field(role), "metadata.name");
        let ns = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "team.a"}});
        assert_eq!(field(ns), "metadata.namespace");
        assert_eq!(
            field(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "my.ns"}})),
            "metadata.name"
        );
        assert_eq!(
            field(json!({"apiVersion": "v1/../x", "kind": "ConfigMap", "metadata": {"name": "a"}})),
            "apiVersion"
        );
        assert_eq!(field(json!({"apiVersion": "v1", "kind": "Config\u{0}Map", "metadata": {"name": "a"}})), "kind");
        let rule =
            m(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a.b"}})).expect_err("label").message;
        assert!(rule.contains("DNS-1123 label"), "{rule}");
        let system = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "system:controller:job-controller"}});
        assert_eq!(m(system).map(|r| r.name), Ok("system:controller:job-controller".to_string()));
        let dotted =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web.v2", "namespace": "app"}});
        assert!(m(dotted).is_ok());
    }
}
