//! The conformance suite every backend passes: DESIGN.md's guarantees 1–5 as tests,
//! plus the event log (order, retention behind a horizon, wake-ups for watchers).
//!
//! A backend's test module implements [`Harness`] (how to open *the same* store again,
//! as after a restart) and calls [`conformance_tests!`](crate::conformance_tests),
//! which expands to one `#[tokio::test]` per check. Time is a
//! [`ManualClock`]: leases and backoff are tested without sleeping.

use crate::{
    ClaimParams, ClaimedItem, CompleteOutcome, Completion, EventRetention, EventsTrimmed, LiveOutcome, LiveRecord, OwnWrite,
    RenewParams, RetryPolicy, RunOutcome, StatusFilter, Store, StoreConfig, StoreError,
};
use async_trait::async_trait;
use fleetsync_model::{
    ApplyMode, Clock, Cluster, ClusterSpec, Document, Endpoint, Kind, LabelSelector, Manifest, ManualClock, ObjectMeta, Phase,
    ResourceRef, SyncSet, SyncSetSpec, Timestamp, WorkKey,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Opens a backend's store. Every call on one harness opens the same database.
#[async_trait]
pub trait Harness: Send + Sync {
    async fn open(&self, config: StoreConfig) -> Arc<dyn Store>;
}

/// Expands to one test per conformance check, each with a fresh harness from `$make`
/// (an expression evaluating to a future of the harness).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            coalescing, dirty_while_processing, exclusivity, stale_token_refused, lease_expiry_and_takeover,
            backoff_schedule, parking_and_redrive, durability_across_reopen, removal, idempotent_apply,
            relabel_moves_keys, events_in_order, wakes_waiters, release_does_not_count, secrets_stored_and_rotated,
            cluster_limit_holds_back, crowded_cluster_hides_no_other, members_and_shards, events_trimmed_behind_a_horizon, event_watchers_woken,
            live_state_deduplicated_and_drift_requeues, consumer_cursors_only_move_forward, consumer_names_are_checked, requeue_runs_again_after_its_delay,
            requeue_yields_to_a_newer_change, own_write_leaves_the_writer_clean, own_write_with_a_stale_token_is_refused,
            own_write_that_unselects_the_writer_dirties_it, inventory_recorded_ahead_outlives_failed_and_lost_runs,
            a_result_the_backend_cannot_hold_is_refused_whole);
    };
    (@each $make:expr; $($name:ident),*) => {$(
        #[tokio::test]
        async fn $name() {
            let harness = $make.await;
            $crate::conformance::$name(&harness).await;
        }
    )*};
}

pub const TTL: Duration = Duration::from_secs(30);
const T0: Timestamp = Timestamp(1_800_000_000_000);

/// A store on a manual clock with a jitter-free retry policy (base 1 s, cap 8 s, 3 attempts).
async fn open(h: &dyn Harness) -> (Arc<dyn Store>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    (h.open(config(clock.clone())).await, clock)
}

fn config(clock: Arc<ManualClock>) -> StoreConfig {
    let retry = RetryPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(8), max_attempts: 3, jitter: 0.0 };
    StoreConfig { clock: Some(clock), retry }
}

pub fn cluster(name: &str, labels: &[(&str, &str)]) -> Document {
    let mut metadata = ObjectMeta::new(name);
    metadata.labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Document::Cluster(Cluster { metadata, spec: ClusterSpec::new(Endpoint::Simulator {}) })
}

/// A SyncSet selecting `env=prod` with `n` ConfigMaps whose data carries `marker`.
pub fn syncset(name: &str, n: usize, marker: &str) -> Document {
    let resources = (0..n)
        .map(|i| {
            Manifest(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-{i}"), "namespace": "apps"},
                "data": {"marker": marker},
            }))
        })
        .collect();
    let spec = SyncSetSpec {
        cluster_selector: Some(LabelSelector { match_labels: [("env".to_string(), "prod".to_string())].into() }),
        cluster_names: None,
        resource_apply_mode: ApplyMode::Sync,
        resources,
    };
    Document::SyncSet(SyncSet { metadata: ObjectMeta::new(name), spec })
}

fn key(c: &str, s: &str) -> WorkKey {
    WorkKey::new("default", c, s)
}

fn claim_params(owner: &str, limit: usize) -> ClaimParams {
    ClaimParams::new(owner, limit, TTL)
}

async fn claim(s: &dyn Store, owner: &str, limit: usize) -> Vec<ClaimedItem> {
    s.work_claim(claim_params(owner, limit)).await.expect("claim")
}

async fn complete(s: &dyn Store, item: &ClaimedItem, outcome: RunOutcome) -> CompleteOutcome {
    s.work_complete(vec![completion(item, outcome)]).await.expect("complete")[0]
}

/// A completion of `item` with `outcome` (no per-resource results).
fn completion(item: &ClaimedItem, outcome: RunOutcome) -> Completion {
    Completion { key: item.key.clone(), fence: item.fence, outcome, resources: vec![] }
}

/// A completion saying `item` applied the generation it was claimed at.
pub fn applied_completion(item: &ClaimedItem) -> Completion {
    completion(item, applied(item))
}

fn applied(item: &ClaimedItem) -> RunOutcome {
    RunOutcome::Applied { generation: item.generation, inventory: vec![] }
}

fn failed(msg: &str) -> RunOutcome {
    RunOutcome::Failed { error: msg.into() }
}

async fn phase(s: &dyn Store, k: &WorkKey) -> Phase {
    s.status_get(k).await.expect("status").expect("key exists").phase
}

async fn one_key(s: &dyn Store) {
    s.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 2, "v1")]).await.expect("apply");
}

