//! The runtime: workers that claim keys from the store, apply each SyncSet's resources
//! in order (many keys at once, on async I/O), keep their leases alive, and commit
//! results in batches — and the library for writing your own reconcilers on the same
//! engine: [`reconciler`] (latest state of a key, exclusively) and [`handlers`] (every
//! event, in order, at least once, from a durable cursor). A runnable example is
//! `examples/reconciler.rs` (`cargo run -p fleetsync-runtime --example reconciler`).
//!
//! One module per concept, after kube-runtime:
//! * [`worker`]: the claim loop — bounded concurrency, instant wake-up, safety poll.
//! * [`reconciler`]: the `Reconciler` trait, its `Context` and `Action`s.
//! * [`syncset`]: the SyncSet applier as a reconciler: one run of one key, in order,
//!   stopping at the first failure.
//! * [`handlers`]: event handlers and the named consumer that drives them.
//! * [`committer`]: group commit of completions (no batching window: it commits
//!   whatever is queued the moment the previous commit ends).
//! * [`membership`]: heartbeats, and the shards this process owns.
//! * [`leases`]: the keys this process holds, renewed together; a lost lease cancels
//!   its run.
//! * [`per_cluster`]: the per-cluster concurrency limit.
//! * [`resync`]: the periodic safety re-apply of everything.
//! * [`rollouts`]: rollouts in progress, driven forward step by step.
//! * [`secrets`]: the store as the Kubernetes applier's source of kubeconfigs.
//! * [`cache`]: Clusters and SyncSets by generation, so a run does not re-read them.
//! * [`metrics`]: what shows saturation and lag.

pub mod cache;
pub mod committer;
pub mod dependencies;
pub mod handlers;
mod health;
pub mod leases;
pub mod membership;
pub mod metrics;
pub mod per_cluster;
pub mod reconciler;
pub mod resync;
pub mod rollouts;
pub mod secrets;
pub mod syncset;
pub mod worker;

pub use handlers::{Consumer, ConsumerConfig, ConsumerError, EventHandler, HandlerError, OnExpired};
pub use metrics::RuntimeMetrics;
pub use reconciler::{Action, Context, ReconcileError, Reconciler};
pub use syncset::SyncSetReconciler;
pub use worker::Runtime;

use fleetsync_model::Clock;
use std::sync::Arc;
use std::time::Duration;

/// Knobs of one worker process.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Recorded on every lease this process takes.
    pub worker_id: String,
    /// Keys (and so applies) in flight at once in this process.
    pub max_in_flight: usize,
    /// At most this many keys per claim call.
    pub claim_batch: usize,
    /// At most this many keys of one cluster in flight in this process (`None`: no
    /// limit), so one slow cluster cannot take every slot.
    pub max_per_cluster: Option<u32>,
    pub lease_ttl: Duration,
    /// How long this process counts as a member without a heartbeat (it beats every
    /// third of it); after that its shards move to the others.
    pub member_ttl: Duration,
    /// How often held leases are renewed; well under `lease_ttl`.
    pub renew_every: Duration,
    /// The safety-net poll when nothing wakes the worker.
    pub poll_interval: Duration,
    /// Work stealing: with free slots and nothing ready in its own shards, this process
    /// also claims keys of other members' shards that have been due at least this long
    /// (their owner is saturated), so a member whose shards hold less work does not sit
    /// idle while another's backlog waits. Shards never move for it, so a cluster's keys
    /// stay with its owner while the owner keeps up. `None`: never steal.
    pub steal_after: Option<Duration>,
    /// Re-apply everything this often (jittered by ±10%); `None` disables it.
    pub resync_every: Option<Duration>,
    /// Look at each rollout in progress at least this often (and when the event log
    /// moves, or a step's wait ends); `None`: this process drives no rollouts (another
    /// must).
    pub rollout_every: Option<Duration>,
    /// On shutdown, how long runs in flight may take to finish before their keys are
    /// released unfinished.
    pub shutdown_grace: Duration,
    /// The clock to turn the store's timestamps into sleeps with. `None` (production):
    /// the store's own ([`WorkQueue::clock`](fleetsync_store::WorkQueue::clock)), the database's
    /// on PostgreSQL, so that this process compares times on the clock they were
    /// stamped with.
    pub clock: Option<Arc<dyn Clock>>,
}

/// `host-pid-xxxx`: unique across machines (pids are not), readable in `get members`.
pub fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()).or_else(|| {
        std::fs::read_to_string("/etc/hostname").ok().map(|h| h.trim().to_string()).filter(|h| !h.is_empty())
    });
    format!("{}-{}-{:04x}", host.as_deref().unwrap_or("worker"), std::process::id(), rand::random::<u16>())
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            worker_id: default_worker_id(),
            max_in_flight: 4096,
            claim_batch: 512,
            max_per_cluster: Some(256),
            lease_ttl: Duration::from_secs(30),
            member_ttl: Duration::from_secs(10),
            renew_every: Duration::from_secs(10),
            poll_interval: Duration::from_secs(5),
            steal_after: Some(Duration::from_secs(1)),
            resync_every: Some(Duration::from_secs(2 * 3600)),
            rollout_every: Some(Duration::from_secs(1)),
            shutdown_grace: Duration::from_secs(20),
            clock: None,
        }
    }
}

/// Why the runtime would not start. Once running, store failures are retried (claims,
/// commits, renewals) rather than ending the process.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("invalid runtime configuration: {0}")]
    Config(String),
}

impl RuntimeConfig {
    /// Checks the knobs against each other.
    pub fn validate(&self) -> Result<(), RuntimeError> {
        if self.max_in_flight == 0 || self.claim_batch == 0 {
            return Err(RuntimeError::Config("max_in_flight and claim_batch must be at least 1".into()));
        }
        if self.member_ttl < Duration::from_millis(300) {
            return Err(RuntimeError::Config(format!("member TTL ({:?}) must be at least 300ms", self.member_ttl)));
        }
        if self.max_per_cluster == Some(0) {
            return Err(RuntimeError::Config("max_per_cluster must be at least 1 (or None for no limit)".into()));
        }
        if self.renew_every >= self.lease_ttl {
            return Err(RuntimeError::Config(format!(
                "renew interval ({:?}) must be shorter than the lease TTL ({:?})",
                self.renew_every, self.lease_ttl
            )));
        }
        Ok(())
    }
}
