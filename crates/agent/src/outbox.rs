//! The agent's outbox: one pending report per resource until the hub acknowledges
//! that it persisted it.
//!
//! A newer report of a resource replaces the pending one (newest wins; a deletion
//! replaces any pending update), so the outbox never holds more entries than the
//! agent watches resources, however fast they change or however long the hub is away.
//! An acknowledgement removes an entry only if it is for the version still pending: a
//! newer report that arrived while the older one was in flight stays, and is sent next.

use fleetsync_model::{LiveReport, ResourceRef};
use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::Notify;

/// Pending reports, shared by the watcher (which puts) and the sender (which takes
/// batches and acknowledges them).
#[derive(Debug, Default)]
pub struct Outbox {
    pending: Mutex<BTreeMap<ResourceRef, LiveReport>>,
    /// Wakes the sender when something is put.
    ready: Notify,
}

impl Outbox {
    /// Makes `report` the pending report of its resource.
    pub fn put(&self, report: LiveReport) {
        self.lock().insert(report.resource.clone(), report);
        self.ready.notify_one();
    }

    /// Up to `n` pending reports, to send (they stay pending until acknowledged).
    pub fn batch(&self, n: usize) -> Vec<LiveReport> {
        self.lock().values().take(n).cloned().collect()
    }

    /// Forgets each report whose version the hub acknowledged, unless a newer one of
    /// its resource has been put meanwhile.
    pub fn ack<'a>(&self, acked: impl IntoIterator<Item = (&'a ResourceRef, &'a str)>) {
        let mut pending = self.lock();
        for (resource, version) in acked {
            if pending.get(resource).is_some_and(|p| p.resource_version == version) {
                pending.remove(resource);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Waits until something is put (returns at once if something was put since the
    /// last wait).
    pub async fn wait(&self) {
        self.ready.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ResourceRef, LiveReport>> {
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::LiveState;

    fn report(name: &str, rv: &str, state: LiveState) -> LiveReport {
        let resource = ResourceRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("a".into()),
            name: name.into(),
        };
        LiveReport { resource, resource_version: rv.into(), state, object: None }
    }

    #[test]
    fn newest_wins_and_a_delete_supersedes_updates() {
        let o = Outbox::default();
        o.put(report("x", "1", LiveState::Present));
        o.put(report("x", "2", LiveState::Present));
        o.put(report("y", "3", LiveState::Present));
        o.put(report("x", "4", LiveState::Deleted));
        let b = o.batch(10);
        assert_eq!(b.len(), 2, "one pending report per resource");
        assert_eq!((b[0].resource_version.as_str(), b[0].state), ("4", LiveState::Deleted));
    }

    #[test]
    fn an_ack_of_an_overtaken_version_keeps_the_newer_one() {
        let o = Outbox::default();
        o.put(report("x", "1", LiveState::Present));
        o.put(report("y", "2", LiveState::Present));
        let sent = o.batch(10);
        o.put(report("x", "5", LiveState::Present));
        o.ack(sent.iter().map(|r| (&r.resource, r.resource_version.as_str())));
        let left = o.batch(10);
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].resource.name.as_str(), left[0].resource_version.as_str()), ("x", "5"));
        assert_eq!(o.batch(0).len(), 0);
    }
}