/// At most one pending item per key: newer generations replace the pending one.
pub async fn coalescing(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    for v in 2..=4 {
        s.objects_apply(vec![syncset("s1", 2, &format!("v{v}"))]).await.expect("update");
    }
    assert_eq!(s.status_list(&StatusFilter::default()).await.expect("status").len(), 1);
    let items = claim(&*s, "w1", 10).await;
    assert_eq!(items.len(), 1, "one key, claimed once");
    assert_eq!(items[0].generation, 4, "the newest generation replaced the pending ones");
    assert_eq!(items[0].attempt, 1);
    assert!(claim(&*s, "w2", 10).await.is_empty(), "nothing else pending");
}

/// A change during a run makes the key run again afterwards, never beside it.
pub async fn dirty_while_processing(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    let first = claim(&*s, "w1", 10).await.remove(0);
    s.objects_apply(vec![syncset("s1", 2, "v2")]).await.expect("update during run");
    assert_eq!(phase(&*s, &first.key).await, Phase::Applying);
    assert!(claim(&*s, "w2", 10).await.is_empty(), "never beside the current run");
    assert_eq!(complete(&*s, &first, applied(&first)).await, CompleteOutcome::Committed(Phase::Pending));
    let second = claim(&*s, "w2", 10).await.remove(0);
    assert_eq!(second.generation, 2);
    assert!(second.fence > first.fence);
    assert_eq!(complete(&*s, &second, applied(&second)).await, CompleteOutcome::Committed(Phase::Applied));
    let st = s.status_get(&first.key).await.expect("status").expect("exists");
    assert_eq!((st.phase, st.observed_generation, st.generation), (Phase::Applied, 2, 2));
}

/// Concurrent claimers never get the same key.
pub async fn exclusivity(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let mut docs: Vec<Document> = (0..25).map(|i| cluster(&format!("c{i}"), &[("env", "prod")])).collect();
    docs.push(syncset("a", 1, "v1"));
    docs.push(syncset("b", 1, "v1"));
    s.objects_apply(docs).await.expect("apply");
    let claims = (0..5).map(|w| {
        let s = s.clone();
        tokio::spawn(async move { s.work_claim(claim_params(&format!("w{w}"), 20)).await.expect("claim") })
    });
    let mut keys = Vec::new();
    for c in claims {
        keys.extend(c.await.expect("join").into_iter().map(|i| i.key));
    }
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(n, 50, "all 50 keys claimed");
    assert_eq!(keys.len(), 50, "no key claimed twice");
}

/// A completion, renewal or release with a stale token is refused and changes nothing.
pub async fn stale_token_refused(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let old = claim(&*s, "w1", 1).await.remove(0);
    clock.advance(TTL + Duration::from_millis(1));
    let new = claim(&*s, "w2", 1).await.remove(0);
    assert!(new.fence > old.fence, "fencing tokens strictly increase");
    assert_eq!(complete(&*s, &old, applied(&old)).await, CompleteOutcome::Stale);
    assert_eq!(complete(&*s, &old, failed("late")).await, CompleteOutcome::Stale);
    s.work_release(&old.key, old.fence).await.expect("release is a no-op");
    let lost = s.lease_renew(RenewParams { leases: vec![(old.key.clone(), old.fence)], lease_ttl: TTL }).await.expect("renew");
    assert_eq!(lost, vec![old.key.clone()]);
    let st = s.status_get(&new.key).await.expect("status").expect("exists");
    assert_eq!((st.phase, st.observed_generation, st.last_error), (Phase::Applying, 0, None), "stale writes changed nothing");
    assert_eq!(complete(&*s, &new, applied(&new)).await, CompleteOutcome::Committed(Phase::Applied));
}

/// A held lease blocks others until it expires; renewal extends it; then it is taken over.
pub async fn lease_expiry_and_takeover(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let first = claim(&*s, "w1", 1).await.remove(0);
    clock.advance(TTL - Duration::from_secs(1));
    assert!(claim(&*s, "w2", 1).await.is_empty(), "lease still valid");
    let lost = s.lease_renew(RenewParams { leases: vec![(first.key.clone(), first.fence)], lease_ttl: TTL }).await.expect("renew");
    assert!(lost.is_empty());
    clock.advance(Duration::from_secs(2));
    assert!(claim(&*s, "w2", 1).await.is_empty(), "renewed lease still valid past the first expiry");
    clock.advance(TTL);
    let taken = claim(&*s, "w2", 1).await;
    assert_eq!(taken.len(), 1, "expired lease is taken over");
    assert_eq!(taken[0].attempt, 2);
    assert!(taken[0].fence > first.fence);
}

/// Failures retry after base·2^(n−1), capped; nothing is claimable before then.
pub async fn backoff_schedule(h: &dyn Harness) {
    let clock = Arc::new(ManualClock::new(T0));
    let mut cfg = config(clock.clone());
    cfg.retry.max_attempts = 10;
    let s = h.open(cfg).await;
    one_key(&*s).await;
    for expected in [1u64, 2, 4, 8, 8] {
        let item = claim(&*s, "w", 1).await.remove(0);
        assert_eq!(complete(&*s, &item, failed("boom")).await, CompleteOutcome::Committed(Phase::Failed));
        let st = s.status_get(&item.key).await.expect("status").expect("exists");
        assert_eq!(st.next_attempt_at, Some(clock.now().plus(Duration::from_secs(expected))));
        assert_eq!(st.last_error.as_deref(), Some("boom"));
        assert_eq!(s.work_next_ready_at(None).await.expect("next"), st.next_attempt_at);
        clock.advance(Duration::from_secs(expected) - Duration::from_millis(1));
        assert!(claim(&*s, "w", 1).await.is_empty(), "not before its backoff ({expected}s)");
        clock.advance(Duration::from_millis(1));
    }
}

