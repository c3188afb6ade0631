//! `GET /healthz` and `GET /readyz`: healthy (ready to serve) means the store answers and
//! holds the schema this build keeps; `GET /livez`: the process answers.
//!
//! The hub has no state of its own worth checking; if the store is ready it can serve.
//! The check is one small read whatever the size of the fleet (no scan of the keys), so
//! probes stay cheap at any scale. The store's error is logged, not returned, like every
//! internal error.

use crate::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use fleetsync_api::{Health, SchemaVersion, ServerVersion};
use fleetsync_store::StatusRead;

/// Whether `store` is ready (see [`StatusRead::store_ready`]): the rule of the hub's
/// probes and a worker's. The cause of a failure is logged here; the answer only says
/// that the store is not ready.
pub async fn store_readiness(store: &dyn StatusRead) -> Result<(), String> {
    store.store_ready().await.map(|_| ()).map_err(|e| {
        tracing::error!(error = %e, "readiness check: the store is not ready");
        "the store is not ready".to_string()
    })
}

pub async fn healthz(State(state): State<AppState>) -> (StatusCode, Json<Health>) {
    match store_readiness(state.store.as_ref()).await {
        Ok(()) => (StatusCode::OK, Json(Health { status: "ok".into(), error: None })),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "unavailable".into(), error: Some(why) })),
    }
}

/// `GET /v1/version`: this build's version and its store's schema (any caller with a
/// credential). A store that cannot be read gives no schema, not an error: the version
/// is still worth knowing.
pub async fn version(State(state): State<AppState>) -> Json<ServerVersion> {
    let schema = match state.store.store_ready().await {
        Ok(s) => Some(SchemaVersion { store: s.backend.into(), version: s.version as u64, latest: s.latest as u64 }),
        Err(e) => {
            tracing::warn!(error = %e, "version: the store's schema is unknown");
            None
        }
    };
    Json(ServerVersion { version: env!("CARGO_PKG_VERSION").into(), schema })
}

/// `GET /livez`: the process is up and serving requests; nothing is checked beyond that,
/// so a store outage does not get the hub restarted.
pub async fn livez() -> Json<Health> {
    Json(Health { status: "ok".into(), error: None })
}
