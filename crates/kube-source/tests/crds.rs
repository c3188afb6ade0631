//! The CRD definitions shipped in `deploy/crds/` and in the Helm chart's `crds/`
//! (Helm reads no files outside a chart, and Flux drops symlinks, hence two
//! generated copies) are the ones the Rust types generate, and they define what the
//! source watches.
//!
//! After changing the types, regenerate the files with
//! `FLEETSYNC_UPDATE_CRDS=1 cargo test -p fleetsync-kube-source --test crds`.

use fleetsync_kube_source::crd::{self, definitions};
use fleetsync_kube_source::{api_resource, CrKind};
use std::path::PathBuf;

const UPDATE: &str = "FLEETSYNC_UPDATE_CRDS";

fn deploy() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Where the definitions are shipped.
fn dirs() -> [PathBuf; 2] {
    [deploy().join("crds"), deploy().join("helm/fleetsync/crds")]
}

#[test]
fn the_shipped_crds_are_the_generated_ones() {
    let update = std::env::var_os(UPDATE).is_some();
    let mut expected = Vec::new();
    for crd in definitions() {
        let name = crd.metadata.name.clone().expect("a name");
        let file = format!("{name}.yaml");
        let yaml = format!(
            "# Generated from crates/kube-source/src/crd.rs: do not edit.\n# Regenerate: {UPDATE}=1 cargo test -p fleetsync-kube-source --test crds\n{}",
            serde_saphyr::to_string(&crd).expect("YAML")
        );
        for dir in dirs() {
            let path = dir.join(&file);
            if update {
                std::fs::create_dir_all(&dir).expect("mkdir");
                std::fs::write(&path, &yaml).expect("write");
            }
            let shipped = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(shipped == yaml, "{} differs from what the types generate: run {UPDATE}=1 cargo test -p fleetsync-kube-source --test crds", path.display());
        }
        expected.push(file);
    }
    expected.sort();
    for dir in dirs() {
        let mut shipped: Vec<String> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|f| f != "kustomization.yaml")
            .collect();
        shipped.sort();
        assert_eq!(shipped, expected, "{} holds exactly the generated definitions", dir.display());
    }
    let kustomization = deploy().join("crds/kustomization.yaml");
    let kustomization: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(kustomization).expect("kustomization.yaml")).expect("YAML");
    let listed: Vec<&str> =
        kustomization["resources"].as_array().expect("resources").iter().filter_map(|r| r.as_str()).collect();
    assert_eq!(listed, expected, "deploy/crds/kustomization.yaml lists every definition");
}

#[test]
fn the_crds_define_what_the_source_watches() {
    let crds = definitions();
    for kind in CrKind::ALL {
        let ar = api_resource(kind);
        let crd = crds.iter().find(|c| c.spec.names.kind == kind.kind()).expect("a definition of each kind");
        assert_eq!((crd.spec.group.as_str(), crd.spec.names.plural.as_str()), (ar.group.as_str(), ar.plural.as_str()));
        assert_eq!(crd.spec.scope, "Namespaced", "the namespace is the tenant");
        let version = crd.spec.versions.iter().find(|v| v.name == ar.version).expect("the version watched");
        assert!(version.served && version.storage);
        assert!(version.subresources.as_ref().is_some_and(|s| s.status.is_some()), "status is a subresource");
        let schema = serde_json::to_value(&version.schema).expect("json");
        let text = schema.to_string();
        assert!(
            !text.contains(r#""additionalProperties":false"#),
            "{kind}: the API server refuses additionalProperties: false"
        );
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
        assert!(spec["properties"].is_object(), "{kind}: the spec has a schema: {spec}");
        let conditions = &schema["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]["items"];
        let required: Vec<&str> =
            conditions["required"].as_array().expect("required").iter().filter_map(|v| v.as_str()).collect();
        for field in ["type", "status", "reason", "message", "lastTransitionTime"] {
            assert!(required.contains(&field), "{kind}: conditions require {field}: {required:?}");
        }
    }
}

#[test]
fn documents_read_as_the_typed_resources() {
    let syncset: crd::SyncSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "fleetsync.io/v1", "kind": "SyncSet", "metadata": {"name": "s", "namespace": "team"},
        "spec": {"clusterSelector": {"matchLabels": {"env": "prod"}}, "resourceApplyMode": "Sync",
                 "resources": [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}]},
    }))
    .expect("a SyncSet");
    assert_eq!(syncset.spec.0.resources.len(), 1);
    let cluster: crd::Cluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "fleetsync.io/v1", "kind": "Cluster", "metadata": {"name": "c", "namespace": "team"},
        "spec": {"endpoint": {"inCluster": {}}},
    }))
    .expect("a Cluster");
    assert_eq!(cluster.spec.0.endpoint.kind_name(), "inCluster");
}