/// After max attempts the key parks with its error; a new generation, a resync or an
/// explicit retry runs it again.
pub async fn parking_and_redrive(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let k = key("c1", "s1");
    for attempt in 1..=3 {
        let item = claim(&*s, "w", 1).await.remove(0);
        assert_eq!(item.attempt, attempt);
        let want = if attempt == 3 { Phase::Parked } else { Phase::Failed };
        assert_eq!(complete(&*s, &item, failed(&format!("err {attempt}"))).await, CompleteOutcome::Committed(want));
        clock.advance(Duration::from_secs(60));
    }
    let st = s.status_get(&k).await.expect("status").expect("exists");
    assert_eq!((st.phase, st.attempts, st.last_error.as_deref()), (Phase::Parked, 3, Some("err 3")));
    assert_eq!(s.queue_stats().await.expect("stats").by_phase[&Phase::Parked], 1);
    clock.advance(Duration::from_secs(3600));
    assert!(claim(&*s, "w", 1).await.is_empty(), "parked keys are not retried by time");

    s.objects_apply(vec![syncset("s1", 2, "v2")]).await.expect("new generation");
    let item = claim(&*s, "w", 1).await.remove(0);
    assert_eq!((item.generation, item.attempt), (2, 1), "a change re-drives with fresh attempts");
    complete(&*s, &item, failed("again")).await;

    // Explicit retry.
    clock.advance(Duration::from_secs(60));
    for _ in 0..2 {
        let item = claim(&*s, "w", 1).await.remove(0);
        complete(&*s, &item, failed("again")).await;
        clock.advance(Duration::from_secs(60));
    }
    assert_eq!(phase(&*s, &k).await, Phase::Parked);
    s.work_retry(&k).await.expect("retry");
    assert_eq!(phase(&*s, &k).await, Phase::Pending);
    let item = claim(&*s, "w", 1).await.remove(0);
    assert_eq!(complete(&*s, &item, applied(&item)).await, CompleteOutcome::Committed(Phase::Applied));
    assert!(s.work_retry(&key("nope", "s1")).await.is_err(), "retry of an unknown key is an error");

    // Resync re-applies applied and parked keys alike.
    assert_eq!(s.work_resync().await.expect("resync"), 1);
    assert_eq!(claim(&*s, "w", 5).await.len(), 1);
}

/// Everything committed survives closing and reopening the store.
pub async fn durability_across_reopen(h: &dyn Harness) {
    let clock = Arc::new(ManualClock::new(T0));
    let (done, pending_fence) = {
        let s = h.open(config(clock.clone())).await;
        s.objects_apply(vec![cluster("c1", &[("env", "prod")]), cluster("c2", &[("env", "prod")]), syncset("s1", 3, "v1")])
            .await
            .expect("apply");
        let items = claim(&*s, "w", 1).await;
        complete(&*s, &items[0], applied(&items[0])).await;
        (items[0].key.clone(), items[0].fence)
    };
    let s = h.open(config(clock.clone())).await;
    assert_eq!(s.cluster_list(None).await.expect("list").len(), 2);
    let ss = s.syncset_get("default", "s1").await.expect("get").expect("exists");
    assert_eq!((ss.metadata.generation, ss.spec.resources.len()), (1, 3));
    assert_eq!(phase(&*s, &done).await, Phase::Applied);
    let rest = claim(&*s, "w", 10).await;
    assert_eq!(rest.len(), 1, "the pending key is still pending");
    assert!(rest[0].fence > pending_fence, "fencing tokens keep increasing across reopen");
    assert!(s.events_read(0, 100).await.expect("events").len() >= 4);
}

/// A deleted SyncSet's keys come back for removal with their inventory; a deleted
/// cluster's keys are gone and their holders' completions are refused.
pub async fn removal(h: &dyn Harness) {
    let (s, _) = open(h).await;
    s.objects_apply(vec![cluster("c1", &[("env", "prod")]), cluster("c2", &[("env", "prod")]), syncset("s1", 2, "v1")])
        .await
        .expect("apply");
    let inventory = vec![fleetsync_model::ResourceRef { api_version: "v1".into(), kind: "ConfigMap".into(), namespace: None, name: "x".into() }];
    for item in claim(&*s, "w", 10).await {
        let outcome = RunOutcome::Applied { generation: 1, inventory: inventory.clone() };
        complete(&*s, &item, outcome).await;
    }
    s.object_delete(Kind::SyncSet, "default", "s1").await.expect("delete");
    let items = claim(&*s, "w", 10).await;
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|i| !i.desired && i.inventory == inventory && i.apply_mode == ApplyMode::Sync));
    assert_eq!(complete(&*s, &items[0], RunOutcome::Removed).await, CompleteOutcome::Removed);
    assert!(s.status_get(&items[0].key).await.expect("status").is_none(), "removed key is gone");

    s.object_delete(Kind::Cluster, &items[1].key.tenant, &items[1].key.cluster).await.expect("delete cluster");
    assert_eq!(complete(&*s, &items[1], RunOutcome::Removed).await, CompleteOutcome::Stale);
    assert!(s.object_delete(Kind::Cluster, "default", "nope").await.is_err(), "unknown object");
    assert!(s.status_list(&StatusFilter::default()).await.expect("status").is_empty());
}

/// Applying the same content again changes nothing and enqueues nothing.
pub async fn idempotent_apply(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, applied(&item)).await;
    let again = s.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 2, "v1")]).await.expect("apply");
    assert!(again.iter().all(|o| o.result == "unchanged" && o.enqueued == 0 && o.generation == 1), "{again:?}");
    assert!(claim(&*s, "w", 1).await.is_empty());
}

/// A cluster that stops matching a selector gets its keys enqueued for removal.
pub async fn relabel_moves_keys(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, applied(&item)).await;
    let out = s.objects_apply(vec![cluster("c1", &[("env", "dev")])]).await.expect("relabel");
    assert_eq!((out[0].generation, out[0].enqueued), (2, 1));
    let item = claim(&*s, "w", 1).await.remove(0);
    assert!(!item.desired, "no longer selected: removal");
}

