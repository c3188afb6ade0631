//! The conformance suite every backend passes: the guarantees of docs/concepts.md
//! (`#guarantee-coalescing` to `#guarantee-retries`) as tests,
//! plus the event log (order, retention behind a horizon, wake-ups for watchers).
//!
//! A backend's test module implements [`Harness`] (how to open *the same* store again,
//! as after a restart) and calls [`conformance_tests!`](crate::conformance_tests),
//! which expands to one `#[tokio::test]` per check. Time is a
//! [`ManualClock`]: leases and backoff are tested without sleeping.
//!
//! The checks are grouped by the role they exercise: the work queue (`queue.rs`), the
//! objects (`objects.rs`) and their dry runs (`dry_run.rs`), the event log and its
//! consumers (`events.rs`), members (`members.rs`), live state (`live.rs`),
//! explicit retries (`retries.rs`) and artifacts of sources (`artifacts.rs`). The harness, the macro and the helpers they share
//! are here.

use crate::{
    ClaimParams, ClaimedItem, CompleteOutcome, Completion, EventObject, EventRetention, EventsTrimmed, LiveOutcome,
    LiveRecord, OwnWrite, RenewParams, RetryPolicy, RunOutcome, StatusFilter, Store, StoreConfig, StoreError,
};
use async_trait::async_trait;
use fleetsync_model::{
    ApplyMode, Clock, Cluster, ClusterSpec, Document, Endpoint, Kind, LabelSelector, Manifest, ManualClock, ObjectMeta,
    Phase, ResourceRef, SyncSet, SyncSetSpec, Timestamp, WorkKey,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Opens a backend's store. Every call on one harness opens the same database.
#[async_trait]
pub trait Harness: Send + Sync {
    async fn open(&self, config: StoreConfig) -> Arc<dyn Store>;
}

/// Expands to one test per conformance check, each with a fresh harness from `$make`
/// (an expression evaluating to a future of the harness).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            coalescing, dirty_while_processing, exclusivity, stale_token_refused, lease_expiry_and_takeover,
            backoff_schedule, parking_and_redrive, durability_across_reopen, removal, idempotent_apply,
            relabel_moves_keys, set_based_selectors_pick_and_follow_clusters, a_relabel_runs_only_the_keys_whose_rendering_changes, events_in_order, an_objects_events_newest_first, wakes_waiters, release_does_not_count, secrets_stored_and_rotated,
            cluster_limit_holds_back, crowded_cluster_hides_no_other, members_and_shards, events_trimmed_behind_a_horizon, events_kept_and_read_per_tenant, event_watchers_woken,
            live_state_deduplicated_and_drift_requeues, consumer_cursors_only_move_forward, consumer_names_are_checked, requeue_runs_again_after_its_delay,
            requeue_yields_to_a_newer_change, own_write_leaves_the_writer_clean, own_write_with_a_stale_token_is_refused,
            own_write_that_unselects_the_writer_dirties_it, inventory_recorded_ahead_outlives_failed_and_lost_runs,
            a_result_the_backend_cannot_hold_is_refused_whole, tokens_found_by_hash_and_revoked, changes_record_their_actor,
            expired_tokens_are_found_and_unknown_names_not_revoked, own_writes_and_status_changes_name_no_actor, quotas_refuse_whole_applies,
            cluster_pages_see_each_item_once_under_changes, status_pages_see_each_key_once_under_changes,
            status_filtered_by_phase_and_staleness, clusters_filtered_by_labels, other_lists_page,
            summaries_equal_a_full_count, stale_clusters_are_those_without_a_sign_of_life, change_times_follow_the_oldest_unclaimed_change,
            dry_run_answers_as_the_apply_and_writes_nothing, a_rollout_moves_one_step_at_a_time_on_the_stores_clock,
            rollout_controls_pause_resume_promote_and_abort, revisions_kept_are_those_still_needed_and_the_last_ten,
            live_records_end_with_what_the_key_stops_applying, retries_are_logged_naming_who_asked,
            artifacts_keep_each_content_once, sources_feed_syncsets_one_revision_at_a_time,
            oci_sources_feed_syncsets_and_share_one_name_space, syncsets_left_behind_by_a_dead_fetcher_catch_up,
            dependency_cycles_are_refused_whole, a_waiting_key_is_pending_with_its_reason,
            the_rendered_hash_goes_with_what_was_applied, notifiers_are_stored_and_run_as_keys);
    };
    (@each $make:expr; $($name:ident),*) => {$(
        #[tokio::test]
        async fn $name() {
            let harness = $make.await;
            $crate::conformance::$name(&harness).await;
        }
    )*};
}

