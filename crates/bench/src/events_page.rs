//! `events-page`: what one page of the event log costs a tenant with no events while
//! another tenant has many. A hub serves the API on loopback over a store whose log is
//! filled directly with `--events` events of tenant `busy` (and, for comparison, with
//! `--baseline-events`); a viewer of tenant `quiet` asks `GET /v1/events?limit=1` and
//! `GET /v1/events?order=desc&limit=1` `--requests` times each, alternating between
//! the two hubs (after a warm-up), so that the machine's load weighs on both alike. The
//! report is each call's median and p99 latency at both log sizes, and their ratio.

use crate::args::EventsPageArgs;
use crate::drain::Admin;
use anyhow::{Context, Result};
use fleetsync_model::{Grant, TenantRole};
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_server::{AppState, QueueMetrics};
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The calls measured, by the name the report gives them.
const CALLS: [(&str, &str); 2] = [("asc", "/v1/events?limit=1"), ("desc", "/v1/events?order=desc&limit=1")];

#[derive(Debug, Serialize)]
struct Report {
    backend: &'static str,
    requests: usize,
    sizes: Vec<Size>,
    /// Per call: the median at `--events` over the median at `--baseline-events`.
    ratios: Vec<(String, f64)>,
}

#[derive(Debug, Serialize)]
struct Size {
    /// Events of the other tenant.
    events: u64,
    calls: Vec<Call>,
}

#[derive(Debug, Serialize)]
struct Call {
    name: String,
    median_ms: f64,
    p99_ms: f64,
}

pub async fn run(a: EventsPageArgs) -> Result<bool> {
    let mut hubs = Vec::new();
    for events in [a.baseline_events, a.events] {
        hubs.push(Hub::start(&a, events).await?);
    }
    let http = reqwest::Client::new();
    let mut took: Vec<Vec<Vec<Duration>>> = vec![vec![Vec::new(); CALLS.len()]; hubs.len()];
    for (c, (_, path)) in CALLS.iter().enumerate() {
        for round in 0..WARM_UP + a.requests {
            for (h, hub) in hubs.iter().enumerate() {
                let t = hub.call(&http, path).await?;
                if round >= WARM_UP {
                    took[h][c].push(t);
                }
            }
        }
    }
    let mut sizes = Vec::new();
    for (hub, took) in hubs.into_iter().zip(took) {
        let calls = CALLS.iter().zip(took).map(|((name, _), t)| Call::of(name, t)).collect();
        sizes.push(Size { events: hub.events, calls });
        hub.stop().await?;
    }
    let ratios = CALLS
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.to_string(), sizes[1].calls[i].median_ms / sizes[0].calls[i].median_ms.max(1e-9)))
        .collect();
    let backend = if a.database_url.is_some() { "postgres" } else { "sqlite" };
    let report = Report { backend, requests: a.requests, sizes, ratios };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(true);
    }
    println!("events-page on {backend}: a viewer of a tenant with no events, {} requests per call", a.requests);
    for s in &report.sizes {
        for c in &s.calls {
            println!(
                "  other tenant {:>9} events  {:<5} median {:>7.3} ms  p99 {:>7.3} ms",
                s.events, c.name, c.median_ms, c.p99_ms
            );
        }
    }
    for (name, r) in &report.ratios {
        println!("  {name}: {:.2}× the median at {} events", r, a.baseline_events);
    }
    Ok(true)
}

/// Requests of each call to each hub before the measured ones.
const WARM_UP: usize = 20;

/// A hub serving, on loopback, a store whose log holds `events` events of tenant
/// `busy`, and the token of a viewer of tenant `quiet`.
struct Hub {
    events: u64,
    base: String,
    token: String,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    /// The PostgreSQL schema to drop afterwards, and the connection to drop it with.
    schema: Option<(Admin, String)>,
    _dir: tempfile::TempDir,
}

impl Hub {
    async fn start(a: &EventsPageArgs, events: u64) -> Result<Hub> {
        let dir = tempfile::tempdir()?;
        let (store, schema): (Arc<dyn Store>, _) = match &a.database_url {
            None => {
                let path = dir.path().join("hub.db");
                let store = SqliteStore::open(&path, StoreConfig::default()).context("opening the SQLite store")?;
                fill_sqlite(&path, events)?;
                (Arc::new(store), None)
            }
            Some(url) => {
                let schema = format!("bench_events_{}_{events}", std::process::id());
                let admin = Admin::connect(url).await?;
                admin.drop_schema(&schema).await?;
                let options = PgOptions { schema: Some(schema.clone()), pool_size: 4, migrate: true };
                let store = PgStore::connect_with(url, options, StoreConfig::default())
                    .await
                    .context("opening the PostgreSQL store")?;
                admin
                    .batch(&fill_sql(&format!("{schema}.events"), events, "generate_series(1, {n}) AS g(i)", "i"))
                    .await?;
                admin.batch(&format!("ANALYZE {schema}.events")).await?;
                (Arc::new(store), Some((admin, schema)))
            }
        };
        let mut registry = prometheus_client::registry::Registry::default();
        let queue_metrics = QueueMetrics::register(&mut registry);
        let viewer = TokenRequest {
            grant: Grant::Tenant { tenant: "quiet".into(), role: TenantRole::Viewer },
            name: None,
            ttl: None,
            created_by: "bench".into(),
        };
        let (token, _) =
            issue(store.as_ref(), store.clock().as_ref(), viewer).await.context("issuing the viewer's token")?;
        let state = AppState::new(store, Arc::new(registry), queue_metrics);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(fleetsync_server::serve(listener, state, None, async {
            let _ = stopped.await;
        }));
        Ok(Hub { events, base, token, stop, server, schema, _dir: dir })
    }

    /// One call of `path` as the quiet tenant's viewer: how long its answer took.
    async fn call(&self, http: &reqwest::Client, path: &str) -> Result<Duration> {
        let t0 = Instant::now();
        let answer = http.get(format!("{}{path}", self.base)).bearer_auth(&self.token).send().await?;
        let status = answer.status();
        let body: serde_json::Value = answer.json().await?;
        let took = t0.elapsed();
        anyhow::ensure!(status.is_success(), "{path}: {status} {body}");
        anyhow::ensure!(
            body["items"].as_array().is_some_and(Vec::is_empty),
            "{path}: the quiet tenant has no events, got {body}"
        );
        Ok(took)
    }

    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        let _ = self.server.await;
        if let Some((admin, schema)) = self.schema {
            admin.drop_schema(&schema).await?;
        }
        Ok(())
    }
}

impl Call {
    fn of(name: &str, mut took: Vec<Duration>) -> Call {
        took.sort();
        let at = |q: usize| ms(took[(took.len() * q / 100).min(took.len() - 1)]);
        Call { name: name.to_string(), median_ms: at(50), p99_ms: at(99) }
    }
}

/// `INSERT` of `n` events of tenant `busy` into `table`, numbering rows from `rows`.
fn fill_sql(table: &str, n: u64, rows: &str, i: &str) -> String {
    format!(
        "INSERT INTO {table} (at, tenant, kind, name, action, generation) \
         SELECT 0, 'busy', 'Cluster', 'c' || ({i} % 1000), 'Updated', {i} FROM {}",
        rows.replace("{n}", &n.to_string())
    )
}

fn fill_sqlite(path: &std::path::Path, n: u64) -> Result<()> {
    let c = rusqlite::Connection::open(path)?;
    let numbers = "(WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {n}) SELECT i FROM g)";
    c.execute_batch(&format!("BEGIN; {}; COMMIT; ANALYZE;", fill_sql("events", n, numbers, "i")))?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
