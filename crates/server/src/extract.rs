//! Extractors whose rejections are [`ApiError`]s, and the checks on names that come
//! from URLs.
//!
//! axum's own `Query`, `Path` and `String` extractors answer a bad request with a
//! plain-text body; wrapping them here keeps every error in the one JSON shape and
//! lets the message say which parameter was wrong.

use crate::error::{ApiError, Result};
use axum::extract::rejection::{PathRejection, QueryRejection, StringRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use fleetsync_model::document::DEFAULT_TENANT;
use fleetsync_model::names::check_dns1123_label;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::time::Duration;

/// The largest request body accepted (a whole fleet's documents in one apply): the
/// documents' body limit, one of their [limits](fleetsync_model::limits).
pub const MAX_BODY_BYTES: usize = fleetsync_model::limits::MAX_BODY_BYTES;

/// Query parameters, deserialized into `T`; a bad one is a 400 that names it.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let Query(v) = Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(v))
    }
}

/// Path parameters, deserialized into `T`.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self> {
        let Path(v) = Path::<T>::from_request_parts(parts, state).await?;
        Ok(ApiPath(v))
    }
}

/// The request body as text, at most [`MAX_BODY_BYTES`] (set by the router's
/// `DefaultBodyLimit`), read by the request's [`BodyDeadline`].
#[derive(Debug)]
pub struct ApiText(pub String);

impl<S: Send + Sync> FromRequest<S> for ApiText {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self> {
        let deadline =
            req.extensions().get::<BodyDeadline>().copied().unwrap_or_else(|| BodyDeadline::after(BODY_READ_TIMEOUT));
        match tokio::time::timeout_at(deadline.at, String::from_request(req, state)).await {
            Ok(text) => Ok(ApiText(text?)),
            Err(_) => Err(ApiError::BodyTimedOut { limit: deadline.limit }),
        }
    }
}

/// How long a request's body may take to arrive when the server sets no other
/// ([`ConnectionLimits::body_read_timeout`](crate::ConnectionLimits::body_read_timeout)).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// When a request's body must have arrived: set by the server as the request's head
/// is read, so that a client trickling a body cannot hold a request open for long.
#[derive(Debug, Clone, Copy)]
pub struct BodyDeadline {
    at: tokio::time::Instant,
    limit: Duration,
}

impl BodyDeadline {
    pub fn after(limit: Duration) -> Self {
        Self { at: tokio::time::Instant::now() + limit, limit }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        let text = r.body_text();
        let detail = text.strip_prefix("Failed to deserialize query string: ").unwrap_or(&text);
        // serde_path_to_error puts the offending parameter first: `after: invalid digit`.
        match detail.split_once(": ") {
            Some((name, rule)) if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                ApiError::InvalidParam { param: format!("query parameter `{name}`"), rule: rule.to_string() }
            }
            _ => ApiError::InvalidParam { param: "query parameters".into(), rule: detail.to_string() },
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        if r.status().is_server_error() {
            return ApiError::Internal { step: "reading path parameters", message: r.body_text() };
        }
        ApiError::InvalidParam { param: "path parameter".into(), rule: r.body_text() }
    }
}

impl From<StringRejection> for ApiError {
    fn from(r: StringRejection) -> Self {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::BodyTooLarge { limit: MAX_BODY_BYTES };
        }
        ApiError::BadBody(r.body_text())
    }
}

/// Checks a name taken from a URL (path segment or query parameter) against the
/// same DNS-1123 rule documents follow, so a name that cannot exist is a 400, not a
/// confusing 404; `what` names the parameter in the message.
pub fn check_name(what: &str, name: &str) -> Result<()> {
    check_dns1123_label(name).map_err(|rule| ApiError::InvalidParam { param: what.to_string(), rule: rule.to_string() })
}

/// A `?tenant=` value, once checked: the same rule and message on every route.
pub fn check_tenant(tenant: &str) -> Result<&str> {
    check_name("query parameter `tenant`", tenant)?;
    Ok(tenant)
}

pub fn default_tenant() -> String {
    DEFAULT_TENANT.to_string()
}

/// `?tenant=`, the only query parameter of most endpoints.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantQuery {
    #[serde(default = "default_tenant")]
    pub tenant: String,
}

impl TenantQuery {
    /// The tenant, once checked.
    pub fn tenant(&self) -> Result<&str> {
        check_tenant(&self.tenant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("cluster name", "ok-1").is_ok());
        let err = check_name("cluster name", "Bad_Name").expect_err("invalid");
        assert!(err.to_string().starts_with("invalid cluster name: "), "{err}");
        assert!(err.to_string().contains("DNS-1123"), "{err}");
    }

    #[test]
    fn tenant_defaults_and_is_checked() {
        let q = TenantQuery { tenant: default_tenant() };
        assert_eq!(q.tenant().ok(), Some("default"));
        assert!(TenantQuery { tenant: "UP".into() }.tenant().is_err());
    }
}