mod artifacts;
mod dependencies;
mod dry_run;
mod events;
mod live;
mod members;
mod notifiers;
mod objects;
mod paging;
mod queue;
mod quotas;
mod retries;
mod rollouts;
mod sources;
mod summary;
mod tokens;

pub use artifacts::artifacts_keep_each_content_once;
pub use dependencies::{
    a_waiting_key_is_pending_with_its_reason, dependency_cycles_are_refused_whole,
    the_rendered_hash_goes_with_what_was_applied,
};
pub use dry_run::dry_run_answers_as_the_apply_and_writes_nothing;
pub use events::{
    an_objects_events_newest_first, consumer_cursors_only_move_forward, consumer_names_are_checked,
    event_watchers_woken, events_in_order, events_kept_and_read_per_tenant, events_trimmed_behind_a_horizon,
};
pub use live::{live_records_end_with_what_the_key_stops_applying, live_state_deduplicated_and_drift_requeues};
pub use members::members_and_shards;
pub use notifiers::notifiers_are_stored_and_run_as_keys;
pub use objects::{
    a_relabel_runs_only_the_keys_whose_rendering_changes, idempotent_apply, own_write_leaves_the_writer_clean,
    own_write_that_unselects_the_writer_dirties_it, own_write_with_a_stale_token_is_refused, relabel_moves_keys,
    secrets_stored_and_rotated, set_based_selectors_pick_and_follow_clusters,
};
pub use paging::{
    cluster_pages_see_each_item_once_under_changes, clusters_filtered_by_labels, other_lists_page,
    status_filtered_by_phase_and_staleness, status_pages_see_each_key_once_under_changes,
};
pub use queue::{
    a_result_the_backend_cannot_hold_is_refused_whole, backoff_schedule,
    change_times_follow_the_oldest_unclaimed_change, cluster_limit_holds_back, coalescing,
    crowded_cluster_hides_no_other, dirty_while_processing, durability_across_reopen, exclusivity,
    inventory_recorded_ahead_outlives_failed_and_lost_runs, lease_expiry_and_takeover, parking_and_redrive,
    release_does_not_count, removal, requeue_runs_again_after_its_delay, requeue_yields_to_a_newer_change,
    stale_token_refused, wakes_waiters,
};
pub use quotas::quotas_refuse_whole_applies;
pub use retries::retries_are_logged_naming_who_asked;
pub use rollouts::{
    a_rollout_moves_one_step_at_a_time_on_the_stores_clock, revisions_kept_are_those_still_needed_and_the_last_ten,
    rollout_controls_pause_resume_promote_and_abort,
};
pub use sources::{
    oci_sources_feed_syncsets_and_share_one_name_space, sources_feed_syncsets_one_revision_at_a_time,
    syncsets_left_behind_by_a_dead_fetcher_catch_up,
};
pub use summary::{stale_clusters_are_those_without_a_sign_of_life, summaries_equal_a_full_count};
pub use tokens::{
    changes_record_their_actor, expired_tokens_are_found_and_unknown_names_not_revoked,
    own_writes_and_status_changes_name_no_actor, tokens_found_by_hash_and_revoked,
};

pub const TTL: Duration = Duration::from_secs(30);
const T0: Timestamp = Timestamp(1_800_000_000_000);

