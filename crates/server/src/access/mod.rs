//! Identity and access: every request is authenticated ([`authn`]) and authorized
//! against the one table of what each route needs ([`routes`]) by the one rule of who
//! may do what ([`rules`]), before any handler runs.
//!
//! [`guard`] is the layer that does it. A refused request never reaches a handler, so
//! it writes nothing. Routes whose tenant is in the query (`?tenant=`) are checked here
//! in full; for the others ([`Need::Checked`]) the handler checks each tenant the
//! request names, with the [`Caller`] this layer hands it.

pub mod authn;
pub mod jwks;
pub mod oidc;
pub mod routes;
pub mod rules;
pub mod tokens;

pub use authn::Authenticator;
pub use oidc::Oidc;
pub use routes::{Need, RULES};
pub use rules::{Caller, Right, Visible};

use crate::dashboard::{session, Sessions};
use crate::error::ApiError;
use crate::extract::check_tenant;
use crate::AppState;
use axum::body::HttpBody;
use axum::extract::{FromRequestParts, MatchedPath, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use fleetsync_model::document::DEFAULT_TENANT;
use serde::Deserialize;
use std::collections::BTreeSet;

/// The hub's access settings.
#[derive(Debug, Clone)]
pub struct Access {
    pub authenticator: Authenticator,
    /// `/metrics` needs a credential (any but an agent's).
    pub metrics_require_auth: bool,
    /// The tenants whose Clusters may use the `inCluster` endpoint (the hub's own
    /// cluster, with the hub's service account): none unless the operator allows some.
    pub in_cluster_tenants: BTreeSet<String>,
    /// The dashboard's sessions: a session cookie stands for the token it signed in with.
    pub sessions: Sessions,
}

impl Access {
    pub fn new(authenticator: Authenticator) -> Access {
        Access {
            authenticator,
            metrics_require_auth: false,
            in_cluster_tenants: BTreeSet::new(),
            sessions: Sessions::default(),
        }
    }

    /// These settings on top of `authenticator` (the store's tokens).
    pub fn configured(authenticator: Authenticator, settings: AccessSettings) -> Access {
        let authenticator = match settings.oidc {
            Some(oidc) => authenticator.with_oidc(oidc),
            None => authenticator,
        };
        Access {
            authenticator,
            metrics_require_auth: settings.metrics_require_auth,
            in_cluster_tenants: settings.in_cluster_tenants,
            sessions: Sessions::default(),
        }
    }
}

/// What the operator of a hub chooses about access (`fleetsync serve`'s flags).
#[derive(Clone, Default)]
pub struct AccessSettings {
    /// Also accept JWTs of this OIDC issuer.
    pub oidc: Option<oidc::Oidc>,
    pub metrics_require_auth: bool,
    pub in_cluster_tenants: BTreeSet<String>,
}

impl std::fmt::Debug for AccessSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessSettings")
            .field("oidc", &self.oidc.is_some())
            .field("metrics_require_auth", &self.metrics_require_auth)
            .field("in_cluster_tenants", &self.in_cluster_tenants)
            .finish()
    }
}

/// The layer in front of every route: authenticates, authorizes what the route table
/// says, refuses a body that is neither YAML nor JSON, and hands the [`Caller`] on.
pub async fn guard(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    match admit(&state.access, &mut req).await {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

async fn admit(access: &Access, req: &mut Request) -> Result<(), ApiError> {
    let path = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_string());
    let need = path.as_deref().and_then(|p| routes::need(req.method(), p));
    match need {
        Some(Need::Public | Need::Signed) => return Ok(()),
        Some(Need::Metrics) if !access.metrics_require_auth => return Ok(()),
        _ => {}
    }
    let caller = match session::credential(access, req, path.as_deref())? {
        Some(token) => access.authenticator.identify_token(&token).await?,
        None => access.authenticator.identify(req.headers(), req.extensions()).await?,
    };
    match (path, need) {
        // No such route (or method): the caller, now known, gets the 404 or 405 (a
        // stranger got a 401).
        (None, _) => {}
        (Some(path), None) if routes::known(&path) => {}
        (Some(path), None) => {
            return Err(ApiError::Internal {
                step: "authorizing",
                message: format!("no access rule for {} {path}", req.method()),
            })
        }
        (Some(_), Some(need)) => authorize(&caller, need, req)?,
    }
    check_content_type(req)?;
    req.extensions_mut().insert(caller);
    Ok(())
}

fn authorize(caller: &Caller, need: Need, req: &Request) -> Result<(), ApiError> {
    match need {
        Need::Public | Need::Signed | Need::Checked => Ok(()),
        Need::Metrics if caller.visible().is_none() => {
            Err(ApiError::Forbidden(format!("{} may not read metrics", caller.subject)))
        }
        Need::Metrics => Ok(()),
        Need::Fleet if caller.is_fleet_admin() => Ok(()),
        Need::Fleet => Err(ApiError::Forbidden(format!("{} is not a fleet-admin", caller.subject))),
        Need::InTenant(right) => {
            let tenant = query_tenant(req)?;
            if caller.allows(right, &tenant) {
                Ok(())
            } else {
                Err(ApiError::Forbidden(caller.refusal(right, &tenant)))
            }
        }
    }
}

/// `?tenant=` as the handlers read it (default `default`), checked.
fn query_tenant(req: &Request) -> Result<String, ApiError> {
    #[derive(Deserialize)]
    struct Tenant {
        tenant: Option<String>,
    }
    let q = Query::<Tenant>::try_from_uri(req.uri())?;
    let tenant = q.0.tenant.unwrap_or_else(|| DEFAULT_TENANT.to_string());
    check_tenant(&tenant)?;
    Ok(tenant)
}

/// Bodies are YAML or JSON only, so that a web page cannot post a form (or plain
/// text) to the API from an operator's browser: browsers send those without asking.
fn check_content_type(req: &Request) -> Result<(), ApiError> {
    if !matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH) {
        return Ok(());
    }
    let value = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let essence = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let no_body = req.headers().get(header::TRANSFER_ENCODING).is_none()
        && req.headers().get(header::CONTENT_LENGTH).is_none_or(|l| l == "0")
        && req.body().size_hint().exact() == Some(0);
    let ok = matches!(essence.as_str(), "application/json" | "application/yaml" | "application/x-yaml" | "text/yaml")
        || (value.is_empty() && no_body);
    if ok {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType { got: if value.is_empty() { "none".into() } else { clip(value) } })
    }
}

fn clip(s: &str) -> String {
    s.chars().take(100).collect()
}

/// The authenticated caller, for handlers of [`Need::Checked`] routes.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| ApiError::Unauthorized("no credential".into()))
    }
}
