//! A hub started through the library, as a program embedding fleetsync would: a
//! SQLite store in a temporary directory, the simulated fleet as the target, the API on
//! a loopback port. What it is given through the HTTP API must land on the target, as
//! the target records it (not as fleetsync's status says); its event trimming must
//! run; and cancelling its token must make `run` return, with the port closed.

use fleetsync_applier::latency::LatencyModel;
use fleetsync_applier::sim::{SimConfig, SimFleet};
use fleetsync_applier::ByEndpoint;
use fleetsync_hub::{EventTrim, Hub};
use fleetsync_model::{Document, Endpoint, Grant, WorkKey};
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_runtime::RuntimeConfig;
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{EventRetention, Store, StoreConfig};
use fleetsync_testkit::{cluster_name, hive_fleet, hive_syncset, syncset_name, FleetShape};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const SHAPE: FleetShape = FleetShape { clusters: 4, syncsets: 3, resources: 2 };

/// Documents as one multi-document text (JSON is YAML).
fn text(docs: &[Document]) -> String {
    docs.iter().map(|d| d.to_value().to_string()).collect::<Vec<_>>().join("\n---\n")
}

/// Whether the target holds every resource of every key at `generation`.
fn on_target(sim: &SimFleet, generation: i64) -> bool {
    (0..SHAPE.clusters).all(|c| {
        (0..SHAPE.syncsets).all(|s| {
            let key = WorkKey::new("default", cluster_name(c), syncset_name(s));
            let Document::SyncSet(ss) = hive_syncset(s, SHAPE.resources, "r1") else { unreachable!("a SyncSet") };
            ss.spec.resources.iter().all(|m| sim.generation_of(&key, &m.resource_ref().expect("ref")) == Some(generation))
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_built_as_a_library_applies_what_its_api_is_given_and_returns_when_cancelled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = SqliteStore::open_for_work(dir.path().join("hub.db"), StoreConfig::default()).await.expect("open");
    let store: Arc<dyn Store> = Arc::new(store);
    let sim = SimFleet::new(SimConfig { latency: LatencyModel::hive_fleet_scaled(0.01), fail_rate: 0.0 });
    let applier = Arc::new(ByEndpoint { simulator: Some(Arc::new(sim.clone())), ..ByEndpoint::default() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    // Keep at most 2 events, trimmed every 50 ms.
    let keep = EventRetention { max_events: Some(2), max_age: None };
    let trim = EventTrim::new(keep, Duration::from_millis(50)).expect("a trim");

    let admin = TokenRequest { grant: Grant::Fleet, name: None, ttl: None, created_by: "test".into() };
    let (token, _) = issue(store.as_ref(), store.clock().as_ref(), admin).await.expect("a token");

    let shutdown = CancellationToken::new();
    let hub = Hub::new(store, applier, RuntimeConfig::default()).api(listener).event_trim(trim);
    let running = tokio::spawn(hub.run(shutdown.clone()));

    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {token}").parse().expect("header value"));
    headers.insert("content-type", reqwest::header::HeaderValue::from_static("application/yaml"));
    let http = reqwest::Client::builder().default_headers(headers).build().expect("client");
    let docs = hive_fleet(SHAPE, |_| Endpoint::Simulator {}, "r1");
    let resp = http.post(format!("{url}/v1/apply")).body(text(&docs)).send().await.expect("reach the hub");
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap_or_default());

    let start = Instant::now();
    while !on_target(&sim, 1) {
        assert!(start.elapsed() < Duration::from_secs(30), "the target never held the fleet: {:?}", sim.totals());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = sim.totals();
    assert_eq!((t.overlaps, t.order_violations, t.fenced), (0, 0, 0), "{t:?}");

    // The trimming runs: the log's first events are gone, so a cursor at 0 is refused.
    let start = Instant::now();
    loop {
        let resp = http.get(format!("{url}/v1/events?after=0")).send().await.expect("reach the hub");
        if resp.status() == reqwest::StatusCode::GONE {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the event log was never trimmed: {}", resp.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // `/metrics` serves the registry the hub filled.
    let metrics = http.get(format!("{url}/metrics")).send().await.expect("reach the hub").text().await.expect("text");
    assert!(metrics.contains("fleetsync_apply_concurrency_limit 4096"), "{metrics}");

    shutdown.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(30), running).await.expect("run returned after the cancel");
    ended.expect("no panic").expect("a clean stop");
    assert!(http.get(format!("{url}/healthz")).send().await.is_err(), "the API stopped with the hub");
}
