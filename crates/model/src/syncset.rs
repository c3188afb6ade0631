//! A SyncSet: an ordered list of resources and the clusters they go to. The resources
//! are given inline (`spec.resources`) or read from a source (`spec.sourceRef`: the
//! manifests under a path of a `GitRepository`'s artifact).

use crate::dependency::Dependency;
use crate::document::ObjectMeta;
use crate::error::FieldError;
use crate::health::HealthSpec;
use crate::manifest::Manifest;
use crate::rollout::RolloutSpec;
use crate::selector::LabelSelector;
use crate::template::{TargetCustomization, Values};
use serde::{Deserialize, Serialize};

/// A SyncSet document (`kind: SyncSet`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncSet {
    pub metadata: ObjectMeta,
    pub spec: SyncSetSpec,
    /// Set by the store (what is given on input is replaced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SyncSetStatus>,
}

/// What the store says of a SyncSet's resources.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncSetStatus {
    /// The revision of the source (a commit id) this generation's resources were read
    /// at; absent while the source has fetched none yet (the SyncSet then runs nowhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_revision: Option<String>,
}

/// The source a SyncSet's resources are read from, and where in it.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceRef {
    /// The kind of source: `GitRepository` or `OCIRepository`.
    pub kind: SourceKind,
    /// The source, in the SyncSet's namespace.
    pub name: String,
    /// The directory whose `.yaml`, `.yml` and `.json` files (and those below it) hold
    /// the resources, relative to the source's root; the root if left out.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
}

/// The kinds of source a SyncSet can read from.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SourceKind {
    GitRepository,
    OCIRepository,
}

impl SourceKind {
    /// The kind of document such a source is.
    pub fn kind(self) -> crate::Kind {
        match self {
            SourceKind::GitRepository => crate::Kind::GitRepository,
            SourceKind::OCIRepository => crate::Kind::OCIRepository,
        }
    }
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SyncSetSpec {
    /// Clusters whose labels match. Exactly one of this and `clusterNames` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Clusters by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_names: Option<Vec<String>>,
    #[serde(default)]
    pub resource_apply_mode: ApplyMode,
    /// Applied in this order; a run stops at the first failure. Left out when
    /// `sourceRef` names where they are.
    #[serde(default)]
    pub resources: Vec<Manifest>,
    /// Read the resources from a source instead: the manifests under `path` (files in
    /// name order, documents in file order), each new revision of the source a new
    /// generation of the SyncSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<SourceRef>,
    /// Stage each new generation through steps instead of applying it everywhere at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutSpec>,
    /// Render the strings of the resources for each cluster ([`crate::template`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub templated: bool,
    /// Templates' `values` on every cluster (with `templated`).
    #[serde(default, skip_serializing_if = "Values::is_empty")]
    pub values: Values,
    /// Values laid over `values` on the clusters each selector matches, in order (later
    /// entries win).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_customizations: Vec<TargetCustomization>,
    /// SyncSets of this namespace whose key on a cluster must be Applied (and ready,
    /// where readiness is known) at its current revision before this SyncSet's key on
    /// that cluster runs. A dependency that does not select a cluster does not hold
    /// it back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<Dependency>,
    /// Read back what a run applied and wait until it is ready, within a timeout
    /// ([`crate::health`]); left out, a run is done when its applies succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSpec>,
}

/// What happens to resources removed from a SyncSet.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ApplyMode {
    /// Removed resources are left on the target.
    #[default]
    Upsert,
    /// Removed resources are deleted from the target.
    Sync,
}

impl ApplyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyMode::Upsert => "Upsert",
            ApplyMode::Sync => "Sync",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Upsert" => Some(ApplyMode::Upsert),
            "Sync" => Some(ApplyMode::Sync),
            _ => None,
        }
    }
}

impl SyncSet {
    /// Whether its resources come from a source that has fetched nothing yet: stored,
    /// but applied nowhere until the source has a revision.
    pub fn waits_for_source(&self) -> bool {
        self.spec.source_ref.is_some() && self.status.as_ref().and_then(|s| s.source_revision.as_ref()).is_none()
    }

    /// The same SyncSet with the values of its Kubernetes Secret manifests replaced by
    /// [`REDACTED`](crate::secret::REDACTED), keys kept: what may be shown. The applier,
    /// the agents' drift and the store use the SyncSet itself.
    pub fn redacted(&self) -> SyncSet {
        let mut shown = self.clone();
        shown.spec.resources.iter_mut().for_each(|m| crate::secret::redact_manifest(&mut m.0));
        shown
    }

    /// Refuses a Kubernetes Secret manifest holding the redaction marker, i.e. a
    /// SyncSet read from the API and applied back unchanged; names the field
    /// (`spec.resources[2].stringData.token`).
    pub fn refuse_redacted(&self) -> Result<(), FieldError> {
        for (i, m) in self.spec.resources.iter().enumerate() {
            crate::secret::refuse_redacted_manifest(&m.0)
                .map_err(|e| FieldError::new(format!("spec.resources[{i}].{}", e.field), e.message))?;
        }
        Ok(())
    }
}

