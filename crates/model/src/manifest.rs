//! A resource manifest: a full Kubernetes-style object kept as JSON, opaque to
//! fleetsync except for the fields that identify it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A full manifest (`apiVersion`, `kind`, `metadata.name`, and whatever else the
/// target understands). Validated by [`Manifest::resource_ref`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Manifest(pub serde_json::Value);

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

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{} {}/{}", self.api_version, self.kind, ns, self.name),
            None => write!(f, "{}/{} {}", self.api_version, self.kind, self.name),
        }
    }
}

impl Manifest {
    /// The identity of this manifest, or the field that is missing or malformed.
    pub fn resource_ref(&self) -> Result<ResourceRef, (String, String)> {
        let obj = self.0.as_object().ok_or_else(|| (String::new(), "must be a mapping".to_string()))?;
        let text = |field: &str, v: Option<&serde_json::Value>| -> Result<String, (String, String)> {
            match v.and_then(|v| v.as_str()) {
                Some(s) if !s.is_empty() => Ok(s.to_string()),
                _ => Err((field.to_string(), "is required and must be a non-empty string".to_string())),
            }
        };
        let meta = obj.get("metadata");
        let namespace = match meta.and_then(|m| m.get("namespace")) {
            None | Some(serde_json::Value::Null) => None,
            v => Some(text("metadata.namespace", v)?),
        };
        Ok(ResourceRef {
            api_version: text("apiVersion", obj.get("apiVersion"))?,
            kind: text("kind", obj.get("kind"))?,
            namespace,
            name: text("metadata.name", meta.and_then(|m| m.get("name")))?,
        })
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
        let m = Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}));
        let r = m.resource_ref().expect("valid");
        assert_eq!(r.to_string(), "v1/ConfigMap ns/a");
    }

    #[test]
    fn missing_name_is_named() {
        let m = Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}));
        assert_eq!(m.resource_ref().expect_err("invalid").0, "metadata.name");
        let m = Manifest(json!({"kind": "ConfigMap", "metadata": {"name": "a"}}));
        assert_eq!(m.resource_ref().expect_err("invalid").0, "apiVersion");
    }
}
