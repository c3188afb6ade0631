//! `fleetsync bench drain`: the engine alone. N keys are enqueued up front, then the
//! real runtime drains them (claim → no-op apply → commit) and we time the drain only:
//! from the workers' start until the last item's completion is committed. The enqueue
//! is timed apart and reported beside it, so neither figure hides the other.
//!
//! With `--peer graphile-worker` the same number of items goes through the
//! `graphile_worker` crate on the same PostgreSQL (its own schema), one keyed job per
//! item with a no-op task, and the same window is timed for a ratio.
//!
//! Every run checks that every item was completed, and fails (exit ≠ 0) otherwise: a
//! fast drain that loses work would be no figure at all.

mod graphile;

use crate::args::{DrainArgs, Peer};
use anyhow::{bail, ensure, Context, Result};
use async_trait::async_trait;
use fleetsync::engine::{runtime_config, store_config};
use fleetsync::output::table;
use fleetsync_applier::{Applier, ApplyContext, ApplyError};
use fleetsync_model::{Cluster, Document, Endpoint, LabelSelector, Manifest, Phase, ResourceRef};
use fleetsync_runtime::metrics::OutcomeLabel;
use fleetsync_runtime::{Runtime, RuntimeMetrics};
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::Store;
use fleetsync_testkit::{hive_cluster, hive_fleet, hive_syncset, FleetShape};
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// SyncSets per cluster in the drained fleet (hive-fleet has 60): keys come in
/// realistic clusters rather than one SyncSet on N clusters or N SyncSets on one.
const SYNCSETS_PER_CLUSTER: usize = 50;

/// How often the end of a drain is looked for: small against any drain worth timing.
const POLL: Duration = Duration::from_millis(2);

/// `--json` output. The first five fields are the fixed interface of issue 4; the
/// others are extra detail scripts may ignore.
#[derive(Debug, Serialize)]
struct DrainReport {
    backend: &'static str,
    items: usize,
    items_per_sec: f64,
    peer: Option<PeerReport>,
    ratio: Option<f64>,
    drain_seconds: f64,
    enqueue_items_per_sec: f64,
    /// With `--churn`: the drain under a held snapshot, round by round.
    #[serde(skip_serializing_if = "Option::is_none")]
    churn: Option<ChurnReport>,
}

/// `--churn`: the drain rate, round after round, while a long-open transaction keeps
/// vacuum from removing any dead row version the rounds leave behind.
#[derive(Debug, Serialize)]
struct ChurnReport {
    rounds: usize,
    items_per_sec_by_round: Vec<f64>,
    /// `1 - late / early`, where early and late are the medians of the first and the
    /// last three rounds' rates (one round with fewer): how much the dead rows slowed
    /// the drain. Medians, so one round disturbed by the machine decides nothing.
    loss: f64,
    /// `pg_total_relation_size` of the work table (with its indexes) before the first
    /// round and after the last.
    work_bytes_before: i64,
    work_bytes_after: i64,
    /// `n_dead_tup` of the work table after the last round (statistics, approximate).
    work_dead_rows_after: i64,
}

#[derive(Debug, Serialize)]
struct PeerReport {
    name: &'static str,
    items_per_sec: f64,
    drain_seconds: f64,
    enqueue_items_per_sec: f64,
}

/// One drain: how long the enqueue and the drain of `items` took.
#[derive(Debug, Clone, Copy)]
struct Measured {
    items: usize,
    enqueue: Duration,
    drain: Duration,
}

impl Measured {
    fn drain_rate(&self) -> f64 {
        self.items as f64 / self.drain.as_secs_f64().max(1e-9)
    }

    fn enqueue_rate(&self) -> f64 {
        self.items as f64 / self.enqueue.as_secs_f64().max(1e-9)
    }
}

