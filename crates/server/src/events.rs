//! The event log, read page by page from a cursor.

use crate::error::{ApiError, Result};
use crate::extract::ApiQuery;
use crate::{AppState, Items};
use axum::extract::State;
use axum::Json;
use fleetsync_store::Event;
use serde::Deserialize;

/// Page size when the client names none.
pub const DEFAULT_LIMIT: usize = 500;
/// The largest page: bounds the memory and time one request can take.
pub const MAX_LIMIT: usize = 10_000;

/// `?after=N&limit=M`. The log is store-wide (every tenant), so there is no
/// `tenant` parameter.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Return events with a sequence number greater than this (the cursor).
    #[serde(default)]
    pub after: u64,
    #[serde(default = "default_limit")]
    pub limit: usize,
}

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

/// `GET /v1/events`: the next page of events, oldest first. A client pages by
/// passing the last `seq` it saw as `after`.
pub async fn list(State(state): State<AppState>, ApiQuery(q): ApiQuery<EventsQuery>) -> Result<Json<Items<Event>>> {
    if !(1..=MAX_LIMIT).contains(&q.limit) {
        return Err(ApiError::InvalidParam {
            param: "query parameter `limit`".into(),
            rule: format!("must be between 1 and {MAX_LIMIT}, got {}", q.limit),
        });
    }
    let items = state.store.events_read(q.after, q.limit).await?;
    Ok(Json(Items { items }))
}
