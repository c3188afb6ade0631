//! `GET /healthz` and `GET /readyz`: healthy (ready to serve) means the store answers;
//! `GET /livez`: the process answers.
//!
//! The hub has no state of its own worth checking; if it can read the queue it can
//! serve. The store's error is logged, not returned, like every internal error.

use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use fleetsync_api::Health;

pub async fn healthz(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    match state.store.queue_stats().await {
        Ok(_) => (StatusCode::OK, Json(Health { status: "ok".into(), error: None })),
        Err(e) => {
            tracing::error!(error = %e, "health check: the store cannot be read");
            let health = Health { status: "unavailable".into(), error: Some("the store cannot be read".into()) };
            (StatusCode::SERVICE_UNAVAILABLE, Json(health))
        }
    }
}

/// `GET /livez`: the process is up and serving requests; nothing is checked beyond that,
/// so a store outage does not get the hub restarted.
pub async fn livez() -> Json<Health> {
    Json(Health { status: "ok".into(), error: None })
}
