//! A store that always fails: the API answers 500/503 and hides the detail.

use crate::harness::over;
use async_trait::async_trait;
use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use fleetsync_model::{
    Cluster, Document, Grant, KeyStatus, Kind, ResourceRef, Secret, StatusSummary, SyncSet, Timestamp, TokenRecord,
    WorkKey,
};
use fleetsync_store::*;
use std::sync::Arc;
use tokio::sync::watch;
use tower::ServiceExt;

struct Broken;

fn fail<T>() -> Result<T> {
    Err(StoreError::backend("testing", true, "SECRET detail of /var/lib/db"))
}

#[async_trait]
impl Objects for Broken {
    async fn objects_apply_within(
        &self,
        _: Vec<Document>,
        _: Option<&str>,
        _: &Quotas,
        _: Commit,
    ) -> Result<Vec<ApplyOutcome>> {
        fail()
    }

    async fn objects_apply_own(&self, _: Vec<Document>, _: OwnWrite) -> Result<Vec<ApplyOutcome>> {
        fail()
    }

    async fn object_delete_by(&self, _: Kind, _: &str, _: &str, _: Option<&str>) -> Result<()> {
        fail()
    }

    async fn cluster_get(&self, _: &str, _: &str) -> Result<Option<Cluster>> {
        fail()
    }

    async fn cluster_list(&self, _: Option<&str>) -> Result<Vec<Cluster>> {
        fail()
    }

    async fn syncset_get(&self, _: &str, _: &str) -> Result<Option<SyncSet>> {
        fail()
    }

    async fn syncset_list(&self, _: Option<&str>) -> Result<Vec<SyncSet>> {
        fail()
    }

    async fn secret_get(&self, _: &str, _: &str) -> Result<Option<Secret>> {
        fail()
    }

    async fn secret_list(&self, _: Option<&str>) -> Result<Vec<Secret>> {
        fail()
    }

    async fn cluster_page(&self, _: &ClusterFilter, _: &PageRequest<ObjectKey>) -> Result<Page<Cluster, ObjectKey>> {
        fail()
    }

    async fn syncset_page(&self, _: &ObjectFilter, _: &PageRequest<ObjectKey>) -> Result<Page<SyncSet, ObjectKey>> {
        fail()
    }

    async fn secret_page(&self, _: &ObjectFilter, _: &PageRequest<ObjectKey>) -> Result<Page<Secret, ObjectKey>> {
        fail()
    }
}

#[async_trait]
impl WorkQueue for Broken {
    async fn work_claim(&self, _: ClaimParams) -> Result<Vec<ClaimedItem>> {
        fail()
    }

    async fn lease_renew(&self, _: RenewParams) -> Result<Vec<WorkKey>> {
        fail()
    }

    async fn work_complete(&self, _: Vec<Completion>) -> Result<Vec<CompleteOutcome>> {
        fail()
    }

    async fn work_inventory_record(&self, _: &WorkKey, _: Fence, _: &[ResourceRef]) -> Result<()> {
        fail()
    }

    async fn work_release(&self, _: &WorkKey, _: Fence) -> Result<()> {
        fail()
    }

    async fn work_retry_by(&self, _: &WorkKey, _: Option<&str>) -> Result<()> {
        fail()
    }

    async fn work_resync(&self) -> Result<u64> {
        fail()
    }

    async fn work_next_ready_at(&self, _: Option<&[u16]>) -> Result<Option<Timestamp>> {
        fail()
    }

    fn clock(&self) -> Arc<dyn fleetsync_model::Clock> {
        Arc::new(fleetsync_model::SystemClock)
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        watch::channel(0).1
    }
}

#[async_trait]
impl Members for Broken {
    async fn member_heartbeat(&self, _: MemberBeat) -> Result<Vec<Member>> {
        fail()
    }

    async fn member_leave(&self, _: &str) -> Result<()> {
        fail()
    }

    async fn member_list(&self) -> Result<Vec<Member>> {
        fail()
    }
}

#[async_trait]
impl StatusRead for Broken {
    async fn status_get(&self, _: &WorkKey) -> Result<Option<KeyStatus>> {
        fail()
    }

    async fn status_list(&self, _: &StatusFilter) -> Result<Vec<KeyStatus>> {
        fail()
    }

    async fn status_page(&self, _: &StatusFilter, _: &PageRequest<WorkKey>) -> Result<Page<KeyStatus, WorkKey>> {
        fail()
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        fail()
    }

    async fn store_ready(&self) -> Result<fleetsync_store::Schema> {
        fail()
    }

    async fn status_summary(&self, _: &str, _: Option<&str>) -> Result<StatusSummary> {
        fail()
    }

    async fn cluster_conditions(&self, _: &str, _: std::time::Duration) -> Result<fleetsync_model::ClusterConditions> {
        fail()
    }
}

#[async_trait]
impl EventLog for Broken {
    async fn consumer_get(&self, _: &str) -> Result<Option<u64>> {
        fail()
    }

