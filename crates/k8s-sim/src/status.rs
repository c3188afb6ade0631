//! Errors as Kubernetes `Status` objects.
//!
//! Clients (kube-rs among them) parse every non-2xx body as a `Status` and type their
//! errors by its `code` and `reason`, so every refusal of the simulator goes through
//! [`ApiError`], which renders exactly that shape and nothing else.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Why a request to a simulated cluster was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApiError {
    /// The path names no resource, or the object does not exist.
    #[error("{message}")]
    NotFound { message: String, name: String, kind: String },
    /// The request is malformed (missing `fieldManager`, unparsable body...).
    #[error("{0}")]
    BadRequest(String),
    /// The object is not valid for the path it was sent to.
    #[error("{0}")]
    Invalid(String),
    /// A patch type other than server-side apply.
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    /// A server-side apply conflict with another field manager.
    #[error("{0}")]
    Conflict(String),
    /// A newer fencing token was seen for the key: the caller lost its lease.
    #[error("stale fencing token {fence} for {key}: {newest} has been seen")]
    Fenced { key: String, fence: i64, newest: i64 },
    /// A watch asked for a resource version older than the cluster's watch history
    /// keeps: the client must list again.
    #[error("too old resource version: {asked} ({oldest})")]
    Expired { asked: u64, oldest: u64 },
    /// A write carried a `resourceVersion` precondition that is no longer current.
    #[error("Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again")]
    Modified { plural: String, name: String },
    /// A failure injected by the configuration or a per-cluster fault.
    #[error("simulated failure ({code})")]
    Injected { code: u16 },
}

/// A `Result` whose error is a Kubernetes `Status`.
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

impl ApiError {
    pub fn not_found(plural: &str, name: &str) -> Self {
        Self::NotFound { message: format!("{plural} \"{name}\" not found"), name: name.into(), kind: plural.into() }
    }

    /// A path the simulated API does not serve.
    pub fn no_such_path(path: &str) -> Self {
        Self::NotFound {
            message: format!("the server could not find the requested resource ({path})"),
            name: String::new(),
            kind: String::new(),
        }
    }

    pub fn code(&self) -> u16 {
        match self {
            Self::NotFound { .. } => 404,
            Self::BadRequest(_) => 400,
            Self::Invalid(_) => 422,
            Self::UnsupportedMediaType(_) => 415,
            Self::MethodNotAllowed(_) => 405,
            Self::Conflict(_) | Self::Fenced { .. } | Self::Modified { .. } => 409,
            Self::Expired { .. } => 410,
            Self::Injected { code } => *code,
        }
    }

    /// The `reason` of the `Status`: by code, except where Kubernetes is more precise.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Expired { .. } => "Expired",
            _ => reason(self.code()),
        }
    }

    /// The `Status` body, as a Kubernetes API server would send it.
    pub fn to_status(&self) -> serde_json::Value {
        let code = self.code();
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": code,
        });
        if let Self::NotFound { name, kind, .. } = self {
            if !name.is_empty() {
                status["details"] = json!({"name": name, "kind": kind});
            }
        }
        status
    }
}

/// The `reason` Kubernetes gives each status code (`metav1.StatusReason`).
pub fn reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Gone",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.to_status().to_string();
        (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_is_a_conflict_that_says_why() {
        let e = ApiError::Fenced { key: "t/c/s".into(), fence: 3, newest: 4 };
        let s = e.to_status();
        assert_eq!((s["code"].as_u64(), s["reason"].as_str()), (Some(409), Some("Conflict")));
        assert!(s["message"].as_str().is_some_and(|m| m.contains("stale fencing token")), "{s}");
    }

    #[test]
    fn an_expired_version_is_gone_with_reason_expired() {
        let s = ApiError::Expired { asked: 3, oldest: 10 }.to_status();
        assert_eq!((s["code"].as_u64(), s["reason"].as_str()), (Some(410), Some("Expired")));
        assert_eq!(s["message"], "too old resource version: 3 (10)");
    }

    #[test]
    fn injected_codes_keep_their_kubernetes_reason() {
        for (code, r) in [(403, "Forbidden"), (429, "TooManyRequests"), (503, "ServiceUnavailable"), (599, "Unknown")] {
            let s = ApiError::Injected { code }.to_status();
            assert_eq!(s["reason"], r);
            assert_eq!(s["status"], "Failure");
        }
    }
}
