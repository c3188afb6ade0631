//! Failures by cause, and retries of many keys at once: what the dashboard's failure
//! groups and its retry buttons read and do.
//!
//! | Route | |
//! |---|---|
//! | `GET /v1/status/failures?tenant=&syncset=` | the failed and parked keys grouped by cause ([`fleetsync_model::failure`]) |
//! | `POST /v1/status/failures/retry?tenant=&cause=&syncset=` | retries every failing key of that cause |
//! | `POST /v1/status/clusters/{name}/retry?tenant=` | retries every failing key of the cluster |
//!
//! Each reads the failing keys a page at a time, at most [`MAX_SCAN`] of them (an answer
//! says when it stopped there), and a retry is recorded with its caller as the actor,
//! one key at a time, as the single-key retry is.

use crate::access::Caller;
use crate::error::{ApiError, Result};
use crate::extract::{check_name, check_tenant, default_tenant, ApiPath, ApiQuery, TenantQuery};
use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use fleetsync_api::{FailureGroups, RetriedKeys};
use fleetsync_model::failure::{self, MAX_CAUSE_CHARS};
use fleetsync_model::{KeyStatus, Kind, Phase, WorkKey};
use fleetsync_store::{PageRequest, StatusFilter, Store, StoreError};
use serde::Deserialize;

/// Failing keys read at most per request.
pub const MAX_SCAN: usize = 20_000;
/// Keys read per store page.
const SCAN_PAGE: usize = 1_000;

/// `?tenant=&syncset=` of the failure routes, and `cause=` of a group's retry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailuresQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    pub syncset: Option<String>,
    pub cause: Option<String>,
}

/// The failing keys of `filter` (its phases set here), at most [`MAX_SCAN`]; and
/// whether there were more.
async fn failing(store: &dyn Store, mut filter: StatusFilter) -> Result<(Vec<KeyStatus>, bool)> {
    filter.phases = vec![Phase::Failed, Phase::Parked];
    let mut keys = Vec::new();
    let mut page = PageRequest::first(SCAN_PAGE);
    loop {
        let got = store.status_page(&filter, &page).await?;
        keys.extend(got.items);
        match got.next {
            Some(next) if keys.len() < MAX_SCAN => page.after = Some(next),
            Some(_) => return Ok((keys, true)),
            None => return Ok((keys, false)),
        }
    }
}

impl FailuresQuery {
    async fn filter(&self, store: &dyn Store) -> Result<StatusFilter> {
        check_tenant(&self.tenant)?;
        if let Some(syncset) = &self.syncset {
            check_name("query parameter `syncset`", syncset)?;
            if store.syncset_get(&self.tenant, syncset).await?.is_none() {
                return Err(StoreError::not_found(Kind::SyncSet, &self.tenant, syncset).into());
            }
        }
        Ok(StatusFilter { tenant: Some(self.tenant.clone()), syncset: self.syncset.clone(), ..StatusFilter::default() })
    }
}

/// `GET /v1/status/failures`: the tenant's (or one SyncSet's) failing keys by cause.
pub async fn list(State(state): State<AppState>, ApiQuery(q): ApiQuery<FailuresQuery>) -> Result<Json<FailureGroups>> {
    if q.cause.is_some() {
        return Err(ApiError::InvalidParam {
            param: "query parameter `cause`".into(),
            rule: "only a retry takes it".into(),
        });
    }
    let (keys, truncated) = failing(state.store.as_ref(), q.filter(state.store.as_ref()).await?).await?;
    Ok(Json(FailureGroups { groups: failure::group(&keys), keys: keys.len() as u64, truncated }))
}

/// `POST /v1/status/failures/retry?cause=`: retries each failing key whose cause is `cause`.
pub async fn retry_cause(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<FailuresQuery>,
) -> Result<(StatusCode, Json<RetriedKeys>)> {
    let cause = match q.cause.as_deref() {
        Some(c) if !c.is_empty() && c.chars().count() <= MAX_CAUSE_CHARS => c,
        _ => {
            return Err(ApiError::InvalidParam {
                param: "query parameter `cause`".into(),
                rule: format!("a failure group's cause, 1 to {MAX_CAUSE_CHARS} characters"),
            })
        }
    };
    let (keys, truncated) = failing(state.store.as_ref(), q.filter(state.store.as_ref()).await?).await?;
    let of_cause = keys.iter().filter(|k| failure::cause_of(k) == cause);
    let retried = retry_each(state.store.as_ref(), of_cause.map(|k| &k.key), &caller).await?;
    Ok((StatusCode::ACCEPTED, Json(RetriedKeys { retried, truncated })))
}

/// `POST /v1/status/clusters/{name}/retry`: retries each failing key of the cluster.
pub async fn retry_cluster(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<(StatusCode, Json<RetriedKeys>)> {
    check_name("cluster name in the path", &name)?;
    let tenant = q.tenant()?;
    if state.store.cluster_get(tenant, &name).await?.is_none() {
        return Err(StoreError::not_found(Kind::Cluster, tenant, &name).into());
    }
    let filter = StatusFilter { tenant: Some(tenant.to_string()), cluster: Some(name), ..StatusFilter::default() };
    let (keys, truncated) = failing(state.store.as_ref(), filter).await?;
    let retried = retry_each(state.store.as_ref(), keys.iter().map(|k| &k.key), &caller).await?;
    Ok((StatusCode::ACCEPTED, Json(RetriedKeys { retried, truncated })))
}

/// Retries each key (a key gone meanwhile is skipped); answers how many were retried.
async fn retry_each<'a>(store: &dyn Store, keys: impl Iterator<Item = &'a WorkKey>, caller: &Caller) -> Result<u64> {
    let mut retried = 0;
    for key in keys {
        match store.work_retry_by(key, Some(&caller.subject)).await {
            Ok(()) => retried += 1,
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(retried)
}
