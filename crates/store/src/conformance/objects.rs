//! The object store's checks: idempotent applies, relabelling, Secrets, own writes.

use super::*;

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

/// A relabel that keeps a cluster selected runs only the templated SyncSet's key whose
/// rendering for the cluster changes: not a plain SyncSet's, not a templated one whose
/// templates do not read what changed.
pub async fn a_relabel_runs_only_the_keys_whose_rendering_changes(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let Document::SyncSet(mut by_region) = syncset("by-region", 1, "{{ cluster.labels.region }}") else {
        unreachable!("a SyncSet")
    };
    by_region.spec.templated = true;
    let fleet = vec![
        cluster("c1", &[("env", "prod"), ("region", "eu")]),
        cluster("c2", &[("env", "prod"), ("region", "us")]),
        syncset("plain", 1, "v1"),
        Document::SyncSet(by_region),
    ];
    s.objects_apply(fleet).await.expect("apply");
    for item in claim(&*s, "w", 10).await {
        complete(&*s, &item, applied(&item)).await;
    }
    let relabel = vec![
        cluster("c1", &[("env", "prod"), ("region", "eu"), ("team", "blue")]),
        cluster("c2", &[("env", "prod"), ("region", "eu")]),
    ];
    let out = s.objects_apply(relabel).await.expect("relabel");
    assert_eq!(
        out.iter().map(|o| (o.generation, o.enqueued)).collect::<Vec<_>>(),
        [(2, 0), (2, 1)],
        "c1's new label is read by no template; c2's region is"
    );
    let items = claim(&*s, "w", 10).await;
    let keys: Vec<(&str, &str)> = items.iter().map(|i| (i.key.cluster.as_str(), i.key.syncset.as_str())).collect();
    assert_eq!(keys, [("c2", "by-region")]);
}

/// A SyncSet whose selector has `matchExpressions` gets keys on exactly the clusters
/// they select, and a relabel adds or removes that cluster's key alone.
pub async fn set_based_selectors_pick_and_follow_clusters(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let Document::SyncSet(mut web) = syncset("web", 1, "v1") else { unreachable!("a SyncSet") };
    let selector: fleetsync_model::LabelSelector = serde_json::from_value(serde_json::json!({"matchExpressions": [
        {"key": "env", "operator": "In", "values": ["prod", "stage"]},
        {"key": "canary", "operator": "DoesNotExist"},
    ]}))
    .expect("a selector");
    web.spec.cluster_selector = Some(selector);
    let fleet = vec![
        cluster("c1", &[("env", "prod")]),
        cluster("c2", &[("env", "stage")]),
        cluster("c3", &[("env", "dev")]),
        cluster("c4", &[("env", "prod"), ("canary", "true")]),
        Document::SyncSet(web),
    ];
    s.objects_apply(fleet).await.expect("apply");
    let wanted = |items: &[ClaimedItem]| {
        let mut keys: Vec<(String, bool)> = items.iter().map(|i| (i.key.cluster.clone(), i.desired)).collect();
        keys.sort();
        keys
    };
    let items = claim(&*s, "w", 10).await;
    assert_eq!(wanted(&items), [("c1".to_string(), true), ("c2".to_string(), true)]);
    for item in &items {
        complete(&*s, item, applied(item)).await;
    }
    let out =
        s.objects_apply(vec![cluster("c3", &[("env", "stage")]), cluster("c1", &[("env", "prod"), ("canary", "no")])]);
    let out = out.await.expect("relabel");
    assert_eq!(out.iter().map(|o| o.enqueued).collect::<Vec<_>>(), [1, 1]);
    let items = claim(&*s, "w", 10).await;
    assert_eq!(wanted(&items), [("c1".to_string(), false), ("c3".to_string(), true)], "c1 left, c3 joined");
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
    let out = s
        .objects_apply(vec![secret("t1"), by_secret, cluster("c2", &[("env", "prod")]), syncset("s1", 1, "v1")])
        .await
        .expect("apply");
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
    assert_eq!(
        complete(&*s, &other, applied(&other)).await,
        CompleteOutcome::Committed(Phase::Pending),
        "others are enqueued"
    );
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
    let unknown = OwnWrite { key: key("nope", "s1"), fence: crate::Fence::new(1) };
    assert!(matches!(
        s.objects_apply_own(vec![syncset("s1", 1, "x")], unknown).await,
        Err(StoreError::LeaseLost { .. })
    ));
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
