//! Artifacts of sources on SQLite (see [`crate::Artifacts`]): written by the shared
//! workflow ([`crate::write::artifact`]), read back here.

use super::write::run;
use super::SqliteStore;
use crate::stored::decode;
use crate::write::artifact::{self, ArtifactStored};
use crate::write::source;
use crate::{ApplyOutcome, Artifacts, OwnWrite, Result, SourceStored};
use async_trait::async_trait;
use fleetsync_model::Artifact;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;

#[async_trait]
impl Artifacts for SqliteStore {
    async fn artifact_put(&self, tenant: &str, source: &str, artifact: &Artifact) -> Result<ArtifactStored> {
        let (tenant, source, artifact) = (tenant.to_string(), source.to_string(), artifact.clone());
        let (stored, _) = self
            .write("storing an artifact", move |tx, now, _| {
                run(tx, now, async |w| artifact::put(w, &tenant, &source, &artifact).await)
            })
            .await?;
        Ok(stored)
    }

    async fn source_stored(
        &self,
        tenant: &str,
        name: &str,
        artifact: &Artifact,
        own: OwnWrite,
    ) -> Result<SourceStored> {
        let (tenant, name, artifact) = (tenant.to_string(), name.to_string(), artifact.clone());
        let (stored, announce) = self
            .write("storing a fetched revision", move |tx, now, _| {
                run(tx, now, async |w| source::stored(w, &tenant, &name, &artifact, &own).await)
            })
            .await?;
        self.announce(announce);
        Ok(stored)
    }

    async fn source_catch_up_one(&self, tenant: &str, name: &str, own: OwnWrite) -> Result<Option<ApplyOutcome>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        let (outcome, announce) = self
            .write("applying a SyncSet at its source's revision", move |tx, now, _| {
                run(tx, now, async |w| source::catch_up_one(w, &tenant, &name, &own).await)
            })
            .await?;
        self.announce(announce);
        Ok(outcome)
    }

    async fn artifact_get(&self, tenant: &str, source: &str, revision: &str) -> Result<Option<Artifact>> {
        let (tenant, source, revision) = (tenant.to_string(), source.to_string(), revision.to_string());
        self.read("reading an artifact", move |c, _| get(c, &tenant, &source, &revision)).await
    }
}

pub(super) fn get(c: &Connection, tenant: &str, source: &str, revision: &str) -> Result<Option<Artifact>> {
    let files: Option<String> = c
        .prepare_cached("SELECT files FROM artifacts WHERE tenant = ?1 AND source = ?2 AND revision = ?3")?
        .query_row(params![tenant, source, revision], |r| r.get(0))
        .optional()?;
    let Some(files) = files else { return Ok(None) };
    let listing: Vec<(String, String)> = decode("artifacts", &files)?;
    let mut content = c.prepare_cached("SELECT content FROM contents WHERE tenant = ?1 AND digest = ?2")?;
    let mut out = BTreeMap::new();
    for (path, digest) in listing {
        let bytes: Vec<u8> = content
            .query_row(params![tenant, digest], |r| r.get(0))
            .optional()?
            .ok_or_else(|| crate::stored::corrupt("artifacts", format!("{path}: no content {digest}")))?;
        out.insert(path, bytes);
    }
    Ok(Some(Artifact { revision: revision.to_string(), files: out }))
}
