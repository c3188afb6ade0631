//! `GET /healthz`: healthy means the store answers.
//!
//! The hub has no state of its own worth checking; if it can read the queue it can
//! serve. The store's error is logged, not returned, like every internal error.

use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

pub async fn healthz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    match state.store.queue_stats().await {
        Ok(_) => (StatusCode::OK, Json(json!({ "status": "ok" }))),
        Err(e) => {
            tracing::error!(error = %e, "health check: the store cannot be read");
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "unavailable", "error": "the store cannot be read" })))
        }
    }
}
