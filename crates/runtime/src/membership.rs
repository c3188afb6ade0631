//! This process as a member of the fleet's workers: a heartbeat with a TTL in the
//! store, and the shards that rendezvous hashing gives it among the live members
//! (see `fleetsync_model::shard`). Claims take only keys of those shards, so each
//! cluster's keys go to one process, which keeps that cluster's connections warm.
//!
//! A member that stops heartbeating (kill -9) drops out after its TTL and its shards
//! move to the others; one that leaves gracefully moves them at once. A lease taken
//! before a shard moved stays valid until it ends, so nothing runs twice: the store's
//! leases, not the shard map, guarantee exclusivity. When the store cannot be reached
//! the last view is kept; a process that never heard of any other claims every shard.

use crate::metrics::RuntimeMetrics;
use fleetsync_model::shard::{owned_by, SHARDS};
use fleetsync_store::{MemberBeat, Members};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Who is alive, and what this process owns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View {
    /// Live members' ids, sorted.
    pub members: Vec<String>,
    /// The shards this process claims from; `None`: every shard (it is alone).
    pub shards: Option<Vec<u16>>,
    /// The other members' shards, where this process may steal keys that have
    /// waited too long (see `RuntimeConfig::steal_after`); empty when it is alone.
    pub others: Vec<u16>,
}

impl View {
    fn of(id: &str, members: Vec<String>) -> View {
        let mine = owned_by(id, &members);
        let others = (0..SHARDS).filter(|s| mine.binary_search(s).is_err()).collect();
        let shards = (mine.len() < usize::from(SHARDS)).then_some(mine);
        View { members, shards, others }
    }
}

pub struct Membership {
    id: String,
    ttl: Duration,
    /// This process's `max_in_flight`, told in each heartbeat.
    max_in_flight: u64,
    view: watch::Sender<View>,
}

impl Membership {
    /// Registers this process (the first heartbeat), so claims are sharded from the start.
    pub async fn join(
        store: &dyn Members,
        id: String,
        ttl: Duration,
        max_in_flight: usize,
        metrics: &RuntimeMetrics,
    ) -> Membership {
        let (view, _) = watch::channel(View::default());
        let max_in_flight = u64::try_from(max_in_flight).unwrap_or(u64::MAX);
        let m = Membership { id, ttl, max_in_flight, view };
        m.beat(store, metrics, 0).await;
        m
    }

    pub fn view(&self) -> watch::Receiver<View> {
        self.view.subscribe()
    }

    /// Heartbeats every third of the TTL until `stop`, then leaves.
    pub async fn run(self, store: Arc<dyn Members>, metrics: RuntimeMetrics, stop: CancellationToken) {
        let every = self.ttl / 3;
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stop.cancelled() => break,
            }
            let in_flight = u64::try_from(metrics.applies_in_flight.get()).unwrap_or(0);
            self.beat(&*store, &metrics, in_flight).await;
        }
        if let Err(e) = store.member_leave(&self.id).await {
            tracing::warn!(error = %e, "leaving the members failed; the others notice when the TTL runs out");
        }
    }

    async fn beat(&self, store: &dyn Members, metrics: &RuntimeMetrics, in_flight: u64) {
        let beat = MemberBeat { id: self.id.clone(), ttl: self.ttl, in_flight, max_in_flight: self.max_in_flight };
        match metrics.store_call("heartbeat", store.member_heartbeat(beat)).await {
            Ok(live) => {
                let view = View::of(&self.id, live.into_iter().map(|m| m.id).collect());
                let owned = view.shards.as_ref().map_or(usize::from(SHARDS), Vec::len);
                metrics.members.set(i64::try_from(view.members.len()).unwrap_or(i64::MAX));
                metrics.shards_owned.set(i64::try_from(owned).unwrap_or(i64::MAX));
                self.view.send_if_modified(|v| {
                    let changed = *v != view;
                    if changed {
                        tracing::info!(members = view.members.len(), shards = owned, "membership changed");
                        *v = view;
                    }
                    changed
                });
            }
            Err(e) => {
                metrics.heartbeat_failures.inc();
                tracing::error!(error = %e, "heartbeat failed; keeping the last view of the members");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alone_means_every_shard_and_company_means_a_share() {
        assert_eq!(View::of("a", vec!["a".into()]).shards, None);
        let two = View::of("a", vec!["a".into(), "b".into()]);
        let mine = two.shards.expect("a share");
        assert!(!mine.is_empty() && mine.len() < usize::from(SHARDS));
        assert_eq!(mine.len() + two.others.len(), usize::from(SHARDS), "every shard is mine or another's");
        assert!(two.others.iter().all(|s| !mine.contains(s)), "no shard is both mine and another's");
    }

    #[test]
    fn alone_there_is_nothing_to_steal() {
        assert!(View::of("a", vec!["a".into()]).others.is_empty());
    }
}
