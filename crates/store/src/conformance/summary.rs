//! A SyncSet's status summary, the store-wide counts by phase (and per SyncSet), and a
//! tenant's clusters
//! by condition equal a full count
//! of the keys' statuses after random sequences of changes, claims, successes,
//! failures (up to parking), retries, deletions of clusters and SyncSets, and
//! heartbeats (which fold PostgreSQL's count deltas).

use super::*;
use crate::summary::SUMMARY_FAILURES;
use fleetsync_model::cluster_list::{ClusterRow, Condition};
use fleetsync_model::{ClusterConditions, ClusterStatus, KeyFailure, KeyStatus, StatusSummary};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

/// The summary, counted the long way from every key's status; a tenant's (`tenant`)
/// names each failure's SyncSet.
fn counted(keys: &[KeyStatus], tenant: bool) -> StatusSummary {
    let mut want = StatusSummary { phases: Phase::ALL.iter().map(|p| (*p, 0)).collect(), ..StatusSummary::default() };
    for k in keys {
        want.total += 1;
        *want.phases.entry(k.phase).or_default() += 1;
        want.at_generation += u64::from(k.observed_generation == k.generation);
    }
    let mut failed: Vec<&KeyStatus> =
        keys.iter().filter(|k| matches!(k.phase, Phase::Failed | Phase::Parked)).collect();
    failed.sort_by(|a, b| (&a.key.syncset, &a.key.cluster).cmp(&(&b.key.syncset, &b.key.cluster)));
    want.failures = failed
        .into_iter()
        .take(SUMMARY_FAILURES)
        .map(|k| KeyFailure {
            syncset: tenant.then(|| k.key.syncset.clone()),
            cluster: k.key.cluster.clone(),
            phase: k.phase,
            attempts: k.attempts,
            last_error: k.last_error.clone(),
        })
        .collect();
    want
}

/// Keys waiting to be applied now: leased, or ready with no backoff to wait out.
fn due(keys: &[KeyStatus]) -> bool {
    keys.iter().any(|k| {
        k.phase == Phase::Applying || (matches!(k.phase, Phase::Pending | Phase::Failed) && k.next_attempt_at.is_none())
    })
}

