//! What an object change does to the work queue, the same in every backend.
//!
//! The write workflows ([`crate::write`]) read what a decision needs (the changed
//! object, the tenant's SyncSets or clusters, which keys are wanted now), ask this
//! module, and have the backend write the answer. Nothing here touches a database, so
//! every rule is unit-tested on its own, like [`crate::lifecycle`]:
//!
//! - whether a written document is unchanged, and its generation ([`upsert`]);
//! - which revision a SyncSet's new keys run: held back by a rollout or not
//!   ([`target`]);
//! - which keys a new or changed Cluster or SyncSet enqueues, and which it unselects
//!   ([`cluster_changed`], [`syncset_changed`]);
//! - which clusters a changed Secret re-plans ([`secret_users`]);
//! - what deleting an object does to its keys ([`deleted`]);
//! - whether an enqueue makes its key dirty, or leaves an own write's key clean
//!   ([`Planned::dirties`]);
//! - what a commit announces, for object writes and completions ([`Announce`]).

use crate::lifecycle::{Enqueue, Finish};
use crate::stored::uses_secret;
use fleetsync_model::{template, ApplyMode, Cluster, Kind, RolloutPhase, SyncSetSpec, Timestamp, WorkKey};
use std::collections::{BTreeMap, HashSet};

/// What writing a document does to its row.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Upsert {
    /// The same content as stored: nothing is written, logged or enqueued, and the
    /// document keeps its generation (an idempotent apply).
    Unchanged { generation: i64 },
    /// Written at `generation` (1 for a new document, the next for a changed one);
    /// `action` names the event (`Created`, `Updated`).
    Write { generation: i64, action: &'static str },
}

impl Upsert {
    /// The generation the document has after the write.
    pub(crate) fn generation(self) -> i64 {
        match self {
            Upsert::Unchanged { generation } | Upsert::Write { generation, .. } => generation,
        }
    }

    /// The apply outcome's result: `unchanged`, `created` or `updated`.
    pub(crate) fn result(self) -> &'static str {
        match self {
            Upsert::Unchanged { .. } => "unchanged",
            Upsert::Write { generation: 1, .. } => "created",
            Upsert::Write { .. } => "updated",
        }
    }
}

/// Decides what writing a document does. `stored`: the stored row's generation and
/// whether its content is the same as the document's, if there is a row.
pub(crate) fn upsert(stored: Option<(i64, bool)>) -> Upsert {
    match stored {
        Some((generation, true)) => Upsert::Unchanged { generation },
        Some((generation, false)) => Upsert::Write { generation: generation + 1, action: "Updated" },
        None => Upsert::Write { generation: 1, action: "Created" },
    }
}

/// A SyncSet as stored, with its rollout's facts: what [`target`] decides from.
#[derive(Debug, Clone)]
pub(crate) struct SyncSetFacts {
    pub(crate) name: String,
    pub(crate) generation: i64,
    pub(crate) mode: ApplyMode,
    pub(crate) targeting: SyncSetSpec,
    /// Its rollout, if it has one.
    pub(crate) rollout: Option<RolloutFacts>,
}

/// What [`target`] needs of a SyncSet's rollout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RolloutFacts {
    pub(crate) phase: RolloutPhase,
    /// The generation the rollout holds clusters at.
    pub(crate) stable: i64,
    /// The apply mode of that revision, if it is stored.
    pub(crate) stable_mode: Option<ApplyMode>,
}

/// The revision a SyncSet's keys are told to run when they are not told otherwise.
/// "Held back by a rollout": while the rollout has not completed, new and unreached
/// clusters get its stable revision (generation and mode), and a cluster that has a
/// key keeps the revision it is at (the rollout moves it). A rollout whose stable
/// revision is not stored holds nothing back (there is nothing to hold clusters at).
pub(crate) fn target(facts: SyncSetFacts) -> Target {
    let held = facts.rollout.filter(|r| r.phase.holds_back()).and_then(|r| r.stable_mode.map(|m| (r.stable, m)));
    let (generation, mode, held_back) = match held {
        Some((stable, mode)) => (stable, mode, true),
        None => (facts.generation, facts.mode, false),
    };
    Target { name: facts.name, generation, mode, held_back, targeting: facts.targeting }
}

