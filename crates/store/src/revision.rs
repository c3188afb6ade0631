//! Revisions: the content of each SyncSet generation, kept so that a key runs exactly
//! the generation it is told to (a rollout holds clusters at the stable one, a rollback
//! returns to it), the same in every SQL backend.
//!
//! A revision is stored as its *head* (the SyncSet without its resources) and the
//! content addresses of its resources, each resource once per tenant however many
//! revisions hold it ([`split`], [`assemble`]). Writing a new generation also decides
//! what happens to the SyncSet's rollout ([`on_write`]) and which old revisions go
//! ([`prune`]); a rollout's step is written only if it follows the stored one
//! ([`rollout_check`]).

use crate::rollout::RolloutState;
use crate::stored::{canonical, corrupt, decode};
use crate::Result;
use fleetsync_model::{RolloutPhase, SyncSet, Timestamp};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

/// Revisions kept per SyncSet beyond those a key or the rollout still needs.
pub(crate) const KEPT_HISTORY: i64 = 10;

/// A revision as stored: the head, and each resource as (content address, JSON).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Split {
    pub(crate) head: String,
    pub(crate) parts: Vec<(String, String)>,
}

impl Split {
    /// The content addresses in order, as the revision row lists them.
    pub(crate) fn hashes(&self) -> Vec<&str> {
        self.parts.iter().map(|(h, _)| h.as_str()).collect()
    }
}

/// Splits a SyncSet into its head and content-addressed resources.
pub(crate) fn split(s: &SyncSet) -> Result<Split> {
    let mut head = s.clone();
    let resources = std::mem::take(&mut head.spec.resources);
    let parts = resources
        .iter()
        .map(|m| {
            let body = serde_json::to_string(&m.0).map_err(|e| corrupt("revisions", e))?;
            Ok((address(&body), body))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Split { head: canonical(&head)?, parts })
}

/// The SyncSet of a stored revision: its head with the resources put back in order.
pub(crate) fn assemble(head: &str, generation: i64, bodies: Vec<String>) -> Result<SyncSet> {
    let mut s: SyncSet = decode("revisions", head)?;
    s.metadata.generation = generation;
    s.spec.resources =
        bodies.iter().map(|b| decode("revision_parts", b).map(fleetsync_model::Manifest)).collect::<Result<_>>()?;
    Ok(s)
}

/// The content address of a resource's JSON: hex SHA-256.
fn address(body: &str) -> String {
    Sha256::digest(body.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// What writing generation `generation` of a SyncSet does to its rollout.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RolloutWrite {
    /// No `spec.rollout`: no rollout row; every key runs the new generation.
    None,
    /// The rollout row to store (a new rollout, or a completed one for a first generation).
    Store(RolloutState),
}

/// Decides the rollout a new generation starts. `previous`: the stored rollout, if any.
/// A first generation has nothing to hold clusters at: it is complete at once. A later
/// one starts at step 0 from the stable generation: the previous rollout's stable one
/// if it had not completed (a newer generation supersedes it), else the generation
/// before this one.
pub(crate) fn on_write(s: &SyncSet, generation: i64, previous: Option<&RolloutState>, now: Timestamp) -> RolloutWrite {
    if s.spec.rollout.is_none() {
        return RolloutWrite::None;
    }
    let (tenant, syncset) = (s.metadata.tenant().to_string(), s.metadata.name.clone());
    let version = previous.map_or(0, |p| p.version) + 1;
    let fresh = |phase, stable| RolloutState {
        tenant: tenant.clone(),
        syncset: syncset.clone(),
        phase,
        step: 0,
        revision: generation,
        stable,
        reason: None,
        step_started_at: now,
        healthy_since: None,
        promoted: false,
        version,
        updated_at: now,
    };
    if generation <= 1 {
        let last = s.spec.rollout.as_ref().map_or(0, |r| r.steps.len().saturating_sub(1));
        return RolloutWrite::Store(RolloutState { step: last, ..fresh(RolloutPhase::Completed, generation) });
    }
    let stable = match previous {
        Some(p) if p.phase.holds_back() => p.stable,
        _ => generation - 1,
    };
    RolloutWrite::Store(fresh(RolloutPhase::Progressing, stable))
}

/// Which of a SyncSet's revisions to delete: those below `below`, but those in `keep`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RevisionsDrop {
    pub(crate) below: i64,
    pub(crate) keep: Vec<i64>,
}

impl RevisionsDrop {
    /// Every revision (a deleted SyncSet's).
    pub(crate) fn every() -> Self {
        RevisionsDrop { below: i64::MAX, keep: Vec::new() }
    }
}

/// The revisions to drop after generation `latest` was written: those older than the
/// last [`KEPT_HISTORY`], but those still `needed` (a wanted key runs it, or the rollout
/// holds clusters at it).
pub(crate) fn prune(latest: i64, needed: BTreeSet<i64>) -> RevisionsDrop {
    RevisionsDrop { below: latest - KEPT_HISTORY + 1, keep: needed.into_iter().collect() }
}

/// Whether a rollout's next state may be written over the stored one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RolloutCheck {
    /// The rollout moved on (another process wrote first, or a newer generation
    /// superseded it): nothing is written.
    MovedOn,
    /// It follows the stored state: written.
    Write,
    /// A move to `Completed`: written only if every wanted key is told this generation
    /// (a cluster that joined after the decision was read, at the stable revision, is
    /// caught up when the rollout is decided again).
    WriteIfEveryWantedKeyAt(i64),
}

