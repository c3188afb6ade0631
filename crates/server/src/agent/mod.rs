//! The agents' side of the API: live-state reports from `fleetsync agent`, what an
//! agent should watch, and the live state stored.
//!
//! | Route | |
//! |---|---|
//! | `POST /v1/agent/reports` | a [`ReportBatch`] → one result per report, once persisted |
//! | `GET /v1/agent/resources?tenant=&cluster=` | the resources fleetsync applies to the cluster |
//! | `GET /v1/live?tenant=&cluster=` | the latest live state stored per resource |
//!
//! The two agent routes take the cluster's agent credential only (a token issued for
//! that cluster: `fleetsync token create --agent`); anyone else is refused before
//! anything is read, so a refused caller learns nothing. A report is matched
//! to the key whose SyncSet lists the resource ([`desired`]); reports of resources
//! fleetsync does not apply there are acknowledged and dropped. A resource's stored
//! state ends with the run that stops applying it (the store's
//! `live::kept_after`), so a deletion reported after it is not needed.

pub mod desired;

use crate::access::Caller;
use crate::error::{ApiError, Result};
use crate::extract::{check_name, check_tenant, default_tenant, ApiQuery, ApiText};
use crate::paging::{self, Scope, Want};
use crate::{AppState, Items};
use axum::extract::State;
use axum::Json;
use fleetsync_api::{Ack, Acks, LiveResource, ReportResult};
use fleetsync_model::readiness::readiness;
use fleetsync_model::{Kind, LiveReport, LiveState, ReportBatch, ResourceRef};
use fleetsync_store::{LiveFilter, LiveRecord, StoreError};
use serde::Deserialize;

/// `POST /v1/agent/reports`: checks, judges and persists a batch in one transaction.
pub async fn report(State(state): State<AppState>, caller: Caller, ApiText(body): ApiText) -> Result<Json<Acks>> {
    let batch = parse_batch(&body)?;
    must_be_agent_of(&caller, &batch.tenant, &batch.cluster)?;
    let desired = desired::Desired::load(state.store.as_ref(), &batch.tenant, &batch.cluster).await?;
    let mut items = Vec::with_capacity(batch.reports.len());
    let mut records = Vec::new();
    for r in batch.reports {
        let judged = desired.judge(&r);
        items.push(Ack {
            resource: r.resource.clone(),
            resource_version: r.resource_version.clone(),
            result: ReportResult::Unmanaged,
            drift: judged.as_ref().and_then(|(_, d)| d.clone()),
        });
        if let Some((syncset, drift)) = judged {
            records.push((items.len() - 1, record(r, syncset, drift)));
        }
    }
    let (at, records): (Vec<usize>, Vec<LiveRecord>) = records.into_iter().unzip();
    let recorded = state.store.live_record(&batch.tenant, &batch.cluster, records).await?;
    for (i, outcome) in at.into_iter().zip(recorded.outcomes) {
        items[i].result = crate::wire::report_result(outcome);
    }
    Ok(Json(Acks { items, requeued: recorded.requeued.into_iter().map(|k| k.syncset).collect() }))
}

/// Refuses anyone but the agent of `tenant/cluster`.
fn must_be_agent_of(caller: &Caller, tenant: &str, cluster: &str) -> Result<()> {
    if caller.reports_for(tenant, cluster) {
        return Ok(());
    }
    Err(ApiError::Forbidden(format!("{} is not the agent of cluster {tenant}/{cluster}", caller.subject)))
}

fn record(r: LiveReport, syncset: String, drift: Option<String>) -> LiveRecord {
    let object = if r.state == LiveState::Present { r.object } else { None };
    let unready = object.as_ref().and_then(|o| readiness(o).err());
    LiveRecord {
        resource: r.resource,
        syncset,
        resource_version: r.resource_version,
        state: r.state,
        object,
        drift,
        unready,
    }
}

/// The batch, or a 400 (not JSON) / 422 (a field breaks a rule) naming the field.
fn parse_batch(body: &str) -> Result<ReportBatch> {
    let mut de = serde_json::Deserializer::from_str(body);
    let batch: ReportBatch = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::BadBody(format!("not a JSON report batch: {inner}"))
        } else {
            ApiError::InvalidField { field: if field == "." { "body".into() } else { field }, rule: inner.to_string() }
        }
    })?;
    batch.validate().map_err(|e| ApiError::InvalidField { field: e.field, rule: e.message })?;
    Ok(batch)
}

/// `?tenant=&cluster=` of the agent routes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    pub cluster: String,
}

impl ClusterQuery {
    fn check(&self) -> Result<()> {
        check_tenant(&self.tenant)?;
        check_name("query parameter `cluster`", &self.cluster)
    }
}

/// `GET /v1/agent/resources`: what the agent of a cluster is to watch.
pub async fn resources(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ClusterQuery>,
) -> Result<Json<Items<ResourceRef>>> {
    q.check()?;
    must_be_agent_of(&caller, &q.tenant, &q.cluster)?;
    let desired = desired::Desired::load(state.store.as_ref(), &q.tenant, &q.cluster).await?;
    Ok(Json(Items::all(desired.resources())))
}

/// `GET /v1/live?tenant=&cluster=&limit=&continue=`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
    pub cluster: String,
    pub limit: Option<usize>,
    #[serde(rename = "continue")]
    pub continue_: Option<String>,
}

/// `GET /v1/live`: the live state stored for a cluster (objects left out), or one page
/// of it.
pub async fn live(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<LiveQuery>,
) -> Result<Json<Items<LiveResource>>> {
    check_tenant(&q.tenant)?;
    check_name("query parameter `cluster`", &q.cluster)?;
    if state.store.cluster_get(&q.tenant, &q.cluster).await?.is_none() {
        return Err(StoreError::not_found(Kind::Cluster, &q.tenant, &q.cluster).into());
    }
    let scope = Scope::new("/v1/live", &q.tenant, &q.cluster);
    Ok(Json(match paging::want::<String>(q.limit, q.continue_.as_deref(), &scope)? {
        Want::All => Items::all(state.store.live_list(&q.tenant, &q.cluster).await?),
        Want::Page(page) => {
            let filter = LiveFilter { tenant: q.tenant.clone(), cluster: q.cluster.clone() };
            paging::items(state.store.live_page(&filter, &page).await?, &scope, |l| l)
        }
    }))
}
