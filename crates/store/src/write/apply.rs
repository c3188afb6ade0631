//! Applying documents: all or nothing, within quotas, or as a reconciler's own write
//! (see [`crate::Objects::objects_apply_within`] and
//! [`crate::Objects::objects_apply_own`]).
//!
//! Each document: its stored row is read and [`plan::upsert`] decides whether it
//! changed; a changed one is written, logged, and plans the keys it affects (a SyncSet
//! first stores its revision and decides its rollout, [`revision::on_write`]).

use super::{ClusterRow, DocRow, NewEvent, SyncSetRow, WriteTx};
use crate::plan::{self, Announce, ClusterChange, RolloutFacts, SyncSetFacts, Upsert};
use crate::quota::{self, Quota, Quotas};
use crate::revision::{self, RolloutWrite};
use crate::sealed::{self, Keyring};
use crate::stored::{canonical, decode, decode_doc, json, source_id};
use crate::{ApplyOutcome, OwnWrite, StoreError};
use fleetsync_model::{Cluster, Document, Kind, Secret, Source, SyncSet, WorkKey};
use std::collections::BTreeSet;

/// Who writes: `own`, the key of an own write, which its enqueues leave clean
/// ([`plan::Planned::dirties`]); `actor`, who the events name; `keys`, what Secrets are
/// sealed with ([`sealed`]).
#[derive(Clone, Copy)]
pub(super) struct By<'a> {
    pub(super) own: Option<&'a WorkKey>,
    pub(super) actor: Option<&'a str>,
    pub(super) keys: Option<&'a Keyring>,
}

/// Applies documents by `actor` within `quotas`, Secrets sealed with `keys`. Their
/// tenants are locked first, so no other write changes what is measured between the
/// two readings of each tenant's usage; nothing is written if one would exceed its
/// quota.
pub(crate) async fn apply_within<T: WriteTx>(
    tx: &mut T,
    docs: &[Document],
    actor: Option<&str>,
    quotas: &Quotas,
    keys: Option<&Keyring>,
) -> Result<Vec<ApplyOutcome>, T::Error> {
    let tenants = lock_tenants(tx, docs).await?;
    let limited: Vec<(&str, Quota)> =
        tenants.into_iter().map(|t| (t, quotas.of(t))).filter(|(_, q)| !q.is_unlimited()).collect();
    let mut before = Vec::with_capacity(limited.len());
    for (tenant, quota) in &limited {
        before.push(tx.tenant_usage(tenant, quota).await?);
    }
    let out = apply_docs(tx, docs, By { own: None, actor, keys }).await?;
    for ((tenant, quota), before) in limited.iter().zip(&before) {
        let after = tx.tenant_usage(tenant, quota).await?;
        quota::check(tenant, quota, before, &after).map_err(StoreError::from)?;
    }
    Ok(out)
}

/// An own write: applied with `own.key` as the own write's key, then refused (the
/// transaction rolled back) unless the key is still running with `own.fence`.
///
/// The lease is checked last, and its row stays locked until commit where rows lock
/// (PostgreSQL), so no take-over can commit between the check and this commit; coming
/// after the enqueues, which lock rows in id order, the check usually finds the row
/// locked already. Checked first, a take-over could commit in between on PostgreSQL;
/// on SQLite (one writer) either order is correct, and a refusal writes nothing either
/// way.
pub(crate) async fn apply_own<T: WriteTx>(
    tx: &mut T,
    docs: &[Document],
    own: &OwnWrite,
    keys: Option<&Keyring>,
) -> Result<Vec<ApplyOutcome>, T::Error> {
    lock_tenants(tx, docs).await?;
    let out = apply_docs(tx, docs, By { own: Some(&own.key), actor: None, keys }).await?;
    if !tx.work_lease_held(&own.key, own.fence).await? {
        return Err(StoreError::LeaseLost { key: own.key.clone(), fence: own.fence }.into());
    }
    Ok(out)
}

/// Locks the documents' tenants, in order; returns them.
async fn lock_tenants<'d, T: WriteTx>(tx: &mut T, docs: &'d [Document]) -> Result<BTreeSet<&'d str>, T::Error> {
    let tenants: BTreeSet<&str> = docs.iter().map(|d| d.metadata().tenant()).collect();
    for tenant in &tenants {
        tx.tenant_lock(tenant).await?;
    }
    Ok(tenants)
}