impl SyncSetSpec {
    /// Whether this SyncSet targets the cluster with this name and labels.
    pub fn selects(&self, cluster_name: &str, labels: &std::collections::BTreeMap<String, String>) -> bool {
        if let Some(names) = &self.cluster_names {
            return names.iter().any(|n| n == cluster_name);
        }
        self.cluster_selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// The targeting part alone (selector and names, no resources): what the store
    /// keeps to match clusters without reading every manifest. A templated SyncSet's
    /// keeps what its rendering depends on too (inline resources, values, source), so
    /// that a cluster's change can tell which keys' output it changes.
    pub fn targeting(&self) -> SyncSetSpec {
        let templated = self.templated;
        SyncSetSpec {
            cluster_selector: self.cluster_selector.clone(),
            cluster_names: self.cluster_names.clone(),
            resource_apply_mode: self.resource_apply_mode,
            resources: if templated { self.resources.clone() } else { Vec::new() },
            source_ref: if templated { self.source_ref.clone() } else { None },
            rollout: None,
            templated,
            values: if templated { self.values.clone() } else { Values::default() },
            target_customizations: if templated { self.target_customizations.clone() } else { Vec::new() },
            depends_on: Vec::new(),
            health: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::document::tests::invalid;
    use crate::document::{parse_documents, Document};
    use crate::secret::{REDACTED, REDACTED_APPLIED};

    const SET: &str = r#"
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: base}
spec:
  clusterNames: [c1]
  resources:
    - {apiVersion: v1, kind: ConfigMap, metadata: {name: cfg, namespace: app}, data: {k: plain}}
    - {apiVersion: v1, kind: Secret, metadata: {name: db, namespace: app}, stringData: {password: MARKER-s1}, data: {token: TUFSS0VSLWQx}}
"#;

    #[test]
    fn secret_manifests_are_shown_redacted_and_kept_whole() {
        let docs = parse_documents(SET).expect("valid");
        let Document::SyncSet(set) = &docs[0] else { panic!("a SyncSet") };
        assert_eq!(set.spec.resources[1].0["stringData"]["password"], "MARKER-s1", "the applier gets the value");
        let shown = docs[0].to_value();
        let text = shown.to_string();
        assert!(!text.contains("MARKER") && !text.contains("TUFSS0VSLWQx"), "{text}");
        let secret = &shown["spec"]["resources"][1];
        assert_eq!((&secret["stringData"]["password"], &secret["data"]["token"]), (&REDACTED.into(), &REDACTED.into()));
        assert_eq!(shown["spec"]["resources"][0]["data"]["k"], "plain", "other manifests are shown as they are");
    }

    #[test]
    fn a_redacted_syncset_applied_back_is_refused() {
        let docs = parse_documents(SET).expect("valid");
        let again = serde_json::to_string(&docs[0].to_value()).expect("json");
        let e = invalid(&again);
        assert_eq!(e.field, "spec.resources[1].data.token");
        assert_eq!(e.rule, REDACTED_APPLIED);
        let whole =
            SET.replace("stringData: {password: MARKER-s1}, data: {token: TUFSS0VSLWQx}", "stringData: \"<redacted>\"");
        assert_eq!(invalid(&whole).field, "spec.resources[1].stringData");
    }

    #[test]
    fn manifest_names_are_checked_at_apply_with_their_field() {
        let nul = SET.replace("name: cfg,", "name: \"x\\0y\",");
        let e = invalid(&nul);
        assert_eq!(e.field, "spec.resources[0].metadata.name");
        assert!(e.rule.contains("DNS-1123 subdomain"), "{e}");
        let steer = SET.replace("name: cfg,", "name: \"../../../../admin/x?confirm=yes#\",");
        assert_eq!(invalid(&steer).field, "spec.resources[0].metadata.name");
        let ns = SET.replace("namespace: app}, data: {k", "namespace: \"app\\0\"}, data: {k");
        assert_eq!(invalid(&ns).field, "spec.resources[0].metadata.namespace");
        let rbac = SET.replace(
            "{apiVersion: v1, kind: ConfigMap, metadata: {name: cfg, namespace: app}, data: {k: plain}}",
            "{apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRole, metadata: {name: \"system:controller:x\"}}",
        );
        assert!(parse_documents(&rbac).is_ok(), "RBAC names may hold ':'");
    }

    #[test]
    fn a_source_ref_stands_for_the_resources_and_is_checked() {
        let sourced = "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: web}\nspec:\n  clusterNames: [c1]\n  sourceRef: {kind: GitRepository, name: fleet, path: apps/web}\n";
        let docs = parse_documents(sourced).expect("valid");
        let Document::SyncSet(set) = &docs[0] else { panic!("a SyncSet") };
        assert!(set.waits_for_source(), "no revision yet");
        let both = sourced
            .replace("  sourceRef:", "  resources: [{apiVersion: v1, kind: A, metadata: {name: x}}]\n  sourceRef:");
        assert_eq!(invalid(&both).rule, "set only one of resources and sourceRef");
        let out = invalid(&sourced.replace("apps/web", "../secrets"));
        assert_eq!(out.field, "spec.sourceRef.path");
        assert!(out.rule.contains("`..`"), "{out:?}");
        let kind = invalid(&sourced.replace("kind: GitRepository", "kind: Bucket"));
        assert_eq!(kind.field, "spec.sourceRef.kind", "{kind:?}");
        assert_eq!(invalid(&sourced.replace("name: fleet", "name: Fleet")).field, "spec.sourceRef.name");
    }

    #[test]
    fn the_example_fleet_still_parses() {
        parse_documents(include_str!("../../../examples/fleet.yaml")).expect("examples/fleet.yaml");
    }
}
