//! `hive-fleet --baseline hive-rabbitmq`: the design of the Hive proposal fleetsync grew
//! from (docs/benchmarks.md), built as the proposal describes it, on RabbitMQ:
//!
//! * a publisher ([`publisher`], the ClusterSync controller's part) sends one durable
//!   message per changed (cluster, SyncSet) to a durable work queue, with publisher
//!   confirms;
//! * consumer processes ([`consumer`], the "subscriber pods") take messages with a
//!   prefetch (`basic.qos`), read the SyncSet from memory (their informer cache, kept
//!   fresh by a fanout of SyncSet edits), apply its resources in order through the
//!   same Kubernetes applier as fleetsync, write the cluster's ClusterSync status on
//!   the hub's API, and ack; on a failure they republish the message with its attempt
//!   count incremented (RabbitMQ has no delay without a plugin) and ack the original,
//!   or, in the dead-letter variant, park it after K attempts in a dead-letter queue
//!   that the publisher's scanner moves back to the work queue periodically;
//! * [`baseline`] runs it in the parent on the simulator fleetsync ran on, and judges
//!   it by the simulator's record.
//!
//! Its keys are of a tenant of their own ([`TENANT`]), so the simulator never mixes
//! its record with the hub's. It runs no fencing: it sends one token (0) on every
//! call, and tells its runs apart to the simulator by `fleetsync.io/run`, which the
//! simulator only records.

mod baseline;
pub mod consumer;
pub mod publisher;

pub use baseline::{run, RabbitOptions, RabbitReport};

use anyhow::{Context, Result};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};

/// The tenant of the baseline's keys in the simulator.
pub const TENANT: &str = "baseline";
/// The simulated cluster standing for the hub's own API server, where ClusterSync
/// statuses are written.
pub const HUB: &str = "hub";
/// The namespace of the ClusterSync objects on [`HUB`].
pub const HUB_NAMESPACE: &str = "hive";
/// Every request to [`HUB`] takes this long: an API server beside the hub, not a
/// remote cluster (the fleet's applies take 200 ms to 1.6 s).
pub const HUB_LATENCY_MS: u64 = 10;
/// The header carrying how many times a message has failed.
const ATTEMPT_HEADER: &str = "x-attempt";

/// The run's queues and exchange: a work queue, a dead-letter queue, and the fanout
/// of SyncSet edits the consumers' caches follow.
#[derive(Debug, Clone, clap::Args)]
pub struct Names {
    #[arg(long)]
    pub queue: String,
    #[arg(long)]
    pub dlq: String,
    #[arg(long)]
    pub exchange: String,
}

impl Names {
    /// Names of the run `id`'s own.
    pub fn for_run(id: u32) -> Self {
        let base = format!("fleetsync-bench-{id}");
        Self { queue: format!("{base}-work"), dlq: format!("{base}-dlq"), exchange: format!("{base}-syncsets") }
    }

    pub fn to_args(&self) -> [String; 6] {
        [
            "--queue".into(),
            self.queue.clone(),
            "--dlq".into(),
            self.dlq.clone(),
            "--exchange".into(),
            self.exchange.clone(),
        ]
    }
}

/// One message: apply SyncSet `syncset` of `tenant` to `cluster`; it changed to
/// `generation`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    pub tenant: String,
    pub cluster: String,
    pub syncset: String,
    pub generation: i64,
}

/// A SyncSet edit, as the consumers' informer caches learn it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit {
    pub syncset: usize,
    pub generation: i64,
}

/// Whether `--churn` edits SyncSet `s` (every fifth: its revision r2, generation 2).
pub fn edited(s: usize) -> bool {
    s.is_multiple_of(5)
}

/// The revision of a generation of the hive-fleet SyncSets (`r1`, `r2`).
pub fn revision(generation: i64) -> String {
    format!("r{generation}")
}

/// The index of SyncSet `name` (`syncset-007` → 7).
pub fn syncset_index(name: &str) -> Option<usize> {
    name.strip_prefix("syncset-")?.parse().ok()
}

/// A persistent message that failed `attempt` times so far.
pub fn properties(attempt: u32) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(ShortString::from(ATTEMPT_HEADER), AMQPValue::LongUInt(attempt));
    BasicProperties::default().with_delivery_mode(2).with_content_type("application/json".into()).with_headers(headers)
}

/// How many times the message has failed (0 without the header).
pub fn attempt_of(p: &BasicProperties) -> u32 {
    let value = p.headers().as_ref().and_then(|h| h.inner().get(ATTEMPT_HEADER).cloned());
    match value {
        Some(AMQPValue::LongUInt(n)) => n,
        Some(v) => v.as_long_long_int().and_then(|n| u32::try_from(n).ok()).unwrap_or(0),
        None => 0,
    }
}

pub async fn connect(url: &str) -> Result<Connection> {
    Connection::connect(url, ConnectionProperties::default())
        .await
        .with_context(|| format!("cannot connect to RabbitMQ at {} (set --amqp-url)", redact(url)))
}

/// `url` without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &url[scheme + 3..at];
            let user = user.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_travel_in_a_header() {
        assert_eq!(attempt_of(&BasicProperties::default()), 0);
        let p = properties(3);
        assert_eq!((attempt_of(&p), p.delivery_mode()), (3, &Some(2)));
    }

    #[test]
    fn names_and_plans() {
        assert_eq!(syncset_index(&fleetsync_testkit::syncset_name(42)), Some(42));
        assert_eq!(syncset_index("other"), None);
        assert_eq!((0..10).filter(|s| edited(*s)).count(), 2);
        assert_eq!(revision(2), "r2");
        let n = Names::for_run(7);
        assert_eq!(n.queue, "fleetsync-bench-7-work");
        assert_eq!(redact("amqp://guest:guest@127.0.0.1:5672/%2f"), "amqp://guest:***@127.0.0.1:5672/%2f");
        assert_eq!(redact("amqp://127.0.0.1"), "amqp://127.0.0.1");
    }
}