pub(super) async fn apply_docs<T: WriteTx>(
    tx: &mut T,
    docs: &[Document],
    by: By<'_>,
) -> Result<Vec<ApplyOutcome>, T::Error> {
    let mut outcomes = Vec::with_capacity(docs.len());
    for doc in docs {
        let (kind, tenant, name) = (doc.kind(), doc.metadata().tenant(), doc.metadata().name.as_str());
        let (upsert, enqueued) = match doc {
            Document::Cluster(c) => apply_cluster(tx, c, by).await?,
            Document::SyncSet(s) => apply_syncset(tx, s, by).await?,
            Document::Secret(s) => apply_secret(tx, s, by).await?,
            Document::GitRepository(g) => super::source::apply(tx, &Source::Git(g.clone()), by).await?,
            Document::OCIRepository(o) => super::source::apply(tx, &Source::Oci(o.clone()), by).await?,
            Document::Notifier(n) => super::notifier::apply(tx, n, by).await?,
        };
        if let Upsert::Write { .. } = upsert {
            tx.work_announce(Announce::objects(tx.now(), 1, enqueued));
        }
        let (generation, result) = (upsert.generation(), upsert.result());
        outcomes.push(ApplyOutcome { kind, tenant: tenant.into(), name: name.into(), generation, result, enqueued });
    }
    Ok(outcomes)
}

/// Appends the event of a written document.
pub(super) async fn logged<T: WriteTx>(
    tx: &mut T,
    kind: Kind,
    tenant: &str,
    name: &str,
    upsert: Upsert,
    by: By<'_>,
) -> Result<(), T::Error> {
    let Upsert::Write { generation, action } = upsert else { return Ok(()) };
    tx.event_append(NewEvent { tenant, kind: kind.as_str(), name, action, generation, actor: by.actor }).await
}

/// A Cluster; a new or changed one plans its keys ([`plan::cluster_changed`]).
async fn apply_cluster<T: WriteTx>(tx: &mut T, c: &Cluster, by: By<'_>) -> Result<(Upsert, u64), T::Error> {
    let (tenant, name) = (c.metadata.tenant(), c.metadata.name.as_str());
    let doc = canonical(c)?;
    let stored = tx.object_stored(Kind::Cluster, tenant, name).await?;
    let upsert = plan::upsert(stored.as_ref().map(|s| (s.generation, s.doc == doc)));
    let Upsert::Write { generation, .. } = upsert else { return Ok((upsert, 0)) };
    let before: Option<Cluster> = stored.map(|s| decode("clusters", &s.doc)).transpose()?;
    let labels = json("clusters", &c.metadata.labels)?;
    tx.cluster_put(ClusterRow { tenant, name, generation, labels: &labels, doc: &doc }).await?;
    logged(tx, Kind::Cluster, tenant, name, upsert, by).await?;
    Ok((upsert, enqueue_cluster(tx, c, ClusterChange::of(before.as_ref(), c), by.own).await?))
}

/// Enqueues a new or changed cluster's keys ([`plan::cluster_changed`]), each SyncSet's
/// revision decided by [`plan::target`].
async fn enqueue_cluster<T: WriteTx>(
    tx: &mut T,
    c: &Cluster,
    change: ClusterChange<'_>,
    own: Option<&WorkKey>,
) -> Result<u64, T::Error> {
    let (tenant, name) = (c.metadata.tenant(), c.metadata.name.as_str());
    let facts = tx.cluster_planning(tenant, name).await?;
    let targets: Vec<_> = facts.syncsets.into_iter().map(plan::target).collect();
    let plan = plan::cluster_changed(tenant, name, &c.metadata.labels, change, &targets, &facts.had, own);
    tx.work_enqueue(&plan).await
}

/// A Secret, sealed (given keys) and compared opened (sealing the same content twice
/// gives two different rows); a new or changed one re-plans every cluster that reaches
/// its target through it ([`plan::secret_users`]: new credentials, or ones that were
/// missing).
async fn apply_secret<T: WriteTx>(tx: &mut T, s: &Secret, by: By<'_>) -> Result<(Upsert, u64), T::Error> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    let doc = canonical(s)?;
    let stored = match tx.object_stored(Kind::Secret, tenant, name).await? {
        Some(old) => {
            Some((old.generation, sealed::open(by.keys, tenant, name, &old.doc).map_err(StoreError::from)? == doc))
        }
        None => None,
    };
    let upsert = plan::upsert(stored);
    let Upsert::Write { generation, .. } = upsert else { return Ok((upsert, 0)) };
    let doc = sealed::seal(by.keys, tenant, name, doc).map_err(StoreError::from)?;
    tx.doc_put(Kind::Secret, DocRow { tenant, name, generation, doc: &doc }).await?;
    logged(tx, Kind::Secret, tenant, name, upsert, by).await?;
    let clusters = tx.cluster_list(tenant).await?;
    let mut enqueued = 0;
    for c in plan::secret_users(name, &clusters) {
        enqueued += enqueue_cluster(tx, c, ClusterChange::Reach, by.own).await?;
    }
    Ok((upsert, enqueued))
}

