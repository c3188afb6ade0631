//! `fleetsync sim`: a Kubernetes-API-compatible target simulator, for tests and
//! benchmarks only.
//!
//! One process serves many clusters, each at its own base URL
//! `http://HOST:PORT/clusters/{cluster}` (a kube-rs client pointed there works as
//! against a real API server): discovery for core and a few groups, server-side apply
//! `PATCH`, `GET`, list, watch and `DELETE`, and fleetsync's own custom resources
//! (`fleetsync.io/v1` Cluster and SyncSet) with a `status` subresource. Every object
//! request waits a sample of the fleet workload's latency; failures can be injected fleet-wide (a rate and a
//! status) or per cluster (a status, a delay) through `PUT
//! /_sim/clusters/{cluster}/faults`. Stale fencing tokens are refused, and every
//! request is recorded so that a run can be judged: every key at its latest
//! generation (`/_sim/keys`, or counts by generation at `/_sim/keys/summary`), order
//! kept within a SyncSet, no two requests of one key in flight together, no older
//! generation written over a newer one and no work done twice (`/_sim/report`),
//! make-span against critical path.
//!
//! Every write moves the cluster's `resourceVersion`; `GET <collection>?watch=true`
//! streams changes as kube-rs's `watcher` expects (resume, `410 Expired` past a
//! bounded history, bookmarks, label selectors), and a cluster's `watchDelayMs`
//! fault delivers them late so that stale-watch scenarios can be tested.

mod cluster;
mod discovery;
mod faults;
mod feed;
pub mod fleet;
pub mod hive;
mod intern;
pub mod latency;
mod manifest;
mod objects;
mod paths;
mod record;
mod report;
mod requests;
mod routes;
mod selector;
mod status;
mod watching;

pub use faults::Faults;
pub use latency::LatencyModel;
pub use record::{
    ClusterTiming, Totals, FENCE_ANNOTATION, FENCE_HEADER, GENERATION_ANNOTATION, INDEX_ANNOTATION, KEY_ANNOTATION,
    KEY_HEADER, RUN_ANNOTATION,
};
pub use report::{ClusterReport, KeyGenerations, KeySummary, Report};
pub use status::ApiError;

use cluster::Clusters;
use discovery::Discovery;
use intern::Interner;
use record::Counters;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::sync::watch;

/// How the simulated clusters behave.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    /// The delay of every object request (discovery is answered at once).
    pub latency: LatencyModel,
    /// Probability in [0, 1] that a `PATCH` or `DELETE` fails with `fail_status`.
    pub fail_rate: f64,
    /// The status of injected failures (500 by default).
    pub fail_status: u16,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self { latency: LatencyModel::hive_fleet(), fail_rate: 0.0, fail_status: 500 }
    }
}

/// The simulator. Clones share the same clusters and records.
#[derive(Clone)]
pub struct SimServer {
    shared: Arc<Shared>,
}

/// State shared by every request.
pub(crate) struct Shared {
    config: SimConfig,
    clusters: Clusters,
    discovery: Discovery,
    counters: Counters,
    interner: Interner,
    next_uid: AtomicU64,
    /// Set when serving ends: wakes requests held by a fault delay, so shutdown is
    /// not stuck behind a simulated hang.
    closing: watch::Sender<bool>,
}

impl std::fmt::Debug for SimServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimServer").field("config", &self.shared.config).finish_non_exhaustive()
    }
}

impl SimServer {
    pub fn new(config: SimConfig) -> Self {
        let shared = Shared {
            config,
            clusters: Clusters::default(),
            discovery: Discovery::new(),
            counters: Counters::default(),
            interner: Interner::default(),
            next_uid: AtomicU64::new(1),
            closing: watch::Sender::new(false),
        };
        Self { shared: Arc::new(shared) }
    }

    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// The HTTP API: `/clusters/{cluster}/...`, `/_sim/...` and `/healthz`.
    pub fn router(&self) -> axum::Router {
        routes::router(self.clone())
    }

    /// Serves the API on `listener` until `shutdown` completes; then requests held
    /// by a fault delay are answered at once (503) and open connections drain.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        use axum::serve::ListenerExt;
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "fleetsync sim listening");
        }
        // Small answers must not wait for Nagle's algorithm.
        let listener = listener.tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "could not set TCP_NODELAY");
            }
        });
        let me = self.clone();
        let shutdown = async move {
            shutdown.await;
            me.shared.closing.send_replace(true);
        };
        axum::serve(listener, self.router()).with_graceful_shutdown(shutdown).await
    }

    /// The counters over every cluster (work done twice is counted by walking every
    /// key's runs: O(keys)).
    pub fn totals(&self) -> Totals {
        let repeated_applies = self.shared.clusters.all().iter().map(|(_, c)| c.lock().record.repeated_applies()).sum();
        Totals { repeated_applies, ..self.shared.counters.snapshot() }
    }

    /// What every key left on its cluster: key → resource → SyncSet generation.
    pub fn key_generations(&self) -> KeyGenerations {
        report::key_generations(&self.shared.clusters)
    }

    /// How many keys starting with `prefix` hold resources, and how many resources
    /// they hold at each generation (as served at `/_sim/keys/summary?prefix=`): a
    /// cheap answer to "has every key reached its generation yet?".
    pub fn key_summary(&self, prefix: &str) -> KeySummary {
        report::key_summary(&self.shared.clusters, prefix)
    }

    /// Each cluster's make-span and critical path (clusters that saw fenced requests).
    pub fn cluster_timings(&self) -> BTreeMap<String, ClusterTiming> {
        report::cluster_timings(&self.shared.clusters)
    }

    /// Totals and timings, as served at `/_sim/report`.
    pub fn report(&self) -> Report {
        let clusters = self.cluster_timings().into_iter().map(|(n, t)| (n, t.into())).collect();
        Report { totals: self.totals(), clusters }
    }

    /// Sets one cluster's faults (as `PUT /_sim/clusters/{cluster}/faults` does).
    pub fn set_faults(&self, cluster: &str, faults: Faults) -> Result<(), ApiError> {
        if !cluster::valid_name(cluster) {
            return Err(ApiError::BadRequest(format!("{cluster:?} is not a DNS-1123 label")));
        }
        faults.validate()?;
        self.shared.clusters.get_or_create(cluster).lock().faults = faults;
        Ok(())
    }

    /// How many objects a cluster holds (0 for a cluster never used).
    pub fn object_count(&self, cluster: &str) -> usize {
        self.shared.clusters.get(cluster).map_or(0, |c| c.lock().objects.len())
    }
}
