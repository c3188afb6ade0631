//! A cluster whose endpoint the hub's egress policy refuses: parked after one attempt
//! with the rule's message, no backoff loop; run again by a retry, by a change of the
//! Cluster, and by a process that starts (with, maybe, another policy). The Kubernetes
//! applier on the embedded store; nothing listens where the clusters point.

use fleetsync_applier::egress::EgressPolicy;
use fleetsync_applier::kubernetes::{KubeApplier, KubeConfig};
use fleetsync_applier::{Applier, ByEndpoint};
use fleetsync_model::{Document, Endpoint, KeyStatus, Phase, WorkKey};
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{RetryPolicy, Store, StoreConfig};
use fleetsync_testkit::{cluster_name, hive_fleet, syncset_name, wait_settled, FleetShape};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const RULE: &str = "forbidden: egress to 127.0.0.1 is denied (loopback; allow it with --egress-allow)";

struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

fn start(store: &Arc<dyn Store>, egress: EgressPolicy) -> Running {
    let kube =
        KubeApplier::new(KubeConfig { request_timeout: Duration::from_secs(5), egress, ..KubeConfig::default() });
    let applier: Arc<dyn Applier> = Arc::new(ByEndpoint { http: Some(Arc::new(kube)), ..ByEndpoint::default() });
    let config =
        RuntimeConfig { poll_interval: Duration::from_millis(100), resync_every: None, ..RuntimeConfig::default() };
    let runtime = Runtime::new(store.clone(), applier, config, RuntimeMetrics::unregistered());
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let task = tokio::spawn(async move { runtime.run(stop).await.expect("runtime") });
    Running { shutdown, task }
}

async fn stop(r: Running) {
    r.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), r.task).await.expect("stops").expect("joins");
}

/// A port on 127.0.0.1 that nothing listens on.
async fn closed_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr").port()
}

fn fleet(port: u16) -> Vec<Document> {
    let shape = FleetShape { clusters: 1, syncsets: 1, resources: 2 };
    hive_fleet(shape, |_| Endpoint::Http { url: format!("http://127.0.0.1:{port}/clusters/c0") }, "r1")
}

async fn status(store: &dyn Store, key: &WorkKey) -> KeyStatus {
    store.status_get(key).await.expect("status").expect("exists")
}

/// Waits until the key has run again since `before` and settled.
async fn ran_again(store: &dyn Store, key: &WorkKey, before: &KeyStatus) -> KeyStatus {
    let start = std::time::Instant::now();
    loop {
        let (_, settled) = wait_settled(store, Duration::from_secs(10)).await.expect("stats");
        let now = status(store, key).await;
        if settled && now.updated_at > before.updated_at && now.phase != Phase::Pending {
            return now;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "did not run again: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn assert_refused(st: &KeyStatus) {
    assert_eq!((st.phase, st.attempts), (Phase::Parked, 1), "parked after exactly one attempt: {st:?}");
    assert!(st.last_error.as_deref().is_some_and(|e| e.ends_with(RULE)), "the rule's message: {st:?}");
    assert_eq!(st.next_attempt_at, None, "no retry scheduled: {st:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_egress_refusal_parks_at_once_and_runs_again_on_a_retry_a_change_or_a_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Many attempts and short backoff: without parking at once the key would retry.
    let retry =
        RetryPolicy { base: Duration::from_millis(10), cap: Duration::from_millis(20), max_attempts: 10, jitter: 0.0 };
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("f.db"), StoreConfig { retry, ..StoreConfig::default() }).expect("open"),
    );
    let key = WorkKey::new("default", cluster_name(0), syncset_name(0));
    let refusing = start(&store, EgressPolicy::default());

    let first_port = closed_port().await;
    store.objects_apply(fleet(first_port)).await.expect("apply");
    let (_, settled) = wait_settled(&*store, Duration::from_secs(10)).await.expect("stats");
    assert!(settled);
    let parked = status(&*store, &key).await;
    assert_refused(&parked);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status(&*store, &key).await, parked, "not tried again by itself");

    store.work_retry(&key).await.expect("retry");
    let retried = ran_again(&*store, &key, &parked).await;
    assert_refused(&retried);

    // A change of the Cluster (another URL) runs its keys again.
    // Another port for certain: the kernel may hand the same free port out twice, and
    // an unchanged Cluster runs nothing.
    let mut port = closed_port().await;
    while port == first_port {
        port = closed_port().await;
    }
    let cluster: Vec<Document> = fleet(port).into_iter().filter(|d| matches!(d, Document::Cluster(_))).collect();
    store.objects_apply(cluster).await.expect("change the cluster");
    let changed = ran_again(&*store, &key, &retried).await;
    assert_refused(&changed);
    stop(refusing).await;

    // A process that starts with a policy that allows loopback runs it again: the
    // target is now tried (and found closed).
    let allowing = start(&store, EgressPolicy::parse(&["127.0.0.1"], &[]).expect("rule"));
    let start = std::time::Instant::now();
    let tried = loop {
        let st = status(&*store, &key).await;
        if st.last_error.as_deref().is_some_and(|e| e.contains("unreachable: http://127.0.0.1:")) {
            break st;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "not run again at the start: {st:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(tried.last_error.as_deref().is_some_and(|e| e.to_lowercase().contains("connection refused")), "{tried:?}");
    stop(allowing).await;
}
