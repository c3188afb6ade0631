//! One consumer process of the RabbitMQ baseline (a "subscriber pod"). It says
//! `ready` on stdout once it consumes, runs until SIGTERM (or SIGKILL), and then
//! prints its counts as one line of JSON.
//!
//! Per message, up to `--prefetch` at once: read the SyncSet from memory at the
//! newest generation its cache knows (never older than the message's; a message older
//! than the cache is acked at once, since the newer change has a message of its own),
//! apply its
//! resources in order through the Kubernetes applier, stopping at the first failure;
//! then write the cluster's ClusterSync status on the hub's API (read, change its
//! entry, write with the version read as a precondition, again after a short random
//! pause on a conflict), and ack. A failed message is republished with its attempt count incremented (or, with
//! `--dlq-after K`, to the dead-letter queue at K) and its original acked once the
//! broker confirmed the copy.

use super::{attempt_of, connect, properties, revision, syncset_index, Edit, Names, Work, HUB, HUB_NAMESPACE};
use crate::hive_fleet::kube;
use anyhow::{anyhow, Context, Result};
use fleetsync_applier::kubernetes::KubeApplier;
use fleetsync_applier::{Applier, ApplyContext};
use fleetsync_k8s_sim::RUN_ANNOTATION;
use fleetsync_model::{Cluster, ClusterSpec, Document, Endpoint, Fence, Manifest, ObjectMeta, WorkKey};
use fleetsync_testkit::hive_syncset;
use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::Channel;
use serde::Serialize;
use serde_json::{json, Value};
use std::io::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// Tries of one status write (each a read and a conditional write) before the
/// message counts as failed. The SyncSets of one cluster finish close together and
/// all write its one ClusterSync (the collisions the proposal foresees), so a write
/// is tried again at once after a short random pause, rather than failing the
/// message and applying the SyncSet again.
const STATUS_TRIES: u32 = 100;
/// The longest pause between two tries of a status write.
const STATUS_JITTER_US: u32 = 20_000;

#[derive(Debug, clap::Args)]
pub struct ConsumerArgs {
    #[arg(long)]
    pub amqp_url: String,
    #[command(flatten)]
    pub names: Names,
    /// Unacknowledged messages this consumer may hold (`basic.qos`).
    #[arg(long)]
    pub prefetch: u16,
    #[arg(long)]
    pub sim: String,
    #[arg(long)]
    pub syncsets: usize,
    #[arg(long)]
    pub resources: usize,
    /// Send a message to the dead-letter queue once it has failed this many times.
    #[arg(long)]
    pub dlq_after: Option<u32>,
    /// The SyncSets `--churn` edits were already edited when this consumer started
    /// (its cache's initial list).
    #[arg(long)]
    pub edited: bool,
    /// Write the ClusterSync's status with one JSON merge patch of its entry (no read,
    /// no conflict) instead of read, change, conditional write.
    #[arg(long)]
    pub status_patch: bool,
}

#[derive(Debug, Default, Serialize)]
struct Counts {
    messages: AtomicU64,
    /// Messages of a generation older than the cache's: acked without work.
    superseded: AtomicU64,
    failed_runs: AtomicU64,
    republished: AtomicU64,
    dead_lettered: AtomicU64,
    status_writes: AtomicU64,
    status_conflicts: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// What every message handler shares.
struct Consumer {
    applier: KubeApplier,
    channel: Channel,
    names: Names,
    dlq_after: Option<u32>,
    sim: String,
    /// Each SyncSet's resources at generations 1 and 2.
    manifests: Vec<[Vec<Manifest>; 2]>,
    /// The informer cache: each SyncSet's generation.
    generations: Vec<AtomicI64>,
    hub: Cluster,
    /// With `--status-patch`: the client of the merge patches.
    patch: Option<reqwest::Client>,
    next_run: AtomicI64,
    counts: Counts,
}

pub async fn run(a: ConsumerArgs) -> Result<()> {
    let conn = connect(&a.amqp_url).await?;
    let manifests =
        (0..a.syncsets).map(|s| [1, 2].map(|g| resources_of(&hive_syncset(s, a.resources, &revision(g))))).collect();
    let initial = |s: usize| if a.edited && super::edited(s) { 2 } else { 1 };
    let me = Arc::new(Consumer {
        applier: kube(),
        channel: conn.create_channel().await?,
        names: a.names.clone(),
        dlq_after: a.dlq_after,
        hub: cluster(&a.sim, HUB),
        patch: a.status_patch.then(reqwest::Client::new),
        sim: a.sim,
        manifests,
        generations: (0..a.syncsets).map(|s| AtomicI64::new(initial(s))).collect(),
        // Runs are told apart by pid and count: unique among this run's consumers.
        next_run: AtomicI64::new(i64::from(std::process::id()) << 32),
        counts: Counts::default(),
    });
    follow_edits(&conn.create_channel().await?, &a.names, me.clone()).await?;

    let channel = &me.channel;
    channel.basic_qos(a.prefetch, BasicQosOptions::default()).await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let tag = format!("consumer-{}", std::process::id());
    let mut deliveries = channel
        .basic_consume(
            a.names.queue.as_str().into(),
            tag.as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    say("ready")?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            d = deliveries.next() => match d {
                Some(Ok(d)) => {
                    let me = me.clone();
                    tokio::spawn(async move { me.handle(d).await });
                }
                Some(Err(e)) => return Err(anyhow!(e).context("the consumer's channel failed")),
                None => return Err(anyhow!("the broker cancelled the consumer")),
            },
            _ = term.recv() => break,
        }
    }
    say(&serde_json::to_string(&me.counts)?)?;
    Ok(())
}