/// Every accepted change is in the log, in commit order.
pub async fn events_in_order(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    s.objects_apply(vec![syncset("s1", 2, "v2")]).await.expect("update");
    s.object_delete(Kind::SyncSet, "default", "s1").await.expect("delete");
    let events = s.events_read(0, 100).await.expect("events");
    let seen: Vec<(String, String, i64)> = events.iter().map(|e| (e.kind.clone(), e.action.clone(), e.generation)).collect();
    let want = [("Cluster", "Created", 1), ("SyncSet", "Created", 1), ("SyncSet", "Updated", 2), ("SyncSet", "Deleted", 2)];
    let want: Vec<(String, String, i64)> = want.iter().map(|(k, a, g)| (k.to_string(), a.to_string(), *g)).collect();
    assert_eq!(seen, want);
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(s.events_read(events[1].seq, 100).await.expect("events").len(), 2, "reading from a cursor");
}

/// A change wakes subscribed workers (no polling needed).
pub async fn wakes_waiters(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let mut rx = s.subscribe();
    rx.borrow_and_update();
    one_key(&*s).await;
    tokio::time::timeout(Duration::from_secs(1), rx.changed()).await.expect("woken").expect("open");
}

/// A released key is claimable at once and the release does not count as an attempt.
pub async fn release_does_not_count(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    let item = claim(&*s, "w", 1).await.remove(0);
    s.work_release(&item.key, item.fence).await.expect("release");
    assert_eq!(phase(&*s, &item.key).await, Phase::Pending);
    let again = claim(&*s, "w", 1).await.remove(0);
    assert_eq!(again.attempt, 1);
}

