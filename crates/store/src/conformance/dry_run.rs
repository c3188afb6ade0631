//! Dry runs: an apply run whole in its transaction, then rolled back.

use super::*;
use crate::{Commit, QueueStats, Quotas};
use fleetsync_model::{Event, KeyStatus, Secret, SecretValue, StatusSummary};

/// What readers of the store see: objects, the event log, the keys and their counts.
#[derive(Debug, PartialEq)]
struct Seen {
    clusters: Vec<Cluster>,
    syncsets: Vec<SyncSet>,
    secrets: Vec<Secret>,
    events: Vec<Event>,
    keys: Vec<KeyStatus>,
    summary: StatusSummary,
    stats: QueueStats,
}

async fn seen(s: &dyn Store) -> Seen {
    Seen {
        clusters: s.cluster_list(None).await.expect("clusters"),
        syncsets: s.syncset_list(None).await.expect("syncsets"),
        secrets: s.secret_list(None).await.expect("secrets"),
        events: s.events_read(0, 10_000).await.expect("events"),
        keys: s.status_list(&StatusFilter::default()).await.expect("status"),
        summary: s.status_summary("default", None).await.expect("summary"),
        stats: s.queue_stats().await.expect("stats"),
    }
}

fn secret(name: &str, value: &str) -> Document {
    let string_data = [("token".to_string(), SecretValue::new(value))].into();
    Document::Secret(Secret { metadata: ObjectMeta::new(name), string_data })
}

/// A dry run answers what the same apply then answers — unchanged, updated and created
/// objects, their generations and the keys they enqueue — and leaves the objects, the
/// event log and the work queue as they were; a quota refuses a dry run as it refuses
/// the apply.
pub async fn dry_run_answers_as_the_apply_and_writes_nothing(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    let item = claim(&*s, "w", 1).await.remove(0);
    complete(&*s, &item, applied(&item)).await;
    let before = seen(&*s).await;

    let docs = vec![
        cluster("c1", &[("env", "prod")]),
        syncset("s1", 2, "v2"),
        cluster("c2", &[("env", "prod")]),
        secret("kc", "t1"),
    ];
    let dry = s.objects_apply_within(docs.clone(), Some("alice"), Quotas::NONE, Commit::No).await.expect("dry run");
    let said: Vec<_> = dry.iter().map(|o| (o.name.as_str(), o.result, o.generation)).collect();
    assert_eq!(
        said,
        [("c1", "unchanged", 1), ("s1", "updated", 2), ("c2", "created", 1), ("kc", "created", 1)],
        "{dry:?}"
    );
    assert!(dry[1].enqueued > 0 && dry[2].enqueued > 0, "the changes would enqueue keys: {dry:?}");
    assert_eq!(seen(&*s).await, before, "a dry run writes, logs and enqueues nothing");
    assert!(claim(&*s, "w", 10).await.is_empty(), "no work to claim after a dry run");

    let real = s.objects_apply_within(docs.clone(), Some("alice"), Quotas::NONE, Commit::Yes).await.expect("apply");
    assert_eq!(real, dry, "the apply answers as its dry run did");
    let after = seen(&*s).await;
    assert_eq!(after.events.len(), before.events.len() + 3, "the apply logs its three changes");
    assert_eq!(s.syncset_get("default", "s1").await.expect("get").expect("s1").metadata.generation, 2);
    let again = s.objects_apply_within(docs, Some("alice"), Quotas::NONE, Commit::No).await.expect("dry run again");
    assert!(again.iter().all(|o| o.result == "unchanged" && o.enqueued == 0), "{again:?}");

    let quotas = Quotas { default: "clusters=2".parse().expect("quota"), tenants: Default::default() };
    let third = || vec![cluster("c3", &[])];
    let dry = s.objects_apply_within(third(), None, &quotas, Commit::No).await.expect_err("over the quota");
    let real = s.objects_apply_within(third(), None, &quotas, Commit::Yes).await.expect_err("over the quota");
    assert!(matches!(dry, StoreError::QuotaExceeded(_)), "{dry}");
    assert_eq!(dry.to_string(), real.to_string());
    assert_eq!(seen(&*s).await, after, "refused, dry or not: nothing written");
}
