//! Status: per key, rolled up per cluster, per SyncSet, and explicit retries.
//!
//! A query that names a cluster or SyncSet that does not exist is a 404 rather than
//! an empty list, so a typo is not mistaken for "nothing to report".

use crate::access::Caller;
use crate::error::{ApiError, Result};
use crate::extract::{check_name, check_tenant, default_tenant, ApiPath, ApiQuery, TenantQuery};
use crate::objects::fetch;
use crate::paging::{self, Scope, Want};
use crate::{AppState, Items};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use fleetsync_api::{Retried, SyncSetStatus, TenantStatus};
use fleetsync_model::{ClusterStatus, KeyStatus, Kind, Phase, WorkKey};
use fleetsync_store::{Event, EventObject, StatusFilter, StoreError};
use serde::Deserialize;

/// `GET /v1/status?tenant=&cluster=&syncset=&phase=&stale=&limit=&continue=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    pub cluster: Option<String>,
    pub syncset: Option<String>,
    /// Phases, comma-separated (`Failed,Parked`): keys in any of them.
    pub phase: Option<String>,
    /// `true`: only keys that have not applied their SyncSet's generation yet.
    #[serde(default)]
    pub stale: bool,
    pub limit: Option<usize>,
    #[serde(rename = "continue")]
    pub continue_: Option<String>,
}

/// The phases of `?phase=`, each checked.
fn phases(text: &str) -> Result<Vec<Phase>> {
    let mut phases: Vec<Phase> = text
        .split(',')
        .map(|p| {
            Phase::parse(p.trim()).ok_or_else(|| ApiError::InvalidParam {
                param: "query parameter `phase`".into(),
                rule: format!("unknown phase {:?} (one of {})", p.trim(), Phase::ALL.map(Phase::as_str).join(", ")),
            })
        })
        .collect::<Result<_>>()?;
    phases.sort();
    phases.dedup();
    Ok(phases)
}

/// `GET /v1/status`: the status of every key matching the filter, or one page of it.
pub async fn list(State(state): State<AppState>, ApiQuery(q): ApiQuery<StatusQuery>) -> Result<Json<Items<KeyStatus>>> {
    check_tenant(&q.tenant)?;
    let named = [(Kind::Cluster, "cluster", &q.cluster), (Kind::SyncSet, "syncset", &q.syncset)];
    for (_, param, name) in &named {
        if let Some(name) = name {
            // A source's key is named `source:NAME` as its cluster and its SyncSet (a
            // notifier's `notifier:NAME`).
            let name = fleetsync_model::key::source_part(name)
                .or_else(|| fleetsync_model::key::notifier_part(name))
                .unwrap_or(name);
            check_name(&format!("query parameter `{param}`"), name)?;
        }
    }
    let phases = q.phase.as_deref().map(phases).transpose()?.unwrap_or_default();
    let filters = format!(
        "cluster={};syncset={};phase={};stale={}",
        q.cluster.as_deref().unwrap_or(""),
        q.syncset.as_deref().unwrap_or(""),
        phases.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(","),
        q.stale
    );
    let scope = Scope::new("/v1/status", &q.tenant, &filters);
    let filter = StatusFilter {
        tenant: Some(q.tenant.clone()),
        cluster: q.cluster.clone(),
        syncset: q.syncset.clone(),
        phases,
        stale: q.stale,
    };
    let (items, first) = match paging::want::<WorkKey>(q.limit, q.continue_.as_deref(), &scope)? {
        Want::All => (Items::all(state.store.status_list(&filter).await?), true),
        Want::Page(page) => {
            let first = page.after.is_none();
            (paging::items(state.store.status_page(&filter, &page).await?, &scope, |k| k), first)
        }
    };
    // Only when nothing matched from the start: a deleted SyncSet's keys stay (being
    // removed) and must remain visible.
    if first && items.items.is_empty() {
        for (kind, _, name) in named {
            if let Some(name) = name {
                if fetch(state.store.as_ref(), kind, &q.tenant, name).await?.is_none() {
                    return Err(StoreError::not_found(kind, &q.tenant, name).into());
                }
            }
        }
    }
    Ok(Json(items))
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
    let filter = StatusFilter { tenant: Some(tenant.into()), cluster: Some(name.clone()), ..StatusFilter::default() };
    let keys = state.store.status_list(&filter).await?;
    Ok(Json(ClusterStatus::roll_up(tenant, &name, keys)))
}

/// `GET /v1/status/syncsets/{name}?tenant=&limit=&continue=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncSetStatusQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    pub limit: Option<usize>,
    #[serde(rename = "continue")]
    pub continue_: Option<String>,
}

