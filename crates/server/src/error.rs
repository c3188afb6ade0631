//! The one error type of the HTTP API.
//!
//! Every handler and extractor returns [`ApiError`], so every failure — a bad
//! document, an unknown object, a bad query parameter, an unknown route, a store
//! outage — answers with the same JSON shape, `{"error": "..."}`, and the right
//! status code. Internal failures are logged in full and answered with a fixed
//! message, so nothing about the backend leaks to clients.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use fleetsync_model::ParseError;
use fleetsync_store::StoreError;
use serde_json::{json, Value};

pub type Result<T, E = ApiError> = std::result::Result<T, E>;

/// What clients see instead of the detail of a 500.
const INTERNAL_MESSAGE: &str = "internal error: see the server log";

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
    /// Valid credentials that do not allow this request.
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("request body is larger than the limit of {limit} bytes")]
    BodyTooLarge { limit: usize },
    #[error("no route for {method} {path}")]
    NoRoute { method: String, path: String },
    #[error("method {method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// A failure inside the server itself; `step` names what it was doing.
    #[error("internal error while {step}: {message}")]
    Internal { step: &'static str, message: String },
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Documents(_) | ApiError::InvalidParam { .. } | ApiError::BadBody(_) => StatusCode::BAD_REQUEST,
            ApiError::Store(StoreError::NotFound { .. }) | ApiError::NoRoute { .. } => StatusCode::NOT_FOUND,
            ApiError::Store(StoreError::Backend { .. } | StoreError::Refused { .. } | StoreError::Corrupt { .. }) | ApiError::Internal { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::InvalidField { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::CursorExpired { .. } | ApiError::Store(StoreError::CursorExpired { .. }) => StatusCode::GONE,
            ApiError::Store(StoreError::InvalidConsumerName { .. }) => StatusCode::BAD_REQUEST,
            ApiError::Store(StoreError::LeaseLost { .. }) => StatusCode::CONFLICT,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    /// The JSON body: the message, plus where a document broke a rule or where the
    /// event log now starts.
    pub(crate) fn body(&self) -> Value {
        if self.status().is_server_error() {
            return json!({ "error": INTERNAL_MESSAGE });
        }
        match self {
            ApiError::Documents(ParseError::Invalid(v)) => {
                json!({ "error": self.to_string(), "document": v.document, "field": v.field, "rule": v.rule })
            }
            ApiError::Documents(ParseError::Yaml { index, .. }) => {
                json!({ "error": self.to_string(), "document": format!("document {index}") })
            }
            ApiError::InvalidField { field, .. } => json!({ "error": self.to_string(), "field": field }),
            ApiError::CursorExpired { cursor, horizon } => {
                json!({ "error": self.to_string(), "cursor": cursor, "horizon": horizon })
            }
            _ => json!({ "error": self.to_string() }),
        }
    }
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
        (status, Json(self.body())).into_response()
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
        assert_eq!(e.body(), json!({ "error": INTERNAL_MESSAGE }));
        let e = ApiError::Store(StoreError::Corrupt { table: "work", message: "x".into() });
        assert_eq!(e.body()["error"], INTERNAL_MESSAGE);
    }

    #[test]
    fn validation_errors_name_document_field_rule() {
        let v = ValidationError { document: "document 2".into(), field: "kind".into(), rule: "unknown".into() };
        let e = ApiError::from(ParseError::Invalid(v));
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let body = e.body();
        assert_eq!(body["field"], "kind");
        assert_eq!(body["document"], "document 2");
        assert_eq!(body["rule"], "unknown");
        assert!(body["error"].as_str().is_some_and(|m| m.contains("document 2")));
    }

    #[test]
    fn expired_cursor_is_410_with_the_horizon() {
        let e = ApiError::from(StoreError::CursorExpired { cursor: 5, horizon: 9 });
        assert_eq!(e.status(), StatusCode::GONE);
        let body = e.body();
        assert_eq!((body["cursor"].as_u64(), body["horizon"].as_u64()), (Some(5), Some(9)));
        let msg = body["error"].as_str().unwrap_or_default();
        assert!(msg.starts_with("the cursor 5 fell off the event log (oldest kept is 10): re-list"), "{msg}");
    }

    #[test]
    fn not_found_is_404() {
        let e = ApiError::from(StoreError::not_found(fleetsync_model::Kind::Cluster, "default", "x"));
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert_eq!(e.body()["error"], "Cluster default/x not found");
    }
}
