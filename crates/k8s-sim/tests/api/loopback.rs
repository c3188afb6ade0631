//! The simulator over a real TCP listener, with a real HTTP client.

use crate::harness::{cm, fenced, object_uri, APPLY};
use fleetsync_k8s_sim::{Faults, LatencyModel, Report, SimConfig, SimServer};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

#[tokio::test]
async fn serves_over_loopback_and_shuts_down_through_a_hang() {
    let sim = SimServer::new(SimConfig { latency: LatencyModel::hive_fleet_scaled(0.01), ..SimConfig::default() });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn({
        let sim = sim.clone();
        async move { sim.serve(listener, async move { drop(stopped.await) }).await }
    });
    let http = reqwest::Client::new();

    let obj = fenced(cm("a", "1"), "t/c1/s", 1, 4, 0);
    let url = format!("{base}{}?fieldManager=fleetsync&force=true", object_uri("c1", &obj));
    let resp = http.patch(&url).header("content-type", APPLY).body(obj.to_string()).send().await.expect("patch");
    assert_eq!(resp.status(), 201);
    let report: Report =
        http.get(format!("{base}/_sim/report")).send().await.expect("report").json().await.expect("json");
    assert_eq!(report.totals.applies, 1);
    assert!(report.clusters["c1"].critical_path_ms >= 2.0, "{report:?}");
    assert_eq!(sim.key_generations()["t/c1/s"]["v1/ConfigMap/app/a"], 4);

    // A request held by a simulated hang does not hold up shutdown.
    sim.set_faults("c1", Faults { delay_ms: Some(600_000), ..Faults::default() }).expect("faults");
    let hung = tokio::spawn({
        let (http, url) = (http.clone(), format!("{base}{}", object_uri("c1", &obj)));
        async move { http.get(url).send().await.map(|r| r.status()) }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.send(()).expect("stop");
    let served = tokio::time::timeout(Duration::from_secs(10), server).await.expect("prompt shutdown");
    served.expect("join").expect("serve");
    assert_eq!(hung.await.expect("join").expect("answered"), 503);
}
