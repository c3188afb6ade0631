//! The event log: every accepted change, in commit order, readable from a cursor.

use fleetsync_model::Timestamp;
use serde::{Deserialize, Serialize};

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Position in the log; strictly increasing in commit order. The cursor.
    pub seq: u64,
    pub at: Timestamp,
    pub tenant: String,
    /// `Cluster`, `SyncSet`, `Secret` or `Status`.
    pub kind: String,
    /// The object's name; for `Status`, `cluster/syncset`.
    pub name: String,
    /// `Created`, `Updated`, `Deleted`, or for `Status` the new phase.
    pub action: String,
    /// The object's generation (for `Status`, the SyncSet generation it concerns).
    pub generation: i64,
}