/// A SyncSet as matching clusters needs it: its name, generation, mode and targeting.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) generation: i64,
    pub(crate) mode: ApplyMode,
    /// A rollout that has not completed: `generation` and `mode` are its stable
    /// revision's, which new clusters get; a cluster that has a key keeps the revision
    /// it is at (the rollout moves it).
    pub(crate) held_back: bool,
    pub(crate) targeting: SyncSetSpec,
}

/// One key to enqueue and how.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Planned {
    pub(crate) key: WorkKey,
    pub(crate) enqueue: Enqueue,
    /// Whether the enqueue makes the key dirty (runs it again, with fresh attempts).
    /// Every key's does, except an own write's key (see
    /// [`crate::Objects::objects_apply_own`]) when the write leaves it as wanted as it
    /// was: a reconciler's own writes do not re-trigger it. One that changes whether it
    /// is wanted (its SyncSet no longer selects the cluster, or selects it again) is a
    /// real change.
    pub(crate) dirties: bool,
}

impl Planned {
    /// Enqueues `key` as `wanted` (apply) or not (remove), where `had` says whether it
    /// is wanted now and `own` is the key of the own write making the change, if any.
    fn new(key: WorkKey, target: &Target, wanted: bool, had: bool, own: Option<&WorkKey>) -> Planned {
        let enqueue = match (wanted, had && target.held_back) {
            (true, true) => Enqueue::keep_revision(),
            (true, false) => Enqueue::apply(target.generation, target.mode),
            (false, _) => Enqueue::remove(),
        };
        let dirties = own != Some(&key) || wanted != had;
        Planned { key, enqueue, dirties }
    }
}

/// What changed of a cluster, which decides whether a key that stays wanted runs again.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ClusterChange<'a> {
    /// A new cluster, a new way to reach it (endpoint) or new credentials: every key runs.
    Reach,
    /// Only what templates see changed (labels, annotations, values): a key runs again
    /// only if what it applies changes ([`output_changes`]).
    Seen { before: &'a Cluster, after: &'a Cluster },
}

impl<'a> ClusterChange<'a> {
    /// The change from `before` (none: a new cluster) to `after`.
    pub(crate) fn of(before: Option<&'a Cluster>, after: &'a Cluster) -> Self {
        match before {
            Some(before) if before.spec.endpoint == after.spec.endpoint => ClusterChange::Seen { before, after },
            _ => ClusterChange::Reach,
        }
    }
}

/// Whether `change` changes what the SyncSet `t` applies to the cluster. A SyncSet that
/// is not templated applies the same whatever the cluster's labels; a templated one
/// whose resources are at hand (inline, not held back by a rollout) is rendered for the
/// cluster before and after and compared (a rendering that fails counts as a change:
/// the key then fails with the reason); any other templated one runs again when
/// anything its templates see changed.
pub(crate) fn output_changes(t: &Target, change: ClusterChange<'_>) -> bool {
    let ClusterChange::Seen { before, after } = change else { return true };
    let spec = &t.targeting;
    if !spec.templated {
        return false;
    }
    if t.held_back || spec.source_ref.is_some() {
        let (b, a) = (&before.metadata, &after.metadata);
        return (&b.name, &b.labels, &b.annotations, &before.spec.values)
            != (&a.name, &a.labels, &a.annotations, &after.spec.values);
    }
    match (template::render(spec, &spec.resources, before), template::render(spec, &spec.resources, after)) {
        (Ok(a), Ok(b)) => a != b,
        _ => true,
    }
}

