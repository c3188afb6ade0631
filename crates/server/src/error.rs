//! The one error type of the HTTP API.
//!
//! Every handler and extractor returns [`ApiError`], so every failure — a bad
//! document, an unknown object, a bad query parameter, an unknown route, a store
//! outage — answers with the same JSON shape, `{"error": "..."}` ([`ErrorBody`]), and the right
//! status code. Internal failures are logged in full and answered with a fixed
//! message, so nothing about the backend leaks to clients.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use fleetsync_api::ErrorBody;
use fleetsync_model::ParseError;
use fleetsync_store::StoreError;

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// What clients see instead of the detail of a 500.
const INTERNAL_MESSAGE: &str = "internal error: see the server log";

/// How long a client waits before it tries again while the store is out of reach (a
/// lost connection, a restart, a primary failing over to its standby).
const STORE_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The submitted documents did not parse or validate.
    #[error(transparent)]
    Documents(#[from] ParseError),
    /// The store refused (not found) or failed.
    #[error(transparent)]
    Store(StoreError),
    /// The cursor is older than the event log's horizon: retention trimmed events
    /// after it. The client must re-list and resume from a newer cursor.
    #[error(
        "the cursor {cursor} fell off the event log (oldest kept is {}): re-list (GET /v1/events without `after`) and resume from the newest `seq` you get",
        horizon + 1
    )]
    CursorExpired { cursor: u64, horizon: u64 },
    /// A query or path parameter is malformed; `param` says which one.
    #[error("invalid {param}: {rule}")]
    InvalidParam { param: String, rule: String },
    /// The request body could not be read (e.g. it is not UTF-8).
    #[error("invalid request body: {0}")]
    BadBody(String),
    /// A field of a JSON body breaks a rule; `field` is its path (`reports[2].object`).
    #[error("invalid {field}: {rule}")]
    InvalidField { field: String, rule: String },
    /// No credentials, or ones nobody has.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// Something that does not exist (or that the caller may not see).
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with what exists (a name taken).
    #[error("{0}")]
    Conflict(String),
    /// Valid credentials that do not allow this request.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A body of a type the API does not take (it takes YAML and JSON only).
    #[error("unsupported content type {got}: send application/yaml or application/json")]
    UnsupportedMediaType { got: String },
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The body did not arrive in time; the connection is closed with the answer.
    #[error("the request body did not arrive within {} s (the limit); send it faster or in smaller requests", limit.as_secs())]
    BodyTimedOut { limit: std::time::Duration },
    #[error("no route for {method} {path}")]
    NoRoute { method: String, path: String },
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// A cap on open event watches is reached; `scope` says which one.
    #[error("too many watches: {open} open {scope} (the limit); close one or try again later")]
    TooManyWatches { open: usize, scope: &'static str },
    /// Too many requests of one kind (`what` says which, and from whom); the answer's
    /// `Retry-After` says when to try again.
    #[error("{what}: try again in {} s", retry_after_secs(*retry_after))]
    RateLimited { what: String, retry_after: std::time::Duration },
    /// A failure inside the server itself; `step` names what it was doing.
    #[error("internal error while {step}: {message}")]
    Internal { step: &'static str, message: String },
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Documents(ParseError::Limit { limit, .. }) if limit.is_size() => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Documents(ParseError::Cancelled) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Documents(_) | ApiError::InvalidParam { .. } | ApiError::BadBody(_) => StatusCode::BAD_REQUEST,
            ApiError::Store(StoreError::NotFound { .. }) | ApiError::NoRoute { .. } | ApiError::NotFound(_) => {
                StatusCode::NOT_FOUND
            }
            ApiError::Conflict(_) | ApiError::Store(StoreError::NameTaken { .. }) => StatusCode::CONFLICT,
            _ if self.store_out_of_reach() => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Store(StoreError::Backend { .. } | StoreError::Refused { .. } | StoreError::Corrupt { .. })
            | ApiError::Internal { .. } => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimedOut { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::InvalidField { .. }
            | ApiError::Store(StoreError::SourceInvalid { .. } | StoreError::DependencyCycle { .. }) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) | ApiError::Store(StoreError::QuotaExceeded(_)) => StatusCode::FORBIDDEN,
            ApiError::CursorExpired { .. } | ApiError::Store(StoreError::CursorExpired { .. }) => StatusCode::GONE,
            ApiError::Store(StoreError::InvalidConsumerName { .. }) => StatusCode::BAD_REQUEST,
            ApiError::Store(StoreError::LeaseLost { .. }) => StatusCode::CONFLICT,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::TooManyWatches { .. } | ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// Whether the store failed in a way that passes (a lost connection, a restart, a
    /// failover): answered `503` with `Retry-After`.
    fn store_out_of_reach(&self) -> bool {
        matches!(self, ApiError::Store(e) if e.is_transient())
    }

    /// The JSON body: the message, plus where a document broke a rule or where the
    /// event log now starts.
    pub(crate) fn body(&self) -> ErrorBody {
        if self.store_out_of_reach() {
            return ErrorBody::message(format!(
                "the store is out of reach (a lost connection, a restart or a failover): try again in {} s",
                retry_after_secs(STORE_RETRY_AFTER)
            ));
        }
        if self.status().is_server_error() {
            return ErrorBody::message(INTERNAL_MESSAGE);
        }
        let message = ErrorBody::message(self.to_string());
        match self {
            ApiError::Documents(ParseError::Invalid(v)) => ErrorBody {
                document: Some(v.document.clone()),
                field: Some(v.field.clone()),
                rule: Some(v.rule.clone()),
                ..message
            },
            ApiError::Documents(ParseError::Yaml { index, .. }) => {
                ErrorBody { document: Some(format!("document {index}")), ..message }
            }
            ApiError::Documents(ParseError::Limit { index, limit }) if *index > 0 => {
                ErrorBody { document: Some(format!("document {index}")), rule: Some(limit.to_string()), ..message }
            }
            ApiError::InvalidField { field, .. } => ErrorBody { field: Some(field.clone()), ..message },
            ApiError::CursorExpired { cursor, horizon } => {
                ErrorBody { cursor: Some(*cursor), horizon: Some(*horizon), ..message }
            }
            _ => message,
        }
    }
}

/// Whole seconds to wait, rounded up (at least 1): `Retry-After` takes no fractions.
fn retry_after_secs(d: std::time::Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0).max(u64::from(d.is_zero()))
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::CursorExpired { cursor, horizon } => ApiError::CursorExpired { cursor, horizon },
            other => ApiError::Store(other),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let mut response = (status, Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        let retry_after = match &self {
            ApiError::RateLimited { retry_after, .. } => Some(*retry_after),
            _ if self.store_out_of_reach() => Some(STORE_RETRY_AFTER),
            _ => None,
        };
        if let Some(after) = retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs(after)));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::ValidationError;

    #[test]
    fn internals_are_hidden() {
        let e = ApiError::Store(StoreError::backend("reading", false, "disk /var/secret failed"));
        assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(e.body(), ErrorBody::message(INTERNAL_MESSAGE));
        let e = ApiError::Store(StoreError::Corrupt { table: "work", message: "x".into() });
        assert_eq!(e.body().error, INTERNAL_MESSAGE);
    }

    #[test]
    fn a_store_out_of_reach_is_503_with_retry_after_and_no_detail() {
        let e = ApiError::from(StoreError::backend("reading", true, "connection to 10.0.0.7 refused"));
        assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = e.body().error;
        assert!(body.contains("out of reach") && !body.contains("10.0.0.7"), "{body}");
        let response = e.into_response();
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn validation_errors_name_document_field_rule() {
        let v = ValidationError { document: "document 2".into(), field: "kind".into(), rule: "unknown".into() };
        let e = ApiError::from(ParseError::Invalid(v));
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let body = e.body();
        assert_eq!(body.field.as_deref(), Some("kind"));
        assert_eq!(body.document.as_deref(), Some("document 2"));
        assert_eq!(body.rule.as_deref(), Some("unknown"));
        assert!(body.error.contains("document 2"), "{}", body.error);
    }

    #[test]
    fn expired_cursor_is_410_with_the_horizon() {
        let e = ApiError::from(StoreError::CursorExpired { cursor: 5, horizon: 9 });
        assert_eq!(e.status(), StatusCode::GONE);
        let body = e.body();
        assert_eq!((body.cursor, body.horizon), (Some(5), Some(9)));
        let msg = body.error;
        assert!(msg.starts_with("the cursor 5 fell off the event log (oldest kept is 10): re-list"), "{msg}");
    }

    #[test]
    fn not_found_is_404() {
        let e = ApiError::from(StoreError::not_found(fleetsync_model::Kind::Cluster, "default", "x"));
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert_eq!(e.body().error, "Cluster default/x not found");
    }
}
