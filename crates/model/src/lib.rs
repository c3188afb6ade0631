//! fleetsync's data model: the vocabulary every other crate speaks.
//!
//! * [`document`]: Clusters and SyncSets as Kubernetes-style YAML documents, with
//!   validation that names the document, the field and the rule that failed.
//! * [`parse`] and [`limits`]: reading a body of YAML or JSON documents within one
//!   policy of depth, size and time, so that whatever is accepted can be stored and read back.
//! * [`artifact`]: the files of one revision of a source, by content digest, and the
//!   manifests under a path of them.
//! * [`source`]: a Git repository as a source of desired state (its spec and rules).
//! * [`notifier`]: where events are sent, which ones (an event's severity, filters), and
//!   in what words (templates); URLs as they may be shown.
//! * [`secret`]: credentials for reaching targets, which never print themselves.
//! * [`shard`]: keys to shards by cluster, shards to members by rendezvous hashing.
//! * [`key`]: the unit of work, `(tenant, cluster, syncset)`.
//! * [`live`]: live state reported by agents, and drift from what was applied.
//! * [`status`]: what a key and a cluster look like to a user.
//! * [`failure`]: failing keys grouped by cause.
//! * [`cluster_list`]: the clusters as a list to search and a heat map by label.
//! * [`progress`]: how far a SyncSet is, the one way every view reads it.
//! * [`template`]: per-cluster rendering of a templated SyncSet's resources.
//! * [`time`]: timestamps and the injected clock that makes time testable.

pub mod access;
pub mod artifact;
pub mod cluster;
pub mod cluster_list;
pub mod dependency;
pub mod document;
pub mod error;
pub mod event;
pub mod failure;
pub mod health;
pub mod key;
pub mod label_query;
pub mod limits;
pub mod live;
pub mod manifest;
pub mod member;
pub mod names;
pub mod notifier;
pub mod oci;
pub mod parse;
pub mod progress;
pub mod readiness;
pub mod rollout;
mod scan;
pub mod secret;
pub mod selector;
pub mod shard;
pub mod source;
pub mod status;
pub mod syncset;
pub mod template;
pub mod time;

pub use access::{Grant, Role, TenantRole, TokenRecord};
pub use artifact::{Artifact, ArtifactError};
pub use cluster::{Cluster, ClusterSpec, Endpoint};
pub use dependency::Dependency;
pub use document::{Document, Kind, ObjectMeta, ValidationError, API_VERSION};
pub use error::FieldError;
pub use event::Event;
pub use failure::FailureGroup;
pub use health::HealthSpec;
pub use key::{Fence, WorkKey};
pub use label_query::{LabelQuery, LabelQueryError, LabelTerm};
pub use limits::{Limit, Limits};
pub use live::{LiveReport, LiveResource, LiveState, ReportBatch};
pub use manifest::{Manifest, ResourceRef};
pub use member::Member;
pub use notifier::{Notifier, NotifierFilters, NotifierSpec, Severity, SlackTarget, WebhookTarget};
pub use oci::{LayerSelector, OCIRepository, OciReference, OciRepositorySpec};
pub use parse::{parse_documents, parse_documents_with, parse_manifests_with, ParseBudget, ParseError};
pub use progress::{ProgressReason, RolloutBrief, SyncSetProgress};
pub use rollout::{RolloutControl, RolloutPhase, RolloutSpec, RolloutStatus, StepCounts};
pub use secret::{Secret, SecretValue};
pub use selector::{LabelOperator, LabelRequirement, LabelSelector};
pub use source::{GitReference, GitRepository, GitRepositorySpec, LocalRef, Source, SourceStatus};
pub use status::{
    ClusterCondition, ClusterConditions, ClusterStatus, Drift, KeyFailure, KeyStatus, Phase, ResourceOutcome,
    ResourceResult, StatusSummary, Unready,
};
pub use syncset::{ApplyMode, SourceKind, SourceRef, SyncSet, SyncSetSpec, SyncSetStatus};
pub use template::{RenderError, TargetCustomization, Values};
pub use time::{Clock, ManualClock, SystemClock, Timestamp};
