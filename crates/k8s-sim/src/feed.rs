//! One cluster's change feed: what watches are served from.
//!
//! Every write that moves the cluster's `resourceVersion` is published here. The
//! feed is dormant until the cluster is first listed or watched, so the fleet
//! benchmark (thousands of clusters, applied to and never listed) pays one branch per
//! write and no memory. A list starts it too because a client lists, then watches
//! from the list's version: writes made in between must still be there.
//! Once active it keeps a bounded history (the last [`HISTORY`] changes) so that a
//! watcher can resume from a version it saw, and a broadcast channel for watchers
//! following live. A resume from before the history is [`ApiError::Expired`]: the
//! client lists again, as against a real API server after compaction.

use crate::status::ApiError;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// How many changes a watched cluster keeps for watchers that resume.
pub const HISTORY: usize = 1024;

/// What happened to the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as watchers receive it.
#[derive(Debug)]
pub struct Change {
    pub resource_version: u64,
    /// The kind's type id (see `discovery::lookup`).
    pub kind: u8,
    /// `""` for cluster-scoped objects.
    pub namespace: Box<str>,
    pub event: EventType,
    /// The object as JSON, as of this change (for a deletion: its last state, at the
    /// deletion's version).
    pub object: Arc<str>,
    /// When the change was made; a watch delay counts from here.
    pub at: Instant,
}

/// Where a watcher starts: the changes it missed, then the live ones.
#[derive(Debug)]
pub struct Following {
    pub backlog: Vec<Arc<Change>>,
    pub live: broadcast::Receiver<Arc<Change>>,
}

/// A cluster's feed; dormant (no history, no channel) until first watched.
#[derive(Debug, Default)]
pub struct Feed {
    active: Option<Active>,
}

#[derive(Debug)]
pub struct Active {
    history: VecDeque<Arc<Change>>,
    /// Watches may resume from this version or later: every change after it is
    /// still in the history.
    horizon: u64,
    live: broadcast::Sender<Arc<Change>>,
}

impl Feed {
    /// Whether anyone has watched this cluster (changes are only built if so).
    pub fn is_active(&self) -> bool {
        self.active.is_some()
    }

    /// Records a change; does nothing while the feed is dormant.
    pub fn publish(&mut self, change: Change) {
        let Some(active) = &mut self.active else { return };
        let change = Arc::new(change);
        if active.history.len() == HISTORY {
            if let Some(oldest) = active.history.pop_front() {
                active.horizon = oldest.resource_version;
            }
        }
        active.history.push_back(change.clone());
        // No receiver is fine: nobody is following right now.
        let _ = active.live.send(change);
    }

    /// Starts keeping changes from now on (the cluster being at `current`), if not
    /// already.
    pub fn activate(&mut self, current: u64) -> &mut Active {
        self.active.get_or_insert_with(|| Active {
            history: VecDeque::new(),
            horizon: current,
            live: broadcast::channel(HISTORY).0,
        })
    }

    /// Starts a watcher after version `from`, the cluster being at `current`. Called
    /// under the cluster's lock, so no change falls between the backlog and the live
    /// channel.
    pub fn follow(&mut self, from: u64, current: u64) -> Result<Following, ApiError> {
        let active = self.activate(current);
        if from < active.horizon {
            return Err(ApiError::Expired { asked: from, oldest: active.horizon });
        }
        let backlog = active.history.iter().filter(|c| c.resource_version > from).cloned().collect();
        Ok(Following { backlog, live: active.live.subscribe() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(rv: u64) -> Change {
        Change {
            resource_version: rv,
            kind: 1,
            namespace: "app".into(),
            event: EventType::Modified,
            object: Arc::from("{}"),
            at: Instant::now(),
        }
    }

    #[tokio::test]
    async fn dormant_until_watched_then_resumable_within_its_history() {
        let mut feed = Feed::default();
        feed.publish(change(1));
        assert!(!feed.is_active());
        feed.activate(1);
        feed.publish(change(2));
        let first = feed.follow(1, 2).expect("from the activation on");
        assert_eq!(first.backlog.len(), 1);
        for rv in 3..=5 {
            feed.publish(change(rv));
        }
        let resumed = feed.follow(3, 5).expect("resume");
        let versions: Vec<u64> = resumed.backlog.iter().map(|c| c.resource_version).collect();
        assert_eq!(versions, [4, 5]);
        assert_eq!(feed.follow(0, 5).map(|_| ()), Err(ApiError::Expired { asked: 0, oldest: 1 }));
    }

    #[tokio::test]
    async fn the_history_is_bounded() {
        let mut feed = Feed::default();
        let mut live = feed.follow(0, 0).expect("follow").live;
        let total = HISTORY as u64 + 10;
        for rv in 1..=total {
            feed.publish(change(rv));
        }
        assert!(feed.follow(9, total).is_err(), "trimmed");
        assert_eq!(feed.follow(10, total).expect("kept").backlog.len(), HISTORY);
        assert!(matches!(live.try_recv(), Err(broadcast::error::TryRecvError::Lagged(_))));
    }
}
