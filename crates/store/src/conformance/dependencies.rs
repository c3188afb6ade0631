//! What the store keeps of templates and order between SyncSets: a `dependsOn` cycle is
//! refused at apply with nothing written; a key that waits for a dependency is
//! `Pending` with its reason, keeps what it applied, and is claimable again after its
//! delay; a key's status carries the hash of the rendering it last applied.

use super::*;
use fleetsync_model::Dependency;

fn depending(name: &str, on: &[&str]) -> Document {
    let Document::SyncSet(mut s) = syncset(name, 1, "v1") else { unreachable!("a SyncSet") };
    s.spec.depends_on = on.iter().map(|n| Dependency { name: n.to_string() }).collect();
    Document::SyncSet(s)
}

/// A SyncSet whose `dependsOn` leads back to it is refused, the cycle named, and
/// nothing of its apply is written: neither the documents before it nor its events.
pub async fn dependency_cycles_are_refused_whole(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let chain = vec![cluster("c1", &[("env", "prod")]), depending("app", &[]), depending("db", &["net", "app"])];
    s.objects_apply(chain).await.expect("no cycle yet: net does not exist, app depends on nothing");
    let head = s.events_head().await.expect("head");
    let closing = vec![depending("cache", &[]), depending("net", &["app"]), depending("app", &["db"])];
    let e = s.objects_apply(closing).await.expect_err("app → db closes a cycle");
    match &e {
        StoreError::DependencyCycle { name, cycle, .. } => {
            // net, written before app in this apply, is read as written.
            assert_eq!((name.as_str(), cycle.join(" → ")), ("app", "app → db → net → app".to_string()), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("spec.dependsOn makes a cycle: app → db → net → app"), "{e}");
    assert!(s.syncset_get("default", "cache").await.expect("read").is_none(), "nothing of the apply is written");
    assert!(s.syncset_get("default", "net").await.expect("read").is_none());
    let app = s.syncset_get("default", "app").await.expect("read").expect("kept");
    assert!(app.spec.depends_on.is_empty() && app.metadata.generation == 1, "app is as it was");
    assert_eq!(s.events_head().await.expect("head"), head, "no event");
    let within = s.objects_apply(vec![depending("x", &["y"]), depending("y", &["x"])]).await;
    assert!(matches!(within, Err(StoreError::DependencyCycle { .. })), "a cycle within one apply: {within:?}");
    assert!(s.syncset_get("default", "x").await.expect("read").is_none());
}

/// A key that waits is `Pending` with what it waits for, keeps the generation its last
/// good run applied, is not claimable before its delay, and starts its attempts over.
pub async fn a_waiting_key_is_pending_with_its_reason(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, applied(&item)).await;
    s.objects_apply(vec![syncset("s1", 2, "v2")]).await.expect("a new generation");
    let item = claim(&*s, "w", 1).await.remove(0);
    // The failed run reports what it did per resource; the wait reports nothing.
    let result = fleetsync_model::ResourceResult {
        resource: fleetsync_model::ResourceRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("apps".into()),
            name: "s1-0".into(),
        },
        outcome: fleetsync_model::ResourceOutcome::Failed,
        error: Some("boom".into()),
        duration_ms: 3,
    };
    let failed_run = Completion { resources: vec![result], ..completion(&item, failed("boom")) };
    s.work_complete(vec![failed_run]).await.expect("complete");
    clock.advance(Duration::from_secs(60));
    let item = claim(&*s, "w", 1).await.remove(0);
    assert_eq!(item.attempt, 2);
    let before = s.status_get(&item.key).await.expect("status").expect("exists");
    let after = Duration::from_secs(2);
    let reason = "waiting for SyncSet db: Applying, generation 1 not applied yet";
    let waiting = RunOutcome::Waiting { reason: reason.into(), after };
    assert_eq!(complete(&*s, &item, waiting).await, CompleteOutcome::Committed(Phase::Pending));
    let st = s.status_get(&item.key).await.expect("status").expect("exists");
    assert_eq!((st.phase, st.last_error.as_deref(), st.attempts), (Phase::Pending, Some(reason), 0));
    assert_eq!((st.generation, st.observed_generation), (2, 1), "what the last good run applied is kept");
    assert_eq!(st.resources, before.resources, "and the per-resource results of the last run");
    assert_eq!(st.resources.len(), 1);
    assert_eq!(st.next_attempt_at, Some(clock.now().plus(after)));
    assert!(claim(&*s, "w", 1).await.is_empty(), "not before its delay");
    clock.advance(after);
    let again = claim(&*s, "w", 1).await.remove(0);
    assert_eq!((again.generation, again.attempt), (2, 1), "waiting is not a failed attempt");
}

/// A key's status carries the hash of the rendering its last good run applied: kept
/// by a failed run or a wait, replaced by the next good run (none for a SyncSet that
/// is not templated).
pub async fn the_rendered_hash_goes_with_what_was_applied(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    one_key(&*s).await;
    let item = claim(&*s, "w", 1).await.remove(0);
    let rendered = RunOutcome::Applied { generation: 1, inventory: vec![], rendered: Some("sha256:aa".into()) };
    complete(&*s, &item, rendered).await;
    assert_eq!(rendered_hash(&*s, &item.key).await.as_deref(), Some("sha256:aa"));
    s.objects_apply(vec![syncset("s1", 2, "v2")]).await.expect("a new generation");
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, failed("boom")).await;
    assert_eq!(rendered_hash(&*s, &item.key).await.as_deref(), Some("sha256:aa"), "a failed run applied nothing new");
    clock.advance(Duration::from_secs(60));
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, applied(&item)).await;
    assert_eq!(rendered_hash(&*s, &item.key).await, None, "the last good run rendered nothing");
}

async fn rendered_hash(s: &dyn Store, key: &WorkKey) -> Option<String> {
    s.status_get(key).await.expect("status").expect("exists").rendered_hash
}
