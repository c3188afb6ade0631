//! The in-process simulated fleet: an [`Applier`] whose targets live in memory (the
//! demo's, and the tests' that need no HTTP; [`SimServer`](crate::SimServer) serves the
//! same behaviour over the Kubernetes API).
//!
//! It waits the workload's latency per apply, can fail at a given rate, refuses stale
//! fencing tokens, and records what tests and the demo need to judge a run: what
//! generation of each resource is on each cluster, whether order within a run was
//! kept, whether two runs of one key ever overlapped, and each cluster's make-span
//! against its critical path.

use crate::latency::LatencyModel;
use async_trait::async_trait;
use fleetsync_applier::{Applier, ApplyContext, ApplyError};
use fleetsync_model::{Cluster, Manifest, ResourceRef, WorkKey};
use rand::Rng;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// How the simulated fleet behaves.
#[derive(Debug, Clone, Copy)]
pub struct SimFleetConfig {
    pub latency: LatencyModel,
    /// Probability that one apply fails with a transient error.
    pub fail_rate: f64,
}

impl Default for SimFleetConfig {
    fn default() -> Self {
        Self { latency: LatencyModel::hive_fleet(), fail_rate: 0.0 }
    }
}

/// A simulated fleet. Clones share the same fleet.
#[derive(Clone, Default)]
pub struct SimFleet {
    config: SimFleetConfig,
    state: Arc<Mutex<FleetState>>,
}

#[derive(Default)]
struct FleetState {
    keys: HashMap<WorkKey, KeyState>,
    clusters: HashMap<String, Span>,
    totals: Totals,
}

/// What one key has on its cluster, and the run in progress.
#[derive(Default)]
struct KeyState {
    /// Resource (by hash of its identity) → generation applied.
    resources: HashMap<u64, i64>,
    newest_fence: i64,
    run_fence: i64,
    next_index: usize,
    in_flight: u32,
    /// Sum of apply latencies of the latest run.
    run_latency: Duration,
}

#[derive(Clone, Copy)]
struct Span {
    first_start: Instant,
    last_end: Instant,
}

/// Counters over the whole run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    /// Applies that took effect.
    pub applies: u64,
    /// Applies and deletes that failed (injected faults, apply conflicts).
    pub failures: u64,
    /// Deletes that took effect.
    pub deletes: u64,
    /// Calls refused because a newer fencing token had been seen.
    pub fenced: u64,
    /// Times a key had two calls in flight at once.
    pub overlaps: u64,
    /// Applies that came out of order within a run.
    pub order_violations: u64,
    /// Applies of a resource at an older SyncSet generation than the one its key had
    /// already put there (a stale writer overtaking a newer one). Counted by the HTTP
    /// simulator ([`crate::SimServer`]); always 0 here, where fencing refuses them.
    #[serde(default)]
    pub stale_writes: u64,
    /// Work done twice: applies of a (key, resource, generation) the cluster already
    /// held from an earlier run of the key that completed (applied every resource of
    /// the SyncSet). Counted by the HTTP simulator ([`crate::SimServer`]); 0 here.
    #[serde(default)]
    pub repeated_applies: u64,
}

/// One cluster's timing: make-span (first apply start to last apply end) and critical
/// path (its slowest SyncSet's sum of apply latencies).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterTiming {
    pub makespan: Duration,
    pub critical_path: Duration,
}

