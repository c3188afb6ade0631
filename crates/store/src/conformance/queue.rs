//! The work queue's checks: coalescing, dirty keys, exclusive leases, stale tokens,
//! take-over after expiry, backoff, parking and redrive, durability, removal, release,
//! requeue, per-cluster limits, the inventory, and results the backend refuses.

use super::*;

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
    let lost =
        s.lease_renew(RenewParams { leases: vec![(old.key.clone(), old.fence)], lease_ttl: TTL }).await.expect("renew");
    assert_eq!(lost, vec![old.key.clone()]);
    let st = s.status_get(&new.key).await.expect("status").expect("exists");
    assert_eq!(
        (st.phase, st.observed_generation, st.last_error),
        (Phase::Applying, 0, None),
        "stale writes changed nothing"
    );
    assert_eq!(complete(&*s, &new, applied(&new)).await, CompleteOutcome::Committed(Phase::Applied));
}

/// A held lease blocks others until it expires; renewal extends it; then it is taken over.
pub async fn lease_expiry_and_takeover(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let first = claim(&*s, "w1", 1).await.remove(0);
    assert!(!first.taken_over, "a ready key is claimed, not taken over");
    clock.advance(TTL - Duration::from_secs(1));
    assert!(claim(&*s, "w2", 1).await.is_empty(), "lease still valid");
    let lost = s
        .lease_renew(RenewParams { leases: vec![(first.key.clone(), first.fence)], lease_ttl: TTL })
        .await
        .expect("renew");
    assert!(lost.is_empty());
    clock.advance(Duration::from_secs(2));
    assert!(claim(&*s, "w2", 1).await.is_empty(), "renewed lease still valid past the first expiry");
    clock.advance(TTL);
    let taken = claim(&*s, "w2", 1).await;
    assert_eq!(taken.len(), 1, "expired lease is taken over");
    assert_eq!(taken[0].attempt, 2);
    assert!(taken[0].fence > first.fence);
    assert!(taken[0].taken_over, "the claim says it took an expired lease");
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
        s.objects_apply(vec![
            cluster("c1", &[("env", "prod")]),
            cluster("c2", &[("env", "prod")]),
            syncset("s1", 3, "v1"),
        ])
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
    let inventory = vec![fleetsync_model::ResourceRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: None,
        name: "x".into(),
    }];
    for item in claim(&*s, "w", 10).await {
        let outcome = RunOutcome::Applied { generation: 1, inventory: inventory.clone(), rendered: None };
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

/// A per-cluster limit holds back a crowded cluster's ready keys, counting what the
/// claimer already has in flight, and they stay ready, in order, for later.
pub async fn cluster_limit_holds_back(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let docs = vec![
        cluster("c1", &[("env", "prod")]),
        cluster("c2", &[("env", "prod")]),
        syncset("s1", 1, "v"),
        syncset("s2", 1, "v"),
        syncset("s3", 1, "v"),
    ];
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
    let limited = ClaimParams {
        cluster_limit: Some(crate::ClusterLimit { max: 2, in_flight: HashMap::new() }),
        ..claim_params("w", 10)
    };
    let got = s.work_claim(limited).await.expect("claim");
    let keys: Vec<_> = got.iter().map(|i| (i.key.cluster.as_str(), i.key.syncset.as_str())).collect();
    assert_eq!(keys, [("c1", "s000"), ("c1", "s001"), ("c2", "s000"), ("c2", "s001")]);
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
                assert_eq!(
                    phase(&*s, &item.key).await,
                    Phase::Applying,
                    "nothing of the batch is written: {}",
                    item.key
                );
            }
            assert_eq!(seqs(&*s, 0).await.len(), before, "no event appended");
            assert_eq!(
                complete(&*s, &good, applied(&good)).await,
                CompleteOutcome::Committed(Phase::Applied),
                "alone, it commits"
            );
        }
        Err(e) => panic!("neither held nor refused: {e}"),
    }
}

fn config_map(name: &str) -> ResourceRef {
    ResourceRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: name.into(),
    }
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

    let done = RunOutcome::Applied { generation: third.generation, inventory: vec![b.clone()], rendered: None };
    assert_eq!(complete(&*s, &third, done).await, CompleteOutcome::Committed(Phase::Applied));
    s.work_resync().await.expect("resync");
    let fourth = claim(&*s, "w2", 1).await.remove(0);
    assert_eq!(fourth.inventory, vec![b], "a successful run's inventory replaces the recorded one");
}

/// A run carries when the oldest change it applies was asked for: coalesced changes
/// keep the first's time, a failed attempt and a take-over keep it, a change during a
/// run starts the next run's, a resync carries none and a retry its own.
pub async fn change_times_follow_the_oldest_unclaimed_change(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    let asked = clock.now();
    one_key(&*s).await;
    clock.advance(Duration::from_secs(1));
    s.objects_apply(vec![syncset("s1", 2, "v2")]).await.expect("a second change, coalesced");
    clock.advance(Duration::from_secs(1));
    let first = claim(&*s, "w1", 1).await.remove(0);
    assert_eq!(first.changed_at, Some(asked), "coalesced changes keep the oldest's time");

    assert_eq!(complete(&*s, &first, failed("boom")).await, CompleteOutcome::Committed(Phase::Failed));
    clock.advance(Duration::from_secs(10));
    let again = claim(&*s, "w1", 1).await.remove(0);
    assert_eq!(again.changed_at, Some(asked), "another attempt at the same change");
    clock.advance(TTL + Duration::from_millis(1));
    let taken = claim(&*s, "w2", 1).await.remove(0);
    assert!(taken.taken_over);
    assert_eq!(taken.changed_at, Some(asked), "a take-over runs the same change");

    let during = clock.now();
    s.objects_apply(vec![syncset("s1", 2, "v3")]).await.expect("a change during the run");
    clock.advance(Duration::from_secs(1));
    assert_eq!(complete(&*s, &taken, applied(&taken)).await, CompleteOutcome::Committed(Phase::Pending));
    let next = claim(&*s, "w2", 1).await.remove(0);
    assert_eq!(next.changed_at, Some(during), "the run after carries the change made during the last");
    assert_eq!(complete(&*s, &next, applied(&next)).await, CompleteOutcome::Committed(Phase::Applied));

    clock.advance(Duration::from_secs(1));
    assert_eq!(s.work_resync().await.expect("resync"), 1);
    let resynced = claim(&*s, "w1", 1).await.remove(0);
    assert_eq!(resynced.changed_at, None, "a resync is no change");
    assert_eq!(complete(&*s, &resynced, applied(&resynced)).await, CompleteOutcome::Committed(Phase::Applied));

    clock.advance(Duration::from_secs(1));
    let retried_at = clock.now();
    s.work_retry(&resynced.key).await.expect("retry");
    let retried = claim(&*s, "w1", 1).await.remove(0);
    assert_eq!(retried.changed_at, Some(retried_at), "a retry is asked for, like a change");
}