/// Secrets round-trip with their values; a changed Secret re-applies the keys of the
/// clusters whose kubeconfig it holds (and only those); deleting it is logged.
pub async fn secrets_stored_and_rotated(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let secret = |token: &str| {
        let mut string_data = std::collections::BTreeMap::new();
        string_data.insert("kubeconfig".to_string(), fleetsync_model::SecretValue::new(token));
        Document::Secret(fleetsync_model::Secret { metadata: ObjectMeta::new("kc"), string_data })
    };
    let mut by_secret = cluster("c1", &[("env", "prod")]);
    if let Document::Cluster(c) = &mut by_secret {
        c.spec.endpoint = Endpoint::Kubeconfig { secret_ref: "kc".into() };
    }
    let out = s.objects_apply(vec![secret("t1"), by_secret, cluster("c2", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply");
    assert_eq!((out[0].kind, out[0].result, out[0].generation), (Kind::Secret, "created", 1));
    let got = s.secret_get("default", "kc").await.expect("get").expect("stored");
    assert_eq!((got.get("kubeconfig").map(|v| v.expose()), got.metadata.generation), (Some("t1"), 1));
    for item in claim(&*s, "w", 10).await {
        complete(&*s, &item, applied(&item)).await;
    }

    let same = s.objects_apply(vec![secret("t1")]).await.expect("again");
    assert_eq!((same[0].result, same[0].enqueued), ("unchanged", 0));
    let rotated = s.objects_apply(vec![secret("t2")]).await.expect("rotate");
    assert_eq!((rotated[0].generation, rotated[0].enqueued), (2, 1), "only c1 uses the Secret");
    let again = claim(&*s, "w", 10).await;
    assert_eq!(again.iter().map(|i| i.key.clone()).collect::<Vec<_>>(), vec![key("c1", "s1")]);
    assert_eq!(s.secret_list(Some("default")).await.expect("list").len(), 1);

    s.object_delete(Kind::Secret, "default", "kc").await.expect("delete");
    assert!(s.secret_get("default", "kc").await.expect("get").is_none());
    let events = s.events_read(0, 100).await.expect("events");
    let secret_events: Vec<_> = events.iter().filter(|e| e.kind == "Secret").map(|e| e.action.as_str()).collect();
    assert_eq!(secret_events, ["Created", "Updated", "Deleted"]);
}

/// A per-cluster limit holds back a crowded cluster's ready keys, counting what the
/// claimer already has in flight, and they stay ready, in order, for later.
pub async fn cluster_limit_holds_back(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let docs = vec![cluster("c1", &[("env", "prod")]), cluster("c2", &[("env", "prod")]), syncset("s1", 1, "v"), syncset("s2", 1, "v"), syncset("s3", 1, "v")];
    s.objects_apply(docs).await.expect("apply");
    let limited = |busy: &[(&str, u32)]| {
        let in_flight = busy.iter().map(|(c, n)| (("default".to_string(), c.to_string()), *n)).collect();
        ClaimParams { cluster_limit: Some(crate::ClusterLimit { max: 2, in_flight }), ..claim_params("w", 10) }
    };
    let first = s.work_claim(limited(&[("c1", 1)])).await.expect("claim");
    let keys: Vec<_> = first.iter().map(|i| (i.key.cluster.as_str(), i.key.syncset.as_str())).collect();
    assert_eq!(keys, [("c1", "s1"), ("c2", "s1"), ("c2", "s2")], "c1 had one in flight already");
    assert!(s.work_claim(limited(&[("c1", 2), ("c2", 2)])).await.expect("claim").is_empty(), "both clusters are full");
    let rest = claim(&*s, "w", 10).await;
    let keys: Vec<_> = rest.iter().map(|i| (i.key.cluster.as_str(), i.key.syncset.as_str())).collect();
    assert_eq!(keys, [("c1", "s2"), ("c1", "s3"), ("c2", "s3")], "held-back keys stayed ready, in order");
}

/// Keys held back for a crowded cluster do not hide the keys of other clusters behind
/// them (a claim looks past them, within a bounded window), and a claim never takes
/// more of one cluster than the limit allows, however it looks.
pub async fn crowded_cluster_hides_no_other(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let mut docs = vec![cluster("c1", &[("env", "prod")]), cluster("c2", &[("env", "prod")])];
    docs.extend((0..100).map(|i| syncset(&format!("s{i:03}"), 1, "v")));
    s.objects_apply(docs).await.expect("apply");
    // c1's 100 keys come first in claim order, c2's after them.
    let limited = ClaimParams { cluster_limit: Some(crate::ClusterLimit { max: 2, in_flight: HashMap::new() }), ..claim_params("w", 10) };
    let got = s.work_claim(limited).await.expect("claim");
    let keys: Vec<_> = got.iter().map(|i| (i.key.cluster.as_str(), i.key.syncset.as_str())).collect();
    assert_eq!(keys, [("c1", "s000"), ("c1", "s001"), ("c2", "s000"), ("c2", "s001")]);
}

/// Members live until their TTL runs out or they leave; a claim (and the next-ready
/// time) can be narrowed to some shards, and a key's shard is its cluster's.
pub async fn members_and_shards(h: &dyn Harness) {
    use fleetsync_model::shard::shard_of;
    let (s, clock) = open(h).await;
    let beat = |id: &str, in_flight| crate::MemberBeat { id: id.into(), ttl: Duration::from_secs(10), in_flight };
    s.member_heartbeat(beat("w1", 3)).await.expect("beat");
    let live = s.member_heartbeat(beat("w2", 0)).await.expect("beat");
    assert_eq!(live.iter().map(|m| (m.id.as_str(), m.in_flight)).collect::<Vec<_>>(), [("w1", 3), ("w2", 0)]);
    clock.advance(Duration::from_secs(6));
    s.member_heartbeat(beat("w1", 1)).await.expect("beat");
    clock.advance(Duration::from_secs(6));
    let live = s.member_list().await.expect("list");
    assert_eq!(live.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["w1"], "w2 missed its heartbeat");
    s.member_leave("w1").await.expect("leave");
    assert!(s.member_list().await.expect("list").is_empty());

    // Two clusters in different shards.
    let other = (2..100).map(|i| format!("c{i}")).find(|c| shard_of("default", c) != shard_of("default", "c1")).expect("a cluster in another shard");
    s.objects_apply(vec![cluster("c1", &[("env", "prod")]), cluster(&other, &[("env", "prod")]), syncset("s1", 1, "v")]).await.expect("apply");
    let (mine, theirs) = (shard_of("default", "c1"), shard_of("default", &other));
    let claim_in = |shards: Vec<u16>| ClaimParams { shards: Some(shards), ..claim_params("w", 10) };
    let got = s.work_claim(claim_in(vec![mine])).await.expect("claim");
    assert_eq!(got.iter().map(|i| i.key.cluster.as_str()).collect::<Vec<_>>(), ["c1"], "only the shard asked for");
    assert_eq!(s.work_next_ready_at(Some(&[mine])).await.expect("next"), Some(clock.now().plus(TTL)), "only c1's lease");
    assert!(s.work_next_ready_at(Some(&[theirs])).await.expect("next").is_some(), "the other cluster's key is ready");
    assert!(s.work_claim(claim_in(vec![mine])).await.expect("claim").is_empty());
    assert_eq!(s.work_claim(claim_in(vec![theirs])).await.expect("claim").len(), 1);
}

/// The sequence numbers of every event after `after`.
async fn seqs(s: &dyn Store, after: u64) -> Vec<u64> {
    s.events_read(after, 10_000).await.expect("events").iter().map(|e| e.seq).collect()
}

fn expired(r: crate::Result<Vec<crate::Event>>) -> (u64, u64) {
    match r {
        Err(StoreError::CursorExpired { cursor, horizon }) => (cursor, horizon),
        other => panic!("expected CursorExpired, got {other:?}"),
    }
}

/// Retention: a trim deletes the oldest events and raises a recorded horizon. A cursor
/// older than the horizon is refused (never answered with a silent gap), one at or after
/// it reads on. The horizon survives a reopen, and a log emptied by a trim never hands
/// out a trimmed sequence number again.
pub async fn events_trimmed_behind_a_horizon(h: &dyn Harness) {
    let clock = Arc::new(ManualClock::new(T0));
    let s = h.open(config(clock.clone())).await;
    let bump = |v: usize| vec![syncset("s1", 1, &format!("v{v}"))];
    for v in 0..10 {
        s.objects_apply(bump(v)).await.expect("apply");
    }
    clock.advance(Duration::from_secs(60));
    for v in 10..15 {
        s.objects_apply(bump(v)).await.expect("apply");
    }
    let all = seqs(&*s, 0).await;
    assert_eq!(all.len(), 15);
    let hour = Some(Duration::from_secs(3600));
    let nothing = s.events_trim(EventRetention { max_events: Some(100), max_age: hour }).await.expect("trim");
    assert_eq!(nothing, EventsTrimmed { deleted: 0, horizon: 0 });
    assert_eq!(seqs(&*s, 0).await, all, "no horizon yet: cursor 0 reads everything");

    // By count: the events of the newest 12 sequence numbers stay.
    let t = s.events_trim(EventRetention { max_events: Some(12), max_age: None }).await.expect("trim by count");
    let horizon = all[14] - 12;
    assert_eq!(t, EventsTrimmed { deleted: all.iter().filter(|q| **q <= horizon).count() as u64, horizon });
    assert_eq!(expired(s.events_read(0, 10).await), (0, horizon));
    assert_eq!(expired(s.events_read(horizon - 1, 10).await), (horizon - 1, horizon));
    assert_eq!(seqs(&*s, horizon).await, all.iter().copied().filter(|q| *q > horizon).collect::<Vec<_>>());
    let again = s.events_trim(EventRetention { max_events: Some(12), max_age: None }).await.expect("trim again");
    assert_eq!(again, EventsTrimmed { deleted: 0, horizon }, "trimming is idempotent");

    // By age: the ten events of the first minute are older than 30 s, the rest are not.
    clock.advance(Duration::from_secs(10));
    let half_minute = EventRetention { max_events: None, max_age: Some(Duration::from_secs(30)) };
    let t = s.events_trim(half_minute).await.expect("trim by age");
    let horizon = all[10] - 1;
    assert_eq!(t.horizon, horizon);
    assert_eq!(seqs(&*s, horizon).await, all[10..].to_vec());
    drop(s);

    let s = h.open(config(clock.clone())).await;
    assert_eq!(expired(s.events_read(horizon - 1, 10).await), (horizon - 1, horizon), "the horizon is durable");
    assert_eq!(seqs(&*s, horizon).await, all[10..].to_vec());

    // Everything too old: the log is emptied, the horizon is the last number used.
    clock.advance(Duration::from_secs(3600));
    let t = s.events_trim(half_minute).await.expect("trim all");
    assert_eq!(t, EventsTrimmed { deleted: 5, horizon: all[14] });
    assert!(seqs(&*s, all[14]).await.is_empty());
    assert_eq!(expired(s.events_read(all[13], 10).await).1, all[14]);
    assert!(s.queue_stats().await.expect("stats").last_event_seq >= all[14], "the last sequence number is not forgotten");
    s.objects_apply(bump(99)).await.expect("apply");
    let next = seqs(&*s, all[14]).await;
    assert_eq!(next.len(), 1);
    assert!(next[0] > all[14], "a trimmed sequence number is never used again");
}

/// Event watchers are woken by every commit that appends events: object writes,
/// completions (status transitions) and deletes.
pub async fn event_watchers_woken(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let limit = Duration::from_secs(5);
    let mut events = s.events_subscribe();
    events.borrow_and_update();
    one_key(&*s).await;
    tokio::time::timeout(limit, events.changed()).await.expect("woken by an apply").expect("open");
    let item = claim(&*s, "w", 1).await.remove(0);
    events.borrow_and_update();
    complete(&*s, &item, applied(&item)).await;
    tokio::time::timeout(limit, events.changed()).await.expect("woken by a completion").expect("open");
    events.borrow_and_update();
    s.object_delete(Kind::Cluster, "default", "c1").await.expect("delete");
    tokio::time::timeout(limit, events.changed()).await.expect("woken by a delete").expect("open");
}

/// A live-state record of ConfigMap `name` of SyncSet `s1` at `rv`, drifted if `drift`.
fn live(name: &str, rv: &str, drift: Option<&str>) -> LiveRecord {
    let resource = fleetsync_model::ResourceRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: name.into(),
    };
    LiveRecord {
        resource,
        syncset: "s1".into(),
        resource_version: rv.into(),
        state: fleetsync_model::LiveState::Present,
        object: Some(serde_json::json!({"data": {"marker": rv}})),
        drift: drift.map(str::to_string),
    }
}

/// Agents' reports: each (resource, version) is stored once (a resend is a
/// duplicate, an overtaken one stale), drift shows in status and enqueues the key
/// again, and what was stored survives a reopen.
pub async fn live_state_deduplicated_and_drift_requeues(h: &dyn Harness) {
    use LiveOutcome::{Duplicate, Stale, Stored};
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let k = key("c1", "s1");
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, applied(&item)).await;
    let rec = |records| {
        let s = s.clone();
        async move { s.live_record("default", "c1", records).await.expect("record") }
    };
    let first = rec(vec![live("s1-0", "3", None), live("s1-1", "4", None)]).await;
    assert_eq!((first.outcomes, first.requeued), (vec![Stored, Stored], vec![]));
    let again = rec(vec![live("s1-0", "3", None)]).await;
    assert_eq!(again.outcomes, vec![Duplicate], "a resend is not stored twice");
    assert_eq!(phase(&*s, &k).await, Phase::Applied, "matching live state changes nothing");

    clock.advance(Duration::from_secs(1));
    let drifted = rec(vec![live("s1-0", "5", Some("data.marker"))]).await;
    assert_eq!((drifted.outcomes, drifted.requeued), (vec![Stored], vec![k.clone()]));
    let status = s.status_get(&k).await.expect("status").expect("key");
    assert_eq!(status.phase, Phase::Pending, "drift enqueues the key again");
    assert_eq!(status.drift.len(), 1);
    assert_eq!((status.drift[0].resource.name.as_str(), status.drift[0].reason.as_str()), ("s1-0", "data.marker"));
    let resent = rec(vec![live("s1-0", "5", Some("data.marker")), live("s1-0", "4", None)]).await;
    assert_eq!((resent.outcomes, resent.requeued), (vec![Duplicate, Stale], vec![]));

    let both = rec(vec![live("s1-1", "6", None), live("s1-1", "7", None), live("s1-1", "7", None)]).await;
    assert_eq!(both.outcomes, vec![Stored, Stored, Duplicate], "versions within one batch are judged in order");
    let unknown = s.live_record("default", "c1", vec![LiveRecord { syncset: "gone".into(), ..live("x", "1", Some("deleted")) }]).await;
    assert_eq!(unknown.expect("record").requeued, vec![], "no key to enqueue");
    drop(s);

    let s = h.open(config(clock)).await;
    let listed = s.live_list("default", "c1").await.expect("list");
    let summary: Vec<(&str, &str, u64, bool)> =
        listed.iter().map(|l| (l.resource.name.as_str(), l.resource_version.as_str(), l.versions, l.drift.is_some())).collect();
    assert_eq!(summary, vec![("s1-0", "5", 2, true), ("s1-1", "7", 3, false), ("x", "1", 1, true)]);
    assert!(s.live_list("default", "other").await.expect("list").is_empty());
    s.object_delete(Kind::Cluster, "default", "c1").await.expect("delete");
    assert!(s.live_list("default", "c1").await.expect("list").is_empty(), "a deleted cluster's live state goes with it");
}

/// A consumer's cursor starts unknown, moves forward with each acknowledgement, never
/// back, is kept per name, and survives a reopen.
pub async fn consumer_cursors_only_move_forward(h: &dyn Harness) {
    let clock = Arc::new(ManualClock::new(T0));
    {
        let s = h.open(config(clock.clone())).await;
        assert_eq!(s.consumer_get("audit").await.expect("get"), None, "an unknown consumer starts at 0");
        assert_eq!(s.consumer_ack("audit", 5).await.expect("ack"), 5);
        assert_eq!(s.consumer_ack("audit", 3).await.expect("late ack"), 5, "an older ack does not move it back");
        assert_eq!(s.consumer_ack("audit", 5).await.expect("repeated ack"), 5);
        assert_eq!(s.consumer_ack("audit", 9).await.expect("ack"), 9);
        assert_eq!(s.consumer_ack("mailer", 2).await.expect("other"), 2);
        assert_eq!(s.consumer_get("audit").await.expect("get"), Some(9));
    }
    let s = h.open(config(clock)).await;
    assert_eq!(s.consumer_get("audit").await.expect("get after reopen"), Some(9), "cursors are durable");
    assert_eq!(s.consumer_get("mailer").await.expect("get"), Some(2), "each name has its own cursor");
}

/// Names that cannot be stored are refused with a message saying why.
pub async fn consumer_names_are_checked(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let long = "x".repeat(crate::MAX_CONSUMER_NAME + 1);
    for bad in ["", long.as_str(), "new\nline"] {
        let get = s.consumer_get(bad).await;
        assert!(matches!(get, Err(StoreError::InvalidConsumerName { .. })), "get {bad:?}: {get:?}");
        let ack = s.consumer_ack(bad, 1).await;
        assert!(matches!(ack, Err(StoreError::InvalidConsumerName { .. })), "ack {bad:?}: {ack:?}");
    }
    let name = "x".repeat(crate::MAX_CONSUMER_NAME);
    assert_eq!(s.consumer_ack(&name, 1).await.expect("longest name"), 1);
}

fn requeue(item: &ClaimedItem, after: Duration) -> RunOutcome {
    RunOutcome::Requeue { generation: item.generation, inventory: vec![], after }
}

/// A requeue commits the run and makes the key claimable again after its delay, not
/// before, with attempts starting over.
pub async fn requeue_runs_again_after_its_delay(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let after = Duration::from_secs(10);
    let item = claim(&*s, "w", 1).await.remove(0);
    assert_eq!(complete(&*s, &item, requeue(&item, after)).await, CompleteOutcome::Committed(Phase::Pending));
    let st = s.status_get(&item.key).await.expect("status").expect("exists");
    assert_eq!((st.observed_generation, st.next_attempt_at, st.last_error), (1, Some(clock.now().plus(after)), None));
    assert_eq!(s.work_next_ready_at(None).await.expect("next"), Some(clock.now().plus(after)));
    clock.advance(after - Duration::from_millis(1));
    assert!(claim(&*s, "w", 1).await.is_empty(), "not before its delay");
    clock.advance(Duration::from_millis(1));
    let again = claim(&*s, "w", 1).await.remove(0);
    assert_eq!((again.generation, again.attempt), (1, 1), "a requeue is not a failed attempt");
    assert_eq!(complete(&*s, &again, applied(&again)).await, CompleteOutcome::Committed(Phase::Applied));
}

/// A change that lands during the run is not held back by a requeue's delay.
pub async fn requeue_yields_to_a_newer_change(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    let item = claim(&*s, "w", 1).await.remove(0);
    s.objects_apply(vec![syncset("s1", 2, "v2")]).await.expect("update during run");
    let outcome = complete(&*s, &item, requeue(&item, Duration::from_secs(3600))).await;
    assert_eq!(outcome, CompleteOutcome::Committed(Phase::Pending));
    let again = claim(&*s, "w", 1).await;
    assert_eq!(again.iter().map(|i| i.generation).collect::<Vec<_>>(), [2], "claimable at once, at the new generation");
}

/// Two clusters selected by `s1`, both keys claimed.
async fn two_keys_claimed(s: &dyn Store) -> (ClaimedItem, ClaimedItem) {
    s.objects_apply(vec![cluster("c1", &[("env", "prod")]), cluster("c2", &[("env", "prod")]), syncset("s1", 1, "v1")])
        .await
        .expect("apply");
    let mut items = claim(s, "w", 10).await;
    items.sort_by(|a, b| a.key.cmp(&b.key));
    let c2 = items.pop().expect("c2/s1");
    (items.pop().expect("c1/s1"), c2)
}

fn own(item: &ClaimedItem) -> OwnWrite {
    OwnWrite { key: item.key.clone(), fence: item.fence }
}

/// An own write is applied and logged, enqueues the other keys it affects, and leaves
/// the writer's key clean (with its attempts); a change by someone else during the
/// same run still makes it dirty.
pub async fn own_write_leaves_the_writer_clean(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let (mine, other) = two_keys_claimed(&*s).await;
    let before = seqs(&*s, 0).await.len();
    let out = s.objects_apply_own(vec![syncset("s1", 1, "annotated")], own(&mine)).await.expect("own write");
    assert_eq!((out[0].result, out[0].generation), ("updated", 2));
    let events = s.events_read(0, 100).await.expect("events");
    assert_eq!(events.len(), before + 1, "the own write is in the log");
    let last = events.last().expect("event");
    assert_eq!((last.kind.as_str(), last.action.as_str(), last.generation), ("SyncSet", "Updated", 2));
    let st = s.status_get(&mine.key).await.expect("status").expect("exists");
    assert_eq!((st.generation, st.attempts), (2, 1), "the key takes the new generation and keeps its attempts");

    assert_eq!(complete(&*s, &mine, applied(&mine)).await, CompleteOutcome::Committed(Phase::Applied), "not dirty");
    assert_eq!(complete(&*s, &other, applied(&other)).await, CompleteOutcome::Committed(Phase::Pending), "others are enqueued");
    let next = claim(&*s, "w", 10).await;
    assert_eq!(next.iter().map(|i| (i.key.clone(), i.generation)).collect::<Vec<_>>(), [(other.key.clone(), 2)]);
    complete(&*s, &next[0], applied(&next[0])).await;

    // Someone else's change during the run is a real change: the own write does not hide it.
    s.objects_apply(vec![syncset("s1", 1, "v3")]).await.expect("third party");
    let mut items = claim(&*s, "w", 10).await;
    items.sort_by(|a, b| a.key.cmp(&b.key));
    s.objects_apply(vec![syncset("s1", 1, "third party")]).await.expect("change during the run");
    s.objects_apply_own(vec![syncset("s1", 1, "annotated again")], own(&items[0])).await.expect("own write");
    assert_eq!(complete(&*s, &items[0], applied(&items[0])).await, CompleteOutcome::Committed(Phase::Pending));
}

/// An own write whose token is no longer the key's current one writes nothing.
pub async fn own_write_with_a_stale_token_is_refused(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    let (mine, _) = two_keys_claimed(&*s).await;
    clock.advance(TTL + Duration::from_millis(1));
    let taken = claim(&*s, "w2", 10).await;
    assert_eq!(taken.len(), 2, "both leases expired and were taken over");
    let before = seqs(&*s, 0).await;
    match s.objects_apply_own(vec![syncset("s1", 1, "late")], own(&mine)).await {
        Err(StoreError::LeaseLost { key, fence }) => assert_eq!((key, fence), (mine.key.clone(), mine.fence)),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert_eq!(seqs(&*s, 0).await, before, "nothing logged");
    let ss = s.syncset_get("default", "s1").await.expect("get").expect("exists");
    assert_eq!(ss.metadata.generation, 1, "nothing written");
    let unknown = OwnWrite { key: key("nope", "s1"), fence: 1 };
    assert!(matches!(s.objects_apply_own(vec![syncset("s1", 1, "x")], unknown).await, Err(StoreError::LeaseLost { .. })));
}

/// An own write that makes the writer's key unwanted (its cluster no longer selected)
/// is a real change for it: the key runs again, to remove what it applied.
pub async fn own_write_that_unselects_the_writer_dirties_it(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let (mine, _) = two_keys_claimed(&*s).await;
    s.objects_apply_own(vec![cluster("c1", &[("env", "dev")])], own(&mine)).await.expect("relabel own cluster");
    assert_eq!(complete(&*s, &mine, applied(&mine)).await, CompleteOutcome::Committed(Phase::Pending));
    let again = claim(&*s, "w", 10).await;
    assert_eq!(again.len(), 1);
    assert!(again[0].key == mine.key && !again[0].desired, "runs again, for removal");
}

/// A run's error with a NUL byte, in a batch with another key's result: a backend holds
/// it and reads it back as written (SQLite), or refuses the whole call as
/// [`StoreError::Refused`] (PostgreSQL: no text holds a NUL) and writes nothing of it —
/// never half a batch, and never as a failure worth trying again. (The runtime's
/// committer then commits the others alone and the refused one as a failed run.)
pub async fn a_result_the_backend_cannot_hold_is_refused_whole(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let (good, bad) = two_keys_claimed(&*s).await;
    let before = seqs(&*s, 0).await.len();
    let error = "boom \0 after a NUL";
    match s.work_complete(vec![applied_completion(&good), completion(&bad, failed(error))]).await {
        Ok(out) => {
            assert_eq!(out, [CompleteOutcome::Committed(Phase::Applied), CompleteOutcome::Committed(Phase::Failed)]);
            let status = s.status_get(&bad.key).await.expect("status").expect("key");
            assert_eq!(status.last_error.as_deref(), Some(error), "held: read back as written");
        }
        Err(e @ StoreError::Refused { .. }) => {
            assert!(!e.is_transient(), "{e}");
            for item in [&good, &bad] {
                assert_eq!(phase(&*s, &item.key).await, Phase::Applying, "nothing of the batch is written: {}", item.key);
            }
            assert_eq!(seqs(&*s, 0).await.len(), before, "no event appended");
            assert_eq!(complete(&*s, &good, applied(&good)).await, CompleteOutcome::Committed(Phase::Applied), "alone, it commits");
        }
        Err(e) => panic!("neither held nor refused: {e}"),
    }
}

fn config_map(name: &str) -> ResourceRef {
    ResourceRef { api_version: "v1".into(), kind: "ConfigMap".into(), namespace: Some("apps".into()), name: name.into() }
}

/// An inventory recorded under a lease before a run applies anything stays recorded
/// when the run fails or its lease is lost (the worker died), is refused with a stale
/// token, and is replaced by what a successful run reports.
pub async fn inventory_recorded_ahead_outlives_failed_and_lost_runs(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let (a, b, c) = (config_map("a"), config_map("b"), config_map("c"));
    let first = claim(&*s, "w1", 1).await.remove(0);
    assert!(first.inventory.is_empty());
    s.work_inventory_record(&first.key, first.fence, &[a.clone(), b.clone()]).await.expect("record under the lease");
    assert_eq!(complete(&*s, &first, failed("refused")).await, CompleteOutcome::Committed(Phase::Failed));
    match s.work_inventory_record(&first.key, first.fence, std::slice::from_ref(&c)).await {
        Err(StoreError::LeaseLost { fence, .. }) => assert_eq!(fence, first.fence),
        other => panic!("a finished run's token records nothing, got {other:?}"),
    }

    clock.advance(Duration::from_secs(60));
    let second = claim(&*s, "w1", 1).await.remove(0);
    assert_eq!(second.inventory, vec![a.clone(), b.clone()], "the failed run's inventory was kept");
    s.work_inventory_record(&second.key, second.fence, &[a.clone(), b.clone(), c.clone()]).await.expect("record");
    // The worker dies: its lease runs out and another takes the key over.
    clock.advance(TTL + Duration::from_secs(1));
    let third = claim(&*s, "w2", 1).await.remove(0);
    assert!(third.fence > second.fence);
    assert_eq!(third.inventory, vec![a.clone(), b.clone(), c.clone()], "the lost run's inventory was kept");
    assert!(s.work_inventory_record(&second.key, second.fence, &[]).await.is_err(), "the old token is refused");

    let done = RunOutcome::Applied { generation: third.generation, inventory: vec![b.clone()] };
    assert_eq!(complete(&*s, &third, done).await, CompleteOutcome::Committed(Phase::Applied));
    s.work_resync().await.expect("resync");
    let fourth = claim(&*s, "w2", 1).await.remove(0);
    assert_eq!(fourth.inventory, vec![b], "a successful run's inventory replaces the recorded one");
}
