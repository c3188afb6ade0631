//! Order between SyncSets on a cluster (`spec.dependsOn`): a key runs only once every
//! SyncSet its SyncSet depends on is Applied at its current revision on the same
//! cluster, and ready where readiness is known (objects an agent reports not ready
//! hold it back). Until then the key applies nothing and waits
//! ([`RunOutcome::Waiting`](fleetsync_store::RunOutcome::Waiting)): `Pending`, its
//! message saying what it waits for, looked at again shortly or at once on a change.
//!
//! A dependency that does not select the cluster does not hold it back. One that does
//! not exist does, until it is created (its name may be a typo, but creating both in
//! either order must work). Read through the store ([`unmet`]), decided in a pure
//! function ([`judge`]).

use crate::reconciler::{Context, ReconcileError};
use fleetsync_model::{Cluster, KeyStatus, Phase, SyncSet, WorkKey};
use std::time::Duration;

/// How soon a key looks again at a dependency that is on its way (pending, applying,
/// or applied and not ready yet).
pub const SOON: Duration = Duration::from_secs(1);
/// How soon a key looks again at a dependency that is stuck (failed, parked), missing,
/// or waits for its source.
pub const LATER: Duration = Duration::from_secs(5);

/// Why a key does not run yet, and when to look again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub reason: String,
    pub after: Duration,
}

/// The first of `syncset`'s dependencies not met on `cluster`, if one is not.
pub(crate) async fn unmet(ctx: &Context, syncset: &SyncSet, cluster: &Cluster) -> Result<Option<Wait>, ReconcileError> {
    let key = ctx.key();
    for dep in &syncset.spec.depends_on {
        let store = ctx.store();
        let theirs = ctx.until_cancelled(store.syncset_get(&key.tenant, &dep.name)).await??;
        let status = match &theirs {
            Some(_) => {
                let theirs_here = WorkKey::new(&*key.tenant, &*key.cluster, &*dep.name);
                ctx.until_cancelled(store.status_get(&theirs_here)).await??
            }
            None => None,
        };
        if let Some(wait) = judge(&dep.name, theirs.as_ref(), status.as_ref(), cluster) {
            return Ok(Some(wait));
        }
    }
    Ok(None)
}

