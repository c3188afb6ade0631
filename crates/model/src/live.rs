//! Live state: what a `fleetsync agent` beside a cluster reports about the resources
//! fleetsync applied there, and whether that still matches what fleetsync wants.
//!
//! The wire types are here, shared by the agent that sends them and the hub that
//! checks and stores them, so the two cannot disagree on the shape.

use crate::document::DEFAULT_TENANT;
use crate::error::FieldError;
use crate::manifest::{Manifest, ResourceRef};
use crate::names::check_dns1123_label;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most reports one batch may carry.
pub const MAX_REPORTS: usize = 10_000;
/// The longest `resourceVersion` accepted (Kubernetes' are short decimal numbers).
pub const MAX_RESOURCE_VERSION: usize = 128;

/// A resource's latest live state, as the hub stored it (`GET /v1/live`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveResource {
    pub syncset: String,
    pub resource: ResourceRef,
    pub resource_version: String,
    pub state: LiveState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<String>,
    /// How many distinct versions of the resource were stored (each exactly once).
    pub versions: u64,
    pub updated_at: Timestamp,
}

/// Whether a resource exists on the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LiveState {
    Present,
    Deleted,
}

impl LiveState {
    pub fn as_str(self) -> &'static str {
        match self {
            LiveState::Present => "present",
            LiveState::Deleted => "deleted",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "present" => Some(LiveState::Present),
            "deleted" => Some(LiveState::Deleted),
            _ => None,
        }
    }
}

/// One resource's state at one `resourceVersion`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LiveReport {
    pub resource: ResourceRef,
    /// The version the target gave this state (for a deletion: the collection's
    /// version when the deletion was seen). The hub deduplicates by it.
    pub resource_version: String,
    pub state: LiveState,
    /// The live object (required when present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
}

/// A batch of reports from the agent of one cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportBatch {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    pub cluster: String,
    pub reports: Vec<LiveReport>,
}

fn default_tenant() -> String {
    DEFAULT_TENANT.to_string()
}

impl ReportBatch {
    /// Checks what serde cannot: names, sizes, and that each object is the resource
    /// it is reported as. Returns the offending field and the rule.
    pub fn validate(&self) -> Result<(), FieldError> {
        check_dns1123_label(&self.tenant).map_err(|r| FieldError::new("tenant", r.to_string()))?;
        check_dns1123_label(&self.cluster).map_err(|r| FieldError::new("cluster", r.to_string()))?;
        if self.reports.len() > MAX_REPORTS {
            return Err(FieldError::new(
                "reports",
                format!("{} reports; a batch holds at most {MAX_REPORTS}", self.reports.len()),
            ));
        }
        for (i, r) in self.reports.iter().enumerate() {
            r.validate().map_err(|e| FieldError::new(format!("reports[{i}].{}", e.field), e.message))?;
        }
        Ok(())
    }
}

impl LiveReport {
    fn validate(&self) -> Result<(), FieldError> {
        self.resource.validate().map_err(|e| FieldError::new(format!("resource.{}", e.field), e.message))?;
        let rv = &self.resource_version;
        if rv.is_empty() || rv.len() > MAX_RESOURCE_VERSION {
            return Err(FieldError::new("resourceVersion", format!("must be 1 to {MAX_RESOURCE_VERSION} characters")));
        }
        match (&self.state, &self.object) {
            (LiveState::Present, None) => Err(FieldError::new("object", "is required when the state is present")),
            (LiveState::Present, Some(object)) => {
                let found = Manifest(object.clone())
                    .resource_ref()
                    .map_err(|e| FieldError::new(format!("object.{}", e.field), e.message))?;
                if found != self.resource {
                    return Err(FieldError::new(
                        "object",
                        format!("is {found}, but the report is about {}", self.resource),
                    ));
                }
                Ok(())
            }
            (LiveState::Deleted, _) => Ok(()),
        }
    }
}

/// Where a live object differs from what fleetsync applied, or `None` if it has
/// every field of `desired` with the same value. Fields that `desired` does not set
/// may differ (server-side apply semantics: other managers and the server own them);
/// a `null` in `desired` asks for the field to be absent; lists are compared whole.
pub fn difference(desired: &Value, live: &Value) -> Option<String> {
    diff_at(desired, live, "")
}

