//! How far a SyncSet is ([`SyncSetProgress`]): the one notion of "done" that every view
//! shows. [`read`] gathers what it needs through the role traits; [`progress`] decides,
//! without a database.
//!
//! Keys are counted by the generation each is told to run. Without a rollout holding
//! clusters back, every key is told the SyncSet's current generation, so the counts the
//! store keeps per SyncSet ([`StatusSummary`]) answer without reading a key. While the
//! current generation's rollout has not completed, some keys are held at the stable
//! generation: then the SyncSet's keys are read (as the rollout's own status reads them)
//! and counted by what each is told.

use crate::rollout::ClusterView;
use crate::rollout_drive::{self, DriveError};
use crate::Store;
use fleetsync_model::{
    KeyFailure, Phase, ProgressReason, RolloutBrief, RolloutPhase, RolloutStatus, StatusSummary, SyncSet,
    SyncSetProgress,
};

/// The most names of `clusterNames` looked up to find those that do not exist.
pub const NAMES_CHECKED: usize = 100;

/// A SyncSet's keys counted by the generation each is told to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Clusters the SyncSet selects.
    pub clusters: u64,
    /// Keys told to run the current generation.
    pub current: u64,
    /// Of those, applied at it.
    pub applied: u64,
    /// Keys told to run another generation, and which (the lowest, if several).
    pub held: u64,
    pub held_at: Option<i64>,
    /// Keys failed (being retried) or parked.
    pub failed: u64,
}

impl Tally {
    /// From the counts the store keeps, when no rollout holds keys back: every key is
    /// told the current generation, and an `Applied` key has applied it. A key being
    /// removed (the SyncSet no longer selects its cluster) counts until it is gone.
    pub fn of_summary(s: &StatusSummary) -> Self {
        let phase = |p: Phase| s.phases.get(&p).copied().unwrap_or(0);
        Tally {
            clusters: s.total,
            current: s.total,
            applied: phase(Phase::Applied),
            held: 0,
            held_at: None,
            failed: phase(Phase::Failed) + phase(Phase::Parked),
        }
    }

    /// From the clusters the SyncSet selects and their wanted keys (as a rollout reads them).
    pub fn of_clusters(generation: i64, clusters: &[ClusterView]) -> Self {
        let mut t = Tally { clusters: clusters.len() as u64, ..Tally::default() };
        for k in clusters.iter().filter_map(|c| c.key.as_ref()) {
            if k.generation == generation {
                t.current += 1;
                t.applied += u64::from(k.phase == Phase::Applied && k.observed_generation == generation);
            } else {
                t.held += 1;
                t.held_at = Some(t.held_at.map_or(k.generation, |h| h.min(k.generation)));
            }
            t.failed += u64::from(matches!(k.phase, Phase::Failed | Phase::Parked));
        }
        t
    }
}