pub async fn run(a: DrainArgs) -> Result<bool> {
    check(&a)?;
    let (backend, (ours, churn)) = match &a.database_url {
        None => ("sqlite", (drain_sqlite(&a).await?, None)),
        Some(url) => ("postgres", drain_postgres(url, &a).await?),
    };
    let peer = match (a.peer, &a.database_url) {
        (Some(Peer::GraphileWorker), Some(url)) => Some(graphile::drain(url, &a).await?),
        _ => None,
    };
    let report = DrainReport {
        backend,
        items: ours.items,
        items_per_sec: ours.drain_rate(),
        ratio: peer.map(|p| ours.drain_rate() / p.drain_rate().max(1e-9)),
        peer: peer.map(|p| PeerReport {
            name: "graphile-worker",
            items_per_sec: p.drain_rate(),
            drain_seconds: p.drain.as_secs_f64(),
            enqueue_items_per_sec: p.enqueue_rate(),
        }),
        drain_seconds: ours.drain.as_secs_f64(),
        enqueue_items_per_sec: ours.enqueue_rate(),
        churn,
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_summary(&report, &ours, peer.as_ref());
    }
    Ok(true)
}

/// Rejects flags that cannot work, saying what to fix.
fn check(a: &DrainArgs) -> Result<()> {
    ensure!(a.items >= 1, "--items must be at least 1");
    ensure!(a.pool_size >= 1, "--pool-size must be at least 1");
    if a.peer.is_some() && a.database_url.is_none() {
        bail!("--peer graphile-worker needs --database-url: graphile_worker runs on PostgreSQL only, and the ratio is only fair on the same database");
    }
    if a.churn > 0 && a.database_url.is_none() {
        bail!("--churn needs --database-url: it measures PostgreSQL's table bloat under a long-open transaction");
    }
    Ok(())
}

/// The embedded store in a temporary file, opened as `serve` opens it (WAL,
/// `synchronous = FULL`: every commit is on disk before it returns).
async fn drain_sqlite(a: &DrainArgs) -> Result<Measured> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory for the store")?;
    let store =
        SqliteStore::open(dir.path().join("drain.db"), store_config(&a.engine)?).context("opening the SQLite store")?;
    drain_ours(Arc::new(store), None, a).await
}

/// PostgreSQL in a schema of its own, created fresh and dropped afterwards (also when
/// the drain fails), so runs never see each other's rows. Then, with `--churn`, the
/// churn rounds on the same schema.
async fn drain_postgres(url: &str, a: &DrainArgs) -> Result<(Measured, Option<ChurnReport>)> {
    let schema = fresh_schema_name();
    let admin = Admin::connect(url).await?;
    admin.drop_schema(&schema).await?;
    let options = PgOptions { schema: Some(schema.clone()), pool_size: a.pool_size, migrate: true };
    let result = async {
        let store = PgStore::connect_with(&plain_unless_said(url), options, store_config(&a.engine)?)
            .await
            .context("cannot open the PostgreSQL store (check --database-url)")?;
        let store: Arc<dyn Store> = Arc::new(store);
        let measured = drain_ours(store.clone(), Some((&admin, schema.as_str())), a).await?;
        let churn = match a.churn {
            0 => None,
            _ => Some(churn(store, url, &schema, a).await?),
        };
        Ok((measured, churn))
    }
    .await;
    admin.drop_schema(&schema).await?;
    result
}

/// `bench_drain_<pid>_<n>`: unique among live processes; a leftover of a killed run
/// with the same pid is dropped before use.
fn fresh_schema_name() -> String {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    format!("bench_drain_{}_{}", std::process::id(), RUNS.fetch_add(1, Ordering::Relaxed))
}

/// Enqueues the items, runs the real runtime with a no-op applier until every item is
/// committed, and checks in the store that each one is Applied. On PostgreSQL
/// (`analyze` names the schema) the enqueue ends with an ANALYZE, counted in its time.
async fn drain_ours(store: Arc<dyn Store>, analyze: Option<(&Admin, &str)>, a: &DrainArgs) -> Result<Measured> {
    let start = Instant::now();
    enqueue_ours(&*store, a.items, "r1").await?;
    if let Some((admin, schema)) = analyze {
        admin.analyze(schema).await?;
    }
    let enqueue = start.elapsed();
    let metrics = RuntimeMetrics::unregistered();
    let applied = metrics.runs.get_or_create(&OutcomeLabel { outcome: "applied" }).clone();
    // No resync: a re-run of everything mid-drain would be extra work, not drain.
    let config = fleetsync_runtime::RuntimeConfig { resync_every: None, ..runtime_config(&a.engine)? };
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let workers =
        tokio::spawn(Runtime::new(store.clone(), Arc::new(NoopApplier), config, metrics).run(shutdown.clone()));
    let finished = wait_until(|| applied.get() >= a.items as u64, a.timeout).await;
    let drain = start.elapsed();
    shutdown.cancel();
    workers.await.context("the workers panicked")??;
    ensure!(
        finished,
        "the drain did not finish within --timeout {:?}: {} of {} items committed",
        a.timeout,
        applied.get(),
        a.items
    );
    verify_all_applied(&*store, a.items).await?;
    Ok(Measured { items: a.items, enqueue, drain })
}