impl Consumer {
    async fn handle(&self, d: Delivery) {
        bump(&self.counts.messages);
        let work = serde_json::from_slice::<Work>(&d.data).ok();
        let Some((work, s)) = work.and_then(|w| syncset_index(&w.syncset).map(|s| (w, s))) else {
            // Not ours to understand: dropped, as a poison message would be.
            let _ = d.ack(BasicAckOptions::default()).await;
            return;
        };
        if s >= self.generations.len() {
            let _ = d.ack(BasicAckOptions::default()).await;
            return;
        }
        // The cache is never older than the change that sent the message.
        let generation = self.generations[s].fetch_max(work.generation, Ordering::Relaxed).max(work.generation);
        if work.generation < generation {
            // A newer change was published after this one: its message applies it.
            bump(&self.counts.superseded);
            let _ = d.ack(BasicAckOptions::default()).await;
            return;
        }
        let run = self.next_run.fetch_add(1, Ordering::Relaxed);
        let done = self.apply(&work, s, generation, run).await && self.write_status(&work, generation, run).await;
        let settled = if done { Ok(()) } else { self.retry(&d).await };
        let acked = match settled {
            Ok(()) => d.ack(BasicAckOptions::default()).await.map(|_| ()),
            Err(e) => {
                tracing::warn!(error = %e, "could not republish a failed message; returning it to the queue");
                d.nack(BasicNackOptions { requeue: true, ..BasicNackOptions::default() }).await.map(|_| ())
            }
        };
        if let Err(e) = acked {
            tracing::warn!(error = %e, "could not settle a message");
        }
    }

    /// The SyncSet's resources in order; false at the first failure.
    async fn apply(&self, work: &Work, s: usize, generation: i64, run: i64) -> bool {
        let target = cluster(&self.sim, &work.cluster);
        let key = WorkKey::new(work.tenant.as_str(), work.cluster.as_str(), work.syncset.as_str());
        let resources = &self.manifests[s][usize::from(generation >= 2)];
        for (index, m) in resources.iter().enumerate() {
            let mut m = m.clone();
            m.0["metadata"]["annotations"] = json!({ RUN_ANNOTATION: run.to_string() });
            let ctx = ApplyContext::new(key.clone(), Fence::new(0), generation, index);
            if self.applier.apply(&target, &m, &ctx).await.is_err() {
                bump(&self.counts.failed_runs);
                return false;
            }
        }
        true
    }

    /// Records `generation` for the SyncSet in the cluster's ClusterSync (a ConfigMap
    /// `clustersync-<cluster>` on the hub, one entry per SyncSet): read it, change the
    /// entry, write it back conditioned on the version read; again on a conflict.
    async fn write_status(&self, work: &Work, generation: i64, run: i64) -> bool {
        if let Some(http) = &self.patch {
            return self.patch_status(http, work, generation).await;
        }
        let name = clustersync_name(&work.cluster);
        for attempt in 0..STATUS_TRIES {
            // A key per write: the simulator judges the fleet's keys, not the hub's.
            let key =
                WorkKey::new("baseline-status", HUB, format!("{}.{}.{run}.{attempt}", work.cluster, work.syncset));
            let ctx = ApplyContext::new(key, Fence::new(0), 0, 0);
            let reference = clustersync(&name, None, json!({})).resource_ref().ok();
            let Some(reference) = reference else { return false };
            let current = match self.applier.read(&self.hub, &reference, &ctx).await {
                Ok(current) => current.unwrap_or(Value::Null),
                Err(_) => continue,
            };
            let mut data = current["data"].as_object().cloned().unwrap_or_default();
            let recorded = data.get(&work.syncset).and_then(Value::as_str).and_then(|g| g.parse::<i64>().ok());
            if recorded.is_some_and(|g| g >= generation) {
                return true;
            }
            data.insert(work.syncset.clone(), generation.to_string().into());
            let version = current["metadata"]["resourceVersion"].as_str();
            match self.applier.apply(&self.hub, &clustersync(&name, version, Value::Object(data)), &ctx).await {
                Ok(()) => {
                    bump(&self.counts.status_writes);
                    return true;
                }
                Err(_) => bump(&self.counts.status_conflicts),
            }
            tokio::time::sleep(jitter()).await;
        }
        false
    }