pub async fn summaries_equal_a_full_count(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    let sets = ["s0", "s1", "s2"];
    for seed in 0..3u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        for step in 0..40 {
            match rng.random_range(0..10) {
                0 | 1 => {
                    let env = if rng.random_bool(0.8) { "prod" } else { "dev" };
                    let c = cluster(&format!("c{:02}", rng.random_range(0..12)), &[("env", env)]);
                    s.objects_apply(vec![c]).await.expect("apply a cluster");
                }
                2 => {
                    let set = syncset(sets[rng.random_range(0..sets.len())], 1, &format!("{seed}-{step}"));
                    s.objects_apply(vec![set]).await.expect("apply a SyncSet");
                }
                3 | 4 => {
                    let fail = rng.random_bool(0.5);
                    let n = rng.random_range(1..6);
                    for item in claim(s.as_ref(), "w", n).await {
                        let outcome = if fail { failed(&format!("refused at step {step}")) } else { applied(&item) };
                        complete(s.as_ref(), &item, outcome).await;
                    }
                }
                5 => clock.advance(Duration::from_secs(rng.random_range(1..10))),
                6 => {
                    let beat = crate::MemberBeat {
                        id: "w".into(),
                        ttl: Duration::from_secs(10),
                        in_flight: 0,
                        max_in_flight: 1,
                    };
                    s.member_heartbeat(beat).await.expect("heartbeat");
                }
                7 => {
                    let _ = s.object_delete(Kind::SyncSet, "default", sets[rng.random_range(0..sets.len())]).await;
                }
                8 => {
                    let keys = s.status_list(&StatusFilter::default()).await.expect("status");
                    if let Some(k) = keys.iter().find(|k| k.phase == Phase::Parked) {
                        s.work_retry(&k.key).await.expect("retry a parked key");
                    }
                }
                _ => {
                    let name = format!("c{:02}", rng.random_range(0..12));
                    // Absent clusters are fine: nothing to delete.
                    let _ = s.object_delete(Kind::Cluster, "default", &name).await;
                }
            }
            for set in sets {
                let filter = StatusFilter {
                    tenant: Some("default".into()),
                    syncset: Some(set.into()),
                    ..StatusFilter::default()
                };
                let keys = s.status_list(&filter).await.expect("status");
                let mut summary = s.status_summary("default", Some(set)).await.expect("summary");
                let since = summary.oldest_pending_since.take();
                assert_eq!(summary, counted(&keys, false), "seed {seed}, step {step}, SyncSet {set}");
                assert_eq!(
                    since.is_some(),
                    due(&keys),
                    "a wait exactly when a key is due: seed {seed}, step {step}, {set}"
                );
                assert!(
                    since.is_none_or(|t| t <= clock.now()),
                    "seed {seed}, step {step}: due at {since:?}, in the future"
                );
            }
            let all = s.status_list(&StatusFilter::default()).await.expect("every key");
            let mut tenant = s.status_summary("default", None).await.expect("the tenant's summary");
            let since = tenant.oldest_pending_since.take();
            assert_eq!(tenant, counted(&all, true), "seed {seed}, step {step}, the tenant");
            assert_eq!(since.is_some(), due(&all), "seed {seed}, step {step}, the tenant's wait");
            let stats = s.queue_stats().await.expect("stats");
            assert_eq!(stats.by_phase, counted(&all, false).phases, "seed {seed}, step {step}");
            let mut per_syncset: BTreeMap<(String, String), Vec<KeyStatus>> = BTreeMap::new();
            for k in &all {
                per_syncset.entry((k.key.tenant.clone(), k.key.syncset.clone())).or_default().push(k.clone());
            }
            let want: BTreeMap<_, _> =
                per_syncset.into_iter().map(|(at, keys)| (at, counted(&keys, false).phases)).collect();
            assert_eq!(stats.by_syncset, want, "seed {seed}, step {step}, per SyncSet");
            // No cluster is stale yet: a stale-after window longer than the test.
            let conditions =
                s.cluster_conditions("default", Duration::from_secs(86_400)).await.expect("clusters by condition");
            assert_eq!(conditions, rolled_up(&all), "seed {seed}, step {step}, the clusters");
            let rows = s.cluster_rows("default").await.expect("the clusters with their counts");
            let cutoff = clock.now().minus(Duration::from_secs(86_400));
            assert_eq!(by_condition(&rows, cutoff), conditions, "seed {seed}, step {step}, the cluster rows");
        }
    }
    let summary = s.status_summary("default", Some("no-such-set")).await.expect("summary of nothing");
    assert_eq!((summary.total, summary.failures.len()), (0, 0));
    let summary = s.status_summary("no-such-tenant", None).await.expect("summary of no tenant");
    assert_eq!((summary.total, summary.failures.len()), (0, 0));
    let none = s.cluster_conditions("no-such-tenant", Duration::ZERO).await.expect("no clusters");
    assert_eq!(none, ClusterConditions::default());
}

/// The clusters of `rows` counted as [`Store::cluster_conditions`] counts them, by the
/// rule of [`fleetsync_model::cluster_list`], stale before `cutoff`.
fn by_condition(rows: &[ClusterRow], cutoff: Timestamp) -> ClusterConditions {
    let count = |c: Condition| rows.iter().filter(|r| r.condition() == c).count() as u64;
    ClusterConditions {
        ready: count(Condition::Ready),
        progressing: count(Condition::Progressing),
        degraded: count(Condition::Degraded),
        stale: rows.iter().filter(|r| r.stale(cutoff)).count() as u64,
    }
}