/// Enqueues exactly `items` keys in one `objects_apply` (one transaction), as a user
/// applying a fleet would.
async fn enqueue_ours(store: &dyn Store, items: usize, revision: &str) -> Result<()> {
    let outcomes = store.objects_apply(drain_fleet(items, revision)).await.context("enqueueing the items")?;
    let enqueued: u64 = outcomes.iter().map(|o| o.enqueued).sum();
    ensure!(enqueued == items as u64, "enqueued {enqueued} keys, expected {items}");
    Ok(())
}

/// Documents whose keys number exactly `items`: `items / S` clusters under S SyncSets
/// (hive-fleet documents with one resource each), plus, for the remainder R < S, one
/// more cluster under R SyncSets that select it alone.
/// Re-applied at another `revision`, every SyncSet changes, so every key runs again.
fn drain_fleet(items: usize, revision: &str) -> Vec<Document> {
    let per_cluster = items.clamp(1, SYNCSETS_PER_CLUSTER);
    let shape = FleetShape { clusters: items / per_cluster, syncsets: per_cluster, resources: 1 };
    let mut docs = hive_fleet(shape, |_| Endpoint::Simulator {}, revision);
    let rest = items % per_cluster;
    if rest > 0 {
        docs.push(labelled(hive_cluster(shape.clusters, Endpoint::Simulator {}), "rest"));
        docs.extend((0..rest).map(|i| rest_syncset(shape.syncsets + i, revision)));
    }
    docs
}

/// A cluster relabelled `fleet=<fleet>`.
fn labelled(mut doc: Document, fleet: &str) -> Document {
    if let Document::Cluster(c) = &mut doc {
        c.metadata.labels.insert("fleet".into(), fleet.into());
    }
    doc
}

/// A hive SyncSet (one resource) that selects only `fleet=rest`.
fn rest_syncset(i: usize, revision: &str) -> Document {
    let mut doc = hive_syncset(i, 1, revision);
    if let Document::SyncSet(s) = &mut doc {
        s.spec.cluster_selector = Some(LabelSelector::labels([("fleet".to_string(), "rest".to_string())].into()));
    }
    doc
}

/// The URL with `sslmode=disable` added unless it (or `PGSSLMODE`) says a mode: the
/// peer (graphile_worker's tokio-postgres driver, built without TLS here) and the
/// churn's connections talk plain text, so the store does too and the comparison is
/// of the engines, not of encryption. Say `sslmode=require` to measure with TLS.
fn plain_unless_said(url: &str) -> String {
    if url.contains("sslmode") || std::env::var_os("PGSSLMODE").is_some() {
        return url.to_string();
    }
    let url = url.trim();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}sslmode=disable")
    } else {
        format!("{url} sslmode=disable")
    }
}

/// `--churn`: `a.churn` rounds, each re-applying every item at a new revision and
/// timing its drain (from the commit of the change to the last completion), with one
/// runtime running throughout and another connection holding a transaction open (its
/// snapshot keeps every dead row version of the rounds from being vacuumed).
async fn churn(store: Arc<dyn Store>, url: &str, schema: &str, a: &DrainArgs) -> Result<ChurnReport> {
    let admin = Admin::connect(url).await?;
    let holder = Admin::connect(url).await?;
    holder.hold_snapshot().await?;
    let work = format!("{schema}.work");
    let work_bytes_before = admin.count(&format!("SELECT pg_total_relation_size('{work}')")).await?;
    let metrics = RuntimeMetrics::unregistered();
    let applied = metrics.runs.get_or_create(&OutcomeLabel { outcome: "applied" }).clone();
    let config = fleetsync_runtime::RuntimeConfig { resync_every: None, ..runtime_config(&a.engine)? };
    let shutdown = CancellationToken::new();
    let workers =
        tokio::spawn(Runtime::new(store.clone(), Arc::new(NoopApplier), config, metrics).run(shutdown.clone()));
    let mut rates = Vec::with_capacity(a.churn);
    for round in 1..=a.churn {
        enqueue_ours(&*store, a.items, &format!("r{}", round + 1)).await?;
        let start = Instant::now();
        let target = (round * a.items) as u64;
        if !wait_until(|| applied.get() >= target, a.timeout).await {
            shutdown.cancel();
            bail!("churn round {round} did not finish within --timeout {:?}", a.timeout);
        }
        rates.push(a.items as f64 / start.elapsed().as_secs_f64().max(1e-9));
    }
    shutdown.cancel();
    workers.await.context("the workers panicked")??;
    verify_all_applied(&*store, a.items).await?;
    let work_bytes_after = admin.count(&format!("SELECT pg_total_relation_size('{work}')")).await?;
    let stat = format!(
        "SELECT COALESCE(n_dead_tup, 0) FROM pg_stat_user_tables WHERE schemaname = '{schema}' AND relname = 'work'"
    );
    let work_dead_rows_after = admin.count(&stat).await?;
    Ok(ChurnReport {
        rounds: a.churn,
        loss: loss(&rates),
        items_per_sec_by_round: rates,
        work_bytes_before,
        work_bytes_after,
        work_dead_rows_after,
    })
}