/// A SyncSet, its resources read from its source if it names one
/// ([`super::source::resolve`]): a new or changed one stores its revision (and the one
/// it replaces, if a SyncSet last written before revisions were kept lacks it),
/// decides its rollout, plans its keys ([`plan::syncset_changed`]) and prunes its old
/// revisions. One that waits for its source is stored, and runs nowhere yet. One whose
/// `dependsOn` closes a cycle is refused ([`super::dependency`]).
async fn apply_syncset<T: WriteTx>(tx: &mut T, s: &SyncSet, by: By<'_>) -> Result<(Upsert, u64), T::Error> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    if !s.spec.depends_on.is_empty() {
        super::dependency::refuse_cycle(tx, s).await?;
    }
    let s = &super::source::resolve(tx, s).await?;
    let doc = match &s.spec.source_ref {
        // What the user wrote, and the source's revision: the resources are the revision's.
        Some(_) => {
            let mut head = s.clone();
            head.spec.resources.clear();
            canonical(&head)?
        }
        None => canonical(s)?,
    };
    let stored = tx.object_stored(Kind::SyncSet, tenant, name).await?;
    let upsert = plan::upsert(stored.as_ref().map(|st| (st.generation, st.doc == doc)));
    let Upsert::Write { generation, .. } = upsert else { return Ok((upsert, 0)) };
    let previous = match stored {
        Some(st) if !tx.revision_kept(tenant, name, st.generation).await? => {
            Some(decode_doc::<SyncSet>("syncsets", &st.doc, st.generation)?).filter(|p| p.spec.source_ref.is_none())
        }
        _ => None,
    };
    let mode = s.spec.resource_apply_mode;
    let mut targeting = s.spec.targeting();
    if s.waits_for_source() {
        // Selects no cluster until it has resources: a cluster written meanwhile gets
        // no key of it.
        (targeting.cluster_selector, targeting.cluster_names) = (None, Some(Vec::new()));
    }
    let selector = json("syncsets", &targeting)?;
    let source = s.spec.source_ref.as_ref().map(|r| source_id(r.kind, &r.name));
    let row = SyncSetRow { tenant, name, generation, mode, selector: &selector, doc: &doc, source: source.as_deref() };
    tx.syncset_put(row).await?;
    logged(tx, Kind::SyncSet, tenant, name, upsert, by).await?;
    if s.waits_for_source() {
        return Ok((upsert, 0));
    }
    if let Some(previous) = &previous {
        revision_put(tx, previous, generation - 1).await?;
    }
    revision_put(tx, s, generation).await?;
    let rollout = rollout_on_write(tx, s, generation).await?;

    let facts = SyncSetFacts { name: name.into(), generation, mode, targeting: s.spec.targeting(), rollout };
    let target = plan::target(facts);
    let planning = tx.syncset_planning(tenant, name).await?;
    let plan = plan::syncset_changed(tenant, &target, &planning.clusters, &planning.had, by.own);
    let enqueued = tx.work_enqueue(&plan).await?;

    let mut needed = tx.work_wanted_generations(tenant, name).await?;
    needed.extend(rollout.map(|r| r.stable));
    tx.revisions_drop(tenant, name, &revision::prune(generation, needed)).await?;
    Ok((upsert, enqueued))
}

/// Stores revision `generation` of `s` ([`revision::split`]) unless it is stored already.
async fn revision_put<T: WriteTx>(tx: &mut T, s: &SyncSet, generation: i64) -> Result<(), T::Error> {
    let (tenant, syncset) = (s.metadata.tenant(), s.metadata.name.as_str());
    let split = revision::split(s)?;
    let row = super::RevisionRow { tenant, syncset, generation, mode: s.spec.resource_apply_mode, split: &split };
    tx.revision_put(row).await
}

/// Writes what a new generation of `s` does to its rollout ([`revision::on_write`]);
/// returns the stored rollout's facts, if it has one.
async fn rollout_on_write<T: WriteTx>(
    tx: &mut T,
    s: &SyncSet,
    generation: i64,
) -> Result<Option<RolloutFacts>, T::Error> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    let previous = tx.rollout_get(tenant, name).await?;
    match revision::on_write(s, generation, previous.as_ref(), tx.now()) {
        RolloutWrite::None => {
            tx.rollout_delete(tenant, name).await?;
            Ok(None)
        }
        RolloutWrite::Store(state) => {
            tx.rollout_put(&state).await?;
            let modes = tx.revision_modes(tenant, name, &[state.stable]).await?;
            let stable_mode = modes.get(&state.stable).copied();
            Ok(Some(RolloutFacts { phase: state.phase, stable: state.stable, stable_mode }))
        }
    }
}