/// How far the SyncSet at `generation` is, from its keys' `tally`, the first failed
/// key, the names of `clusterNames` that name no cluster, and its rollout if the rollout
/// is of this generation.
pub fn progress(
    generation: i64,
    tally: &Tally,
    failure: Option<&KeyFailure>,
    missing: Vec<String>,
    rollout: Option<&RolloutStatus>,
) -> SyncSetProgress {
    let rollout = rollout.filter(|r| r.revision == generation && r.phase != RolloutPhase::Completed);
    let brief = rollout.map(|r| RolloutBrief {
        phase: r.phase,
        step: r.step,
        steps: r.steps.len(),
        revision: r.revision,
        stable: r.stable,
        waiting: r.waiting.clone(),
        reason: r.reason.clone(),
    });
    let t = tally;
    let clusters = plural(t.clusters, "cluster");
    let at = format!("{} of {clusters} at generation {generation}", t.applied);
    let held = match (t.held, t.held_at) {
        (0, _) | (_, None) => String::new(),
        (n, Some(g)) => format!(", {n} held at generation {g} by the rollout"),
    };
    let (reason, mut message) = match (t.clusters, &brief) {
        (0, _) => (ProgressReason::NoClusters, "selects no cluster".to_string()),
        (_, Some(r)) if r.phase == RolloutPhase::RolledBack => {
            let why = r.reason.as_deref().unwrap_or("no reason recorded");
            (
                ProgressReason::RolledBack,
                format!(
                    "the rollout of generation {generation} rolled back ({why}); {} at generation {}",
                    plural(t.held, "cluster"),
                    r.stable
                ),
            )
        }
        (_, Some(r)) => {
            let reason = match r.phase {
                RolloutPhase::Failed => ProgressReason::RolloutFailed,
                RolloutPhase::Paused => ProgressReason::RolloutPaused,
                _ => ProgressReason::RollingOut,
            };
            let what = match r.phase {
                RolloutPhase::Progressing => r.waiting.clone().unwrap_or_else(|| "progressing".into()),
                RolloutPhase::Paused => "paused".into(),
                _ => format!("failed: {}", r.reason.as_deref().unwrap_or("no reason recorded")),
            };
            (reason, format!("{at}{held} (step {} of {}, {what})", r.step + 1, r.steps))
        }
        _ if t.failed > 0 => (ProgressReason::Degraded, at),
        _ if t.applied == t.clusters && t.current == t.clusters => (ProgressReason::Applied, at),
        _ => (ProgressReason::Progressing, at),
    };
    if let Some(f) = failure.filter(|_| t.failed > 0 && reason != ProgressReason::RolledBack) {
        let error = f.last_error.as_deref().unwrap_or("no error recorded");
        message.push_str(&format!("; {} failed, first {} on {}: {error}", t.failed, f.phase.as_str(), f.cluster));
    }
    if !missing.is_empty() {
        message.push_str(&format!(
            "; clusterNames names {} that does not exist: {}",
            plural(missing.len() as u64, "cluster"),
            missing.join(", ")
        ));
    }
    SyncSetProgress {
        generation,
        clusters: t.clusters,
        missing_clusters: missing,
        current: t.current,
        applied: t.applied,
        held: t.held,
        held_at: t.held_at.filter(|_| t.held > 0),
        failed: t.failed,
        done: reason == ProgressReason::Applied,
        reason,
        message,
        rollout: brief,
    }
}

fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The names among `names` (the first [`NAMES_CHECKED`]) of no cluster of `tenant`,
/// looked up one by one; `known` names clusters that exist without being stored yet
/// (those of the same apply).
pub async fn missing_clusters<S: Store + ?Sized>(
    store: &S,
    tenant: &str,
    names: &[String],
    known: impl Fn(&str) -> bool,
) -> Result<Vec<String>, crate::StoreError> {
    let mut missing = Vec::new();
    for name in names.iter().take(NAMES_CHECKED) {
        if !known(name) && store.cluster_get(tenant, name).await?.is_none() {
            missing.push(name.clone());
        }
    }
    Ok(missing)
}