/// `1 - late / early` (see [`ChurnReport::loss`]).
fn loss(rates: &[f64]) -> f64 {
    let n = (rates.len() / 2).clamp(1, 3);
    let median = |r: &[f64]| {
        let mut r = r.to_vec();
        r.sort_by(f64::total_cmp);
        r.get(r.len() / 2).copied().unwrap_or(0.0)
    };
    let (early, late) = (median(&rates[..n.min(rates.len())]), median(&rates[rates.len().saturating_sub(n)..]));
    1.0 - late / early.max(1e-9)
}

/// Polls `done` every [`POLL`] until it holds (true) or `timeout` passes (false).
async fn wait_until(done: impl Fn() -> bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
    true
}

/// The store's own view after the drain: `items` keys, every one Applied.
async fn verify_all_applied(store: &dyn Store, items: usize) -> Result<()> {
    let stats = store.queue_stats().await.context("reading queue stats after the drain")?;
    let total: u64 = stats.by_phase.values().sum();
    let applied = stats.by_phase.get(&Phase::Applied).copied().unwrap_or(0);
    ensure!(
        total == items as u64 && applied == total,
        "after the drain the store holds {total} keys of which {applied} Applied, expected {items} all Applied: {:?}",
        stats.by_phase
    );
    Ok(())
}

/// Applies nothing and succeeds at once: what is left to measure is the engine.
struct NoopApplier;

#[async_trait]
impl Applier for NoopApplier {
    async fn apply(&self, _: &Cluster, _: &Manifest, _: &ApplyContext) -> Result<(), ApplyError> {
        Ok(())
    }

    async fn delete(&self, _: &Cluster, _: &ResourceRef, _: &ApplyContext) -> Result<(), ApplyError> {
        Ok(())
    }
}

/// A plain connection for creating and dropping the bench's schemas and checking the
/// peer's tables.
pub(crate) struct Admin {
    client: tokio_postgres::Client,
}

impl Admin {
    pub(crate) async fn connect(url: &str) -> Result<Self> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .context("cannot connect to PostgreSQL (check --database-url)")?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "the bench's admin connection ended");
            }
        });
        Ok(Self { client })
    }

    /// Runs `sql` (the benches' own statements).
    pub(crate) async fn batch(&self, sql: &str) -> Result<()> {
        self.client.batch_execute(sql).await.context("running the bench's SQL")
    }

    /// The name is one of the benches' own (`bench_…_<pid>…`): a plain identifier,
    /// safe to splice.
    pub(crate) async fn drop_schema(&self, schema: &str) -> Result<()> {
        self.client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await
            .with_context(|| format!("dropping the bench schema {schema}"))
    }

    /// Fresh planner statistics for the freshly filled tables. Without them PostgreSQL
    /// plans a completion's key lookups on `work_syncset (tenant, syncset)` instead of
    /// the unique key and reads every cluster's row of the SyncSet per key (measured:
    /// ~28× the buffer reads, drain 2× slower) until autovacuum first analyzes the
    /// table, a minute or more later. A long-running hub has statistics; graphile_worker
    /// runs ANALYZE itself after large batches.
    pub(crate) async fn analyze(&self, schema: &str) -> Result<()> {
        self.client
            .batch_execute(&format!("ANALYZE {schema}.work, {schema}.due, {schema}.clusters, {schema}.syncsets"))
            .await
            .with_context(|| format!("analyzing the tables of {schema}"))
    }

    /// Opens a transaction that stays open as long as this connection: with an xid
    /// assigned, it holds back the horizon below which vacuum may remove row versions,
    /// as a forgotten `BEGIN` in a psql session or a long report would.
    async fn hold_snapshot(&self) -> Result<()> {
        self.client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT txid_current();")
            .await
            .context("opening the long transaction that holds back vacuum")
    }

    pub(crate) async fn count(&self, sql: &str) -> Result<i64> {
        Ok(self.client.query_one(sql, &[]).await.with_context(|| format!("running {sql}"))?.try_get(0)?)
    }
}