/// Whether the dependency `name` (its SyncSet `theirs`, its key's `status` on
/// `cluster`) holds a dependent key back on `cluster`.
pub fn judge(name: &str, theirs: Option<&SyncSet>, status: Option<&KeyStatus>, cluster: &Cluster) -> Option<Wait> {
    let wait = |what: String, after| Some(Wait { reason: format!("waiting for SyncSet {name}: {what}"), after });
    let Some(theirs) = theirs else { return wait("it does not exist".into(), LATER) };
    let Some(status) = status else {
        // No key: it does not select the cluster, or it waits for its source's first
        // revision (a SyncSet selects nothing until then).
        if theirs.waits_for_source() {
            return wait("its source has no revision yet".into(), LATER);
        }
        let selects = theirs.spec.selects(&cluster.metadata.name, &cluster.metadata.labels);
        return if selects { wait("it has no key on this cluster yet".into(), SOON) } else { None };
    };
    if !status.desired {
        // Being removed from the cluster: it no longer selects it.
        return None;
    }
    let at_revision = status.phase == Phase::Applied && status.observed_generation == status.generation;
    if !at_revision {
        let after = match status.phase {
            Phase::Failed | Phase::Parked => LATER,
            _ => SOON,
        };
        let what = format!("{}, generation {} not applied yet", status.phase.as_str(), status.generation);
        return wait(what, after);
    }
    match status.unready.first() {
        Some(u) => {
            let more = match status.unready.len() {
                1 => String::new(),
                n => format!(" (and {} more)", n - 1),
            };
            wait(format!("not ready: {}: {}{more}", u.resource, u.reason), SOON)
        }
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{Document, ResourceRef, Timestamp, Unready};

    fn docs(yaml: &str) -> Vec<Document> {
        fleetsync_model::parse_documents(yaml).expect("valid")
    }

    fn db(selector: &str) -> SyncSet {
        let yaml = format!(
            "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: db}}\nspec:\n  clusterSelector: {selector}\n  resources: []\n"
        );
        match docs(&yaml).remove(0) {
            Document::SyncSet(s) => s,
            other => panic!("{other:?}"),
        }
    }

    fn cluster(region: &str) -> Cluster {
        let yaml = format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c1, labels: {{region: {region}}}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n"
        );
        match docs(&yaml).remove(0) {
            Document::Cluster(c) => c,
            other => panic!("{other:?}"),
        }
    }

    fn status(phase: Phase, observed: i64, generation: i64) -> KeyStatus {
        KeyStatus {
            key: WorkKey::new("default", "c1", "db"),
            phase,
            desired: true,
            generation,
            observed_generation: observed,
            attempts: 0,
            last_error: None,
            resources: vec![],
            next_attempt_at: None,
            last_applied_at: None,
            updated_at: Timestamp(0),
            rendered_hash: None,
            drift: vec![],
            unready: vec![],
        }
    }

    #[test]
    fn applied_at_the_current_revision_and_ready_lets_the_key_run() {
        let (theirs, c) = (db("{matchLabels: {region: eu}}"), cluster("eu"));
        assert_eq!(judge("db", Some(&theirs), Some(&status(Phase::Applied, 3, 3)), &c), None);
    }

    #[test]
    fn anything_short_of_that_waits_and_says_for_what() {
        let (theirs, c) = (db("{matchLabels: {region: eu}}"), cluster("eu"));
        let reason = |s: &KeyStatus| judge("db", Some(&theirs), Some(s), &c).map(|w| (w.reason, w.after));
        assert_eq!(
            reason(&status(Phase::Applying, 0, 1)),
            Some(("waiting for SyncSet db: Applying, generation 1 not applied yet".into(), SOON))
        );
        let older = status(Phase::Pending, 2, 3);
        assert_eq!(
            reason(&older).map(|r| r.0),
            Some("waiting for SyncSet db: Pending, generation 3 not applied yet".into())
        );
        let parked = reason(&status(Phase::Parked, 2, 3)).expect("waits");
        assert_eq!(parked.1, LATER, "a stuck dependency is looked at less often");
        let mut unready = status(Phase::Applied, 3, 3);
        let deployment = ResourceRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("db".into()),
            name: "pg".into(),
        };
        let missing = Unready { resource: deployment, reason: "Deployment: 1 of 3 replicas updated".into() };
        unready.unready = vec![missing.clone(), missing];
        let (why, _) = reason(&unready).expect("not ready");
        assert!(why.starts_with("waiting for SyncSet db: not ready: apps/v1/Deployment db/pg"), "{why}");
        assert!(why.ends_with("1 of 3 replicas updated (and 1 more)"), "{why}");
    }

    #[test]
    fn a_dependency_that_does_not_select_the_cluster_does_not_hold_it_back() {
        let theirs = db("{matchLabels: {region: us}}");
        assert_eq!(judge("db", Some(&theirs), None, &cluster("eu")), None);
        let removing = KeyStatus { desired: false, ..status(Phase::Applying, 1, 1) };
        assert_eq!(judge("db", Some(&theirs), Some(&removing), &cluster("eu")), None, "being removed from it");
        let selecting = judge("db", Some(&theirs), None, &cluster("us")).expect("no key yet");
        assert_eq!(selecting.reason, "waiting for SyncSet db: it has no key on this cluster yet");
    }

    #[test]
    fn a_missing_dependency_holds_the_key_until_it_exists() {
        let w = judge("db", None, None, &cluster("eu")).expect("waits");
        assert_eq!((w.reason.as_str(), w.after), ("waiting for SyncSet db: it does not exist", LATER));
    }
}
