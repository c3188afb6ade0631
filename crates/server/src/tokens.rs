//! Hub-issued tokens over the API: an admin of a tenant issues and revokes the
//! credentials of its tenant (people's tokens and its clusters' agent credentials); a
//! fleet-admin, any. The token itself is in the answer to its creation only.
//!
//! A token belongs to the tenant of its grant (a `fleet-admin` token to none: it is
//! hub-wide), and its name is unique in that tenant, so what one tenant names its
//! tokens neither blocks nor tells another anything.
//!
//! | Route | |
//! |---|---|
//! | `POST /v1/tokens` | a [`TokenCreate`] → the [`IssuedToken`] |
//! | `GET /v1/tokens` | the records of the tokens the caller may administer (`admin` of a tenant, or `fleet-admin`) |
//! | `DELETE /v1/tokens/{name}` | revokes one; `?tenant=` says which when the caller sees several of that name |
//! | `GET /v1/whoami` | the caller's subject and grants |

use crate::access::tokens::{issue, pick, IssueError, PickError, TokenRequest};
use crate::access::{Caller, Right};
use crate::error::{ApiError, Result};
use crate::extract::{check_name, check_tenant, ApiPath, ApiQuery, ApiText};
use crate::{AppState, Items};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use fleetsync_api::{IssuedToken, Revoked, TokenCreate, WhoAmI};
use fleetsync_model::{Grant, TokenRecord};
use serde::Deserialize;
use std::time::Duration;

/// The longest life a token can be given (ten years): a bound, not a default.
const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 86_400);

/// `POST /v1/tokens`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiText(body): ApiText,
) -> Result<(StatusCode, Json<IssuedToken>)> {
    let mut de = serde_json::Deserializer::from_str(&body);
    let req: TokenCreate = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        ApiError::InvalidField {
            field: if field == "." { "body".into() } else { field },
            rule: e.into_inner().to_string(),
        }
    })?;
    if !caller.may_issue(&req.grant) {
        return Err(ApiError::Forbidden(format!("{} may not issue a token granting {}", caller.subject, req.grant)));
    }
    let ttl = req.ttl_seconds.map(Duration::from_secs);
    if ttl.is_some_and(|t| t.is_zero() || t > MAX_TTL) {
        return Err(ApiError::InvalidField {
            field: "ttlSeconds".into(),
            rule: format!("must be between 1 and {}", MAX_TTL.as_secs()),
        });
    }
    let request = TokenRequest { grant: req.grant, name: req.name, ttl, created_by: caller.subject.clone() };
    let (token, record) =
        issue(state.store.as_ref(), state.store.clock().as_ref(), request).await.map_err(|e| match e {
            IssueError::Store(e) => ApiError::from(e),
            IssueError::NameTaken { .. } => ApiError::Conflict(e.to_string()),
            other => ApiError::InvalidField { field: "name".into(), rule: other.to_string() },
        })?;
    tracing::info!(name = record.name, grant = %record.grant, by = caller.subject, "token issued");
    Ok((StatusCode::CREATED, Json(IssuedToken { token, record })))
}

/// `GET /v1/tokens`: the tokens whose grant the caller could have issued; `403` for a
/// caller who administers no tenant.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Json<Items<TokenRecord>>> {
    administers_tokens(&caller)?;
    Ok(Json(Items::all(visible(&state, &caller).await?)))
}

/// `DELETE /v1/tokens/{name}`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeQuery {
    /// The tenant of the token (of its grant), when the caller sees several so named.
    tenant: Option<String>,
}

/// `DELETE /v1/tokens/{name}`: 404 for a token the caller may not see, as for one that
/// does not exist; 409 when the caller sees several of that name and gave no tenant.
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<RevokeQuery>,
) -> Result<Json<Revoked>> {
    check_name("token name in the path", &name)?;
    if let Some(tenant) = &q.tenant {
        check_tenant(tenant)?;
    }
    administers_tokens(&caller)?;
    let records = visible(&state, &caller).await?;
    let record = pick(&records, &name, q.tenant.as_deref()).map_err(|e| match e {
        PickError::NotFound(_) => ApiError::NotFound(e.to_string()),
        PickError::Several { .. } => ApiError::Conflict(e.to_string()),
    })?;
    if !state.store.token_revoke(record.grant.tenant(), &name).await? {
        return Err(ApiError::NotFound(PickError::NotFound(name).to_string()));
    }
    tracing::info!(name, grant = %record.grant, by = caller.subject, "token revoked");
    Ok(Json(Revoked { revoked: name }))
}

/// The records of the tokens the caller may administer.
async fn visible(state: &AppState, caller: &Caller) -> Result<Vec<TokenRecord>> {
    Ok(state.store.token_list().await?.into_iter().filter(|t| caller.may_issue(&t.grant)).collect())
}

/// `403` unless the caller is an `admin` of some tenant or a `fleet-admin`: the token
/// routes are theirs.
fn administers_tokens(caller: &Caller) -> Result<()> {
    let admin = caller.grants.iter().any(|g| match g {
        Grant::Fleet => true,
        Grant::Tenant { tenant, .. } => caller.allows(Right::Admin, tenant),
        Grant::Agent { .. } => false,
    });
    if admin {
        Ok(())
    } else {
        Err(ApiError::Forbidden(format!(
            "{} may not administer tokens (needs role admin in a tenant, or fleet-admin)",
            caller.subject
        )))
    }
}

/// `GET /v1/whoami`.
pub async fn whoami(caller: Caller) -> Json<WhoAmI> {
    Json(WhoAmI { subject: caller.subject, grants: caller.grants })
}
