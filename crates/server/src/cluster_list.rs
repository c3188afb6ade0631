//! The clusters list and the heat map (see [`fleetsync_model::cluster_list`]): every
//! cluster of the tenant read as one row each ([`Store::cluster_rows`](fleetsync_store::StatusRead::cluster_rows)),
//! then searched, sorted and paged, or counted per value of a label. A search by
//! reachability also reads the failing keys, as the unreachable clusters' metric does
//! ([`unreachable_clusters`]).
//!
//! | Route | |
//! |---|---|
//! | `GET /v1/status/clusters?name=&labelSelector=&condition=&stale=&reachability=&sort=&limit=&offset=` | a page of the clusters found |
//! | `GET /v1/status/heatmap?groupBy=LABEL` | the clusters by condition per value of `LABEL` |

use crate::error::{ApiError, Result};
use crate::extract::{check_tenant, default_tenant, ApiQuery};
use crate::metrics::unreachable_clusters;
use crate::AppState;
use axum::extract::State;
use axum::Json;
use fleetsync_api::{ClusterList, ClusterListItem, HeatMap};
use fleetsync_model::cluster_list::{heat_map, ClusterQuery, Condition, SortBy};
use fleetsync_model::{LabelQuery, Timestamp};
use serde::Deserialize;

/// Clusters per page unless `limit` says otherwise, and at most.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 1_000;
/// The longest name part or label key searched for.
const MAX_SEARCH: usize = 253;

/// `GET /v1/status/clusters`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    /// Part of the name, in any case.
    pub name: Option<String>,
    pub label_selector: Option<String>,
    /// `Ready`, `Progressing`, `Degraded` or `NoKeys`.
    pub condition: Option<String>,
    pub stale: Option<bool>,
    /// `Unreachable` or `Reachable` (by the reachability rule of every view).
    pub reachability: Option<String>,
    /// `name` (the default), `condition`, `failing` or `seen`.
    pub sort: Option<String>,
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: usize,
}

fn invalid(param: &str, rule: impl Into<String>) -> ApiError {
    ApiError::InvalidParam { param: format!("query parameter `{param}`"), rule: rule.into() }
}

impl ListQuery {
    fn query(&self) -> Result<ClusterQuery> {
        if self.name.as_ref().is_some_and(|n| n.len() > MAX_SEARCH) {
            return Err(invalid("name", format!("at most {MAX_SEARCH} bytes")));
        }
        let labels = match &self.label_selector {
            Some(text) => LabelQuery::parse(text).map_err(|e| invalid("labelSelector", e.to_string()))?,
            None => LabelQuery::default(),
        };
        let condition = self
            .condition
            .as_deref()
            .map(|c| {
                Condition::parse(c).ok_or_else(|| invalid("condition", "one of Ready, Progressing, Degraded, NoKeys"))
            })
            .transpose()?;
        let sort = match self.sort.as_deref() {
            Some(s) => SortBy::parse(s).ok_or_else(|| invalid("sort", "one of name, condition, failing, seen"))?,
            None => SortBy::Name,
        };
        let name = self.name.clone().filter(|n| !n.is_empty());
        Ok(ClusterQuery { name, labels, condition, stale: self.stale, sort })
    }
}

/// The time before which a cluster is stale: the store's now less `--stale-after`.
fn stale_cutoff(state: &AppState) -> Timestamp {
    state.store.clock().now().minus(state.stale_after)
}

/// `GET /v1/status/clusters`: a page of the tenant's clusters that match, in order.
pub async fn list(State(state): State<AppState>, ApiQuery(q): ApiQuery<ListQuery>) -> Result<Json<ClusterList>> {
    check_tenant(&q.tenant)?;
    let query = q.query()?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(invalid("limit", format!("1 to {MAX_LIMIT}")));
    }
    let cutoff = stale_cutoff(&state);
    let mut found = query.select(state.store.cluster_rows(&q.tenant).await?, cutoff);
    if let Some(want) = q.reachability.as_deref() {
        let unreachable = match want.to_ascii_lowercase().as_str() {
            "unreachable" => true,
            "reachable" => false,
            _ => return Err(invalid("reachability", "Unreachable or Reachable")),
        };
        let mut of_tenant = unreachable_clusters(state.store.as_ref(), Some(&q.tenant)).await?;
        let clusters = of_tenant.remove(&q.tenant).unwrap_or_default();
        found.retain(|row| clusters.contains(&row.name) == unreachable);
    }
    let total = found.len();
    let items = found
        .into_iter()
        .skip(q.offset)
        .take(limit)
        .map(|row| ClusterListItem { condition: row.condition(), stale: row.stale(cutoff), row })
        .collect();
    Ok(Json(ClusterList { items, total: total as u64, offset: q.offset as u64 }))
}

/// `GET /v1/status/heatmap?groupBy=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HeatMapQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    pub group_by: String,
}

/// `GET /v1/status/heatmap`: the tenant's clusters by condition per value of a label.
pub async fn heatmap(State(state): State<AppState>, ApiQuery(q): ApiQuery<HeatMapQuery>) -> Result<Json<HeatMap>> {
    check_tenant(&q.tenant)?;
    if q.group_by.is_empty() || q.group_by.len() > MAX_SEARCH {
        return Err(invalid("groupBy", format!("a label key, 1 to {MAX_SEARCH} bytes")));
    }
    let rows = state.store.cluster_rows(&q.tenant).await?;
    let groups = heat_map(&rows, &q.group_by, stale_cutoff(&state));
    Ok(Json(HeatMap { label: q.group_by, clusters: rows.len() as u64, groups }))
}
