//! The store's error type.

use crate::Fence;
use fleetsync_model::{Kind, WorkKey};

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{kind} {tenant}/{name} not found")]
    NotFound { kind: &'static str, tenant: String, name: String },
    /// The backend failed (I/O, SQL, connection). The operation did not take effect.
    #[error("store backend error while {step}: {message}")]
    Backend { step: &'static str, message: String },
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
}

impl StoreError {
    pub fn not_found(kind: Kind, tenant: &str, name: &str) -> Self {
        StoreError::NotFound { kind: kind.as_str(), tenant: tenant.into(), name: name.into() }
    }

    pub fn key_not_found(key: &fleetsync_model::WorkKey) -> Self {
        StoreError::NotFound { kind: "key", tenant: key.tenant.clone(), name: format!("{}/{}", key.cluster, key.syncset) }
    }
}
