//! The store's error type.

use crate::Fence;
use fleetsync_model::{Kind, WorkKey};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// What a backend failed with, kept as the [`StoreError::Backend`]'s source. A plain
/// message converts too (`"…".into()`) where the store itself found the problem.
pub type Cause = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{kind} {tenant}/{name} not found")]
    NotFound { kind: &'static str, tenant: String, name: String },
    /// The backend failed (I/O, SQL, connection) while `step`; `source` is its error.
    /// `transient` is decided where the backend's error is mapped: whether the same call
    /// may succeed if tried again (a lost connection, an outage, a conflict the
    /// backend's own retries did not outlast), or not (a syntax error, a constraint, a
    /// corrupt or read-only file). See [`is_transient`](StoreError::is_transient).
    #[error("store backend error while {step}: {source}")]
    Backend {
        step: &'static str,
        transient: bool,
        #[source]
        source: Cause,
    },
    /// The backend refused the data it was given: it cannot hold a value of it (on
    /// PostgreSQL, a data exception, SQLSTATE class 22, such as a NUL byte in text).
    /// Nothing of the operation took effect, and the same call would be refused again.
    /// `reason` is the backend's description (with its code), not the value.
    #[error("store refused the data while {step}: {reason}")]
    Refused { step: &'static str, reason: String },
    /// A stored row could not be decoded; the store was written by something else.
    #[error("corrupt row in {table}: {message}")]
    Corrupt { table: &'static str, message: String },
    /// The events after `cursor` are no longer all in the log: a trim removed every
    /// event up to `horizon` (> `cursor`). The reader must re-list and resume from a
    /// cursor at or after the horizon.
    #[error("cursor {cursor} fell off the event log: events up to {horizon} were trimmed")]
    CursorExpired { cursor: u64, horizon: u64 },
    /// A consumer name that cannot be stored; `reason` says what to change.
    #[error("invalid consumer name {name:?}: {reason}")]
    InvalidConsumerName { name: String, reason: &'static str },
    /// An own write (see [`Store::objects_apply_own`](crate::Store::objects_apply_own))
    /// whose writer no longer holds the key with this token: nothing was written.
    #[error("write refused: the lease on {key} with token {fence} is no longer held")]
    LeaseLost { key: WorkKey, fence: Fence },
    /// A SyncSet's resources, read from its source, break a rule (see
    /// [`fleetsync_model::document::validate_sourced`]): nothing was written.
    #[error("SyncSet {tenant}/{name}: the manifests its source holds at revision {revision}: {rule}")]
    SourceInvalid { tenant: String, name: String, revision: String, rule: String },
    /// A source named as a source of another kind in the same namespace is: sources
    /// share one name space (`reconcile source NAME`, push notifications and the
    /// source's key name it alone). Nothing was written.
    #[error("{kind} {tenant}/{name}: the name is taken by the {taken_by} of that name")]
    NameTaken { kind: &'static str, tenant: String, name: String, taken_by: &'static str },
    /// A SyncSet's `dependsOn` leads back to it through the SyncSets stored in its
    /// tenant: `cycle` names them, from this SyncSet back to it. Nothing was written.
    #[error("SyncSet {tenant}/{name}: spec.dependsOn makes a cycle: {}", cycle.join(" → "))]
    DependencyCycle { tenant: String, name: String, cycle: Vec<String> },
    /// The write would have exceeded a tenant's quota: nothing was written.
    #[error(transparent)]
    QuotaExceeded(#[from] crate::quota::QuotaExceeded),
}

impl StoreError {
    pub fn not_found(kind: Kind, tenant: &str, name: &str) -> Self {
        StoreError::NotFound { kind: kind.as_str(), tenant: tenant.into(), name: name.into() }
    }

    pub fn key_not_found(key: &fleetsync_model::WorkKey) -> Self {
        StoreError::NotFound {
            kind: "key",
            tenant: key.tenant.clone(),
            name: format!("{}/{}", key.cluster, key.syncset),
        }
    }

    /// A backend failure while `step`, caused by `source`; `transient` as the backend
    /// judged it (see [`StoreError::Backend`]).
    pub fn backend(step: &'static str, transient: bool, source: impl Into<Cause>) -> Self {
        StoreError::Backend { step, transient, source: source.into() }
    }

    /// Whether the same call may succeed if tried again: a backend failure the backend
    /// judged transient (a lost connection, an outage, a conflict its own retries did
    /// not outlast). Not for a permanent backend failure (a syntax error, a constraint,
    /// a corrupt file), refused data, nor an answer about the data (not found, a stale
    /// lease, a corrupt row, a trimmed cursor, a bad name).
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Backend { transient: true, .. })
    }
}

/// The schema a ready store holds: `version` (migrations applied) of its `backend`
/// (`sqlite` or `postgres`), and `latest`, the version this build keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schema {
    pub backend: &'static str,
    pub version: usize,
    pub latest: usize,
}

/// Readiness: a schema at `found` serves this build, which keeps `latest`, only if it is
/// up to date; one behind is transient (a `fleetsync migrate`, or the hub's start, fixes it).
pub(crate) fn schema_ready(step: &'static str, backend: &'static str, found: usize, latest: usize) -> Result<Schema> {
    if found >= latest {
        return Ok(Schema { backend, version: found, latest });
    }
    let why =
        format!("the schema is at version {found} and this build keeps version {latest}: run `fleetsync migrate`");
    Err(StoreError::backend(step, true, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_backend_failures_judged_transient_are_worth_trying_again() {
        assert!(StoreError::backend("s", true, "connection closed").is_transient());
        assert!(!StoreError::backend("s", false, "syntax error").is_transient());
        assert!(!StoreError::Refused { step: "s", reason: "NUL byte".into() }.is_transient());
        assert!(!StoreError::LeaseLost { key: WorkKey::new("t", "c", "s"), fence: Fence::new(1) }.is_transient());
        assert!(!StoreError::Corrupt { table: "work", message: "x".into() }.is_transient());
    }

    #[test]
    fn a_backend_error_shows_its_step_and_cause_and_keeps_the_cause() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = StoreError::backend("completing work", true, io);
        assert_eq!(e.to_string(), "store backend error while completing work: connection refused");
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(
            source.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
    }

    #[test]
    fn a_schema_behind_the_build_is_not_ready_and_says_what_to_run() {
        assert_eq!(
            schema_ready("s", "sqlite", 12, 12).ok(),
            Some(Schema { backend: "sqlite", version: 12, latest: 12 })
        );
        assert!(schema_ready("s", "sqlite", 13, 12).is_ok());
        let e = schema_ready("checking readiness", "postgres", 11, 12).expect_err("schema 11 is behind 12");
        assert!(e.is_transient());
        assert!(e.to_string().ends_with("version 11 and this build keeps version 12: run `fleetsync migrate`"), "{e}");
    }
}
