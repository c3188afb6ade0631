//! The runtime's Prometheus metrics: saturation (in flight against the limit), speed
//! (apply latency), trouble (failures, retries, parked, stale completions, leases lost,
//! store calls that failed), and this process's place among the members.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabel {
    pub call: &'static str,
}

type Durations<L> = Family<L, Histogram, fn() -> Histogram>;

/// The store calls the runtime makes, as the `call` label names them.
pub const STORE_CALLS: [&str; 4] = ["claim", "complete", "renew", "heartbeat"];

/// Handles to the runtime's metrics; cheap to clone.
#[derive(Debug, Clone)]
pub struct RuntimeMetrics {
    pub applies_in_flight: Gauge,
    pub concurrency_limit: Gauge,
    pub apply_duration: Histogram,
    pub applies: Family<OutcomeLabel, Counter>,
    pub runs: Family<OutcomeLabel, Counter>,
    pub retries: Counter,
    pub parked: Counter,
    pub commit_transactions: Counter,
    pub claimed: Counter,
    /// Keys claimed from other members' shards (work stealing), also in `claimed`.
    pub stolen: Counter,
    /// Keys claimed from expired leases (their holder died or stalled), also in `claimed`.
    pub taken_over: Counter,
    /// Leases whose runs were cancelled: `refused` (a renewal found another holder)
    /// or `unrenewed` (about to end with no renewal, e.g. the store unreachable).
    pub leases_lost: Family<ReasonLabel, Counter>,
    pub lease_renewal_failures: Counter,
    pub heartbeat_failures: Counter,
    /// Live members as this process last saw them, and the shards it owns.
    pub members: Gauge,
    pub shards_owned: Gauge,
    /// A key's run, from its claim to its result committed.
    pub run_duration: Histogram,
    /// From a change asked for to its result committed by a successful run
    /// ([`ClaimedItem::changed_at`](fleetsync_store::ClaimedItem::changed_at)).
    pub change_latency: Histogram,
    /// The runtime's calls to the store, timed, and those that failed.
    pub store_call_duration: Durations<CallLabel>,
    pub store_call_errors: Family<CallLabel, Counter>,
}

impl RuntimeMetrics {
    /// Creates the metrics and registers them under the `fleetsync` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            applies_in_flight: Gauge::default(),
            concurrency_limit: Gauge::default(),
            apply_duration: Histogram::new(exponential_buckets(0.005, 2.0, 12)),
            applies: Family::default(),
            runs: Family::default(),
            retries: Counter::default(),
            parked: Counter::default(),
            commit_transactions: Counter::default(),
            claimed: Counter::default(),
            stolen: Counter::default(),
            taken_over: Counter::default(),
            leases_lost: Family::default(),
            lease_renewal_failures: Counter::default(),
            heartbeat_failures: Counter::default(),
            members: Gauge::default(),
            shards_owned: Gauge::default(),
            run_duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            change_latency: Histogram::new(exponential_buckets(0.01, 2.0, 17)),
            // 0.5 ms to about 8 s.
            store_call_duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 15))),
            store_call_errors: Family::default(),
        };
        let r = registry.sub_registry_with_prefix("fleetsync");
        r.register(
            "applies_in_flight",
            "Resource applies (keys) in flight in this process",
            m.applies_in_flight.clone(),
        );
        r.register("apply_concurrency_limit", "Most applies this process runs at once", m.concurrency_limit.clone());
        r.register("apply_duration_seconds", "Time one resource apply took", m.apply_duration.clone());
        r.register("applies", "Resource applies by outcome", m.applies.clone());
        r.register("runs", "Key runs by outcome (applied, failed, removed, stale, released)", m.runs.clone());
        r.register("retries", "Runs that failed and were scheduled to retry", m.retries.clone());
        r.register("parked", "Runs that parked their key after max attempts", m.parked.clone());
        r.register(
            "commit_transactions",
            "Store transactions that committed completions",
            m.commit_transactions.clone(),
        );
        r.register("claimed_keys", "Keys claimed by this process", m.claimed.clone());
        r.register(
            "stolen_keys",
            "Keys this process claimed from other members' shards (their owner was behind)",
            m.stolen.clone(),
        );
        r.register(
            "lease_takeovers",
            "Keys this process claimed from expired leases (their holder died or stalled)",
            m.taken_over.clone(),
        );
        // Both reasons from the start: a series at 0, not absent, until a lease is lost.
        for reason in ["refused", "unrenewed"] {
            let _ = m.leases_lost.get_or_create(&ReasonLabel { reason });
        }
        r.register(
            "leases_lost",
            "Leases whose runs this process cancelled, by reason (refused, unrenewed)",
            m.leases_lost.clone(),
        );
        r.register(
            "lease_renewal_failures",
            "Lease renewals that failed (the store did not answer)",
            m.lease_renewal_failures.clone(),
        );
        r.register("heartbeat_failures", "Member heartbeats that failed", m.heartbeat_failures.clone());
        r.register("members", "Live worker processes, as this process last saw them", m.members.clone());
        r.register("shards_owned", "Shards this process owns", m.shards_owned.clone());
        r.register(
            "run_duration_seconds",
            "Time a key's run took, from its claim to its result committed",
            m.run_duration.clone(),
        );
        r.register(
            "change_to_applied_seconds",
            "From a change (an apply, a delete, a retry) to its result committed by a run that applied it",
            m.change_latency.clone(),
        );
        for call in STORE_CALLS {
            let _ = m.store_call_errors.get_or_create(&CallLabel { call });
        }
        r.register(
            "store_call_duration_seconds",
            "Time the runtime's store calls took, by call",
            m.store_call_duration.clone(),
        );
        r.register("store_call_errors", "The runtime's store calls that failed, by call", m.store_call_errors.clone());
        m
    }

    /// Metrics registered nowhere, for runs that export none.
    pub fn unregistered() -> Self {
        Self::register(&mut Registry::default())
    }

    pub fn run(&self, outcome: &'static str) {
        self.runs.get_or_create(&OutcomeLabel { outcome }).inc();
    }

    /// Awaits the store call `call` (one of [`STORE_CALLS`]), timing it and counting
    /// its failure.
    pub async fn store_call<T, E>(
        &self,
        call: &'static str,
        fut: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let start = std::time::Instant::now();
        let result = fut.await;
        self.store_call_duration.get_or_create(&CallLabel { call }).observe(start.elapsed().as_secs_f64());
        if result.is_err() {
            self.store_call_errors.get_or_create(&CallLabel { call }).inc();
        }
        result
    }
}
