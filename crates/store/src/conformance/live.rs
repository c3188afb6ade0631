//! The live state's checks: deduplicated records, and drift that requeues its key.

use super::*;

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
    let shown: Vec<(&str, &str)> = status.unready.iter().map(|u| (u.resource.name.as_str(), u.reason.as_str())).collect();
    assert_eq!(shown, [("s1-1", waiting)], "status shows what is not ready");
    let unknown = s.live_record("default", "c1", vec![LiveRecord { syncset: "gone".into(), ..live("x", "1", Some("deleted")) }]).await;
    assert_eq!(unknown.expect("record").requeued, vec![], "no key to enqueue");
    drop(s);

    let s = h.open(config(clock)).await;
    let listed = s.live_list("default", "c1").await.expect("list");
    let summary: Vec<(&str, &str, u64, bool)> =
        listed.iter().map(|l| (l.resource.name.as_str(), l.resource_version.as_str(), l.versions, l.drift.is_some())).collect();
    assert_eq!(summary, vec![("s1-0", "5", 2, true), ("s1-1", "8", 4, false), ("x", "1", 1, true)]);
    assert!(s.live_list("default", "other").await.expect("list").is_empty());
    s.object_delete(Kind::Cluster, "default", "c1").await.expect("delete");
    assert!(s.live_list("default", "c1").await.expect("list").is_empty(), "a deleted cluster's live state goes with it");
}