/// A new or changed cluster: every SyncSet that selects it applies again if what it
/// applies there changes ([`output_changes`]), every SyncSet that newly selects it
/// applies, and every SyncSet it had a wanted key of but that no longer selects it
/// removes what it applied. SyncSets that neither select it nor had it are untouched.
/// `had`: the SyncSets whose key on this cluster is wanted now; `own`: the key of the
/// own write making the change, if any.
pub(crate) fn cluster_changed(
    tenant: &str,
    cluster: &str,
    labels: &BTreeMap<String, String>,
    change: ClusterChange<'_>,
    syncsets: &[Target],
    had: &HashSet<String>,
    own: Option<&WorkKey>,
) -> Vec<Planned> {
    syncsets
        .iter()
        .filter_map(|t| {
            let key = WorkKey::new(tenant, cluster, t.name.as_str());
            let (selects, had) = (t.targeting.selects(cluster, labels), had.contains(&t.name));
            if selects && had && !output_changes(t, change) {
                return None;
            }
            select(key, t, selects, had, own)
        })
        .collect()
}

/// A new or changed SyncSet: each cluster it selects applies its new generation, each
/// cluster it had a wanted key on but no longer selects removes what it applied.
/// `clusters`: the tenant's clusters with their labels; `had`: the clusters whose key
/// of this SyncSet is wanted now; `own`: the key of the own write making the change.
pub(crate) fn syncset_changed(
    tenant: &str,
    syncset: &Target,
    clusters: &[(String, BTreeMap<String, String>)],
    had: &HashSet<String>,
    own: Option<&WorkKey>,
) -> Vec<Planned> {
    clusters
        .iter()
        .filter_map(|(cluster, labels)| {
            let key = WorkKey::new(tenant, cluster.as_str(), syncset.name.as_str());
            let (selects, had) = (syncset.targeting.selects(cluster, labels), had.contains(cluster));
            // Held back by a rollout, a cluster that has the SyncSet keeps its revision
            // until the rollout moves it: a new generation does not run it.
            if selects && had && syncset.held_back {
                return None;
            }
            select(key, syncset, selects, had, own)
        })
        .collect()
}

/// Selected: apply; no longer selected but wanted until now: remove; else nothing.
fn select(key: WorkKey, t: &Target, selects: bool, had: bool, own: Option<&WorkKey>) -> Option<Planned> {
    (selects || had).then(|| Planned::new(key, t, selects, had, own))
}

/// The clusters that reach their target through the Secret `name` (a kubeconfig): a new
/// or changed Secret re-plans each of them as a changed cluster (new credentials, or
/// ones that were missing). Others are untouched.
pub(crate) fn secret_users<'a>(name: &'a str, clusters: &'a [Cluster]) -> impl Iterator<Item = &'a Cluster> + 'a {
    clusters.iter().filter(move |c| uses_secret(c, name))
}

/// A new or changed source: its key fetches (again) at the source's `generation`; an
/// own write (the fetch's) leaves it clean.
pub(crate) fn source_changed(tenant: &str, name: &str, generation: i64, own: Option<&WorkKey>) -> Planned {
    let key = WorkKey::source(tenant, name);
    Planned { dirties: own != Some(&key), key, enqueue: Enqueue::apply(generation, ApplyMode::Upsert) }
}

/// A new or changed notifier: its key delivers (again) with the notifier's `generation`.
pub(crate) fn notifier_changed(tenant: &str, name: &str, generation: i64) -> Planned {
    Planned {
        key: WorkKey::notifier(tenant, name),
        enqueue: Enqueue::apply(generation, ApplyMode::Upsert),
        dirties: true,
    }
}

/// What deleting an object does to the work queue.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Deleted {
    /// Without the cluster there is no way to reach it: its keys and live state end here.
    ClusterKeysDropped,
    /// The SyncSet's keys are enqueued for removal, so Sync mode deletes what it applied.
    Removals(Vec<Planned>),
    /// A source's key is enqueued for removal (no more fetches); the SyncSets that
    /// read it keep the revision they hold. A notifier's likewise (no more deliveries;
    /// its removal run drops its cursor).
    SourceRemoved(Planned),
    /// Nothing: clusters that use the Secret fail to connect until it is back (and retry
    /// with backoff).
    Nothing,
}

