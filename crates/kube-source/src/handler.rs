//! What users of the source plug in: event handlers, which see every watch event
//! once, and the reconciler, which sees the latest state of an object when its spec
//! changed and answers the status to write back.

use async_trait::async_trait;
use kube::api::DynamicObject;
use std::fmt;

/// The custom resources the source watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CrKind {
    SyncSet,
    Cluster,
    GitRepository,
    OCIRepository,
}

impl CrKind {
    pub const ALL: [CrKind; 4] = [CrKind::SyncSet, CrKind::Cluster, CrKind::GitRepository, CrKind::OCIRepository];

    pub fn kind(self) -> &'static str {
        self.document_kind().as_str()
    }

    pub fn plural(self) -> &'static str {
        match self {
            CrKind::SyncSet => "syncsets",
            CrKind::Cluster => "clusters",
            CrKind::GitRepository => "gitrepositories",
            CrKind::OCIRepository => "ocirepositories",
        }
    }

    /// The same kind as fleetsync's documents know it.
    pub fn document_kind(self) -> fleetsync_model::Kind {
        match self {
            CrKind::SyncSet => fleetsync_model::Kind::SyncSet,
            CrKind::Cluster => fleetsync_model::Kind::Cluster,
            CrKind::GitRepository => fleetsync_model::Kind::GitRepository,
            CrKind::OCIRepository => fleetsync_model::Kind::OCIRepository,
        }
    }
}

impl fmt::Display for CrKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind())
    }
}

/// What happened to the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Created or changed (including status-only changes).
    Applied,
    Deleted,
}

/// One watch event, as handlers receive it.
#[derive(Debug, Clone)]
pub struct SourceEvent {
    pub kind: CrKind,
    pub change: Change,
    pub object: DynamicObject,
}

/// Receives every watch event of the watched custom resources: each version of
/// each object once, in the order the watch delivered them (a re-list after a
/// broken watch does not repeat versions already delivered). Runs before the
/// reconciler sees the state.
#[async_trait]
pub trait SourceEventHandler: Send + Sync {
    async fn handle(&self, event: &SourceEvent);
}

/// Why a reconcile failed; written to the object's status as `error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReconcileError(pub String);

/// Acts on the latest state of an object whose spec changed (never on a state
/// older than the source's own last write to it, never because of a status write).
#[async_trait]
pub trait CrReconciler: Send + Sync {
    /// Answers the status to write back. The source adds `observedGeneration`, and
    /// stamps each of its `conditions` (`type`, `status`, `reason`, `message`) with
    /// `observedGeneration` and `lastTransitionTime`; when the reconcile fails it
    /// writes `error` and the conditions `Synced` and `Ready` as `False` itself.
    async fn reconcile(&self, kind: CrKind, object: &DynamicObject) -> Result<serde_json::Value, ReconcileError>;

    /// The status of an object whose spec has not changed since it was last
    /// reconciled, asked for every [`SourceConfig::status_interval`] so that status
    /// follows what happens after the reconcile (keys applied, failing); written
    /// only when it differs. `None` (the default): nothing to refresh.
    ///
    /// [`SourceConfig::status_interval`]: crate::SourceConfig::status_interval
    async fn refresh(&self, kind: CrKind, object: &DynamicObject) -> Option<Result<serde_json::Value, ReconcileError>> {
        let _ = (kind, object);
        None
    }

    /// The object was deleted.
    async fn deleted(&self, kind: CrKind, object: &DynamicObject) -> Result<(), ReconcileError> {
        let _ = (kind, object);
        Ok(())
    }
}
