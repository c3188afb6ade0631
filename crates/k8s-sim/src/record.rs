//! Fencing and the record a verdict is drawn from, per key (`tenant/cluster/syncset`).
//!
//! Same semantics as the in-process simulator ([`fleet`](crate::fleet)), so a run is
//! judged the same way whichever simulator it used:
//! * a request whose fencing token is lower than the newest seen for its key is
//!   refused (the sender lost its lease);
//! * a *run* is the requests carrying one token; its applies must come with index
//!   0, 1, 2... (order within a SyncSet), and its latencies are summed (the key's
//!   share of the cluster's critical path);
//! * two requests of one key in flight at once are an overlap;
//! * a cluster's make-span runs from its first fenced request's start to its last
//!   one's end.

use crate::status::ApiError;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The annotation naming the key an object was applied for.
pub const KEY_ANNOTATION: &str = "fleetsync.io/key";
/// The annotation carrying the key's fencing token.
pub const FENCE_ANNOTATION: &str = "fleetsync.io/fence";
/// The annotation carrying the SyncSet generation being applied.
pub const GENERATION_ANNOTATION: &str = "fleetsync.io/generation";
/// The annotation carrying the resource's position in its SyncSet.
pub const INDEX_ANNOTATION: &str = "fleetsync.io/index";
/// Deletes have no object to annotate: they carry the key and token as headers.
pub const KEY_HEADER: &str = "x-fleetsync-key";
pub const FENCE_HEADER: &str = "x-fleetsync-fence";

/// What a fenced request claims: whose it is, under which token, and where it sits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceClaim {
    pub key: String,
    pub fence: i64,
    /// The SyncSet generation (applies only; 0 when absent).
    pub generation: i64,
    /// Position in the SyncSet (applies only); no order check without it.
    pub index: Option<usize>,
}

/// The same counters as the in-process simulator's, so both simulators report one
/// shape.
pub use crate::fleet::Totals;

/// [`Totals`] as lock-free counters, so no request waits on a global lock.
#[derive(Debug, Default)]
pub struct Counters {
    pub applies: AtomicU64,
    pub failures: AtomicU64,
    pub deletes: AtomicU64,
    pub fenced: AtomicU64,
    pub overlaps: AtomicU64,
    pub order_violations: AtomicU64,
}

/// Adds one to a counter.
pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    pub fn snapshot(&self) -> Totals {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Totals {
            applies: get(&self.applies),
            failures: get(&self.failures),
            deletes: get(&self.deletes),
            fenced: get(&self.fenced),
            overlaps: get(&self.overlaps),
            order_violations: get(&self.order_violations),
        }
    }
}

/// One cluster's timing: make-span (first fenced request's start to last one's end)
/// and critical path (its slowest key's sum of latencies in its latest run).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClusterTiming {
    pub makespan: Duration,
    pub critical_path: Duration,
}

/// Whether a request applies (order is checked) or deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Apply,
    Delete,
}

/// One key's fencing state and its latest run.
#[derive(Debug, Default)]
struct KeyRecord {
    newest_fence: i64,
    run_fence: i64,
    next_index: usize,
    in_flight: u32,
    run_latency: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Span {
    first_start: Instant,
    last_end: Instant,
}

/// One cluster's record: its keys and its span.
#[derive(Debug, Default)]
pub struct Record {
    keys: HashMap<Arc<str>, KeyRecord>,
    span: Option<Span>,
}

impl Record {
    /// Checks the claim's token and opens a request; refuses a stale token.
    pub fn begin(&mut self, claim: &FenceClaim, verb: Verb, now: Instant, counters: &Counters) -> Result<(), ApiError> {
        let k = self.keys.entry(Arc::from(claim.key.as_str())).or_default();
        if claim.fence < k.newest_fence {
            bump(&counters.fenced);
            return Err(ApiError::Fenced { key: claim.key.clone(), fence: claim.fence, newest: k.newest_fence });
        }
        k.newest_fence = claim.fence;
        if k.run_fence != claim.fence {
            k.run_fence = claim.fence;
            k.next_index = 0;
            k.run_latency = Duration::ZERO;
        }
        if let (Verb::Apply, Some(index)) = (verb, claim.index) {
            if index != k.next_index {
                bump(&counters.order_violations);
            }
            k.next_index = index + 1;
        }
        k.in_flight += 1;
        if k.in_flight > 1 {
            bump(&counters.overlaps);
        }
        let span = self.span.get_or_insert(Span { first_start: now, last_end: now });
        span.first_start = span.first_start.min(now);
        Ok(())
    }