impl SimFleet {
    pub fn new(config: SimFleetConfig) -> Self {
        Self { config, state: Arc::default() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FleetState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn totals(&self) -> Totals {
        self.state().totals
    }

    /// The generation of `resource` that the key put on its cluster, if any.
    pub fn generation_of(&self, key: &WorkKey, resource: &ResourceRef) -> Option<i64> {
        self.state().keys.get(key).and_then(|k| k.resources.get(&hash(resource)).copied())
    }

    /// How many resources the key has on its cluster.
    pub fn resource_count(&self, key: &WorkKey) -> usize {
        self.state().keys.get(key).map_or(0, |k| k.resources.len())
    }

    /// Every cluster's make-span and critical path.
    pub fn cluster_timings(&self) -> HashMap<String, ClusterTiming> {
        let st = self.state();
        let mut critical: HashMap<&str, Duration> = HashMap::new();
        for (key, k) in &st.keys {
            let c = critical.entry(key.cluster.as_str()).or_default();
            *c = (*c).max(k.run_latency);
        }
        st.clusters
            .iter()
            .map(|(name, span)| {
                let critical_path = critical.get(name.as_str()).copied().unwrap_or_default();
                (name.clone(), ClusterTiming { makespan: span.last_end - span.first_start, critical_path })
            })
            .collect()
    }

    /// Checks the fence and opens an apply; returns the latency to simulate.
    fn begin(&self, ctx: &ApplyContext) -> Result<Duration, ApplyError> {
        let latency = self.config.latency.sample(&mut rand::rng());
        let mut st = self.state();
        let now = Instant::now();
        let k = st.keys.entry(ctx.key.clone()).or_default();
        // The target sees the token as the number it is sent as.
        let fence = ctx.fence.get();
        if fence < k.newest_fence {
            let newest = k.newest_fence;
            st.totals.fenced += 1;
            return Err(ApplyError::Fenced { token: fence, newest });
        }
        k.newest_fence = fence;
        if k.run_fence != fence {
            k.run_fence = fence;
            k.next_index = 0;
            k.run_latency = Duration::ZERO;
        }
        let out_of_order = ctx.index != k.next_index;
        k.next_index = ctx.index + 1;
        k.in_flight += 1;
        let overlap = k.in_flight > 1;
        st.totals.order_violations += u64::from(out_of_order);
        st.totals.overlaps += u64::from(overlap);
        st.clusters.entry(ctx.key.cluster.clone()).or_insert(Span { first_start: now, last_end: now });
        Ok(latency)
    }

    /// Closes an apply and records its effect.
    fn end(&self, ctx: &ApplyContext, latency: Duration, effect: Effect) {
        let mut st = self.state();
        let now = Instant::now();
        if let Some(k) = st.keys.get_mut(&ctx.key) {
            k.in_flight = k.in_flight.saturating_sub(1);
            if k.run_fence == ctx.fence.get() {
                k.run_latency += latency;
            }
            match effect {
                Effect::Put(r, g) => {
                    k.resources.insert(r, g);
                }
                Effect::Delete(r) => {
                    k.resources.remove(&r);
                }
                Effect::Fail => {}
            }
        }
        if let Some(span) = st.clusters.get_mut(&ctx.key.cluster) {
            span.last_end = span.last_end.max(now);
        }
        match effect {
            Effect::Put(..) => st.totals.applies += 1,
            Effect::Delete(_) => st.totals.deletes += 1,
            Effect::Fail => st.totals.failures += 1,
        }
    }

    async fn run(&self, ctx: &ApplyContext, effect: Effect) -> Result<(), ApplyError> {
        let latency = self.begin(ctx)?;
        tokio::time::sleep(latency).await;
        let fail = self.config.fail_rate > 0.0 && rand::rng().random::<f64>() < self.config.fail_rate;
        self.end(ctx, latency, if fail { Effect::Fail } else { effect });
        if fail {
            return Err(ApplyError::Transient("simulated failure".into()));
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Effect {
    Put(u64, i64),
    Delete(u64),
    Fail,
}

fn hash(r: &ResourceRef) -> u64 {
    let mut h = DefaultHasher::new();
    r.hash(&mut h);
    h.finish()
}

#[async_trait]
impl Applier for SimFleet {
    async fn apply(&self, _cluster: &Cluster, resource: &Manifest, ctx: &ApplyContext) -> Result<(), ApplyError> {
        let r = resource.resource_ref().map_err(|e| ApplyError::Invalid(format!("{} {}", e.field, e.message)))?;
        self.run(ctx, Effect::Put(hash(&r), ctx.generation)).await
    }

    async fn delete(&self, _cluster: &Cluster, resource: &ResourceRef, ctx: &ApplyContext) -> Result<(), ApplyError> {
        self.run(ctx, Effect::Delete(hash(resource))).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{ClusterSpec, Endpoint, Fence, ObjectMeta};
    use serde_json::json;

    fn ctx(fence: i64, index: usize) -> ApplyContext {
        ApplyContext::new(WorkKey::new("t", "c1", "s1"), Fence::new(fence), 3, index)
    }

    fn cluster() -> Cluster {
        Cluster { metadata: ObjectMeta::new("c1"), spec: ClusterSpec::new(Endpoint::Simulator {}) }
    }

    fn cm(name: &str) -> Manifest {
        Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}))
    }

    #[tokio::test(start_paused = true)]
    async fn records_generation_order_and_timing() {
        let sim = SimFleet::new(SimFleetConfig::default());
        sim.apply(&cluster(), &cm("a"), &ctx(1, 0)).await.expect("apply");
        sim.apply(&cluster(), &cm("b"), &ctx(1, 1)).await.expect("apply");
        let r = cm("a").resource_ref().expect("ref");
        assert_eq!(sim.generation_of(&ctx(1, 0).key, &r), Some(3));
        assert_eq!(sim.resource_count(&ctx(1, 0).key), 2);
        let t = sim.cluster_timings()["c1"];
        assert!(t.critical_path >= Duration::from_millis(400), "{t:?}");
        let gap = t.makespan.abs_diff(t.critical_path);
        assert!(gap <= Duration::from_millis(2), "sequential applies: make-span equals the path: {t:?}");
        sim.apply(&cluster(), &cm("c"), &ctx(1, 5)).await.expect("apply");
        assert_eq!(sim.totals().order_violations, 1);
        sim.delete(&cluster(), &r, &ctx(2, 0)).await.expect("delete");
        assert_eq!(sim.resource_count(&ctx(1, 0).key), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn refuses_stale_fences_and_counts_overlaps() {
        let sim = SimFleet::new(SimFleetConfig::default());
        let (a, b) = (ctx(5, 0), ctx(6, 0));
        let (c, m) = (cluster(), cm("a"));
        let (ra, rb) = tokio::join!(sim.apply(&c, &m, &a), sim.apply(&c, &m, &b));
        assert!(ra.is_ok() && rb.is_ok());
        assert_eq!(sim.totals().overlaps, 1, "two runs of one key in flight together");
        let err = sim.apply(&cluster(), &cm("a"), &ctx(5, 1)).await.expect_err("stale");
        assert_eq!(err, ApplyError::Fenced { token: 5, newest: 6 });
    }

    #[tokio::test(start_paused = true)]
    async fn injects_failures() {
        let sim = SimFleet::new(SimFleetConfig { latency: LatencyModel::zero(), fail_rate: 1.0 });
        let err = sim.apply(&cluster(), &cm("a"), &ctx(1, 0)).await.expect_err("fails");
        assert!(err.is_retryable());
        assert_eq!(sim.totals().failures, 1);
    }
}
