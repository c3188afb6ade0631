//! `POST /v1/sources/{tenant}/{name}/hook`: a push notification from a Git host, which
//! makes the source's key fetch now (as `reconcile source` does) instead of at
//! its next interval.
//!
//! The route takes no bearer token (Git hosts send none): the notification is
//! authenticated by its signature, checked against the `token` of the Secret the
//! source's `spec.webhookSecretRef` names ([`fleetsync_source::webhook`]: GitHub's
//! `X-Hub-Signature-256`, GitLab's `X-Gitlab-Token`, or a generic `X-Signature`). Every
//! refusal is the same 401, whether the source exists, has a webhook secret or was
//! signed wrongly, so that a stranger learns nothing of the tenant's sources. A
//! notification carries nothing that is trusted: what is fetched is what the remote
//! advertises.

use crate::error::{ApiError, Result};
use crate::extract::{check_name, check_tenant, ApiPath, ApiText};
use crate::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use fleetsync_api::Retried;
use fleetsync_model::WorkKey;
use fleetsync_source::webhook;

/// Who the event log names as asking for the fetch.
const ACTOR: &str = "webhook";

/// The largest notification read (a push of many commits stays well under it; a larger
/// one is refused `413`, and the source is still polled at its interval). Anyone may
/// send one, so it is far below the limit of documents.
pub const MAX_NOTIFICATION_BYTES: usize = 1024 * 1024;

pub async fn hook(
    State(state): State<AppState>,
    ApiPath((tenant, name)): ApiPath<(String, String)>,
    headers: HeaderMap,
    body: Result<ApiText, ApiError>,
) -> Result<(StatusCode, Json<Retried>)> {
    let ApiText(body) = body.map_err(|e| match e {
        ApiError::BodyTooLarge { .. } => ApiError::BodyTooLarge { limit: MAX_NOTIFICATION_BYTES },
        e => e,
    })?;
    check_tenant(&tenant)?;
    check_name("source name in the path", &name)?;
    let token = webhook_token(&state, &tenant, &name).await?.ok_or_else(refused)?;
    let header = |h: &str| headers.get(h).and_then(|v| v.to_str().ok());
    webhook::verify(header, body.as_bytes(), token.as_bytes()).map_err(|_| refused())?;
    let key = WorkKey::source(tenant.as_str(), &name);
    state.store.work_retry_by(&key, Some(ACTOR)).await?;
    Ok((StatusCode::ACCEPTED, Json(Retried { retried: key })))
}

/// The secret notifications for `tenant/name` are signed with, if it has one.
async fn webhook_token(state: &AppState, tenant: &str, name: &str) -> Result<Option<String>> {
    let Some(source) = state.store.source_get(tenant, name).await? else { return Ok(None) };
    let Some(secret_ref) = source.webhook_secret_ref() else { return Ok(None) };
    let Some(secret) = state.store.secret_get(tenant, &secret_ref.name).await? else { return Ok(None) };
    Ok(secret.get(TOKEN_KEY).map(|v| v.expose().to_string()))
}

/// The key of the webhook Secret that holds the token.
pub const TOKEN_KEY: &str = "token";

fn refused() -> ApiError {
    ApiError::Unauthorized(
        "the notification is not signed with this source's webhook secret (X-Hub-Signature-256, X-Gitlab-Token or X-Signature)"
            .into(),
    )
}
