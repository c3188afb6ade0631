//! The Kubernetes applier's clients: one per cluster, built on first use, reused, and
//! dropped after it has been idle for `idle_after`, or sooner when more than
//! `max_clients` clusters have one (the least recently used go first): a client with
//! its connection pool and discovery cache is kilobytes, and a hub of 100,000 clusters
//! would otherwise hold one per cluster it reached in the last `idle_after`.
//!
//! A client is built from what the cluster's endpoint names. A URL (or `inCluster`) is
//! in the Cluster object itself, which a run reads at its claimed generation or newer,
//! so comparing it is enough. A kubeconfig Secret is not: a kubeconfig client
//! remembers when its Secret was last read ([`Checked`], taken before the read began)
//! and serves a run only if that read began after the run's claim returned
//! ([`ApplyContext::claimed_at`](crate::ApplyContext::claimed_at)). A change of the
//! Secret that enqueued the run committed before the claim returned, so such a read
//! saw it; otherwise the run reads the Secret again, and the client is rebuilt only if
//! the Secret's generation changed. A credential or endpoint change is thus used by the
//! run it enqueued (docs/concepts.md#guarantee-truthful-end-state), and a busy
//! cluster's calls within one run read nothing. Calls without a claim re-read the Secret at most every
//! `secret_refresh`.
//!
//! Builds and re-reads of one cluster take turns ([`Slot::turn`]). A cluster's keys
//! are claimed together: the first run of a burst reads the Secret, and those queued
//! behind it were claimed before that read began, so they find the client current —
//! one read per burst, not one per run.

use crate::Moment;
use fleetsync_model::Endpoint;
use kube::core::{ApiResource, GroupVersionKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// What a client was built from; a cluster whose source changed gets a new client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    Url(String),
    Secret { name: String, generation: i64 },
    InCluster,
}

/// When a client's source was last read: the moment (for runs' claims) and the
/// instant (for the periodic check of calls without a claim) the read began.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checked {
    moment: Moment,
    at: Instant,
}

impl Checked {
    /// Take it *before* reading the source.
    pub fn now() -> Self {
        Self { moment: Moment::now(), at: Instant::now() }
    }

    /// Whether what this read saw is current for a call of a run claimed at
    /// `claimed_at`: only if the read began after the claim returned. A call without a
    /// claim takes a read younger than `refresh`.
    fn covers(self, claimed_at: Option<Moment>, now: Instant, refresh: Duration) -> bool {
        match claimed_at {
            Some(claimed) => self.moment > claimed,
            None => now.duration_since(self.at) < refresh,
        }
    }
}

/// A cluster's client and its discovery cache.
pub(crate) struct ClusterClient {
    pub client: kube::Client,
    /// Kind → (resource, namespaced), found through discovery.
    pub kinds: Mutex<HashMap<GroupVersionKind, (ApiResource, bool)>>,
    /// The cluster's URL as errors name it: scheme, host, port and path, never user
    /// info or a query; no trailing `/`.
    pub base: String,
    source: Source,
    checked: Mutex<Checked>,
}

impl ClusterClient {
    pub fn new(client: kube::Client, base: String, source: Source, checked: Checked) -> Self {
        Self { client, kinds: Mutex::default(), base, source, checked: Mutex::new(checked) }
    }

    /// Whether it was built from what `endpoint` names now, as far as a call of a run
    /// claimed at `claimed_at` must know.
    fn serves(&self, endpoint: &Endpoint, claimed_at: Option<Moment>, refresh: Duration) -> bool {
        match (endpoint, &self.source) {
            (Endpoint::Http { url }, Source::Url(u)) => url == u,
            (Endpoint::Kubeconfig { secret_ref }, Source::Secret { name, .. }) => {
                name == secret_ref && lock(&self.checked).covers(claimed_at, Instant::now(), refresh)
            }
            (Endpoint::InCluster {}, Source::InCluster) => true,
            _ => false,
        }
    }
}

/// The clients by cluster (`tenant/name`).
pub(crate) struct Clients {
    by_cluster: Mutex<ByCluster>,
    idle_after: Duration,
    max_clients: usize,
}

struct ByCluster {
    slots: HashMap<String, Arc<Slot>>,
    /// When idle slots were last swept out.
    swept: Instant,
}

impl ByCluster {
    /// Drops the least recently used slots that no call holds until at most `keep` are
    /// left (or only held ones). Down to a tenth below the cap, so that a full map
    /// sorts its slots once per tenth of the cap of new clusters, not per call.
    fn evict_to(&mut self, keep: usize) {
        let mut idle: Vec<(Instant, String)> = self
            .slots
            .iter()
            .filter(|(_, s)| Arc::strong_count(s) == 1)
            .map(|(id, s)| (*lock(&s.last_used), id.clone()))
            .collect();
        idle.sort_unstable();
        let excess = self.slots.len().saturating_sub(keep);
        for (_, id) in idle.into_iter().take(excess) {
            self.slots.remove(&id);
        }
    }
}