    /// Records `generation` for the SyncSet with one JSON merge patch of the status
    /// of the cluster's ClusterSync (a `fleetsync.io/v1` custom resource on the hub,
    /// `status.syncSets` a map by SyncSet): no read and no conflict, the cheapest
    /// correct write. Tried again after a short pause if it fails.
    async fn patch_status(&self, http: &reqwest::Client, work: &Work, generation: i64) -> bool {
        let url = format!("{}/{}/status", self.sim_hub_collection(), clustersync_name(&work.cluster));
        let body = json!({"status": {"syncSets": {work.syncset.as_str(): generation}}});
        for _ in 0..STATUS_TRIES {
            let sent = http
                .patch(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/merge-patch+json")
                .body(body.to_string())
                .send()
                .await;
            if sent.is_ok_and(|r| r.status().is_success()) {
                bump(&self.counts.status_writes);
                return true;
            }
            bump(&self.counts.status_conflicts);
            tokio::time::sleep(jitter()).await;
        }
        false
    }

    fn sim_hub_collection(&self) -> String {
        format!("{}/clusters/{HUB}/apis/fleetsync.io/v1/namespaces/{HUB_NAMESPACE}/clusters", self.sim)
    }

    /// Republishes the message with one more attempt (to the dead-letter queue at
    /// `--dlq-after`), confirmed before the original is acked.
    async fn retry(&self, d: &Delivery) -> Result<()> {
        let attempt = attempt_of(&d.properties) + 1;
        let dead = self.dlq_after.is_some_and(|k| attempt >= k);
        let queue = if dead { &self.names.dlq } else { &self.names.queue };
        let confirm = self
            .channel
            .basic_publish(
                "".into(),
                queue.as_str().into(),
                BasicPublishOptions::default(),
                &d.data,
                properties(attempt),
            )
            .await?
            .await?;
        if !confirm.is_ack() {
            return Err(anyhow!("the broker did not confirm the republished message"));
        }
        bump(if dead { &self.counts.dead_lettered } else { &self.counts.republished });
        Ok(())
    }
}

/// The cache follows SyncSet edits: a queue of this process's own bound to the
/// fanout, bound before the consumer says it is ready.
async fn follow_edits(channel: &Channel, names: &Names, me: Arc<Consumer>) -> Result<()> {
    let options = QueueDeclareOptions { exclusive: true, auto_delete: true, ..QueueDeclareOptions::default() };
    let queue = channel.queue_declare("".into(), options, FieldTable::default()).await?;
    channel
        .queue_bind(
            queue.name().clone(),
            names.exchange.as_str().into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let options = BasicConsumeOptions { no_ack: true, ..BasicConsumeOptions::default() };
    let mut edits = channel.basic_consume(queue.name().clone(), "edits".into(), options, FieldTable::default()).await?;
    tokio::spawn(async move {
        while let Some(Ok(d)) = edits.next().await {
            if let Ok(e) = serde_json::from_slice::<Edit>(&d.data) {
                if let Some(g) = me.generations.get(e.syncset) {
                    g.fetch_max(e.generation, Ordering::Relaxed);
                }
            }
        }
    });
    Ok(())
}

/// A pause of up to [`STATUS_JITTER_US`], from the clock's low bits.
fn jitter() -> std::time::Duration {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    std::time::Duration::from_micros(u64::from(nanos / 1000 % STATUS_JITTER_US))
}

/// A ClusterSync as the hub keeps it here: a ConfigMap of SyncSet → generation.
fn clustersync(name: &str, version: Option<&str>, data: Value) -> Manifest {
    let mut metadata = json!({"name": name, "namespace": HUB_NAMESPACE});
    if let Some(v) = version {
        metadata["resourceVersion"] = v.into();
    }
    Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}))
}

/// The simulated cluster `name`.
pub fn cluster(sim: &str, name: &str) -> Cluster {
    let endpoint = Endpoint::Http { url: format!("{sim}/clusters/{name}") };
    Cluster { metadata: ObjectMeta::new(name), spec: ClusterSpec::new(endpoint) }
}

/// An empty ClusterSync for `cluster`, as the hub creates one per cluster: the
/// ConfigMap the read-and-write variant keeps, or (`patch`) the custom resource
/// whose status the merge patches write.
pub fn empty_clustersync(cluster: &str, patch: bool) -> Manifest {
    if patch {
        let metadata = json!({"name": clustersync_name(cluster), "namespace": HUB_NAMESPACE});
        return Manifest(json!({"apiVersion": "fleetsync.io/v1", "kind": "Cluster", "metadata": metadata, "spec": {}}));
    }
    clustersync(&clustersync_name(cluster), None, json!({}))
}

fn clustersync_name(cluster: &str) -> String {
    format!("clustersync-{cluster}")
}

fn resources_of(doc: &Document) -> Vec<Manifest> {
    match doc {
        Document::SyncSet(s) => s.spec.resources.clone(),
        _ => Vec::new(),
    }
}

fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").context("writing to stdout")?;
    out.flush()?;
    Ok(())
}