fn diff_at(desired: &Value, live: &Value, path: &str) -> Option<String> {
    let here = || if path.is_empty() { "the object".to_string() } else { path.to_string() };
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().find_map(|(k, v)| {
            let at = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
            match (v, l.get(k)) {
                (Value::Null, None | Some(Value::Null)) => None,
                (_, None) => Some(at),
                (v, Some(lv)) => diff_at(v, lv, &at),
            }
        }),
        (Value::Array(d), Value::Array(l)) => {
            if d.len() != l.len() {
                return Some(here());
            }
            d.iter().zip(l).enumerate().find_map(|(i, (a, b))| diff_at(a, b, &format!("{path}[{i}]")))
        }
        _ if desired == live => None,
        _ => Some(here()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm() -> ResourceRef {
        ResourceRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("app".into()),
            name: "a".into(),
        }
    }

    #[test]
    fn extra_live_fields_are_not_drift() {
        let desired = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}});
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "9", "annotations": {"x": "y"}}, "data": {"k": "v", "other": "1"}});
        assert_eq!(difference(&desired, &live), None);
        let changed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "w"}});
        assert_eq!(difference(&desired, &changed).as_deref(), Some("data.k"));
        let gone = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        assert_eq!(difference(&desired, &gone).as_deref(), Some("data"));
    }

    #[test]
    fn lists_are_compared_whole_and_null_means_absent() {
        let desired = json!({"spec": {"ports": [{"port": 80}], "gone": null}});
        assert_eq!(difference(&desired, &json!({"spec": {"ports": [{"port": 80, "protocol": "TCP"}]}})), None);
        assert_eq!(
            difference(&desired, &json!({"spec": {"ports": [{"port": 81}]}})).as_deref(),
            Some("spec.ports[0].port")
        );
        assert_eq!(difference(&desired, &json!({"spec": {"ports": []}})).as_deref(), Some("spec.ports"));
        let present = json!({"spec": {"ports": [{"port": 80}], "gone": 1}});
        assert_eq!(difference(&desired, &present).as_deref(), Some("spec.gone"));
    }

    #[test]
    fn batches_name_the_bad_field() {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "app"}});
        let good = LiveReport {
            resource: cm(),
            resource_version: "3".into(),
            state: LiveState::Present,
            object: Some(object),
        };
        let batch = ReportBatch { tenant: "default".into(), cluster: "c1".into(), reports: vec![good.clone()] };
        assert_eq!(batch.validate(), Ok(()));
        let mut bad = batch.clone();
        bad.reports.push(LiveReport { object: None, ..good.clone() });
        assert_eq!(bad.validate().map_err(|e| e.field), Err("reports[1].object".to_string()));
        let mut other = batch.clone();
        other.reports[0].resource.name = "b".into();
        let e = other.validate().expect_err("mismatch");
        assert_eq!(e.field, "reports[0].object");
        assert!(e.message.contains("v1/ConfigMap app/b"), "{e}");
        let mut no_rv = batch;
        no_rv.reports[0].resource_version.clear();
        assert_eq!(no_rv.validate().map_err(|e| e.field), Err("reports[0].resourceVersion".to_string()));
    }

    #[test]
    fn reported_names_follow_kubernetes_rules() {
        let deleted = |name: &str| LiveReport {
            resource: ResourceRef { name: name.into(), ..cm() },
            resource_version: "1".into(),
            state: LiveState::Deleted,
            object: None,
        };
        let batch =
            |name: &str| ReportBatch { tenant: "default".into(), cluster: "c1".into(), reports: vec![deleted(name)] };
        assert_eq!(batch("a").validate(), Ok(()));
        for bad in ["x\u{0}y", "../../admin", "a?b", "A"] {
            assert_eq!(
                batch(bad).validate().map_err(|e| e.field),
                Err("reports[0].resource.name".to_string()),
                "{bad:?}"
            );
        }
    }
}
