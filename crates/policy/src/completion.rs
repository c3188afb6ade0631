//! What a run of a key reports ([`Completion`]) and what the store answers
//! ([`CompleteOutcome`]): the terms [`lifecycle::finish`](crate::lifecycle::finish)
//! decides in.

use fleetsync_model::{Fence, Phase, ResourceRef, ResourceResult, WorkKey};
use std::time::Duration;

/// The result of one run of a key.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub key: WorkKey,
    pub fence: Fence,
    pub outcome: RunOutcome,
    pub resources: Vec<ResourceResult>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    /// Every resource of `generation` applied; `inventory` is what is now on the target;
    /// `rendered`, for a templated SyncSet, the hash of what was applied
    /// ([`fleetsync_model::template::rendered_hash`]), shown in the key's status.
    Applied { generation: i64, inventory: Vec<ResourceRef>, rendered: Option<String> },
    /// The run stopped at an error; retried with backoff or parked.
    Failed { error: String },
    /// The run stopped at an error that trying again cannot fix until something
    /// changes (the hub refused the target by its egress policy): parked at once, no
    /// backoff. Like any parked key it runs again on a change of its Cluster or
    /// SyncSet, a resync or an explicit retry.
    Parked { error: String },
    /// The key's resources were removed (or left, in Upsert mode); the key is gone.
    Removed,
    /// Done with `generation` for now, but run again `after` this long (a reconciler
    /// polling something outside the store), or at once if a change arrived meanwhile.
    /// Attempts start over: a requeue is not a failure.
    Requeue { generation: i64, inventory: Vec<ResourceRef>, after: Duration },
    /// Nothing was applied: the key waits for something outside it (a SyncSet it
    /// depends on, not yet Applied on this cluster). `Pending`, with `reason` as its
    /// message, and run again `after` this long, or at once if a change arrived
    /// meanwhile. Not a failure: attempts start over, and what the last good run
    /// applied is kept.
    Waiting { reason: String, after: Duration },
}

/// The store's answer to one completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleteOutcome {
    /// Written; the key is released, and is now in this phase.
    Committed(Phase),
    /// Written; the key's removal is done and the key is gone.
    Removed,
    /// Refused: the token is not the key's current one (the lease was lost).
    Stale,
}
