//! How documents are stored, the same in every SQL backend: canonical JSON without the
//! generation (so that re-applying the same content is recognised as unchanged), and
//! decoding it back with the stored generation stamped on.

use crate::{Result, StoreError};
use fleetsync_model::{Cluster, GitRepository, Kind, Notifier, OCIRepository, Secret, SourceKind, SyncSet};
use serde::de::DeserializeOwned;

/// The stored form of a document: canonical JSON without the generation.
pub(crate) fn canonical<T: serde::Serialize>(doc: &T) -> Result<String> {
    let mut v = serde_json::to_value(doc).map_err(|e| corrupt("documents", e))?;
    if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("generation");
    }
    Ok(v.to_string())
}

/// JSON text for a column; only fails for types that cannot be JSON (a bug).
pub(crate) fn json<T: serde::Serialize + ?Sized>(table: &'static str, value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| corrupt(table, e))
}

pub(crate) fn decode<T: DeserializeOwned>(table: &'static str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| corrupt(table, e))
}

/// A stored document with its stored generation stamped on.
pub(crate) fn decode_doc<T: DeserializeOwned + WithGeneration>(
    table: &'static str,
    doc: &str,
    generation: i64,
) -> Result<T> {
    let mut t: T = decode(table, doc)?;
    t.set_generation(generation);
    Ok(t)
}

/// The `tenant` column of a stored token: its grant's tenant, `''` for a hub-wide
/// (fleet-admin) token.
pub(crate) fn token_tenant(tenant: Option<&str>) -> &str {
    tenant.unwrap_or("")
}

pub(crate) fn corrupt(table: &'static str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt { table, message: e.to_string() }
}

/// The table a kind of document lives in.
pub(crate) fn table(kind: Kind) -> &'static str {
    match kind {
        Kind::Cluster => "clusters",
        Kind::SyncSet => "syncsets",
        Kind::Secret => "secrets",
        Kind::GitRepository => "git_repositories",
        Kind::OCIRepository => "oci_repositories",
        Kind::Notifier => "notifiers",
    }
}

/// How a source is named where its artifacts and the SyncSets that read it are stored:
/// `GitRepository/<name>`, `OCIRepository/<name>`.
pub(crate) fn source_id(kind: SourceKind, name: &str) -> String {
    format!("{}/{name}", kind.kind().as_str())
}

/// Lets the generic readers stamp the stored generation onto a decoded document.
pub(crate) trait WithGeneration {
    fn set_generation(&mut self, generation: i64);
}

impl WithGeneration for Cluster {
    fn set_generation(&mut self, generation: i64) {
        self.metadata.generation = generation;
    }
}

impl WithGeneration for SyncSet {
    fn set_generation(&mut self, generation: i64) {
        self.metadata.generation = generation;
    }
}

impl WithGeneration for GitRepository {
    fn set_generation(&mut self, generation: i64) {
        self.metadata.generation = generation;
    }
}

impl WithGeneration for OCIRepository {
    fn set_generation(&mut self, generation: i64) {
        self.metadata.generation = generation;
    }
}

impl WithGeneration for Notifier {
    fn set_generation(&mut self, generation: i64) {
        self.metadata.generation = generation;
    }
}

impl WithGeneration for Secret {
    fn set_generation(&mut self, generation: i64) {
        self.metadata.generation = generation;
    }
}

/// Whether a cluster reaches its target through the kubeconfig in Secret `secret`
/// (so that a changed Secret re-applies the cluster's keys with the new credentials).
pub(crate) fn uses_secret(cluster: &Cluster, secret: &str) -> bool {
    matches!(&cluster.spec.endpoint, fleetsync_model::Endpoint::Kubeconfig { secret_ref } if secret_ref == secret)
}
