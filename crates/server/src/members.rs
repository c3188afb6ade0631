//! `GET /v1/members`: the worker processes that are alive, with how many shards each
//! owns (rendezvous hashing over the live members, as every process computes it) and
//! how many keys each has in flight (as of its last heartbeat).

use crate::error::Result;
use crate::{AppState, Items};
use axum::extract::State;
use axum::Json;
use fleetsync_api::Member;
use fleetsync_model::shard::shard_counts;

pub async fn list(State(state): State<AppState>) -> Result<Json<Items<Member>>> {
    let members = state.store.member_list().await?;
    let ids: Vec<String> = members.iter().map(|m| m.id.clone()).collect();
    let items = members
        .into_iter()
        .zip(shard_counts(&ids))
        .map(|(member, shards)| crate::wire::member(member, shards))
        .collect();
    Ok(Json(Items::all(items)))
}