    /// Closes a request opened by [`Record::begin`]; returns the newest token seen
    /// for the key, so the caller can refuse a request overtaken while in flight.
    pub fn end(&mut self, key: &str, fence: i64, latency: Duration, now: Instant) -> i64 {
        if let Some(span) = &mut self.span {
            span.last_end = span.last_end.max(now);
        }
        let Some(k) = self.keys.get_mut(key) else { return fence };
        k.in_flight = k.in_flight.saturating_sub(1);
        if k.run_fence == fence {
            k.run_latency += latency;
        }
        k.newest_fence
    }

    /// The shared copy of `key`, if the key has a record (objects point to it).
    pub fn shared_key(&self, key: &str) -> Option<Arc<str>> {
        self.keys.get_key_value(key).map(|(k, _)| k.clone())
    }

    pub fn timing(&self) -> ClusterTiming {
        let critical_path = self.keys.values().map(|k| k.run_latency).max().unwrap_or_default();
        let makespan = self.span.map(|s| s.last_end - s.first_start).unwrap_or_default();
        ClusterTiming { makespan, critical_path }
    }

    /// Whether any fenced request reached this cluster.
    pub fn is_empty(&self) -> bool {
        self.span.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(fence: i64, index: usize) -> FenceClaim {
        FenceClaim { key: "t/c1/s1".into(), fence, generation: 1, index: Some(index) }
    }

    #[tokio::test(start_paused = true)]
    async fn stale_tokens_are_refused_and_runs_restart_at_a_new_token() {
        let (mut r, c, now) = (Record::default(), Counters::default(), Instant::now());
        r.begin(&claim(2, 0), Verb::Apply, now, &c).expect("first");
        assert_eq!(r.end("t/c1/s1", 2, Duration::from_millis(300), now), 2);
        let err = r.begin(&claim(1, 1), Verb::Apply, now, &c).expect_err("stale");
        assert!(matches!(err, ApiError::Fenced { fence: 1, newest: 2, .. }));
        r.begin(&claim(3, 0), Verb::Apply, now, &c).expect("new run starts at 0");
        let t = c.snapshot();
        assert_eq!((t.fenced, t.order_violations, t.overlaps), (1, 0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn overlaps_order_and_timing() {
        let (mut r, c, t0) = (Record::default(), Counters::default(), Instant::now());
        r.begin(&claim(1, 0), Verb::Apply, t0, &c).expect("a");
        r.begin(&claim(1, 2), Verb::Apply, t0, &c).expect("b");
        assert_eq!((c.snapshot().overlaps, c.snapshot().order_violations), (1, 1));
        tokio::time::advance(Duration::from_millis(500)).await;
        let t1 = Instant::now();
        r.end("t/c1/s1", 1, Duration::from_millis(250), t1);
        r.end("t/c1/s1", 1, Duration::from_millis(250), t1);
        r.begin(&claim(1, 3), Verb::Delete, t1, &c).expect("deletes keep no order");
        assert_eq!(c.snapshot().order_violations, 1);
        assert_eq!(
            r.timing(),
            ClusterTiming { makespan: Duration::from_millis(500), critical_path: Duration::from_millis(500) }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_overtaken_in_flight_is_not_newest() {
        let (mut r, c, now) = (Record::default(), Counters::default(), Instant::now());
        r.begin(&claim(1, 0), Verb::Apply, now, &c).expect("old");
        r.begin(&claim(2, 0), Verb::Apply, now, &c).expect("new");
        assert_eq!(r.end("t/c1/s1", 1, Duration::ZERO, now), 2, "overtaken");
        assert_eq!(r.end("t/c1/s1", 2, Duration::ZERO, now), 2);
    }
}
