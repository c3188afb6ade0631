//! Sources: a GitRepository written (its key enqueued to fetch it), a SyncSet's
//! resources read from the source it names ([`resolve`]), and a fetched revision
//! stored and taken up by every SyncSet that reads the source ([`fetched`], see
//! [`crate::Artifacts::source_fetched`]).
//!
//! A source's status (the revision its SyncSets read, and when it was stored) lives in
//! its stored document: a fetch changes it without a new generation, and a write of the
//! spec keeps it.

use super::apply::{apply_docs, logged, By};
use super::{artifact, DocRow, WriteTx};
use crate::plan::{self, Upsert};
use crate::stored::{canonical, decode, decode_doc, source_id};
use crate::{OwnWrite, SourceFetched, StoreError};
use fleetsync_model::document::validate_sourced;
use fleetsync_model::{Artifact, Document, GitRepository, Kind, ParseBudget, SourceStatus, SyncSet, SyncSetStatus};

const TABLE: &str = "git_repositories";

/// A GitRepository, written with the status it has; a new or changed one enqueues its
/// key, which fetches it ([`plan::source_changed`]).
pub(super) async fn apply<T: WriteTx>(tx: &mut T, g: &GitRepository, by: By<'_>) -> Result<(Upsert, u64), T::Error> {
    let (tenant, name) = (g.metadata.tenant(), g.metadata.name.as_str());
    let stored = tx.object_stored(Kind::GitRepository, tenant, name).await?;
    let status = match &stored {
        Some(st) => decode::<GitRepository>(TABLE, &st.doc)?.status,
        None => None,
    };
    let doc = canonical(&GitRepository { status, ..g.clone() })?;
    let upsert = plan::upsert(stored.map(|st| (st.generation, st.doc == doc)));
    let Upsert::Write { generation, .. } = upsert else { return Ok((upsert, 0)) };
    tx.doc_put(Kind::GitRepository, DocRow { tenant, name, generation, doc: &doc }).await?;
    logged(tx, Kind::GitRepository, tenant, name, upsert, by).await?;
    let enqueued = tx.work_enqueue(&[plan::source_changed(tenant, name, generation, by.own)]).await?;
    Ok((upsert, enqueued))
}

/// `s` as its keys run it: as given for inline resources; for a `sourceRef`, the
/// manifests under its path at the source's revision, checked as an apply checks
/// them, and that revision as `status.sourceRevision`. While the source has no
/// revision (or does not exist), `s` without resources or revision: it
/// [waits](SyncSet::waits_for_source).
pub(super) async fn resolve<T: WriteTx>(tx: &mut T, s: &SyncSet) -> Result<SyncSet, T::Error> {
    let mut out = SyncSet { status: None, ..s.clone() };
    let Some(r) = &s.spec.source_ref else { return Ok(out) };
    let tenant = s.metadata.tenant();
    let Some(stored) = tx.object_stored(Kind::GitRepository, tenant, &r.name).await? else { return Ok(out) };
    let source: GitRepository = decode(TABLE, &stored.doc)?;
    let Some(revision) = source.status.and_then(|st| st.revision) else { return Ok(out) };
    let id = source_id(r.kind, &r.name);
    let artifact = tx.artifact_get(tenant, &id, &revision).await?.ok_or_else(|| StoreError::Corrupt {
        table: "artifacts",
        message: format!("{id} has no stored revision {revision}"),
    })?;
    let invalid = |rule: String| StoreError::SourceInvalid {
        tenant: tenant.into(),
        name: s.metadata.name.clone(),
        revision: revision.clone(),
        rule,
    };
    out.spec.resources = artifact.manifests(&r.path, &ParseBudget::default()).map_err(|e| invalid(e.to_string()))?;
    validate_sourced(&out).map_err(|e| invalid(e.to_string()))?;
    out.status = Some(SyncSetStatus { source_revision: Some(revision.clone()) });
    Ok(out)
}

/// Stores `artifact` as the GitRepository `name`'s revision, by the holder of its key
/// (`own`), and applies again every SyncSet that reads it: each takes the revision as
/// a new generation (see [`crate::Artifacts::source_fetched`]). Refused with nothing
/// written if the source is gone, a SyncSet's manifests break a rule, or the lease is
/// lost.
pub(crate) async fn fetched<T: WriteTx>(
    tx: &mut T,
    tenant: &str,
    name: &str,
    artifact: &Artifact,
    own: &OwnWrite,
) -> Result<SourceFetched, T::Error> {
    tx.tenant_lock(tenant).await?;
    let Some(stored) = tx.object_stored(Kind::GitRepository, tenant, name).await? else {
        return Err(StoreError::not_found(Kind::GitRepository, tenant, name).into());
    };
    let mut source: GitRepository = decode_doc(TABLE, &stored.doc, stored.generation)?;
    let id = source_id(fleetsync_model::SourceKind::GitRepository, name);
    let stored_artifact = artifact::put(tx, tenant, &id, artifact).await?;
    source.status = Some(SourceStatus { revision: Some(artifact.revision.clone()), fetched_at: Some(tx.now()) });
    let doc = canonical(&source)?;
    tx.doc_put(Kind::GitRepository, DocRow { tenant, name, generation: stored.generation, doc: &doc }).await?;

    let by = By { own: Some(&own.key), actor: None, keys: None };
    let mut readers = Vec::new();
    for st in tx.syncsets_reading(tenant, &id).await? {
        readers.push(Document::SyncSet(decode_doc("syncsets", &st.doc, st.generation)?));
    }
    let syncsets = apply_docs(tx, &readers, by).await?;
    if !tx.work_lease_held(&own.key, own.fence).await? {
        return Err(StoreError::LeaseLost { key: own.key.clone(), fence: own.fence }.into());
    }
    Ok(SourceFetched { artifact: stored_artifact, syncsets })
}
