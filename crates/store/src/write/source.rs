//! Sources: a GitRepository or OCIRepository written (its key enqueued to fetch it), a SyncSet's
//! resources read from the source it names ([`resolve`]), and a fetched revision
//! stored ([`stored`]) and taken up by every SyncSet that reads the source, one
//! SyncSet a transaction ([`catch_up_one`], see [`crate::Artifacts::source_fetched`]).
//!
//! A source's status (the revision its SyncSets read, and when it was stored) lives in
//! its stored document: a fetch changes it without a new generation, and a write of the
//! spec keeps it.

use super::apply::{apply_docs, logged, By};
use super::{artifact, DocRow, Stored, WriteTx};
use crate::plan::{self, Upsert};
use crate::stored::{canonical, decode_doc, source_id, table};
use crate::{ApplyOutcome, OwnWrite, SourceStored, StoreError};
use fleetsync_model::document::validate_sourced;
use fleetsync_model::{
    Artifact, Document, GitRepository, Kind, OCIRepository, ParseBudget, Source, SourceKind, SourceStatus, SyncSet,
    SyncSetStatus,
};

/// A source, written with the status it has; a new or changed one enqueues its key,
/// which fetches it ([`plan::source_changed`]). Refused (`NameTaken`) if a source of
/// the other kind has its name.
pub(super) async fn apply<T: WriteTx>(tx: &mut T, source: &Source, by: By<'_>) -> Result<(Upsert, u64), T::Error> {
    let (tenant, name) = (source.metadata().tenant(), source.metadata().name.as_str());
    let kind = source.kind();
    let other = match kind {
        SourceKind::GitRepository => SourceKind::OCIRepository,
        SourceKind::OCIRepository => SourceKind::GitRepository,
    };
    if tx.object_stored(other.kind(), tenant, name).await?.is_some() {
        let (kind, taken_by) = (kind.kind().as_str(), other.kind().as_str());
        return Err(StoreError::NameTaken { kind, tenant: tenant.into(), name: name.into(), taken_by }.into());
    }
    let kind = kind.kind();
    let stored = tx.object_stored(kind, tenant, name).await?;
    let mut source = source.clone();
    source.set_status(match &stored {
        Some(st) => decode(kind, st)?.status().cloned(),
        None => None,
    });
    let doc = canonical_source(&source)?;
    let upsert = plan::upsert(stored.map(|st| (st.generation, st.doc == doc)));
    let Upsert::Write { generation, .. } = upsert else { return Ok((upsert, 0)) };
    tx.doc_put(kind, DocRow { tenant, name, generation, doc: &doc }).await?;
    logged(tx, kind, tenant, name, upsert, by).await?;
    let enqueued = tx.work_enqueue(&[plan::source_changed(tenant, name, generation, by.own)]).await?;
    Ok((upsert, enqueued))
}

/// A stored source of `kind`.
fn decode(kind: Kind, st: &Stored) -> Result<Source, StoreError> {
    Ok(match kind {
        Kind::OCIRepository => Source::Oci(decode_doc::<OCIRepository>(table(kind), &st.doc, st.generation)?),
        _ => Source::Git(decode_doc::<GitRepository>(table(kind), &st.doc, st.generation)?),
    })
}

fn canonical_source(source: &Source) -> Result<String, StoreError> {
    match source {
        Source::Git(g) => canonical(g),
        Source::Oci(o) => canonical(o),
    }
}

/// The source `tenant/name`, of whichever kind it is (names are unique across kinds).
async fn stored_source<T: WriteTx>(tx: &mut T, tenant: &str, name: &str) -> Result<Option<Source>, T::Error> {
    for kind in [Kind::GitRepository, Kind::OCIRepository] {
        if let Some(st) = tx.object_stored(kind, tenant, name).await? {
            return Ok(Some(decode(kind, &st)?));
        }
    }
    Ok(None)
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
    let Some(stored) = tx.object_stored(r.kind.kind(), tenant, &r.name).await? else { return Ok(out) };
    let source = decode(r.kind.kind(), &stored)?;
    let Some(revision) = source.revision().map(String::from) else { return Ok(out) };
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

/// Stores `artifact` as the source `name`'s revision, by the holder of its key
/// (`own`), once every SyncSet that reads it holds manifests at that revision that
/// pass the rules (each is resolved here, and nothing is written if one breaks a
/// rule); answers the names of those SyncSets, which [`catch_up_one`] then applies
/// one transaction each (see [`crate::Artifacts::source_fetched`]). Refused with
/// nothing written if the source is gone or the lease is lost.
pub(crate) async fn stored<T: WriteTx>(
    tx: &mut T,
    tenant: &str,
    name: &str,
    artifact: &Artifact,
    own: &OwnWrite,
) -> Result<SourceStored, T::Error> {
    tx.tenant_lock(tenant).await?;
    let Some(mut source) = stored_source(tx, tenant, name).await? else {
        return Err(StoreError::not_found(Kind::GitRepository, tenant, name).into());
    };
    let (kind, generation) = (source.kind(), source.metadata().generation);
    let id = source_id(kind, name);
    let stored_artifact = artifact::put(tx, tenant, &id, artifact).await?;
    source.set_status(Some(SourceStatus { revision: Some(artifact.revision.clone()), fetched_at: Some(tx.now()) }));
    let doc = canonical_source(&source)?;
    tx.doc_put(kind.kind(), DocRow { tenant, name, generation, doc: &doc }).await?;
    let mut syncsets = Vec::new();
    for st in tx.syncsets_reading(tenant, &id).await? {
        let reader: SyncSet = decode_doc("syncsets", &st.doc, st.generation)?;
        resolve(tx, &reader).await?;
        syncsets.push(reader.metadata.name);
    }
    if !tx.work_lease_held(&own.key, own.fence).await? {
        return Err(StoreError::LeaseLost { key: own.key.clone(), fence: own.fence }.into());
    }
    Ok(SourceStored { artifact: stored_artifact, syncsets })
}

/// Applies again the first SyncSet (in name order) that reads the source `name` but
/// not at its revision, by the holder of the source's key (`own`): it takes the
/// revision as a new generation. `None` when every reader is at the revision (or the
/// source has none). Refused with nothing written if its manifests break a rule or the
/// lease is lost.
pub(crate) async fn catch_up_one<T: WriteTx>(
    tx: &mut T,
    tenant: &str,
    name: &str,
    own: &OwnWrite,
) -> Result<Option<ApplyOutcome>, T::Error> {
    tx.tenant_lock(tenant).await?;
    let Some(source) = stored_source(tx, tenant, name).await? else { return Ok(None) };
    let Some(revision) = source.revision() else { return Ok(None) };
    let id = source_id(source.kind(), name);
    let mut behind = None;
    // In name order: the first one behind is the one to apply.
    for st in tx.syncsets_reading(tenant, &id).await? {
        let reader: SyncSet = decode_doc("syncsets", &st.doc, st.generation)?;
        if reader.status.as_ref().and_then(|s| s.source_revision.as_deref()) != Some(revision) {
            behind = Some(reader);
            break;
        }
    }
    let Some(reader) = behind else { return Ok(None) };
    let by = By { own: Some(&own.key), actor: None, keys: None };
    let outcome = apply_docs(tx, &[Document::SyncSet(reader)], by).await?.pop();
    if !tx.work_lease_held(&own.key, own.fence).await? {
        return Err(StoreError::LeaseLost { key: own.key.clone(), fence: own.fence }.into());
    }
    Ok(outcome)
}
