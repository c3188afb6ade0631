//! A result PostgreSQL refuses (a NUL byte in a run's error message, which no text
//! column can hold), committed in one batch with other tenants' results: the others
//! commit, and the refused one fails only its own key, as a failed run with a reason
//! the store can hold, backed off and then parked like any failure.
//!
//! Database: `FLEETSYNC_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`,
//! in a schema of the test's own, dropped at the end.

use fleetsync_model::{Document, Phase, ResourceOutcome, ResourceRef, ResourceResult, WorkKey};
use fleetsync_runtime::committer::Committer;
use fleetsync_runtime::RuntimeMetrics;
use fleetsync_store::conformance::{cluster, syncset};
use fleetsync_store::postgres::{
    testing::{test_database_url, ScratchSchema},
    PgStore,
};
use fleetsync_store::{
    ClaimParams, ClaimedItem, CompleteOutcome, Completion, RetryPolicy, RunOutcome, Store, StoreConfig,
};
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

const TTL: Duration = Duration::from_secs(30);
/// Parked at the third failed attempt; backoff short enough not to wait for.
const RETRY: RetryPolicy =
    RetryPolicy { base: Duration::from_millis(1), cap: Duration::from_millis(5), max_attempts: 3, jitter: 0.0 };

/// `doc` in `tenant`.
fn in_tenant(mut doc: Document, tenant: &str) -> Document {
    doc.metadata_mut().namespace = tenant.into();
    doc
}

/// What a run that stopped at a resource whose name and error hold a NUL byte reports.
fn refused_run(item: &ClaimedItem) -> Completion {
    let resource =
        ResourceRef { api_version: "v1".into(), kind: "ConfigMap".into(), namespace: None, name: "bad\0name".into() };
    let error = "apply failed: unexpected \0 in the response".to_string();
    let result =
        ResourceResult { resource, outcome: ResourceOutcome::Failed, error: Some(error.clone()), duration_ms: 1 };
    Completion {
        key: item.key.clone(),
        fence: item.fence,
        outcome: RunOutcome::Failed { error },
        resources: vec![result],
    }
}

fn applied(item: &ClaimedItem) -> Completion {
    let outcome = RunOutcome::Applied { generation: item.generation, inventory: vec![], rendered: None };
    Completion { key: item.key.clone(), fence: item.fence, outcome, resources: vec![] }
}

/// Polls every future in turn until all are done: each sends its completion on its
/// first poll, so all are queued before the committer takes a batch (this test runs on
/// one thread), and they commit as one batch.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in futures.iter_mut().zip(outputs.iter_mut()).filter(|(_, out)| out.is_none()) {
            match f.as_mut().poll(cx) {
                Poll::Ready(v) => *out = Some(v),
                Poll::Pending => pending = true,
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("done")).collect()
}

/// Waits until `key` is claimable again (its backoff is a few milliseconds) and claims it.
async fn claim_again(store: &dyn Store, key: &WorkKey) -> ClaimedItem {
    let start = Instant::now();
    loop {
        let items = store.work_claim(ClaimParams::new("w", 10, TTL)).await.expect("claim");
        assert!(items.iter().all(|i| &i.key == key), "only the refused key runs again: {items:?}");
        if let Some(item) = items.into_iter().next() {
            return item;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{key} did not become claimable again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_refused_result_fails_only_its_own_key_and_parks_after_max_attempts() {
    let scratch = ScratchSchema::new();
    let config = StoreConfig { retry: RETRY, ..StoreConfig::default() };
    let store: Arc<dyn Store> =
        Arc::new(PgStore::connect(&test_database_url(), Some(&scratch.name), config).await.expect("connect"));
    let tenants = ["t1", "t2", "t3"];
    let docs = tenants.iter().flat_map(|t| {
        [cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1"), syncset("s2", 1, "v1")].map(|d| in_tenant(d, t))
    });
    store.objects_apply(docs.collect()).await.expect("apply");
    let items = store.work_claim(ClaimParams::new("w", 100, TTL)).await.expect("claim");
    assert_eq!(items.len(), 6);
    let bad = WorkKey::new("t2", "c1", "s1");

    // One batch: five results that commit, and one the database refuses.
    let (committer, task) = Committer::spawn(store.clone(), RuntimeMetrics::unregistered());
    let completions: Vec<Completion> =
        items.iter().map(|i| if i.key == bad { refused_run(i) } else { applied(i) }).collect();
    let outcomes = join_all(completions.into_iter().map(|c| committer.commit(c)).collect()).await;
    for (item, outcome) in items.iter().zip(&outcomes) {
        let expected = if item.key == bad { Phase::Failed } else { Phase::Applied };
        assert_eq!(outcome.as_ref().ok(), Some(&CompleteOutcome::Committed(expected)), "{}", item.key);
    }

    // Seen from status and the event log.
    let status = |key: WorkKey| {
        let store = store.clone();
        async move { store.status_get(&key).await.expect("status").expect("the key exists") }
    };
    let reason = |s: &fleetsync_model::KeyStatus| s.last_error.clone().unwrap_or_default();
    for item in &items {
        let s = status(item.key.clone()).await;
        if item.key == bad {
            assert_eq!(s.phase, Phase::Failed, "{s:?}");
            assert!(
                reason(&s).contains("refused") && !reason(&s).contains('\0'),
                "a readable reason the store holds: {s:?}"
            );
            assert!(s.resources.is_empty(), "the refused resource results are not kept: {s:?}");
        } else {
            assert_eq!(
                (s.phase, s.observed_generation, s.last_error.as_deref()),
                (Phase::Applied, 1, None),
                "{}",
                item.key
            );
        }
    }
    let events = store.events_read(0, 1000).await.expect("events");
    let status_events: Vec<(String, String, String)> = events
        .iter()
        .filter(|e| e.kind == "Status")
        .map(|e| (e.tenant.clone(), e.name.clone(), e.action.clone()))
        .collect();
    for item in &items {
        let action = if item.key == bad { "Failed" } else { "Applied" };
        let event = (item.key.tenant.clone(), format!("{}/{}", item.key.cluster, item.key.syncset), action.to_string());
        assert!(status_events.contains(&event), "{event:?} not in {status_events:?}");
    }

    // The refused key runs again after its backoff and is refused again, until it is
    // parked at its third attempt, with the reason.
    let mut phases = vec![Phase::Failed];
    while phases.last() != Some(&Phase::Parked) {
        assert!(phases.len() < 3, "not parked after {} attempts: {phases:?}", phases.len());
        let item = claim_again(&*store, &bad).await;
        match committer.commit(refused_run(&item)).await {
            Ok(CompleteOutcome::Committed(phase)) => phases.push(phase),
            other => panic!("attempt {}: {other:?}", phases.len() + 1),
        }
    }
    assert_eq!(phases, [Phase::Failed, Phase::Failed, Phase::Parked]);
    let parked = status(bad.clone()).await;
    assert_eq!((parked.phase, parked.attempts), (Phase::Parked, 3), "{parked:?}");
    assert!(reason(&parked).contains("refused") && !reason(&parked).contains('\0'), "{parked:?}");
    for item in items.iter().filter(|i| i.key != bad) {
        assert_eq!(status(item.key.clone()).await.phase, Phase::Applied, "{}", item.key);
    }
    drop(committer);
    task.await.expect("the committer stops");
}
