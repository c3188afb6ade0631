//! A worker process sharing a store, as the store last heard from it.

use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// A live worker process, as the store last heard from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub id: String,
    pub started_at: Timestamp,
    pub heartbeat_at: Timestamp,
    pub expires_at: Timestamp,
    /// Keys it had in flight at its last heartbeat.
    pub in_flight: u64,
    /// The most it may have in flight (its `--max-in-flight`); 0 when it did not say
    /// (a process of an older version).
    #[serde(default)]
    pub max_in_flight: u64,
}