/// What deleting `kind` `tenant/name` does. `keyed`: for a SyncSet, the clusters it has
/// a key on (wanted or not; a removal may still be pending).
pub(crate) fn deleted(kind: Kind, tenant: &str, name: &str, keyed: impl IntoIterator<Item = String>) -> Deleted {
    match kind {
        Kind::Cluster => Deleted::ClusterKeysDropped,
        Kind::SyncSet => Deleted::Removals(
            keyed
                .into_iter()
                .map(|cluster| Planned {
                    key: WorkKey::new(tenant, cluster, name),
                    enqueue: Enqueue::remove(),
                    dirties: true,
                })
                .collect(),
        ),
        Kind::GitRepository | Kind::OCIRepository => Deleted::SourceRemoved(Planned {
            key: WorkKey::source(tenant, name),
            enqueue: Enqueue::remove(),
            dirties: true,
        }),
        Kind::Notifier => Deleted::SourceRemoved(Planned {
            key: WorkKey::notifier(tenant, name),
            enqueue: Enqueue::remove(),
            dirties: true,
        }),
        Kind::Secret => Deleted::Nothing,
    }
}

/// What a committed transaction tells waiters: claimers (work may be claimable from
/// `work_at`) and event watchers (events were appended).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Announce {
    pub(crate) work_at: Option<Timestamp>,
    pub(crate) events: bool,
}

impl Announce {
    /// Object writes at `now`: each created, updated or deleted object appended an
    /// event; any enqueued key may be claimable at once.
    pub(crate) fn objects(now: Timestamp, events: usize, enqueued: u64) -> Self {
        Announce { work_at: (enqueued > 0).then_some(now), events: events > 0 }
    }

    /// A completion `fin` committed at `now`: it appended a `Status` event, and a key it
    /// made ready again ([`Finish::ready_at`]) may be claimed from then on (a retry's
    /// backoff is no reason to claim now, but PostgreSQL claimers' cursors must know
    /// when it is due).
    pub(crate) fn completed(fin: &Finish<'_>, now: Timestamp) -> Self {
        Announce { work_at: fin.ready_at(now), events: true }
    }

