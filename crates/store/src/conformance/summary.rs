//! A SyncSet's status summary equals a full count of its keys' statuses, after random
//! sequences of changes, claims, successes, failures (up to parking), retries and
//! deletions.

use super::*;
use fleetsync_model::{KeyFailure, KeyStatus, StatusSummary};
use crate::summary::SUMMARY_FAILURES;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The summary, counted the long way from every key's status.
fn counted(keys: &[KeyStatus]) -> StatusSummary {
    let mut want = StatusSummary { phases: Phase::ALL.iter().map(|p| (*p, 0)).collect(), ..StatusSummary::default() };
    for k in keys {
        want.total += 1;
        *want.phases.entry(k.phase).or_default() += 1;
        want.at_generation += u64::from(k.observed_generation == k.generation);
        if matches!(k.phase, Phase::Pending | Phase::Failed | Phase::Applying) {
            want.oldest_pending_since = Some(want.oldest_pending_since.map_or(k.updated_at, |t| t.min(k.updated_at)));
        }
    }
    let mut failed: Vec<&KeyStatus> = keys.iter().filter(|k| matches!(k.phase, Phase::Failed | Phase::Parked)).collect();
    failed.sort_by(|a, b| a.key.cluster.cmp(&b.key.cluster));
    want.failures = failed
        .into_iter()
        .take(SUMMARY_FAILURES)
        .map(|k| KeyFailure { cluster: k.key.cluster.clone(), phase: k.phase, attempts: k.attempts, last_error: k.last_error.clone() })
        .collect();
    want
}

pub async fn summaries_equal_a_full_count(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    let sets = ["s0", "s1", "s2"];
    for seed in 0..3u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        for step in 0..40 {
            match rng.random_range(0..7) {
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
                _ => {
                    let name = format!("c{:02}", rng.random_range(0..12));
                    // Absent clusters are fine: nothing to delete.
                    let _ = s.object_delete(Kind::Cluster, "default", &name).await;
                }
            }
            for set in sets {
                let filter = StatusFilter { tenant: Some("default".into()), syncset: Some(set.into()), ..StatusFilter::default() };
                let keys = s.status_list(&filter).await.expect("status");
                let summary = s.status_summary("default", set).await.expect("summary");
                assert_eq!(summary, counted(&keys), "seed {seed}, step {step}, SyncSet {set}");
            }
        }
    }
    let summary = s.status_summary("default", "no-such-set").await.expect("summary of nothing");
    assert_eq!((summary.total, summary.failures.len()), (0, 0));
}