/// The progress of `set` (as stored now), whose keys sum to `summary`.
pub async fn read<S: Store + ?Sized>(
    store: &S,
    set: &SyncSet,
    summary: &StatusSummary,
) -> Result<SyncSetProgress, DriveError> {
    let (tenant, name, generation) = (set.metadata.tenant(), set.metadata.name.as_str(), set.metadata.generation);
    let missing =
        missing_clusters(store, tenant, set.spec.cluster_names.as_deref().unwrap_or_default(), |_| false).await?;
    let holds_back = store
        .rollout_get(tenant, name)
        .await?
        .is_some_and(|r| r.revision == generation && r.phase != RolloutPhase::Completed);
    let viewed = match holds_back {
        true => rollout_drive::status_with_clusters(store, tenant, name).await?,
        false => None,
    };
    let failure = summary.failures.first();
    Ok(match viewed {
        Some((status, clusters)) => {
            progress(generation, &Tally::of_clusters(generation, &clusters), failure, missing, Some(&status))
        }
        None => progress(generation, &Tally::of_summary(summary), failure, missing, None),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{StepCounts, Timestamp};

    fn rollout(phase: RolloutPhase, step: usize, waiting: Option<&str>, reason: Option<&str>) -> RolloutStatus {
        RolloutStatus {
            tenant: "t".into(),
            syncset: "web".into(),
            phase,
            step,
            revision: 2,
            stable: 1,
            reason: reason.map(str::to_string),
            waiting: waiting.map(str::to_string),
            step_started_at: Timestamp(0),
            healthy_since: None,
            steps: vec![StepCounts::default(); 3],
            updated_at: Timestamp(0),
        }
    }

    fn tally(clusters: u64, current: u64, applied: u64, held: u64, failed: u64) -> Tally {
        Tally { clusters, current, applied, held, held_at: (held > 0).then_some(1), failed }
    }

    #[test]
    fn held_clusters_are_not_done_and_say_why() {
        let r = rollout(RolloutPhase::Progressing, 0, Some("waiting for promote"), None);
        let p = progress(2, &tally(6, 2, 2, 4, 0), None, vec![], Some(&r));
        assert_eq!((p.done, p.reason), (false, ProgressReason::RollingOut));
        assert_eq!(
            p.message,
            "2 of 6 clusters at generation 2, 4 held at generation 1 by the rollout (step 1 of 3, waiting for promote)"
        );
        assert_eq!((p.held, p.held_at, p.rollout.as_ref().map(|r| r.step)), (4, Some(1), Some(0)));
    }

    #[test]
    fn a_rolled_back_generation_is_not_applied_and_is_final() {
        let r = rollout(RolloutPhase::RolledBack, 0, None, Some("aborted"));
        let p = progress(2, &tally(6, 0, 0, 6, 0), None, vec![], Some(&r));
        assert_eq!((p.done, p.reason), (false, ProgressReason::RolledBack));
        assert!(p.reason.is_final());
        assert_eq!(p.message, "the rollout of generation 2 rolled back (aborted); 6 clusters at generation 1");
    }

    #[test]
    fn a_completed_or_older_rollout_does_not_hold_anything() {
        let done = rollout(RolloutPhase::Completed, 2, None, None);
        let p = progress(2, &tally(6, 6, 6, 0, 0), None, vec![], Some(&done));
        assert_eq!((p.done, p.reason, p.rollout), (true, ProgressReason::Applied, None));
        assert_eq!(p.message, "6 of 6 clusters at generation 2");
        let older = rollout(RolloutPhase::RolledBack, 0, None, Some("aborted"));
        assert_eq!(
            progress(3, &tally(6, 6, 6, 0, 0), None, vec![], Some(&older)).reason,
            ProgressReason::Applied,
            "a rollout of generation 2 says nothing of 3"
        );
    }

    #[test]
    fn no_cluster_is_not_applied_and_missing_names_are_named() {
        let p = progress(1, &Tally::default(), None, vec!["eu-west-9".into()], None);
        assert_eq!((p.done, p.reason), (false, ProgressReason::NoClusters));
        assert_eq!(p.message, "selects no cluster; clusterNames names 1 cluster that does not exist: eu-west-9");
    }

    #[test]
    fn a_failed_key_degrades_and_is_named() {
        let f = KeyFailure {
            syncset: None,
            cluster: "c3".into(),
            phase: Phase::Parked,
            attempts: 5,
            last_error: Some("forbidden".into()),
        };
        let p = progress(2, &tally(3, 3, 2, 0, 1), Some(&f), vec![], None);
        assert_eq!((p.done, p.reason), (false, ProgressReason::Degraded));
        assert_eq!(p.message, "2 of 3 clusters at generation 2; 1 failed, first Parked on c3: forbidden");
        assert_eq!(progress(2, &tally(3, 3, 2, 0, 0), None, vec![], None).reason, ProgressReason::Progressing);
    }

    #[test]
    fn tallies_count_keys_by_the_generation_they_are_told() {
        use crate::rollout::KeyView;
        let view = |name: &str, generation: i64, observed: i64, phase: Phase| ClusterView {
            name: name.into(),
            labels: Default::default(),
            key: Some(KeyView {
                generation,
                observed_generation: observed,
                phase,
                last_error: None,
                drifted: false,
                unready: None,
            }),
        };
        let clusters = [
            view("a", 2, 2, Phase::Applied),
            view("b", 2, 1, Phase::Pending),
            view("c", 1, 1, Phase::Applied),
            view("d", 1, 1, Phase::Failed),
        ];
        let t = Tally::of_clusters(2, &clusters);
        assert_eq!(t, Tally { clusters: 4, current: 2, applied: 1, held: 2, held_at: Some(1), failed: 1 });
    }
}
