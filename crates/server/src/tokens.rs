//! Hub-issued tokens over the API: an admin of a tenant issues and revokes the
//! credentials of its tenant (people's tokens and its clusters' agent credentials); a
//! fleet-admin, any. The token itself is in the answer to its creation only.
//!
//! | Route | |
//! |---|---|
//! | `POST /v1/tokens` | a [`TokenCreate`] → the [`IssuedToken`] |
//! | `GET /v1/tokens` | the records of the tokens the caller may administer |
//! | `DELETE /v1/tokens/{name}` | revokes one |
//! | `GET /v1/whoami` | the caller's subject and grants |

use crate::access::tokens::{issue, IssueError, TokenRequest};
use crate::access::Caller;
use crate::error::{ApiError, Result};
use crate::extract::{check_name, ApiPath, ApiText};
use crate::{AppState, Items};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use fleetsync_api::{IssuedToken, Revoked, TokenCreate, WhoAmI};
use fleetsync_model::TokenRecord;
use std::time::Duration;

/// The longest life a token can be given (ten years): a bound, not a default.
const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 86_400);

/// `POST /v1/tokens`.
pub async fn create(State(state): State<AppState>, caller: Caller, ApiText(body): ApiText) -> Result<(StatusCode, Json<IssuedToken>)> {
    let mut de = serde_json::Deserializer::from_str(&body);
    let req: TokenCreate = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        ApiError::InvalidField { field: if field == "." { "body".into() } else { field }, rule: e.into_inner().to_string() }
    })?;
    if !caller.may_issue(&req.grant) {
        return Err(ApiError::Forbidden(format!("{} may not issue a token granting {}", caller.subject, req.grant)));
    }
    let ttl = req.ttl_seconds.map(Duration::from_secs);
    if ttl.is_some_and(|t| t.is_zero() || t > MAX_TTL) {
        return Err(ApiError::InvalidField { field: "ttlSeconds".into(), rule: format!("must be between 1 and {}", MAX_TTL.as_secs()) });
    }
    let request = TokenRequest { grant: req.grant, name: req.name, ttl, created_by: caller.subject.clone() };
    let (token, record) = issue(state.store.as_ref(), state.store.clock().as_ref(), request).await.map_err(|e| match e {
        IssueError::Store(e) => ApiError::from(e),
        IssueError::NameTaken(_) => ApiError::Conflict(e.to_string()),
        other => ApiError::InvalidField { field: "name".into(), rule: other.to_string() },
    })?;
    tracing::info!(name = record.name, grant = %record.grant, by = caller.subject, "token issued");
    Ok((StatusCode::CREATED, Json(IssuedToken { token, record })))
}

/// `GET /v1/tokens`: the tokens whose grant the caller could have issued.
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Json<Items<TokenRecord>>> {
    let items = state.store.token_list().await?.into_iter().filter(|t| caller.may_issue(&t.grant)).collect();
    Ok(Json(Items::all(items)))
}

/// `DELETE /v1/tokens/{name}`: 404 for a token the caller may not see, as for one that
/// does not exist.
pub async fn revoke(State(state): State<AppState>, caller: Caller, ApiPath(name): ApiPath<String>) -> Result<Json<Revoked>> {
    check_name("token name in the path", &name)?;
    let visible = state.store.token_list().await?.into_iter().any(|t| t.name == name && caller.may_issue(&t.grant));
    if !visible || !state.store.token_revoke(&name).await? {
        return Err(ApiError::NotFound(format!("token {name} not found")));
    }
    tracing::info!(name, by = caller.subject, "token revoked");
    Ok(Json(Revoked { revoked: name }))
}

/// `GET /v1/whoami`.
pub async fn whoami(caller: Caller) -> Json<WhoAmI> {
    Json(WhoAmI { subject: caller.subject, grants: caller.grants })
}
