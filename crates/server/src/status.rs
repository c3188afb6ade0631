//! Status: per key, rolled up per cluster, per SyncSet, and explicit retries.
//!
//! A query that names a cluster or SyncSet that does not exist is a 404 rather than
//! an empty list, so a typo is not mistaken for "nothing to report".

use crate::error::Result;
use crate::extract::{check_name, default_tenant, ApiPath, ApiQuery, TenantQuery};
use crate::objects::fetch;
use crate::{AppState, Items};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use fleetsync_model::{ClusterStatus, Kind, KeyStatus, WorkKey};
use fleetsync_store::{StatusFilter, StoreError};
use fleetsync_api::{Retried, SyncSetStatus};
use serde::Deserialize;

/// `GET /v1/status?tenant=&cluster=&syncset=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    pub cluster: Option<String>,
    pub syncset: Option<String>,
}

/// `GET /v1/status`: the status of every key matching the filter.
pub async fn list(State(state): State<AppState>, ApiQuery(q): ApiQuery<StatusQuery>) -> Result<Json<Items<KeyStatus>>> {
    check_name("query parameter `tenant`", &q.tenant)?;
    let named = [(Kind::Cluster, "cluster", &q.cluster), (Kind::SyncSet, "syncset", &q.syncset)];
    for (_, param, name) in &named {
        if let Some(name) = name {
            check_name(&format!("query parameter `{param}`"), name)?;
        }
    }
    let filter = StatusFilter { tenant: Some(q.tenant.clone()), cluster: q.cluster.clone(), syncset: q.syncset.clone() };
    let items = state.store.status_list(&filter).await?;
    // Only when nothing matched: a deleted SyncSet's keys stay (being removed) and
    // must remain visible.
    if items.is_empty() {
        for (kind, _, name) in named {
            if let Some(name) = name {
                if fetch(state.store.as_ref(), kind, &q.tenant, name).await?.is_none() {
                    return Err(StoreError::not_found(kind, &q.tenant, name).into());
                }
            }
        }
    }
    Ok(Json(Items { items }))
}

/// `GET /v1/status/clusters/{name}`: the cluster's condition and its keys.
pub async fn cluster(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<Json<ClusterStatus>> {
    check_name("cluster name in the path", &name)?;
    let tenant = q.tenant()?;
    if state.store.cluster_get(tenant, &name).await?.is_none() {
        return Err(StoreError::not_found(Kind::Cluster, tenant, &name).into());
    }
    let filter = StatusFilter { tenant: Some(tenant.into()), cluster: Some(name.clone()), syncset: None };
    let keys = state.store.status_list(&filter).await?;
    Ok(Json(ClusterStatus::roll_up(tenant, &name, keys)))
}

/// `GET /v1/status/syncsets/{name}`: the SyncSet's keys on every cluster.
pub async fn syncset(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<Json<SyncSetStatus>> {
    check_name("SyncSet name in the path", &name)?;
    let tenant = q.tenant()?;
    let Some(set) = state.store.syncset_get(tenant, &name).await? else {
        return Err(StoreError::not_found(Kind::SyncSet, tenant, &name).into());
    };
    let filter = StatusFilter { tenant: Some(tenant.into()), cluster: None, syncset: Some(name.clone()) };
    let items = state.store.status_list(&filter).await?;
    Ok(Json(SyncSetStatus { tenant: tenant.into(), syncset: name, generation: set.metadata.generation, items }))
}

/// `POST /v1/status/clusters/{cluster}/syncsets/{syncset}/retry`: runs the key again
/// now, whatever its phase (e.g. parked). 202: the run happens later, on a worker.
pub async fn retry(
    State(state): State<AppState>,
    ApiPath((cluster, syncset)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<(StatusCode, Json<Retried>)> {
    check_name("cluster name in the path", &cluster)?;
    check_name("SyncSet name in the path", &syncset)?;
    let key = WorkKey::new(q.tenant()?, cluster, syncset);
    state.store.work_retry(&key).await?;
    Ok((StatusCode::ACCEPTED, Json(Retried { retried: key })))
}
