//! The store: the single source of truth of fleetsync.
//!
//! It holds objects (Clusters, SyncSets, Secrets), the coalescing keyed work queue with
//! leases and fencing tokens, members, status, the event log and live state, one role
//! trait each ([`roles`]); [`Store`] is their union. Backends are modules behind cargo
//! features (`sqlite`, the default, and `postgres`) and all pass the one shared
//! [`conformance`] suite. What they decide without a database — a key's life, retries,
//! quotas, summaries, rollout steps — is `fleetsync-policy`'s.
//!
//! Method names read `noun_verb` and take plain params structs, after River's driver
//! interface. Time comes from the store's clock ([`WorkQueue::clock`]): the one
//! [`StoreConfig::clock`] gives (tests fix time with it, so leases and backoff are
//! testable without sleeping), else the store's own — the database's on PostgreSQL, so
//! every process stamps and compares leases, member TTLs and due times on one clock.

pub mod consumer;
pub mod error;
pub mod event;
pub mod live;
pub mod page;
pub mod progress;
pub mod queue;
pub mod roles;
pub mod rollout_drive;
pub mod sealed;
pub mod summary;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod plan;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod revision;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod stored;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod write;

pub(crate) use fleetsync_policy::lifecycle;
/// The pure decisions the backends write the answers of, from `fleetsync-policy`, under
/// the paths they had when they lived here.
pub use fleetsync_policy::{quota, retry, rollout};

pub use consumer::{check_consumer_name, MAX_CONSUMER_NAME};
pub use error::{Result, Schema, StoreError};
pub use event::{Event, EventObject, EventRetention, EventsTrimmed};
pub use live::{LiveOutcome, LiveRecord, LiveRecorded, LiveResource};
pub use page::{
    ClusterFilter, LiveFilter, ObjectFilter, ObjectKey, Page, PageRequest, DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT,
};
pub use queue::{
    ApplyOutcome, ClaimParams, ClaimedItem, ClusterLimit, Commit, CompleteOutcome, Completion, Fence, Member,
    MemberBeat, OwnWrite, QueueStats, RenewParams, RunOutcome, StatusFilter,
};
pub use quota::{Quota, QuotaExceeded, Quotas, Usage};
pub use retry::RetryPolicy;
pub use roles::{Artifacts, EventLog, LiveState, Members, Objects, Rollouts, StatusRead, Store, Tokens, WorkQueue};
pub use sealed::{KeyFileError, Keyring, Resealed, SealError};
pub use write::artifact::{ArtifactStored, SourceFetched, SourceStored};

use fleetsync_model::Clock;
use std::sync::Arc;

/// What every backend is opened with.
#[derive(Debug, Clone, Default)]
pub struct StoreConfig {
    /// Where "now" comes from for leases, backoff and timestamps. `None` (production):
    /// the store's own clock — the database server's on PostgreSQL (`postgres::clock`),
    /// the system's on SQLite (one process). `Some`: this one (tests fix time with it).
    pub clock: Option<Arc<dyn Clock>>,
    /// Backoff and parking after failures.
    pub retry: RetryPolicy,
    /// The keys Secrets are sealed with at rest ([`sealed`]): the first seals, every one
    /// opens. `None`: Secrets are written in clear, and a sealed one does not read.
    pub keys: Option<Arc<Keyring>>,
}
