//! Artifacts of sources on PostgreSQL (see [`crate::Artifacts`]): written by the shared
//! workflow ([`crate::write::artifact`]), read back here in two queries.

use super::{query, PgResult, PgStore};
use crate::stored::{corrupt, decode};
use crate::write::artifact::{self, ArtifactStored};
use crate::write::source;
use crate::{ApplyOutcome, Artifacts, OwnWrite, Result, SourceStored};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use fleetsync_model::Artifact;
use std::collections::{BTreeMap, HashMap};

#[async_trait]
impl Artifacts for PgStore {
    async fn artifact_put(&self, tenant: &str, source: &str, artifact: &Artifact) -> Result<ArtifactStored> {
        self.write("storing an artifact", |tx| {
            let (tenant, source, artifact) = (tenant.to_string(), source.to_string(), artifact.clone());
            Box::pin(async move { artifact::put(tx, &tenant, &source, &artifact).await })
        })
        .await
    }

    async fn artifact_get(&self, tenant: &str, source: &str, revision: &str) -> Result<Option<Artifact>> {
        self.read("reading an artifact", |c, _| {
            let (tenant, source, revision) = (tenant.to_string(), source.to_string(), revision.to_string());
            Box::pin(async move { get(c, &tenant, &source, &revision).await })
        })
        .await
    }

    async fn source_stored(
        &self,
        tenant: &str,
        name: &str,
        artifact: &Artifact,
        own: OwnWrite,
    ) -> Result<SourceStored> {
        self.write("storing a fetched revision", |tx| {
            let (tenant, name, artifact, own) = (tenant.to_string(), name.to_string(), artifact.clone(), own.clone());
            Box::pin(async move { source::stored(tx, &tenant, &name, &artifact, &own).await })
        })
        .await
    }

    async fn source_catch_up_one(&self, tenant: &str, name: &str, own: OwnWrite) -> Result<Option<ApplyOutcome>> {
        self.write("applying a SyncSet at its source's revision", |tx| {
            let (tenant, name, own) = (tenant.to_string(), name.to_string(), own.clone());
            Box::pin(async move { source::catch_up_one(tx, &tenant, &name, &own).await })
        })
        .await
    }
}

/// `source`'s `revision`, if stored: its listing, then its contents in one query.
pub(super) async fn get<C: GenericClient>(
    c: &C,
    tenant: &str,
    source: &str,
    revision: &str,
) -> PgResult<Option<Artifact>> {
    let rows = query(
        c,
        "SELECT files FROM artifacts WHERE tenant = $1 AND source = $2 AND revision = $3",
        &[&tenant, &source, &revision],
    )
    .await?;
    let Some(row) = rows.first() else { return Ok(None) };
    let listing: Vec<(String, String)> = decode("artifacts", &row.try_get::<_, String>(0)?)?;
    let digests: Vec<&str> = listing.iter().map(|(_, d)| d.as_str()).collect();
    let rows =
        query(c, "SELECT digest, content FROM contents WHERE tenant = $1 AND digest = ANY($2)", &[&tenant, &digests])
            .await?;
    let mut contents = HashMap::with_capacity(rows.len());
    for r in &rows {
        contents.insert(r.try_get::<_, String>(0)?, r.try_get::<_, Vec<u8>>(1)?);
    }
    let mut files = BTreeMap::new();
    for (path, digest) in listing {
        let bytes = contents
            .get(&digest)
            .cloned()
            .ok_or_else(|| corrupt("artifacts", format!("{path}: no content {digest}")))?;
        files.insert(path, bytes);
    }
    Ok(Some(Artifact { revision: revision.to_string(), files }))
}
