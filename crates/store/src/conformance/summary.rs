//! A SyncSet's status summary, the store-wide counts by phase, and a tenant's clusters
//! by condition equal a full count
//! of the keys' statuses after random sequences of changes, claims, successes,
//! failures (up to parking), retries, deletions of clusters and SyncSets, and
//! heartbeats (which fold PostgreSQL's count deltas).

use super::*;
use fleetsync_model::{ClusterConditions, ClusterStatus, KeyFailure, KeyStatus, StatusSummary};
use crate::summary::SUMMARY_FAILURES;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The summary, counted the long way from every key's status; a tenant's (`tenant`)
/// names each failure's SyncSet.
fn counted(keys: &[KeyStatus], tenant: bool) -> StatusSummary {
    let mut want = StatusSummary { phases: Phase::ALL.iter().map(|p| (*p, 0)).collect(), ..StatusSummary::default() };
    for k in keys {
        want.total += 1;
        *want.phases.entry(k.phase).or_default() += 1;
        want.at_generation += u64::from(k.observed_generation == k.generation);
    }
    let mut failed: Vec<&KeyStatus> = keys.iter().filter(|k| matches!(k.phase, Phase::Failed | Phase::Parked)).collect();
    failed.sort_by(|a, b| (&a.key.syncset, &a.key.cluster).cmp(&(&b.key.syncset, &b.key.cluster)));
    want.failures = failed
        .into_iter()
        .take(SUMMARY_FAILURES)
        .map(|k| KeyFailure {
            syncset: tenant.then(|| k.key.syncset.clone()),
            cluster: k.key.cluster.clone(), phase: k.phase, attempts: k.attempts, last_error: k.last_error.clone() })
        .collect();
    want
}

/// Keys waiting to be applied now: leased, or ready with no backoff to wait out.
fn due(keys: &[KeyStatus]) -> bool {
    keys.iter().any(|k| k.phase == Phase::Applying || (matches!(k.phase, Phase::Pending | Phase::Failed) && k.next_attempt_at.is_none()))
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
                    let beat = crate::MemberBeat { id: "w".into(), ttl: Duration::from_secs(10), in_flight: 0 };
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
                let filter = StatusFilter { tenant: Some("default".into()), syncset: Some(set.into()), ..StatusFilter::default() };
                let keys = s.status_list(&filter).await.expect("status");
                let mut summary = s.status_summary("default", Some(set)).await.expect("summary");
                let since = summary.oldest_pending_since.take();
                assert_eq!(summary, counted(&keys, false), "seed {seed}, step {step}, SyncSet {set}");
                assert_eq!(since.is_some(), due(&keys), "a wait exactly when a key is due: seed {seed}, step {step}, {set}");
                assert!(since.is_none_or(|t| t <= clock.now()), "seed {seed}, step {step}: due at {since:?}, in the future");
            }
            let all = s.status_list(&StatusFilter::default()).await.expect("every key");
            let mut tenant = s.status_summary("default", None).await.expect("the tenant's summary");
            let since = tenant.oldest_pending_since.take();
            assert_eq!(tenant, counted(&all, true), "seed {seed}, step {step}, the tenant");
            assert_eq!(since.is_some(), due(&all), "seed {seed}, step {step}, the tenant's wait");
            assert_eq!(s.queue_stats().await.expect("stats").by_phase, counted(&all, false).phases, "seed {seed}, step {step}");
            let conditions = s.cluster_conditions("default").await.expect("clusters by condition");
            assert_eq!(conditions, rolled_up(&all), "seed {seed}, step {step}, the clusters");
        }
    }
    let summary = s.status_summary("default", Some("no-such-set")).await.expect("summary of nothing");
    assert_eq!((summary.total, summary.failures.len()), (0, 0));
    let summary = s.status_summary("no-such-tenant", None).await.expect("summary of no tenant");
    assert_eq!((summary.total, summary.failures.len()), (0, 0));
    assert_eq!(s.cluster_conditions("no-such-tenant").await.expect("no clusters"), ClusterConditions::default());
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