    async fn consumer_ack(&self, _: &str, _: u64) -> Result<u64> {
        fail()
    }

    async fn events_read(&self, _: u64, _: usize) -> Result<Vec<Event>> {
        fail()
    }

    async fn events_read_of(&self, _: &[String], _: u64, _: usize) -> Result<Vec<Event>> {
        fail()
    }

    async fn events_newest(&self, _: Option<&[String]>, _: Option<u64>, _: usize) -> Result<Vec<Event>> {
        fail()
    }

    async fn events_head(&self) -> Result<u64> {
        fail()
    }

    async fn events_of(&self, _: &EventObject, _: Option<u64>, _: usize) -> Result<Vec<Event>> {
        fail()
    }

    async fn events_trim(&self, _: EventRetention) -> Result<EventsTrimmed> {
        fail()
    }

    fn events_subscribe(&self) -> watch::Receiver<u64> {
        watch::channel(0).1
    }
}

/// Every token is a fleet-admin's, so that requests get past authentication to the
/// store calls that fail.
#[async_trait]
impl Tokens for Broken {
    async fn token_create(&self, _: &TokenRecord, _: &[u8; 32]) -> Result<bool> {
        fail()
    }

    async fn token_find(&self, _: &[u8; 32]) -> Result<Option<TokenRecord>> {
        let created_by = "test".into();
        Ok(Some(TokenRecord {
            name: "t".into(),
            grant: Grant::Fleet,
            created_at: Timestamp(0),
            expires_at: None,
            created_by,
        }))
    }

    async fn token_list(&self) -> Result<Vec<TokenRecord>> {
        fail()
    }

    async fn token_revoke(&self, _: Option<&str>, _: &str) -> Result<bool> {
        fail()
    }
}

#[async_trait]
impl LiveState for Broken {
    async fn live_record(&self, _: &str, _: &str, _: Vec<LiveRecord>) -> Result<LiveRecorded> {
        fail()
    }

    async fn live_list(&self, _: &str, _: &str) -> Result<Vec<LiveResource>> {
        fail()
    }

    async fn live_page(&self, _: &LiveFilter, _: &PageRequest<String>) -> Result<Page<LiveResource, String>> {
        fail()
    }
}

#[async_trait]
impl Rollouts for Broken {
    async fn revision_get(&self, _: &str, _: &str, _: i64) -> Result<Option<SyncSet>> {
        fail()
    }

    async fn rollout_get(&self, _: &str, _: &str) -> Result<Option<rollout::RolloutState>> {
        fail()
    }

    async fn rollout_list(
        &self,
        _: Option<&str>,
        _: Option<fleetsync_model::RolloutPhase>,
    ) -> Result<Vec<rollout::RolloutState>> {
        fail()
    }

    async fn rollout_write(
        &self,
        _: &rollout::RolloutState,
        _: &[(String, i64)],
        _: Option<rollout::RolloutEvent>,
    ) -> Result<bool> {
        fail()
    }
}

#[tokio::test]
async fn store_failures_are_hidden() {
    let router = over(Arc::new(Broken));
    let cases = [
        ("GET", "/healthz", StatusCode::SERVICE_UNAVAILABLE),
        ("GET", "/metrics", StatusCode::INTERNAL_SERVER_ERROR),
        ("GET", "/v1/clusters", StatusCode::INTERNAL_SERVER_ERROR),
        ("GET", "/v1/syncsets/x", StatusCode::INTERNAL_SERVER_ERROR),
        ("GET", "/v1/status", StatusCode::INTERNAL_SERVER_ERROR),
        ("GET", "/v1/status?limit=5", StatusCode::INTERNAL_SERVER_ERROR),
        ("GET", "/v1/clusters?limit=5&labelSelector=a%3Db", StatusCode::INTERNAL_SERVER_ERROR),
        ("GET", "/v1/events", StatusCode::INTERNAL_SERVER_ERROR),
        ("GET", "/v1/events?watch=true", StatusCode::INTERNAL_SERVER_ERROR),
        ("POST", "/v1/apply", StatusCode::INTERNAL_SERVER_ERROR),
    ];
    for (method, uri, want) in cases {
        let body = if method == "POST" { Body::from(crate::harness::FLEET) } else { Body::empty() };
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", "Bearer fst_any")
            .header("content-type", "application/yaml");
        let req = req.body(body).expect("request");
        let resp = router.clone().oneshot(req).await.expect("infallible");
        assert_eq!(resp.status(), want, "{uri}");
        let text = String::from_utf8_lossy(&to_bytes(resp.into_body(), usize::MAX).await.expect("body")).into_owned();
        assert!(!text.contains("SECRET"), "{uri} leaked: {text}");
        let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        if want == StatusCode::INTERNAL_SERVER_ERROR {
            assert_eq!(json["error"], "internal error: see the server log", "{uri}");
        }
    }
}
