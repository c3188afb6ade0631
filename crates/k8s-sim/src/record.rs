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
//!   one's end;
//! * a caller that holds no lease (a queue consumer) sends one token for every run
//!   (so it is never refused) and tells its runs apart by [`RUN_ANNOTATION`];
//! * an apply at an older generation than the one its key already put on the
//!   resource is a stale write; an apply of a (resource, generation) the key already
//!   put there in another run that *completed* (applied every index the key has been
//!   sent, from 0) is work done twice.

use crate::objects::Owner;
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
/// The annotation telling runs apart that share a token (see the module docs).
pub const RUN_ANNOTATION: &str = "fleetsync.io/run";
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
    /// The run under the token ([`RUN_ANNOTATION`]; 0 when absent).
    pub run: i64,
}

impl FenceClaim {
    pub fn run_id(&self) -> RunId {
        RunId { fence: self.fence, run: self.run }
    }
}

/// One run of a key: its token and, for callers that share a token, its run id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunId {
    pub fence: i64,
    pub run: i64,
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
    pub stale_writes: AtomicU64,
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
            stale_writes: get(&self.stale_writes),
            // Known only by walking every key's runs: see `Record::repeated_applies`.
            repeated_applies: 0,
        }
    }
}

/// One cluster's timing: make-span (first fenced request's start to last one's end)
/// and critical path (its slowest key's sum of latencies in its latest run).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClusterTiming {
    pub makespan: Duration,
    pub critical_path: Duration,
    /// Fenced applies that took effect on the cluster.
    pub applies: u64,
}

/// Whether a request applies (order is checked) or deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Apply,
    Delete,
}

/// One key's fencing state, its latest run, and what its runs applied.
#[derive(Debug, Default)]
struct KeyRecord {
    newest_fence: i64,
    run: RunId,
    next_index: usize,
    in_flight: u32,
    run_latency: Duration,
    /// One more than the highest index the key has been sent: its SyncSet's length
    /// as far as the target can tell.
    width: usize,
    /// Every run that applied something, in the order each began to.
    runs: Vec<RunLog>,
    /// For each apply that found its (resource, generation) already put there by
    /// another run: that run (work done twice if it completed).
    repeats: Vec<RunId>,
}

