//! Storing a source's artifact: each file's content once per tenant (by its digest),
//! and the revision as the list of its files' paths and digests.

use super::WriteTx;
use crate::stored::json;
use fleetsync_model::artifact::digest;
use fleetsync_model::Artifact;

/// What storing an artifact added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArtifactStored {
    /// Files the revision holds.
    pub files: usize,
    /// Contents the tenant did not hold before (a content several files share counts once).
    pub new_contents: usize,
    /// Their bytes: what the store grew by, besides the revision's list of files.
    pub new_bytes: u64,
    /// Whether the revision was new (`false`: it was stored before, and is unchanged).
    pub new_revision: bool,
}

/// What the first step of a fetch stored (see [`crate::Artifacts::source_stored`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStored {
    pub artifact: ArtifactStored,
    /// The SyncSets that read the source, each checked at the new revision; they take
    /// it one transaction each ([`crate::Artifacts::source_catch_up_one`]).
    pub syncsets: Vec<String>,
}

/// What a fetch stored (see [`crate::Artifacts::source_fetched`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFetched {
    pub artifact: ArtifactStored,
    /// Each SyncSet that reads the source, applied again: `updated` where the
    /// revision changed its resources or status.
    pub syncsets: Vec<crate::ApplyOutcome>,
}

/// Stores `artifact` as `source`'s revision (see [`crate::Artifacts::artifact_put`]).
pub(crate) async fn put<T: WriteTx>(
    tx: &mut T,
    tenant: &str,
    source: &str,
    artifact: &Artifact,
) -> Result<ArtifactStored, T::Error> {
    let mut stored = ArtifactStored { files: artifact.files.len(), ..ArtifactStored::default() };
    let mut listing = Vec::with_capacity(artifact.files.len());
    for (path, content) in &artifact.files {
        let digest = digest(content);
        if tx.content_put(tenant, &digest, content).await? {
            stored.new_contents += 1;
            stored.new_bytes += content.len() as u64;
        }
        listing.push((path.as_str(), digest));
    }
    let files = json("artifacts", &listing)?;
    stored.new_revision = tx.artifact_insert(tenant, source, &artifact.revision, &files).await?;
    Ok(stored)
}