/// A store on a manual clock with a jitter-free retry policy (base 1 s, cap 8 s, 3 attempts).
async fn open(h: &dyn Harness) -> (Arc<dyn Store>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    (h.open(config(clock.clone())).await, clock)
}

fn config(clock: Arc<ManualClock>) -> StoreConfig {
    let retry = RetryPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(8), max_attempts: 3, jitter: 0.0 };
    StoreConfig { clock: Some(clock), retry, keys: None }
}

pub fn cluster(name: &str, labels: &[(&str, &str)]) -> Document {
    let mut metadata = ObjectMeta::new(name);
    metadata.labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Document::Cluster(Cluster { metadata, spec: ClusterSpec::new(Endpoint::Simulator {}) })
}

/// A SyncSet selecting `env=prod` with `n` ConfigMaps whose data carries `marker`.
pub fn syncset(name: &str, n: usize, marker: &str) -> Document {
    let resources = (0..n)
        .map(|i| {
            Manifest(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-{i}"), "namespace": "apps"},
                "data": {"marker": marker},
            }))
        })
        .collect();
    let spec = SyncSetSpec {
        source_ref: None,
        cluster_selector: Some(LabelSelector::labels([("env".to_string(), "prod".to_string())].into())),
        cluster_names: None,
        resource_apply_mode: ApplyMode::Sync,
        resources,
        rollout: None,
        templated: false,
        values: Default::default(),
        target_customizations: Vec::new(),
        depends_on: Vec::new(),
        health: None,
    };
    Document::SyncSet(SyncSet { metadata: ObjectMeta::new(name), spec, status: None })
}

fn key(c: &str, s: &str) -> WorkKey {
    WorkKey::new("default", c, s)
}

fn claim_params(owner: &str, limit: usize) -> ClaimParams {
    ClaimParams::new(owner, limit, TTL)
}

async fn claim(s: &dyn Store, owner: &str, limit: usize) -> Vec<ClaimedItem> {
    s.work_claim(claim_params(owner, limit)).await.expect("claim")
}

async fn complete(s: &dyn Store, item: &ClaimedItem, outcome: RunOutcome) -> CompleteOutcome {
    s.work_complete(vec![completion(item, outcome)]).await.expect("complete")[0]
}

/// A completion of `item` with `outcome` (no per-resource results).
fn completion(item: &ClaimedItem, outcome: RunOutcome) -> Completion {
    Completion { key: item.key.clone(), fence: item.fence, outcome, resources: vec![] }
}

/// A completion saying `item` applied the generation it was claimed at.
pub fn applied_completion(item: &ClaimedItem) -> Completion {
    completion(item, applied(item))
}

fn applied(item: &ClaimedItem) -> RunOutcome {
    RunOutcome::Applied { generation: item.generation, inventory: vec![], rendered: None }
}

fn failed(msg: &str) -> RunOutcome {
    RunOutcome::Failed { error: msg.into() }
}

async fn phase(s: &dyn Store, k: &WorkKey) -> Phase {
    s.status_get(k).await.expect("status").expect("key exists").phase
}

async fn one_key(s: &dyn Store) {
    s.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 2, "v1")]).await.expect("apply");
}

/// The sequence numbers of every event after `after`.
async fn seqs(s: &dyn Store, after: u64) -> Vec<u64> {
    s.events_read(after, 10_000).await.expect("events").iter().map(|e| e.seq).collect()
}

/// Two clusters selected by `s1`, both keys claimed.
async fn two_keys_claimed(s: &dyn Store) -> (ClaimedItem, ClaimedItem) {
    s.objects_apply(vec![cluster("c1", &[("env", "prod")]), cluster("c2", &[("env", "prod")]), syncset("s1", 1, "v1")])
        .await
        .expect("apply");
    let mut items = claim(s, "w", 10).await;
    items.sort_by(|a, b| a.key.cmp(&b.key));
    let c2 = items.pop().expect("c2/s1");
    (items.pop().expect("c1/s1"), c2)
}