/// Decides whether `next` follows the stored rollout `current` (a compare-and-set on
/// the same revision and the next version), and what else a write of it needs.
pub(crate) fn rollout_check(current: Option<&RolloutState>, next: &RolloutState) -> RolloutCheck {
    if !current.is_some_and(|c| c.revision == next.revision && c.version + 1 == next.version) {
        return RolloutCheck::MovedOn;
    }
    match next.phase {
        RolloutPhase::Completed => RolloutCheck::WriteIfEveryWantedKeyAt(next.revision),
        _ => RolloutCheck::Write,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{document::parse_documents, Document};

    fn syncset(rollout: bool, value: &str) -> SyncSet {
        let rollout = if rollout { "\n  rollout: {steps: [{count: 1}, {percent: 100}]}" } else { "" };
        let yaml = format!(
            "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: s, namespace: t}}\nspec:\n  clusterNames: [a]{rollout}\n  resources:\n    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: one, namespace: x}}, data: {{v: \"{value}\"}}}}\n    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: two, namespace: x}}, data: {{v: same}}}}\n"
        );
        let Document::SyncSet(s) = parse_documents(&yaml).expect("valid").remove(0) else { panic!("a SyncSet") };
        s
    }

    #[test]
    fn a_revision_splits_into_content_addressed_resources_and_comes_back_whole() {
        let (a, b) = (split(&syncset(false, "1")).expect("split"), split(&syncset(false, "2")).expect("split"));
        assert_ne!(a.parts[0].0, b.parts[0].0, "changed content, new address");
        assert_eq!(a.parts[1].0, b.parts[1].0, "unchanged content, same address: stored once");
        assert!(!a.head.contains("one"), "the head holds no resource: {}", a.head);
        let back = assemble(&a.head, 3, a.parts.iter().map(|(_, body)| body.clone()).collect()).expect("assemble");
        let mut want = syncset(false, "1");
        want.metadata.generation = 3;
        assert_eq!(back, want);
    }

    #[test]
    fn old_revisions_go_but_those_still_needed() {
        let drop = prune(15, BTreeSet::from([2, 14]));
        assert_eq!(drop, RevisionsDrop { below: 6, keep: vec![2, 14] }, "the last 10 stay, and what is needed");
        assert_eq!(RevisionsDrop::every(), RevisionsDrop { below: i64::MAX, keep: vec![] });
    }

    #[test]
    fn a_rollout_step_is_written_only_over_the_state_it_was_decided_from() {
        let RolloutWrite::Store(stored) = on_write(&syncset(true, "2"), 2, None, Timestamp(0)) else {
            panic!("stored")
        };
        let next = RolloutState { step: 1, version: stored.version + 1, ..stored.clone() };
        assert_eq!(rollout_check(Some(&stored), &next), RolloutCheck::Write);
        assert_eq!(rollout_check(None, &next), RolloutCheck::MovedOn, "no rollout any more");
        let again = RolloutState { version: stored.version + 2, ..next.clone() };
        assert_eq!(rollout_check(Some(&stored), &again), RolloutCheck::MovedOn, "another process wrote first");
        let newer = RolloutState { revision: 3, ..stored.clone() };
        assert_eq!(rollout_check(Some(&newer), &next), RolloutCheck::MovedOn, "a newer generation superseded it");
        let done = RolloutState { phase: RolloutPhase::Completed, ..next };
        assert_eq!(
            rollout_check(Some(&stored), &done),
            RolloutCheck::WriteIfEveryWantedKeyAt(2),
            "completed only once every wanted key is told the revision"
        );
    }

    #[test]
    fn a_new_generation_starts_a_rollout_from_the_stable_one() {
        let now = Timestamp(50);
        assert_eq!(on_write(&syncset(false, "1"), 4, None, now), RolloutWrite::None, "no spec.rollout");
        let RolloutWrite::Store(first) = on_write(&syncset(true, "1"), 1, None, now) else { panic!("stored") };
        assert_eq!(
            (first.phase, first.step, first.revision, first.stable),
            (RolloutPhase::Completed, 1, 1, 1),
            "a first generation is complete, at its last step"
        );
        let RolloutWrite::Store(second) = on_write(&syncset(true, "2"), 2, Some(&first), now) else { panic!("stored") };
        assert_eq!((second.phase, second.step, second.revision, second.stable), (RolloutPhase::Progressing, 0, 2, 1));
        assert_eq!(second.version, first.version + 1);
        let RolloutWrite::Store(third) = on_write(&syncset(true, "3"), 3, Some(&second), now) else { panic!("stored") };
        assert_eq!((third.revision, third.stable), (3, 1), "a superseded rollout never completed: 1 stays stable");
        let rolled_back = RolloutState { phase: RolloutPhase::RolledBack, ..third.clone() };
        let RolloutWrite::Store(fourth) = on_write(&syncset(true, "4"), 4, Some(&rolled_back), now) else {
            panic!("stored")
        };
        assert_eq!(fourth.stable, 1, "a rolled-back revision is not stable");
        let RolloutWrite::Store(added) = on_write(&syncset(true, "5"), 5, None, now) else { panic!("stored") };
        assert_eq!(
            (added.phase, added.stable),
            (RolloutPhase::Progressing, 4),
            "a rollout added to a SyncSet starts from the generation before"
        );
    }
}