/// What one run applied: indices 0..`committed` took effect, in order.
#[derive(Debug, Clone, Copy)]
struct RunLog {
    id: RunId,
    committed: usize,
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
    applies: u64,
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
        if k.run != claim.run_id() {
            k.run = claim.run_id();
            k.next_index = 0;
            k.run_latency = Duration::ZERO;
        }
        if let (Verb::Apply, Some(index)) = (verb, claim.index) {
            if index != k.next_index {
                bump(&counters.order_violations);
            }
            k.next_index = index + 1;
            k.width = k.width.max(index + 1);
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
    pub fn end(&mut self, key: &str, run: RunId, latency: Duration, now: Instant) -> i64 {
        if let Some(span) = &mut self.span {
            span.last_end = span.last_end.max(now);
        }
        let Some(k) = self.keys.get_mut(key) else { return run.fence };
        k.in_flight = k.in_flight.saturating_sub(1);
        if k.run == run {
            k.run_latency += latency;
        }
        k.newest_fence
    }

    /// Records an apply of `claim` that took effect; `previous` is who had put the
    /// object there before (its key, generation and run), if anyone had.
    pub fn applied(&mut self, claim: &FenceClaim, previous: Option<&Owner>, counters: &Counters) {
        self.applies += 1;
        let k = self.keys.entry(Arc::from(claim.key.as_str())).or_default();
        let id = claim.run_id();
        let log = match k.runs.iter().rposition(|r| r.id == id) {
            Some(i) => &mut k.runs[i],
            None => {
                k.runs.push(RunLog { id, committed: 0 });
                let last = k.runs.len() - 1;
                &mut k.runs[last]
            }
        };
        if claim.index == Some(log.committed) {
            log.committed += 1;
        }
        let Some(prev) = previous.filter(|p| *p.key == *claim.key) else { return };
        if prev.generation > claim.generation {
            bump(&counters.stale_writes);
        } else if prev.generation == claim.generation && prev.run != id {
            k.repeats.push(prev.run);
        }
    }

    /// Work done twice on this cluster: applies that found their (resource,
    /// generation) put there by another run of the key that completed (applied every
    /// index from 0 to the highest the key has been sent).
    pub fn repeated_applies(&self) -> u64 {
        let repeated = |k: &KeyRecord| {
            let complete = |id: &RunId| k.runs.iter().any(|r| r.id == *id && r.committed >= k.width.max(1));
            k.repeats.iter().filter(|id| complete(id)).count() as u64
        };
        self.keys.values().map(repeated).sum()
    }

    /// The shared copy of `key`, if the key has a record (objects point to it).
    pub fn shared_key(&self, key: &str) -> Option<Arc<str>> {
        self.keys.get_key_value(key).map(|(k, _)| k.clone())
    }

    pub fn timing(&self) -> ClusterTiming {
        let critical_path = self.keys.values().map(|k| k.run_latency).max().unwrap_or_default();
        let makespan = self.span.map(|s| s.last_end - s.first_start).unwrap_or_default();
        ClusterTiming { makespan, critical_path, applies: self.applies }
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
        FenceClaim { key: "t/c1/s1".into(), fence, generation: 1, index: Some(index), run: 0 }
    }

    fn run(fence: i64) -> RunId {
        RunId { fence, run: 0 }
    }

    #[tokio::test(start_paused = true)]
    async fn stale_tokens_are_refused_and_runs_restart_at_a_new_token() {
        let (mut r, c, now) = (Record::default(), Counters::default(), Instant::now());
        r.begin(&claim(2, 0), Verb::Apply, now, &c).expect("first");
        assert_eq!(r.end("t/c1/s1", run(2), Duration::from_millis(300), now), 2);
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
        r.end("t/c1/s1", run(1), Duration::from_millis(250), t1);
        r.end("t/c1/s1", run(1), Duration::from_millis(250), t1);
        r.begin(&claim(1, 3), Verb::Delete, t1, &c).expect("deletes keep no order");
        assert_eq!(c.snapshot().order_violations, 1);
        assert_eq!(
            r.timing(),
            ClusterTiming {
                makespan: Duration::from_millis(500),
                critical_path: Duration::from_millis(500),
                applies: 0
            }
        );
    }

    /// Runs `run` of a key: applies indices `0..n` at `generation`, each over what
    /// `held` says the object had before; returns the owners it leaves.
    fn apply_run(r: &mut Record, c: &Counters, id: RunId, generation: i64, held: &mut [Option<Owner>], n: usize) {
        let now = Instant::now();
        for (index, slot) in held.iter_mut().enumerate().take(n) {
            let claim =
                FenceClaim { key: "t/c1/s1".into(), fence: id.fence, generation, index: Some(index), run: id.run };
            r.begin(&claim, Verb::Apply, now, c).expect("not fenced");
            r.end("t/c1/s1", id, Duration::ZERO, now);
            r.applied(&claim, slot.as_ref(), c);
            *slot = Some(Owner { key: Arc::from("t/c1/s1"), generation, run: id });
        }
    }

    #[tokio::test(start_paused = true)]
    async fn work_done_twice_counts_only_repeats_of_a_completed_run() {
        let (mut r, c) = (Record::default(), Counters::default());
        let mut held = vec![None; 3];
        let unfenced = |run| RunId { fence: 0, run };
        // A run that fails after index 1 (index 2 was sent, never took effect)…
        apply_run(&mut r, &c, unfenced(1), 1, &mut held, 2);
        r.begin(
            &FenceClaim { key: "t/c1/s1".into(), fence: 0, generation: 1, index: Some(2), run: 1 },
            Verb::Apply,
            Instant::now(),
            &c,
        )
        .expect("sent");
        r.end("t/c1/s1", unfenced(1), Duration::ZERO, Instant::now());
        // …so its retry repeats nothing that completed.
        apply_run(&mut r, &c, unfenced(2), 1, &mut held, 3);
        assert_eq!(r.repeated_applies(), 0);
        // A redelivery of the same generation after the retry completed: all 3 again.
        apply_run(&mut r, &c, unfenced(3), 1, &mut held, 3);
        assert_eq!(r.repeated_applies(), 3);
        let t = c.snapshot();
        assert_eq!((t.order_violations, t.fenced, t.stale_writes), (0, 0, 0), "one token, runs told apart");
        assert_eq!(r.timing().applies, 8);
    }

    #[tokio::test(start_paused = true)]
    async fn an_older_generation_over_a_newer_one_is_a_stale_write() {
        let (mut r, c) = (Record::default(), Counters::default());
        let mut held = vec![None; 2];
        apply_run(&mut r, &c, RunId { fence: 0, run: 1 }, 2, &mut held, 2);
        apply_run(&mut r, &c, RunId { fence: 0, run: 2 }, 1, &mut held, 1);
        assert_eq!((c.snapshot().stale_writes, r.repeated_applies()), (1, 0));
        // Another key's object is not this key's history.
        let other = Owner { key: Arc::from("u/c1/s1"), generation: 9, run: RunId::default() };
        let claim = FenceClaim { key: "t/c1/s1".into(), fence: 0, generation: 1, index: Some(1), run: 2 };
        r.applied(&claim, Some(&other), &c);
        assert_eq!(c.snapshot().stale_writes, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_overtaken_in_flight_is_not_newest() {
        let (mut r, c, now) = (Record::default(), Counters::default(), Instant::now());
        r.begin(&claim(1, 0), Verb::Apply, now, &c).expect("old");
        r.begin(&claim(2, 0), Verb::Apply, now, &c).expect("new");
        assert_eq!(r.end("t/c1/s1", run(1), Duration::ZERO, now), 2, "overtaken");
        assert_eq!(r.end("t/c1/s1", run(2), Duration::ZERO, now), 2);
    }
}