/// One cluster: its client once built, and the turn its builds and re-reads take.
pub(crate) struct Slot {
    client: Mutex<Option<Arc<ClusterClient>>>,
    turn: tokio::sync::Mutex<()>,
    last_used: Mutex<Instant>,
}

impl Clients {
    pub fn new(idle_after: Duration, max_clients: usize) -> Self {
        let by_cluster = Mutex::new(ByCluster { slots: HashMap::new(), swept: Instant::now() });
        Self { by_cluster, idle_after, max_clients: max_clients.max(1) }
    }

    /// The cluster's slot (created if need be), marked used. Sweeps out idle ones too.
    pub fn slot(&self, id: &str) -> Arc<Slot> {
        let now = Instant::now();
        let mut by = lock(&self.by_cluster);
        // Sweeping looks at every cluster: do it at most once a second, not per call.
        if now.duration_since(by.swept) >= Duration::from_secs(1) {
            let idle = self.idle_after;
            by.slots.retain(|_, s| now.duration_since(*lock(&s.last_used)) < idle);
            by.swept = now;
        }
        if by.slots.len() >= self.max_clients && !by.slots.contains_key(id) {
            by.evict_to(self.max_clients - self.max_clients.div_ceil(10));
        }
        let slot = by.slots.entry(id.to_string()).or_insert_with(|| {
            Arc::new(Slot { client: Mutex::default(), turn: tokio::sync::Mutex::new(()), last_used: Mutex::new(now) })
        });
        *lock(&slot.last_used) = now;
        slot.clone()
    }

    /// How many clusters have a client.
    pub fn open(&self) -> usize {
        lock(&self.by_cluster).slots.values().filter(|s| lock(&s.client).is_some()).count()
    }
}

impl Slot {
    /// The client, if it serves a call to `endpoint` of a run claimed at `claimed_at`
    /// (see the module docs).
    pub fn current(
        &self,
        endpoint: &Endpoint,
        claimed_at: Option<Moment>,
        refresh: Duration,
    ) -> Option<Arc<ClusterClient>> {
        lock(&self.client).clone().filter(|c| c.serves(endpoint, claimed_at, refresh))
    }

    /// Waits for this cluster's turn to build its client or re-read its Secret; look
    /// at [`current`](Self::current) again once it is yours.
    pub async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }

    /// The client, if it was built from exactly `source` (a re-read Secret whose
    /// generation did not change keeps its warm client), now known current as of `read`.
    pub fn confirm(&self, source: &Source, read: Checked) -> Option<Arc<ClusterClient>> {
        let c = lock(&self.client).clone().filter(|c| &c.source == source)?;
        let mut checked = lock(&c.checked);
        if read.moment > checked.moment {
            *checked = read;
        }
        drop(checked);
        Some(c)
    }

    /// Makes `fresh` the cluster's client.
    pub fn install(&self, fresh: ClusterClient) -> Arc<ClusterClient> {
        let fresh = Arc::new(fresh);
        *lock(&self.client) = Some(fresh.clone());
        fresh
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_is_current_for_runs_claimed_before_it_began() {
        let claimed = Moment::now();
        let read = Checked::now();
        let later_claim = Moment::now();
        let (now, refresh) = (read.at, Duration::from_secs(10));
        assert!(read.covers(Some(claimed), now, refresh), "read began after the claim returned");
        assert!(!read.covers(Some(later_claim), now, refresh), "the claim may have seen a change the read did not");
        // However fresh the read is by the clock.
        assert!(!read.covers(Some(later_claim), read.at, Duration::MAX));
    }

    /// Past `max_clients`, the least recently used clusters lose their slot (a tenth
    /// below the cap at once); a slot a call holds is kept.
    #[tokio::test(start_paused = true)]
    async fn past_the_cap_the_least_recently_used_clients_go() {
        let clients = Clients::new(Duration::from_secs(600), 10);
        let held = clients.slot("c0");
        for i in 1..10 {
            tokio::time::advance(Duration::from_millis(10)).await;
            clients.slot(&format!("c{i}"));
        }
        tokio::time::advance(Duration::from_millis(10)).await;
        clients.slot("c1"); // used again: now the most recent of the first ones
        tokio::time::advance(Duration::from_millis(10)).await;
        clients.slot("c10");
        let kept: std::collections::BTreeSet<String> = lock(&clients.by_cluster).slots.keys().cloned().collect();
        let want: std::collections::BTreeSet<String> =
            ["c0", "c1", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10"].into_iter().map(String::from).collect();
        assert_eq!(kept, want, "c2, the least recently used, went; c0, older, is held by a call");
        drop(held);
    }

    #[test]
    fn without_a_claim_a_read_is_current_for_refresh() {
        let read = Checked::now();
        let refresh = Duration::from_secs(10);
        assert!(read.covers(None, read.at + Duration::from_secs(9), refresh));
        assert!(!read.covers(None, read.at + refresh, refresh));
    }
}