/// `GET /v1/status/syncsets/{name}`: the SyncSet's summary (counted by the store, not
/// from the keys sent), its progress (keys by the generation each is told to run, and
/// whether it is applied), and its keys on every cluster, all or one page.
pub async fn syncset(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<SyncSetStatusQuery>,
) -> Result<Json<SyncSetStatus>> {
    check_name("SyncSet name in the path", &name)?;
    let tenant = check_tenant(&q.tenant)?;
    let Some(set) = state.store.syncset_get(tenant, &name).await? else {
        return Err(StoreError::not_found(Kind::SyncSet, tenant, &name).into());
    };
    let scope = Scope::new(&format!("/v1/status/syncsets/{name}"), tenant, "");
    let filter = StatusFilter { tenant: Some(tenant.into()), syncset: Some(name.clone()), ..StatusFilter::default() };
    let items = match paging::want::<WorkKey>(q.limit, q.continue_.as_deref(), &scope)? {
        Want::All => Items::all(state.store.status_list(&filter).await?),
        Want::Page(page) => paging::items(state.store.status_page(&filter, &page).await?, &scope, |k| k),
    };
    let summary = state.store.status_summary(tenant, Some(&name)).await?;
    let progress = fleetsync_store::progress::read(state.store.as_ref(), &set, &summary)
        .await
        .map_err(crate::rollouts::drive_error)?;
    Ok(Json(SyncSetStatus {
        tenant: tenant.into(),
        syncset: name,
        generation: set.metadata.generation,
        summary,
        progress,
        items: items.items,
        continue_: items.continue_,
    }))
}

/// `GET /v1/status/summary?tenant=`: every key of the tenant summed up, and its
/// clusters counted by condition, from the store's counts (no key is read).
pub async fn summary(State(state): State<AppState>, ApiQuery(q): ApiQuery<TenantQuery>) -> Result<Json<TenantStatus>> {
    let tenant = q.tenant()?;
    let (summary, clusters) = tokio::try_join!(
        state.store.status_summary(tenant, None),
        state.store.cluster_conditions(tenant, state.stale_after)
    )?;
    Ok(Json(TenantStatus { tenant: tenant.into(), summary, clusters }))
}

/// `GET /v1/status/clusters/{cluster}/syncsets/{syncset}/events?tenant=&limit=&before=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEventsQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    #[serde(default = "default_key_events")]
    pub limit: usize,
    /// Only events older than this sequence number: the next page back is `before`
    /// the last `seq` of this one.
    pub before: Option<u64>,
}

/// Events a key's page holds when the client names no `limit`.
pub const DEFAULT_KEY_EVENTS: usize = 20;
/// The most a key's page holds.
pub const MAX_KEY_EVENTS: usize = 1_000;

fn default_key_events() -> usize {
    DEFAULT_KEY_EVENTS
}

/// `GET /v1/status/clusters/{cluster}/syncsets/{syncset}/events`: the key's newest
/// status events (each run's outcome), newest first, read from the log's index by
/// object: a page costs its own size, whatever the log's.
pub async fn key_events(
    State(state): State<AppState>,
    ApiPath((cluster, syncset)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<KeyEventsQuery>,
) -> Result<Json<Items<Event>>> {
    check_name("cluster name in the path", &cluster)?;
    check_name("SyncSet name in the path", &syncset)?;
    let tenant = check_tenant(&q.tenant)?;
    if !(1..=MAX_KEY_EVENTS).contains(&q.limit) {
        return Err(ApiError::InvalidParam {
            param: "query parameter `limit`".into(),
            rule: format!("must be between 1 and {MAX_KEY_EVENTS}, got {}", q.limit),
        });
    }
    let object = EventObject { tenant: tenant.into(), kind: "Status".into(), name: format!("{cluster}/{syncset}") };
    Ok(Json(Items::all(state.store.events_of(&object, q.before, q.limit).await?)))
}

/// `POST /v1/status/clusters/{cluster}/syncsets/{syncset}/retry`: runs the key again
/// now, whatever its phase (e.g. parked), and logs the retry naming the caller. 202:
/// the run happens later, on a worker.
/// `POST /v1/gitrepositories/{name}/reconcile` (and `/v1/ocirepositories/…`): fetches the source now (its key runs
/// at once, as a retry makes it), rather than at its next interval.
pub async fn fetch_now(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<(StatusCode, Json<Retried>)> {
    check_name("source name in the path", &name)?;
    let key = WorkKey::source(q.tenant()?, &name);
    state.store.work_retry_by(&key, Some(&caller.subject)).await?;
    Ok((StatusCode::ACCEPTED, Json(Retried { retried: key })))
}

/// `POST /v1/notifiers/{name}/reconcile`: the notifier's key runs at once, as a retry
/// makes it (also a parked or backing-off one), and sends what it has not sent.
pub async fn deliver_now(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<(StatusCode, Json<Retried>)> {
    check_name("Notifier name in the path", &name)?;
    let key = WorkKey::notifier(q.tenant()?, &name);
    state.store.work_retry_by(&key, Some(&caller.subject)).await?;
    Ok((StatusCode::ACCEPTED, Json(Retried { retried: key })))
}

pub async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((cluster, syncset)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<(StatusCode, Json<Retried>)> {
    check_name("cluster name in the path", &cluster)?;
    check_name("SyncSet name in the path", &syncset)?;
    let key = WorkKey::new(q.tenant()?, cluster, syncset);
    state.store.work_retry_by(&key, Some(&caller.subject)).await?;
    Ok((StatusCode::ACCEPTED, Json(Retried { retried: key })))
}
