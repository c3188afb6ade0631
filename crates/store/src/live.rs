//! Live state reported by agents: what the store keeps of it, and the rules every
//! backend applies the same way (deduplication by `resourceVersion`, drift shown in
//! key status, records ended with the runs that stop applying their resources).

use crate::lifecycle::Finish;
use fleetsync_model::{Drift, KeyStatus, LiveState, ResourceRef, Unready, WorkKey};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub use fleetsync_model::LiveResource;

/// One report, as the hub asks the store to keep it: already matched to the key that
/// applies the resource and judged against that key's manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveRecord {
    pub resource: ResourceRef,
    /// The SyncSet of the key (on the reporting cluster) that applies the resource.
    pub syncset: String,
    pub resource_version: String,
    pub state: LiveState,
    /// The live object (present only).
    pub object: Option<serde_json::Value>,
    /// Where the live state differs from the desired one (`deleted`, or a field);
    /// `None` if it matches.
    pub drift: Option<String>,
    /// Why the live object is not ready yet ([`fleetsync_model::readiness`]); `None`
    /// if it is (or no rule applies).
    pub unready: Option<String>,
}

/// What the store did with one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LiveOutcome {
    /// Persisted as the resource's latest state.
    Stored,
    /// This `resourceVersion` is the one already stored: nothing written again.
    Duplicate,
    /// Older than the stored version (a resend overtaken by a newer report): ignored.
    Stale,
}

/// The answer to a batch: one outcome per record, in input order, and the keys that
/// were enqueued again because a stored record drifted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveRecorded {
    pub outcomes: Vec<LiveOutcome>,
    pub requeued: Vec<WorkKey>,
}

/// Whether a report at `new` replaces the stored version `old` (`None`: nothing
/// stored). Versions are opaque strings to Kubernetes clients, so equality is the
/// deduplication rule; where both are decimal numbers (etcd revisions, the
/// simulator's counter), an older one is a resend that was overtaken and is ignored.
pub fn judge(old: Option<&str>, new: &str) -> LiveOutcome {
    let Some(old) = old else { return LiveOutcome::Stored };
    if old == new {
        return LiveOutcome::Duplicate;
    }
    match (old.parse::<u64>(), new.parse::<u64>()) {
        (Ok(o), Ok(n)) if n < o => LiveOutcome::Stale,
        _ => LiveOutcome::Stored,
    }
}

/// What a batch of one cluster's reports writes, judged ([`judge`]) against the
/// versions stored: each record in the batch's order, a later record of a resource
/// against the earlier one the batch stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Batch {
    /// One outcome per record, in input order.
    pub(crate) outcomes: Vec<LiveOutcome>,
    /// Each resource the batch stores, by stored identity: its row is its last record
    /// stored.
    pub(crate) stored: BTreeMap<String, Kept>,
    /// The SyncSets of the records stored with drift: their keys run again.
    pub(crate) drifted: BTreeSet<String>,
}

/// A resource's row in a [`Batch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kept {
    /// The index of its last record stored.
    pub(crate) record: usize,
    /// How many versions of it the batch stored (its row's count grows by as many).
    pub(crate) versions: i64,
}

/// Judges a batch of records (`ids`: their resources' stored identities, in the same
/// order) against `stored`, the versions stored of their resources.
pub(crate) fn batch(records: &[LiveRecord], ids: &[String], mut stored: HashMap<String, String>) -> Batch {
    let mut out = Batch::default();
    for (i, (r, id)) in records.iter().zip(ids).enumerate() {
        let outcome = judge(stored.get(id).map(String::as_str), &r.resource_version);
        if outcome == LiveOutcome::Stored {
            stored.insert(id.clone(), r.resource_version.clone());
            let kept = out.stored.entry(id.clone()).or_insert(Kept { record: i, versions: 0 });
            *kept = Kept { record: i, versions: kept.versions + 1 };
            if r.drift.is_some() {
                out.drifted.insert(r.syncset.clone());
            }
        }
        out.outcomes.push(outcome);
    }
    out
}

/// The live records of a key that outlive a completion, as the stored identities of
/// their resources; every other record of the key ends in the completion's
/// transaction. `None`: the completion ends none.
///
/// A record lasts as long as fleetsync applies its resource through the key. A run
/// that applied the key's revision keeps the records of what it applied (its
/// inventory) and ends the others: Sync mode deleted those resources, Upsert mode left
/// them on the target, unmanaged. A finished removal keeps none. A failed run keeps
/// them all: the run that next succeeds decides. An agent's report of the end comes
/// after the resource has left the key's revision, so it is dropped as unmanaged: only
/// this rule ends the record.
pub(crate) fn kept_after(fin: &Finish<'_>) -> Option<Vec<String>> {
    match fin {
        Finish::Applied { inventory, .. } | Finish::Requeue { inventory, .. } => {
            Some(inventory.iter().map(resource_id).collect())
        }
        Finish::Restart | Finish::Delete => Some(Vec::new()),
        Finish::Failed { .. } | Finish::Waiting { .. } => None,
    }
}

