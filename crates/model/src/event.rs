//! One entry of the event log: what the store keeps and what `GET /v1/events` answers.

use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Who made the change: the API caller's subject (`token:NAME`, `oidc:SUB`,
    /// `cert:CN`). None for status events and changes made inside the hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
}
