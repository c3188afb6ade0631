//! Rollouts: where a SyncSet's staged change stands, and an operator's controls
//! (pause, resume, promote, abort). A control is decided and written like any move of
//! the rollout (see [`fleetsync_store::rollout_drive`]): at once, as a compare-and-set.

use crate::access::Caller;
use crate::error::{ApiError, Result};
use crate::extract::{check_name, ApiPath, ApiQuery, TenantQuery};
use crate::{AppState, Items};
use axum::extract::State;
use axum::Json;
use fleetsync_model::{RolloutControl, RolloutStatus};
use fleetsync_store::rollout_drive::{self, DriveError};

/// `GET /v1/rollouts?tenant=`: every rollout of the tenant; those not completed with
/// per-step counts.
pub async fn list(
    State(state): State<AppState>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<Json<Items<RolloutStatus>>> {
    let tenant = q.tenant()?;
    Ok(Json(Items::all(rollout_drive::list(&*state.store, tenant).await.map_err(drive_error)?)))
}

/// `GET /v1/rollouts/{syncset}?tenant=`.
pub async fn get(
    State(state): State<AppState>,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<Json<RolloutStatus>> {
    check_name("SyncSet name in the path", &name)?;
    let tenant = q.tenant()?;
    let status = rollout_drive::status(&*state.store, tenant, &name).await.map_err(drive_error)?;
    status.map(Json).ok_or_else(|| no_rollout(tenant, &name))
}

/// `POST /v1/rollouts/{syncset}/{control}?tenant=`: `pause`, `resume`, `promote` or
/// `abort`; answers the rollout as the control left it. 409 if the control does not
/// apply in the rollout's phase. The move is logged naming the caller.
pub async fn control(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((name, control)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<TenantQuery>,
) -> Result<Json<RolloutStatus>> {
    check_name("SyncSet name in the path", &name)?;
    let Some(control) = RolloutControl::parse(&control) else {
        return Err(ApiError::InvalidParam {
            param: "control in the path".into(),
            rule: "one of pause, resume, promote, abort".into(),
        });
    };
    let tenant = q.tenant()?;
    let driven = rollout_drive::drive(&*state.store, tenant, &name, Some(control), Some(&caller.subject))
        .await
        .map_err(drive_error)?;
    driven.map(|d| Json(d.status)).ok_or_else(|| no_rollout(tenant, &name))
}

fn no_rollout(tenant: &str, name: &str) -> ApiError {
    ApiError::NotFound(format!(
        "SyncSet {tenant}/{name} has no rollout (it does not exist, or its spec has no rollout)"
    ))
}

pub(crate) fn drive_error(e: DriveError) -> ApiError {
    match e {
        DriveError::Store(e) => e.into(),
        e @ (DriveError::Refused(_) | DriveError::Contended | DriveError::Superseded { .. }) => {
            ApiError::Conflict(e.to_string())
        }
    }
}