/// The stored identity of a resource: its reference as JSON (fields in a fixed
/// order, so equal references give equal text).
pub(crate) fn resource_id(r: &ResourceRef) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

/// What live state says is wrong with one applied resource.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Issue {
    Drift(Drift),
    Unready(Unready),
}

impl Issue {
    /// The issues of one stored row: its drift and its readiness.
    pub(crate) fn of_row(
        resource: ResourceRef,
        drift: Option<String>,
        unready: Option<String>,
        resource_version: String,
    ) -> Vec<Issue> {
        let unready = unready.map(|reason| Issue::Unready(Unready { resource: resource.clone(), reason }));
        let drift = drift.map(|reason| Issue::Drift(Drift { resource, reason, resource_version }));
        drift.into_iter().chain(unready).collect()
    }
}

/// Shows each key's drifted and unready resources in its status.
pub(crate) fn attach_drift(statuses: &mut [KeyStatus], issues: Vec<(WorkKey, Issue)>) {
    let mut by_key: HashMap<WorkKey, Vec<Issue>> = HashMap::new();
    for (key, i) in issues {
        by_key.entry(key).or_default().push(i);
    }
    for s in statuses {
        for issue in by_key.remove(&s.key).unwrap_or_default() {
            match issue {
                Issue::Drift(d) => s.drift.push(d),
                Issue::Unready(u) => s.unready.push(u),
            }
        }
        s.drift.sort_by(|a, b| a.resource.cmp(&b.resource));
        s.unready.sort_by(|a, b| a.resource.cmp(&b.resource));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_dedupe_and_order() {
        assert_eq!(judge(None, "5"), LiveOutcome::Stored);
        assert_eq!(judge(Some("5"), "5"), LiveOutcome::Duplicate);
        assert_eq!(judge(Some("5"), "4"), LiveOutcome::Stale);
        assert_eq!(judge(Some("5"), "12"), LiveOutcome::Stored);
        assert_eq!(judge(Some("abc"), "abd"), LiveOutcome::Stored, "opaque versions: newest report wins");
    }

    fn report(name: &str, syncset: &str, version: &str, drift: Option<&str>) -> LiveRecord {
        LiveRecord {
            resource: ResourceRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: None,
                name: name.into(),
            },
            syncset: syncset.into(),
            resource_version: version.into(),
            state: LiveState::Present,
            object: None,
            drift: drift.map(str::to_string),
            unready: None,
        }
    }

    #[test]
    fn a_batch_stores_what_is_new_once_per_resource_and_requeues_what_drifted() {
        let records = [
            report("a", "s1", "5", None),            // a resend of what is stored
            report("b", "s1", "3", Some("deleted")), // older than what is stored
            report("c", "s2", "1", Some("data")),    // new, drifted
            report("c", "s2", "2", None),            // newer again within the batch
            report("c", "s2", "2", None),            // a resend within the batch
            report("d", "s3", "7", None),            // new
        ];
        let ids: Vec<String> = records.iter().map(|r| resource_id(&r.resource)).collect();
        let stored = HashMap::from([(ids[0].clone(), "5".to_string()), (ids[1].clone(), "4".to_string())]);
        let b = batch(&records, &ids, stored);
        use LiveOutcome::*;
        assert_eq!(b.outcomes, [Duplicate, Stale, Stored, Stored, Duplicate, Stored]);
        let kept = BTreeMap::from([
            (ids[2].clone(), Kept { record: 3, versions: 2 }),
            (ids[5].clone(), Kept { record: 5, versions: 1 }),
        ]);
        assert_eq!(b.stored, kept, "a resource's row is its last record stored, counted once per version");
        assert_eq!(b.drifted, BTreeSet::from(["s2".to_string()]), "a stored record that drifted, not an older one");
        assert_eq!(batch(&[], &[], HashMap::new()), Batch::default());
    }

    #[test]
    fn a_key_keeps_the_records_of_what_its_last_run_applied() {
        let cm = |name: &str| ResourceRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: None,
            name: name.into(),
        };
        let inventory = [cm("a")];
        let applied = Finish::Applied {
            phase: fleetsync_model::Phase::Applied,
            generation: 2,
            inventory: &inventory,
            rendered: None,
        };
        assert_eq!(kept_after(&applied), Some(vec![resource_id(&cm("a"))]));
        let requeued = Finish::Requeue { generation: 2, inventory: &[], run_at: fleetsync_model::Timestamp(0) };
        assert_eq!(kept_after(&requeued), Some(vec![]));
        assert_eq!(kept_after(&Finish::Delete), Some(vec![]), "a removed key keeps none");
        assert_eq!(kept_after(&Finish::Restart), Some(vec![]), "nor one removed and wanted again");
        let failed =
            Finish::Failed { phase: fleetsync_model::Phase::Failed, run_at: fleetsync_model::Timestamp(0), error: "x" };
        assert_eq!(kept_after(&failed), None, "a failed run ends nothing");
    }
}
