//! The live state's checks: deduplicated records, drift that requeues its key, and
//! records that end with what the key stops applying.

use super::*;

/// ConfigMap `name` in namespace `apps`, as [`syncset`] writes them.
fn cm(name: &str) -> ResourceRef {
    ResourceRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: name.into(),
    }
}

/// A live-state record of ConfigMap `name` of SyncSet `s1` at `rv`, drifted if `drift`.
fn live(name: &str, rv: &str, drift: Option<&str>) -> LiveRecord {
    LiveRecord {
        resource: cm(name),
        syncset: "s1".into(),
        resource_version: rv.into(),
        state: fleetsync_model::LiveState::Present,
        object: Some(serde_json::json!({"data": {"marker": rv}})),
        drift: drift.map(str::to_string),
        unready: None,
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
    let waiting = "Deployment: 0 of 1 replicas updated";
    let unready = rec(vec![LiveRecord { unready: Some(waiting.into()), ..live("s1-1", "8", None) }]).await;
    assert_eq!(unready.requeued, vec![], "an object not ready yet is no drift: nothing to apply again");
    let status = s.status_get(&k).await.expect("status").expect("key");
    let shown: Vec<(&str, &str)> =
        status.unready.iter().map(|u| (u.resource.name.as_str(), u.reason.as_str())).collect();
    assert_eq!(shown, [("s1-1", waiting)], "status shows what is not ready");
    let unknown = s
        .live_record("default", "c1", vec![LiveRecord { syncset: "gone".into(), ..live("x", "1", Some("deleted")) }])
        .await;
    assert_eq!(unknown.expect("record").requeued, vec![], "no key to enqueue");
    drop(s);

    let s = h.open(config(clock)).await;
    let listed = s.live_list("default", "c1").await.expect("list");
    let summary: Vec<(&str, &str, u64, bool)> = listed
        .iter()
        .map(|l| (l.resource.name.as_str(), l.resource_version.as_str(), l.versions, l.drift.is_some()))
        .collect();
    assert_eq!(summary, vec![("s1-0", "5", 2, true), ("s1-1", "8", 4, false), ("x", "1", 1, true)]);
    assert!(s.live_list("default", "other").await.expect("list").is_empty());
    s.object_delete(Kind::Cluster, "default", "c1").await.expect("delete");
    assert!(
        s.live_list("default", "c1").await.expect("list").is_empty(),
        "a deleted cluster's live state goes with it"
    );
}

/// A live record lasts as long as fleetsync applies its resource through the key,
/// whether or not an agent reports the end: a run that applies a revision without the
/// resource ends its record, a failed run ends none, and the key's removal (its
/// SyncSet no longer selects the cluster) ends the rest. Other keys' records stay.
pub async fn live_records_end_with_what_the_key_stops_applying(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let names = || {
        let s = s.clone();
        async move {
            let listed = s.live_list("default", "c1").await.expect("list");
            listed.into_iter().map(|l| (l.syncset, l.resource.name)).collect::<Vec<_>>()
        }
    };
    let pairs = |p: &[(&str, &str)]| p.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
    let run = |generation, names: &[&str]| RunOutcome::Applied {
        generation,
        inventory: names.iter().map(|n| cm(n)).collect(),
        rendered: None,
    };
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, run(1, &["s1-0", "s1-1"])).await;
    let other = LiveRecord { syncset: "s2".into(), ..live("s2-0", "1", None) };
    s.live_record("default", "c1", vec![live("s1-0", "3", None), live("s1-1", "4", None), other])
        .await
        .expect("record");
    assert_eq!(names().await, pairs(&[("s1", "s1-0"), ("s1", "s1-1"), ("s2", "s2-0")]));

    s.objects_apply(vec![syncset("s1", 1, "v1")]).await.expect("s1 drops s1-1");
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, failed("boom")).await;
    assert_eq!(names().await.len(), 3, "a failed run ends no record: the next run decides");
    clock.advance(Duration::from_secs(5));
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, run(2, &["s1-0"])).await;
    assert_eq!(
        names().await,
        pairs(&[("s1", "s1-0"), ("s2", "s2-0")]),
        "the record of what the run no longer applies ends with it"
    );

    s.objects_apply(vec![cluster("c1", &[("env", "dev")])]).await.expect("s1 no longer selects c1");
    let item = claim(&*s, "w", 1).await.remove(0);
    assert!(!item.desired);
    assert_eq!(complete(&*s, &item, RunOutcome::Removed).await, CompleteOutcome::Removed);
    assert_eq!(names().await, pairs(&[("s2", "s2-0")]), "the key's removal ends its records, and only its");
}
