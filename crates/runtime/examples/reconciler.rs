//! A reconciler and an event handler of your own on the fleetsync engine.
//!
//! `cargo run -p fleetsync-runtime --example reconciler`
//!
//! An embedded (SQLite) store in a temporary directory; one named event handler that
//! prints every event; one state reconciler that labels its SyncSet through an *own
//! write* (which does not run it again) and asks to look again a little later. A few
//! changes are applied, the output shows who saw what, and the example stops by itself.

use async_trait::async_trait;
use fleetsync_model::{
    Cluster, ClusterSpec, Document, Endpoint, LabelSelector, Manifest, ObjectMeta, SyncSet, SyncSetSpec,
};
use fleetsync_runtime::{
    Action, Consumer, Context, EventHandler, HandlerError, ReconcileError, Reconciler, Runtime, RuntimeConfig,
    RuntimeMetrics,
};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Event, Store, StoreConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Prints every event of the log: it sees them all, in order, own writes included.
struct Printer {
    started: Instant,
}

#[async_trait]
impl EventHandler for Printer {
    async fn handle(&self, e: &Event) -> Result<(), HandlerError> {
        let at = self.started.elapsed().as_millis();
        println!(
            "{at:>5} ms  [handler]    #{:<3} {} {} {} (generation {})",
            e.seq, e.kind, e.name, e.action, e.generation
        );
        Ok(())
    }
}

/// Labels its SyncSet `reviewed-at=<generation>` when the label is missing, then asks
/// to look again in 700 ms. It sees only the latest state of its key, one run at a time.
struct Reviewer {
    started: Instant,
}

#[async_trait]
impl Reconciler for Reviewer {
    async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError> {
        let at = self.started.elapsed().as_millis();
        let Some(syncset) = ctx.syncset().await? else { return Ok(Action::Done) };
        let generation = syncset.metadata.generation;
        if syncset.metadata.labels.contains_key("reviewed-at") {
            println!(
                "{at:>5} ms  [reconciler] {} at generation {generation}: already reviewed, look again later",
                ctx.key()
            );
        } else {
            println!("{at:>5} ms  [reconciler] {} at generation {generation}: labelling it (an own write)", ctx.key());
            let mut reviewed = (*syncset).clone();
            reviewed.metadata.labels.insert("reviewed-at".into(), generation.to_string());
            ctx.apply_own(vec![Document::SyncSet(reviewed)]).await?;
        }
        Ok(Action::Requeue(Duration::from_millis(700)))
    }
}

fn cluster() -> Document {
    let mut metadata = ObjectMeta::new("edge-1");
    metadata.labels.insert("env".into(), "prod".into());
    Document::Cluster(Cluster { metadata, spec: ClusterSpec::new(Endpoint::Simulator {}) })
}

/// The SyncSet `web` at `version`, as a user would apply it (without the label).
fn syncset(version: &str) -> Document {
    let manifest = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": "apps"},
        "data": {"version": version},
    });
    let spec = SyncSetSpec {
        source_ref: None,
        cluster_selector: Some(LabelSelector::labels([("env".to_string(), "prod".to_string())].into())),
        cluster_names: None,
        resource_apply_mode: Default::default(),
        resources: vec![Manifest(manifest)],
        rollout: None,
        templated: false,
        values: Default::default(),
        target_customizations: Vec::new(),
        depends_on: Vec::new(),
        health: None,
    };
    Document::SyncSet(SyncSet { metadata: ObjectMeta::new("web"), spec, status: None })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("fleetsync.db"), StoreConfig::default())?);
    let started = Instant::now();
    let shutdown = CancellationToken::new();

    let consumer = Consumer::new(store.clone(), "printer", Arc::new(Printer { started }));
    let handler = tokio::spawn(consumer.run(shutdown.clone()));
    let config = RuntimeConfig { worker_id: "example".into(), resync_every: None, ..RuntimeConfig::default() };
    let runtime =
        Runtime::with_reconciler(store.clone(), Arc::new(Reviewer { started }), config, RuntimeMetrics::unregistered());
    let engine = tokio::spawn(runtime.run(shutdown.clone()));

    store.objects_apply(vec![cluster(), syncset("1.0")]).await?;
    for version in ["1.1", "1.2"] {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        println!("{:>5} ms  [user]       applies SyncSet web version {version}", started.elapsed().as_millis());
        store.objects_apply(vec![syncset(version)]).await?;
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    shutdown.cancel();
    engine.await??;
    let cursor = handler.await??;
    println!("stopped; consumer \"printer\" acknowledged up to event #{cursor} and would resume after it");
    Ok(())
}