    /// Both announcements (a transaction of several writes).
    pub(crate) fn and(self, other: Announce) -> Self {
        let work_at = match (self.work_at, other.work_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Announce { work_at, events: self.events || other.events }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{ClusterSpec, Endpoint, LabelSelector, ObjectMeta};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn target(name: &str, generation: i64, env: &str) -> Target {
        let targeting = SyncSetSpec {
            source_ref: None,
            cluster_selector: Some(LabelSelector::labels(labels(&[("env", env)]))),
            cluster_names: None,
            resource_apply_mode: ApplyMode::Sync,
            resources: Vec::new(),
            rollout: None,
            templated: false,
            values: Default::default(),
            target_customizations: Vec::new(),
            depends_on: Vec::new(),
            health: None,
        };
        Target { name: name.into(), generation, mode: ApplyMode::Sync, held_back: false, targeting }
    }

    fn had(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn planned(cluster: &str, syncset: &str, enqueue: Enqueue) -> Planned {
        Planned { key: WorkKey::new("t", cluster, syncset), enqueue, dirties: true }
    }

    #[test]
    fn a_document_keeps_its_generation_unless_its_content_changed() {
        assert_eq!(upsert(None), Upsert::Write { generation: 1, action: "Created" });
        assert_eq!(upsert(Some((4, false))), Upsert::Write { generation: 5, action: "Updated" });
        assert_eq!(upsert(Some((4, true))), Upsert::Unchanged { generation: 4 });
        let results: Vec<_> = [upsert(None), upsert(Some((4, false))), upsert(Some((4, true)))]
            .iter()
            .map(|u| (u.generation(), u.result()))
            .collect();
        assert_eq!(results, [(1, "created"), (5, "updated"), (4, "unchanged")]);
    }

    #[test]
    fn a_rollout_that_has_not_completed_holds_new_clusters_at_its_stable_revision() {
        let facts = |rollout| SyncSetFacts {
            name: "s".into(),
            generation: 5,
            mode: ApplyMode::Sync,
            targeting: target("s", 5, "dev").targeting,
            rollout,
        };
        let decided = |rollout| {
            let t = super::target(facts(rollout));
            (t.generation, t.mode, t.held_back)
        };
        assert_eq!(decided(None), (5, ApplyMode::Sync, false), "no rollout: the SyncSet's generation");
        let rollout = |phase, stable_mode| Some(RolloutFacts { phase, stable: 3, stable_mode });
        assert_eq!(
            decided(rollout(RolloutPhase::Progressing, Some(ApplyMode::Upsert))),
            (3, ApplyMode::Upsert, true),
            "progressing: the stable revision, in its own mode"
        );
        for phase in [RolloutPhase::Paused, RolloutPhase::RolledBack] {
            assert_eq!(decided(rollout(phase, Some(ApplyMode::Upsert))), (3, ApplyMode::Upsert, true), "{phase}");
        }
        assert_eq!(
            decided(rollout(RolloutPhase::Completed, Some(ApplyMode::Upsert))),
            (5, ApplyMode::Sync, false),
            "completed: nothing held back"
        );
        assert_eq!(
            decided(rollout(RolloutPhase::Progressing, None)),
            (5, ApplyMode::Sync, false),
            "a stable revision that is not stored holds nothing back"
        );
    }

    #[test]
    fn a_relabelled_cluster_applies_what_now_selects_it_and_removes_what_no_longer_does() {
        let syncsets =
            [target("prod-only", 3, "prod"), target("dev-only", 5, "dev"), target("staging-only", 1, "staging")];
        // Was prod (had prod-only), now dev; never had staging-only.
        let plan = cluster_changed(
            "t",
            "c1",
            &labels(&[("env", "dev")]),
            ClusterChange::Reach,
            &syncsets,
            &had(&["prod-only"]),
            None,
        );
        assert_eq!(
            plan,
            [
                planned("c1", "prod-only", Enqueue::remove()),
                planned("c1", "dev-only", Enqueue::apply(5, ApplyMode::Sync))
            ],
            "staging-only neither selects nor had it: untouched"
        );
    }

    #[test]
    fn a_changed_selector_moves_the_syncset_to_the_clusters_it_now_selects() {
        let clusters = [
            ("a".to_string(), labels(&[("env", "prod")])),
            ("b".to_string(), labels(&[("env", "dev")])),
            ("c".to_string(), labels(&[])),
        ];
        // Selected prod (had a), now selects dev.
        let plan = syncset_changed("t", &target("s", 2, "dev"), &clusters, &had(&["a"]), None);
        assert_eq!(plan, [planned("a", "s", Enqueue::remove()), planned("b", "s", Enqueue::apply(2, ApplyMode::Sync))]);
        // An unchanged selector with a new generation re-applies everywhere it selects.
        let again = syncset_changed("t", &target("s", 3, "dev"), &clusters, &had(&["b"]), None);
        assert_eq!(again, [planned("b", "s", Enqueue::apply(3, ApplyMode::Sync))]);
    }

    #[test]
    fn a_deleted_syncset_removes_every_key_it_has_and_a_deleted_cluster_drops_its_own() {
        assert_eq!(
            deleted(Kind::SyncSet, "t", "s", ["a".to_string(), "b".to_string()]),
            Deleted::Removals(vec![planned("a", "s", Enqueue::remove()), planned("b", "s", Enqueue::remove())])
        );
        assert_eq!(deleted(Kind::Cluster, "t", "a", Vec::new()), Deleted::ClusterKeysDropped);
        assert_eq!(deleted(Kind::Secret, "t", "kc", Vec::new()), Deleted::Nothing);
        let source = Planned { key: WorkKey::source("t", "fleet"), enqueue: Enqueue::remove(), dirties: true };
        assert_eq!(deleted(Kind::GitRepository, "t", "fleet", Vec::new()), Deleted::SourceRemoved(source));
    }

    #[test]
    fn a_changed_source_fetches_unless_its_own_fetch_changed_it() {
        let key = WorkKey::source("t", "fleet");
        let planned = source_changed("t", "fleet", 3, None);
        assert_eq!(
            (&planned.key, planned.enqueue, planned.dirties),
            (&key, Enqueue::apply(3, ApplyMode::Upsert), true)
        );
        assert!(!source_changed("t", "fleet", 3, Some(&key)).dirties);
    }

    #[test]
    fn a_relabelled_cluster_runs_only_the_keys_whose_rendering_changes() {
        let templated = |name: &str, data: serde_json::Value| {
            let mut t = target(name, 2, "dev");
            t.targeting.templated = true;
            t.targeting.resources = vec![fleetsync_model::Manifest(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m", "namespace": "apps"}, "data": data,
            }))];
            t
        };
        let mut sourced = templated("sourced", serde_json::json!({}));
        sourced.targeting.resources.clear();
        sourced.targeting.source_ref = Some(fleetsync_model::SourceRef {
            kind: fleetsync_model::SourceKind::GitRepository,
            name: "g".into(),
            path: String::new(),
        });
        let syncsets = [
            target("plain", 1, "dev"),
            templated("by-region", serde_json::json!({"r": "{{ cluster.labels.region }}"})),
            templated("by-name", serde_json::json!({"n": "{{ cluster.name }}"})),
            templated("needs-tier", serde_json::json!({"t": "{{ cluster.labels.tier }}"})),
            sourced,
        ];
        let cluster = |region: &str, endpoint: Endpoint| {
            let mut c = Cluster { metadata: ObjectMeta::new("c1"), spec: ClusterSpec::new(endpoint) };
            c.metadata.labels = labels(&[("env", "dev"), ("region", region)]);
            c
        };
        let (eu, us) = (cluster("eu", Endpoint::Simulator {}), cluster("us", Endpoint::Simulator {}));
        let all = had(&["plain", "by-region", "by-name", "needs-tier", "sourced"]);
        let run = |change| {
            let plan = cluster_changed("t", "c1", &us.metadata.labels, change, &syncsets, &all, None);
            plan.into_iter().map(|p| p.key.syncset).collect::<Vec<_>>()
        };
        assert_eq!(
            run(ClusterChange::of(Some(&eu), &us)),
            ["by-region", "needs-tier", "sourced"],
            "by-region renders anew, needs-tier fails to render (the key says why), sourced cannot be rendered here"
        );
        assert_eq!(
            run(ClusterChange::of(Some(&us), &us)),
            ["needs-tier"],
            "nothing seen changed: only a rendering that fails runs (to say why)"
        );
        let moved = cluster("us", Endpoint::Http { url: "http://10.0.0.1".into() });
        assert_eq!(run(ClusterChange::of(Some(&eu), &moved)).len(), 5, "a new endpoint runs every key");
        assert_eq!(run(ClusterChange::of(None, &us)).len(), 5, "a new cluster runs every key");
    }

    #[test]
    fn a_rotated_secret_replans_only_the_clusters_that_connect_through_it() {
        let cluster = |name: &str, endpoint: Endpoint| Cluster {
            metadata: ObjectMeta::new(name),
            spec: ClusterSpec::new(endpoint),
        };
        let clusters = [
            cluster("uses-it", Endpoint::Kubeconfig { secret_ref: "kc".into() }),
            cluster("uses-another", Endpoint::Kubeconfig { secret_ref: "other".into() }),
            cluster("simulated", Endpoint::Simulator {}),
        ];
        let users: Vec<&str> = secret_users("kc", &clusters).map(|c| c.metadata.name.as_str()).collect();
        assert_eq!(users, ["uses-it"]);
    }

    #[test]
    fn an_own_write_leaves_its_key_clean_unless_it_changes_whether_the_key_is_wanted() {
        let own = WorkKey::new("t", "c", "s");
        let syncsets = [target("s", 2, "dev"), target("other", 4, "dev")];
        let dirty = |plan: &[Planned], syncset: &str| plan.iter().find(|p| p.key.syncset == syncset).map(|p| p.dirties);
        let dev = labels(&[("env", "dev")]);
        let still = cluster_changed("t", "c", &dev, ClusterChange::Reach, &syncsets, &had(&["s", "other"]), Some(&own));
        assert_eq!(dirty(&still, "s"), Some(false), "still selected: the writer stays clean");
        assert_eq!(dirty(&still, "other"), Some(true), "every other key is dirtied as usual");
        let unselected = cluster_changed(
            "t",
            "c",
            &labels(&[("env", "prod")]),
            ClusterChange::Reach,
            &syncsets,
            &had(&["s"]),
            Some(&own),
        );
        assert_eq!(dirty(&unselected, "s"), Some(true), "the write unselects the writer: a real change");
        assert_eq!(unselected[0].enqueue, Enqueue::remove());
        let not_own = cluster_changed("t", "c", &dev, ClusterChange::Reach, &syncsets, &had(&["s"]), None);
        assert_eq!(dirty(&not_own, "s"), Some(true), "not an own write");
        let again = cluster_changed("t", "c", &dev, ClusterChange::Reach, &syncsets, &had(&[]), Some(&own));
        assert_eq!(dirty(&again, "s"), Some(true), "the write selects it again: a real change");
        let clusters = [("c".to_string(), dev.clone())];
        let own_syncset = syncset_changed("t", &syncsets[0], &clusters, &had(&["c"]), Some(&own));
        assert_eq!(dirty(&own_syncset, "s"), Some(false), "an own write of the SyncSet itself, still selecting");
    }

    #[test]
    fn object_writes_announce_work_only_when_they_enqueue_and_events_only_when_they_change() {
        let now = Timestamp(1_000);
        assert_eq!(Announce::objects(now, 0, 0), Announce::default(), "an unchanged apply wakes nobody");
        assert_eq!(Announce::objects(now, 1, 0), Announce { work_at: None, events: true }, "a Secret no cluster uses");
        assert_eq!(Announce::objects(now, 1, 3), Announce { work_at: Some(now), events: true });
        let later = Announce::objects(Timestamp(2_000), 0, 1);
        assert_eq!(
            later.and(Announce::objects(now, 1, 1)),
            Announce { work_at: Some(now), events: true },
            "the earliest wins"
        );
    }

    #[test]
    fn completions_announce_when_the_key_is_claimable_again_and_always_log() {
        use fleetsync_model::Phase;
        let (now, at) = (Timestamp(10), |ms| Some(Timestamp(ms)));
        let applied = Finish::Applied { phase: Phase::Applied, generation: 1, inventory: &[], rendered: None };
        assert_eq!(
            Announce::completed(&applied, now),
            Announce { work_at: None, events: true },
            "applied: idle, nothing to claim"
        );
        let retry = Finish::Failed { phase: Phase::Failed, run_at: Timestamp(40), error: "boom" };
        assert_eq!(Announce::completed(&retry, now).work_at, at(40), "a retry: at its backoff");
        let requeue = Finish::Requeue { generation: 1, inventory: &[], run_at: Timestamp(25) };
        assert_eq!(Announce::completed(&requeue, now).work_at, at(25));
        assert_eq!(Announce::completed(&Finish::Restart, now).work_at, at(10), "a restarted key is ready now");
        let parked = Finish::Failed { phase: Phase::Parked, run_at: Timestamp(10), error: "boom" };
        assert_eq!(Announce::completed(&parked, now), Announce { work_at: None, events: true });
        assert_eq!(Announce::completed(&Finish::Delete, now), Announce { work_at: None, events: true });
    }
}