/// The stale clusters for each stale-after window, before and after a heartbeat (which
/// folds PostgreSQL's deltas), by the count and by the cluster rows.
async fn stale(s: &dyn Store, clock: &ManualClock, windows: &[(u64, u64)], when: &str) {
    for (secs, want) in windows {
        for folded in [false, true] {
            let got = s.cluster_conditions("default", Duration::from_secs(*secs)).await.expect("clusters by condition");
            assert_eq!(got.stale, *want, "{when}: stale after {secs} s, folded {folded}: {got:?}");
            let rows = s.cluster_rows("default").await.expect("cluster rows");
            let cutoff = clock.now().minus(Duration::from_secs(*secs));
            assert_eq!(by_condition(&rows, cutoff), got, "{when}: the rows, stale after {secs} s, folded {folded}");
            let beat =
                crate::MemberBeat { id: "w".into(), ttl: Duration::from_secs(10), in_flight: 0, max_in_flight: 1 };
            s.member_heartbeat(beat).await.expect("heartbeat");
        }
    }
}

/// A cluster is stale when neither a successful run nor a report from its agent came
/// within the window (or, lacking both, since its first key): a failure is no sign of
/// life; a success counts even when a newer change keeps the key pending; a report
/// counts; a report from a cluster with no keys adds no cluster, nor makes it stale
/// once it has keys.
pub async fn stale_clusters_are_those_without_a_sign_of_life(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    let prod = [("env", "prod")];
    s.objects_apply(vec![cluster("a", &prod), cluster("b", &prod), cluster("c", &prod), syncset("s1", 1, "v1")])
        .await
        .expect("apply");
    clock.advance(Duration::from_secs(10));
    let mut items = claim(s.as_ref(), "w", 10).await;
    items.sort_by(|x, y| x.key.cmp(&y.key));
    for item in &items[1..] {
        complete(s.as_ref(), item, failed("refused")).await;
    }
    // A newer generation while `a` runs: its success leaves it pending, but it is alive.
    s.objects_apply(vec![syncset("s1", 1, "v2")]).await.expect("a new generation");
    assert_eq!(
        complete(s.as_ref(), &items[0], applied(&items[0])).await,
        CompleteOutcome::Committed(Phase::Pending),
        "a newer change is pending"
    );
    clock.advance(Duration::from_secs(10));
    let report = LiveRecord {
        resource: ResourceRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("apps".into()),
            name: "s1-0".into(),
        },
        syncset: "s1".into(),
        resource_version: "1".into(),
        state: fleetsync_model::LiveState::Present,
        object: None,
        drift: None,
        unready: None,
    };
    s.live_record("default", "c", vec![report.clone()]).await.expect("c's agent reports");
    s.live_record("default", "no-keys", vec![report.clone()]).await.expect("a cluster with no keys reports");
    clock.advance(Duration::from_secs(10));
    // Now T0+30: b never ran well (first key at T0), a succeeded at T0+10, c reported at T0+20.
    stale(s.as_ref(), &clock, &[(3600, 0), (25, 1), (15, 2), (5, 3)], "three clusters").await;
    let all = s.cluster_conditions("default", Duration::ZERO).await.expect("clusters by condition");
    assert_eq!(
        all.ready + all.progressing + all.degraded,
        3,
        "the report of a cluster with no keys adds none: {all:?}"
    );
    // A report from before its first key (no heartbeat between) does not make it stale.
    s.live_record("default", "d", vec![report]).await.expect("d's agent reports before d has keys");
    clock.advance(Duration::from_secs(1));
    s.objects_apply(vec![cluster("d", &prod)]).await.expect("a new cluster");
    stale(s.as_ref(), &clock, &[(5, 3), (0, 3)], "a new cluster is not stale").await;
    clock.advance(Duration::from_secs(10));
    stale(s.as_ref(), &clock, &[(5, 4)], "until its window passes").await;
}

/// The clusters of these keys by condition, counted the long way: each cluster's keys
/// rolled up as `GET /v1/status/clusters/{name}` does.
fn rolled_up(keys: &[KeyStatus]) -> ClusterConditions {
    let mut by_cluster: std::collections::BTreeMap<&str, Vec<KeyStatus>> = Default::default();
    for k in keys {
        by_cluster.entry(k.key.cluster.as_str()).or_default().push(k.clone());
    }
    let mut want = ClusterConditions::default();
    for (cluster, keys) in by_cluster {
        match ClusterStatus::roll_up("default", cluster, keys).condition.reason.as_str() {
            "Converged" => want.ready += 1,
            "Progressing" => want.progressing += 1,
            _ => want.degraded += 1,
        }
    }
    want
}