fn print_summary(r: &DrainReport, ours: &Measured, peer: Option<&Measured>) {
    let store = match r.backend {
        "sqlite" => "SQLite in a temporary file (WAL, synchronous=FULL)",
        _ => "PostgreSQL (a fresh schema, dropped afterwards)",
    };
    println!(
        "fleetsync bench drain: {} items (keys) enqueued, then claimed and completed with no-op applies, on {store}",
        r.items
    );
    println!("drain = from the workers' start until every item is committed; the enqueue before it is timed apart\n");
    let row = |name: &str, m: &Measured| {
        vec![
            name.to_string(),
            format!("{:.0}", m.drain_rate()),
            format!("{:.2}", m.drain.as_secs_f64()),
            format!("{:.0}", m.enqueue_rate()),
        ]
    };
    let mut rows = vec![row(&format!("fleetsync ({})", r.backend), ours)];
    if let Some(p) = peer {
        rows.push(row("graphile-worker", p));
    }
    if table(&["", "drain items/s", "drain seconds", "enqueue items/s"], &rows).is_err() {
        return; // standard output is closed: no one reads the rest
    }
    if let Some(x) = r.ratio {
        println!("\nratio (drain items/s, fleetsync / graphile-worker): {x:.2}");
    }
    if let Some(c) = &r.churn {
        let rates: Vec<String> = c.items_per_sec_by_round.iter().map(|r| format!("{r:.0}")).collect();
        println!("\nchurn: {} rounds of {} items with a transaction held open (vacuum held back)", c.rounds, r.items);
        println!("  items/s by round: {}", rates.join(", "));
        println!("  loss, median of the last rounds against the first (up to 3 each): {:.1}%", c.loss * 100.0);
        println!(
            "  work table: {} → {} bytes, {} dead rows after",
            c.work_bytes_before, c.work_bytes_after, c.work_dead_rows_after
        );
    }
}

#[cfg(test)]
mod tests {
    use super::loss;

    #[test]
    fn the_store_talks_plain_text_like_the_peer_unless_told_otherwise() {
        use super::plain_unless_said;
        if std::env::var_os("PGSSLMODE").is_some() {
            return; // the environment decides; nothing to add
        }
        assert_eq!(plain_unless_said("postgres://u@h/db"), "postgres://u@h/db?sslmode=disable");
        assert_eq!(
            plain_unless_said("postgres://u@h/db?application_name=x"),
            "postgres://u@h/db?application_name=x&sslmode=disable"
        );
        assert_eq!(plain_unless_said("host=h dbname=db"), "host=h dbname=db sslmode=disable");
        assert_eq!(plain_unless_said("postgres://u@h/db?sslmode=require"), "postgres://u@h/db?sslmode=require");
    }

    #[test]
    fn loss_compares_the_medians_of_the_first_and_last_rounds() {
        let rates = [100.0, 90.0, 110.0, 50.0, 80.0, 95.0, 70.0];
        // early: median(100, 90, 110) = 100; late: median(80, 95, 70) = 80.
        assert!((loss(&rates) - 0.2).abs() < 1e-9, "{}", loss(&rates));
        assert!((loss(&[100.0, 50.0]) - 0.5).abs() < 1e-9, "two rounds: last against first");
        assert!(loss(&[100.0]).abs() < 1e-9, "one round loses nothing against itself");
        assert!((loss(&[100.0, 300.0, 80.0, 120.0]) - (1.0 - 120.0 / 300.0)).abs() < 1e-9, "two each");
    }
}
