//! `GET /v1/syncsets/{name}/render?cluster=`: a SyncSet's resources as one cluster
//! gets them — for a templated SyncSet, rendered for that cluster
//! ([`fleetsync_model::template`]); Kubernetes Secret values redacted. The SyncSet's
//! latest generation is rendered, with the resources its source gave it.

use crate::error::{ApiError, Result};
use crate::extract::{check_name, check_tenant, default_tenant, ApiPath, ApiQuery};
use crate::AppState;
use axum::extract::State;
use axum::Json;
use fleetsync_api::Rendered;
use fleetsync_model::{secret, template, Kind};
use fleetsync_store::StoreError;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenderQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    pub cluster: String,
}

pub async fn render(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<RenderQuery>,
) -> Result<Json<Rendered>> {
    check_name("SyncSet name in the path", &name)?;
    check_name("cluster", &q.cluster)?;
    let tenant = check_tenant(&q.tenant)?;
    let Some(latest) = state.store.syncset_get(tenant, &name).await? else {
        return Err(StoreError::not_found(Kind::SyncSet, tenant, &name).into());
    };
    let Some(cluster) = state.store.cluster_get(tenant, &q.cluster).await? else {
        return Err(StoreError::not_found(Kind::Cluster, tenant, &q.cluster).into());
    };
    let generation = latest.metadata.generation;
    // A SyncSet read from a source is stored without its resources: its revision has them.
    let set = match latest.spec.source_ref {
        None => latest,
        Some(_) => state.store.revision_get(tenant, &name, generation).await?.ok_or_else(|| {
            ApiError::Conflict(format!("SyncSet {tenant}/{name} has no resources yet: its source has fetched none"))
        })?,
    };
    let field = || format!("rendering for cluster {}", q.cluster);
    let mut resources = template::resources_for(&set, &cluster)
        .map_err(|e| ApiError::InvalidField { field: field(), rule: e.to_string() })?
        .into_owned();
    let hash = template::rendered_hash(&resources);
    resources.iter_mut().for_each(|m| secret::redact_manifest(&mut m.0));
    Ok(Json(Rendered { syncset: name, cluster: q.cluster, generation, hash, resources }))
}
