//! A hub started through the library, as a program embedding fleetsync would: a
//! SQLite store in a temporary directory, the simulated fleet as the target, the API on
//! a loopback port. What it is given through the HTTP API must land on the target, as
//! the target records it (not as fleetsync's status says); its event trimming must
//! run; and cancelling its token must make `run` return, with the port closed.

mod common;

use common::TestHub;
use fleetsync_hub::EventTrim;
use fleetsync_runtime::RuntimeConfig;
use fleetsync_store::EventRetention;
use fleetsync_testkit::FleetShape;
use std::time::{Duration, Instant};

const SHAPE: FleetShape = FleetShape { clusters: 4, syncsets: 3, resources: 2 };

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_built_as_a_library_applies_what_its_api_is_given_and_returns_when_cancelled() {
    // Keep at most 2 events, trimmed every 50 ms.
    let keep = EventRetention { max_events: Some(2), max_age: None };
    let trim = EventTrim::new(keep, Duration::from_millis(50)).expect("a trim");
    let hub = TestHub::start_with(RuntimeConfig::default(), 0.01, |hub| hub.event_trim(trim)).await;
    hub.apply_fleet(SHAPE).await;

    let start = Instant::now();
    let keys = SHAPE.clusters * SHAPE.syncsets;
    while hub.on_target(SHAPE) < keys {
        assert!(start.elapsed() < Duration::from_secs(30), "the target never held the fleet: {:?}", hub.sim.totals());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let t = hub.sim.totals();
    assert_eq!((t.overlaps, t.order_violations, t.fenced), (0, 0, 0), "{t:?}");

    // The trimming runs: the log's first events are gone, so a cursor at 0 is refused.
    let start = Instant::now();
    loop {
        let resp = hub.get("/v1/events?after=0").send().await.expect("reach the hub");
        if resp.status() == reqwest::StatusCode::GONE {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the event log was never trimmed: {}", resp.status());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // `/metrics` serves the registry the hub filled.
    let metrics = hub.get("/metrics").send().await.expect("reach the hub").text().await.expect("text");
    assert!(metrics.contains("fleetsync_apply_concurrency_limit 4096"), "{metrics}");

    let (http, url) = (hub.http.clone(), hub.url.clone());
    hub.stop().await;
    assert!(http.get(format!("{url}/healthz")).send().await.is_err(), "the API stopped with the hub");
}
