//! A store that always fails: the API answers 503 with `Retry-After` while the store is
//! out of reach (a transient failure) and 500 for any other failure, hiding the detail.

use crate::harness::over;
use async_trait::async_trait;
use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use fleetsync_model::{
    Cluster, Document, GitRepository, Grant, KeyStatus, Kind, Notifier, OCIRepository, ResourceRef, Secret,
    StatusSummary, SyncSet, Timestamp, TokenRecord, WorkKey,
};
use fleetsync_store::*;
use std::sync::Arc;
use tokio::sync::watch;
use tower::ServiceExt;

/// A store whose every call fails, transiently (out of reach) or not.
struct Broken<const TRANSIENT: bool>;

impl<const TRANSIENT: bool> Broken<TRANSIENT> {
    fn fail<T>() -> Result<T> {
        Err(StoreError::backend("testing", TRANSIENT, "SECRET detail of /var/lib/db"))
    }
}

#[async_trait]
impl<const TRANSIENT: bool> Objects for Broken<TRANSIENT> {
    async fn objects_apply_within(
        &self,
        _: Vec<Document>,
        _: Option<&str>,
        _: &Quotas,
        _: Commit,
    ) -> Result<Vec<ApplyOutcome>> {
        Self::fail()
    }

    async fn objects_apply_own(&self, _: Vec<Document>, _: OwnWrite) -> Result<Vec<ApplyOutcome>> {
        Self::fail()
    }

    async fn object_delete_by(&self, _: Kind, _: &str, _: &str, _: Option<&str>) -> Result<()> {
        Self::fail()
    }

    async fn cluster_get(&self, _: &str, _: &str) -> Result<Option<Cluster>> {
        Self::fail()
    }

    async fn cluster_list(&self, _: Option<&str>) -> Result<Vec<Cluster>> {
        Self::fail()
    }

    async fn syncset_get(&self, _: &str, _: &str) -> Result<Option<SyncSet>> {
        Self::fail()
    }

    async fn syncset_list(&self, _: Option<&str>) -> Result<Vec<SyncSet>> {
        Self::fail()
    }

    async fn secret_get(&self, _: &str, _: &str) -> Result<Option<Secret>> {
        Self::fail()
    }

    async fn secret_list(&self, _: Option<&str>) -> Result<Vec<Secret>> {
        Self::fail()
    }

    async fn git_repository_get(&self, _: &str, _: &str) -> Result<Option<GitRepository>> {
        Self::fail()
    }

    async fn git_repository_list(&self, _: Option<&str>) -> Result<Vec<GitRepository>> {
        Self::fail()
    }

    async fn oci_repository_get(&self, _: &str, _: &str) -> Result<Option<OCIRepository>> {
        Self::fail()
    }

    async fn oci_repository_list(&self, _: Option<&str>) -> Result<Vec<OCIRepository>> {
        Self::fail()
    }

    async fn notifier_get(&self, _: &str, _: &str) -> Result<Option<Notifier>> {
        Self::fail()
    }

    async fn notifier_list(&self, _: Option<&str>) -> Result<Vec<Notifier>> {
        Self::fail()
    }

    async fn cluster_page(&self, _: &ClusterFilter, _: &PageRequest<ObjectKey>) -> Result<Page<Cluster, ObjectKey>> {
        Self::fail()
    }

    async fn syncset_page(&self, _: &ObjectFilter, _: &PageRequest<ObjectKey>) -> Result<Page<SyncSet, ObjectKey>> {
        Self::fail()
    }

    async fn secret_page(&self, _: &ObjectFilter, _: &PageRequest<ObjectKey>) -> Result<Page<Secret, ObjectKey>> {
        Self::fail()
    }

    async fn git_repository_page(
        &self,
        _: &ObjectFilter,
        _: &PageRequest<ObjectKey>,
    ) -> Result<Page<GitRepository, ObjectKey>> {
        Self::fail()
    }

    async fn oci_repository_page(
        &self,
        _: &ObjectFilter,
        _: &PageRequest<ObjectKey>,
    ) -> Result<Page<OCIRepository, ObjectKey>> {
        Self::fail()
    }

    async fn notifier_page(&self, _: &ObjectFilter, _: &PageRequest<ObjectKey>) -> Result<Page<Notifier, ObjectKey>> {
        Self::fail()
    }
}

#[async_trait]
impl<const TRANSIENT: bool> WorkQueue for Broken<TRANSIENT> {
    async fn work_claim(&self, _: ClaimParams) -> Result<Vec<ClaimedItem>> {
        Self::fail()
    }

    async fn lease_renew(&self, _: RenewParams) -> Result<Vec<WorkKey>> {
        Self::fail()
    }

    async fn work_complete(&self, _: Vec<Completion>) -> Result<Vec<CompleteOutcome>> {
        Self::fail()
    }

    async fn work_inventory_record(&self, _: &WorkKey, _: Fence, _: &[ResourceRef]) -> Result<()> {
        Self::fail()
    }

    async fn work_release(&self, _: &WorkKey, _: Fence) -> Result<()> {
        Self::fail()
    }

    async fn work_retry_by(&self, _: &WorkKey, _: Option<&str>) -> Result<()> {
        Self::fail()
    }

    async fn work_resync(&self) -> Result<u64> {
        Self::fail()
    }

    async fn work_next_ready_at(&self, _: Option<&[u16]>) -> Result<Option<Timestamp>> {
        Self::fail()
    }

    fn clock(&self) -> Arc<dyn fleetsync_model::Clock> {
        Arc::new(fleetsync_model::SystemClock)
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        watch::channel(0).1
    }
}

#[async_trait]
impl<const TRANSIENT: bool> Members for Broken<TRANSIENT> {
    async fn member_heartbeat(&self, _: MemberBeat) -> Result<Vec<Member>> {
        Self::fail()
    }

    async fn member_leave(&self, _: &str) -> Result<()> {
        Self::fail()
    }

    async fn member_list(&self) -> Result<Vec<Member>> {
        Self::fail()
    }
}

#[async_trait]
impl<const TRANSIENT: bool> StatusRead for Broken<TRANSIENT> {
    async fn status_get(&self, _: &WorkKey) -> Result<Option<KeyStatus>> {
        Self::fail()
    }

    async fn status_list(&self, _: &StatusFilter) -> Result<Vec<KeyStatus>> {
        Self::fail()
    }

    async fn status_page(&self, _: &StatusFilter, _: &PageRequest<WorkKey>) -> Result<Page<KeyStatus, WorkKey>> {
        Self::fail()
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        Self::fail()
    }

    async fn store_ready(&self) -> Result<fleetsync_store::Schema> {
        Self::fail()
    }

    async fn status_summary(&self, _: &str, _: Option<&str>) -> Result<StatusSummary> {
        Self::fail()
    }

    async fn cluster_conditions(&self, _: &str, _: std::time::Duration) -> Result<fleetsync_model::ClusterConditions> {
        Self::fail()
    }

    async fn cluster_rows(&self, _: &str) -> Result<Vec<fleetsync_model::cluster_list::ClusterRow>> {
        Self::fail()
    }
}

#[async_trait]
impl<const TRANSIENT: bool> EventLog for Broken<TRANSIENT> {
    async fn consumer_get(&self, _: &str) -> Result<Option<u64>> {
        Self::fail()
    }

    async fn consumer_ack(&self, _: &str, _: u64) -> Result<u64> {
        Self::fail()
    }

    async fn consumer_delete(&self, _: &str) -> Result<()> {
        Self::fail()
    }

    async fn events_read(&self, _: u64, _: usize) -> Result<Vec<Event>> {
        Self::fail()
    }

    async fn events_read_of(&self, _: &[String], _: u64, _: usize) -> Result<Vec<Event>> {
        Self::fail()
    }

    async fn events_newest(&self, _: Option<&[String]>, _: Option<u64>, _: usize) -> Result<Vec<Event>> {
        Self::fail()
    }

    async fn events_head(&self) -> Result<u64> {
        Self::fail()
    }

    async fn events_of(&self, _: &EventObject, _: Option<u64>, _: usize) -> Result<Vec<Event>> {
        Self::fail()
    }

    async fn events_trim(&self, _: EventRetention) -> Result<EventsTrimmed> {
        Self::fail()
    }

    fn events_subscribe(&self) -> watch::Receiver<u64> {
        watch::channel(0).1
    }
}

/// Every token is a fleet-admin's, so that requests get past authentication to the
/// store calls that fail.
#[async_trait]
impl<const TRANSIENT: bool> Tokens for Broken<TRANSIENT> {
    async fn token_create(&self, _: &TokenRecord, _: &[u8; 32]) -> Result<bool> {
        Self::fail()
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
        Self::fail()
    }

    async fn token_revoke(&self, _: Option<&str>, _: &str) -> Result<bool> {
        Self::fail()
    }
}

#[async_trait]
impl<const TRANSIENT: bool> LiveState for Broken<TRANSIENT> {
    async fn live_record(&self, _: &str, _: &str, _: Vec<LiveRecord>) -> Result<LiveRecorded> {
        Self::fail()
    }

    async fn live_list(&self, _: &str, _: &str) -> Result<Vec<LiveResource>> {
        Self::fail()
    }

    async fn live_page(&self, _: &LiveFilter, _: &PageRequest<String>) -> Result<Page<LiveResource, String>> {
        Self::fail()
    }
}

#[async_trait]
impl<const TRANSIENT: bool> Artifacts for Broken<TRANSIENT> {
    async fn artifact_put(&self, _: &str, _: &str, _: &fleetsync_model::Artifact) -> Result<ArtifactStored> {
        Self::fail()
    }

    async fn artifact_get(&self, _: &str, _: &str, _: &str) -> Result<Option<fleetsync_model::Artifact>> {
        Self::fail()
    }

    async fn source_stored(
        &self,
        _: &str,
        _: &str,
        _: &fleetsync_model::Artifact,
        _: OwnWrite,
    ) -> Result<fleetsync_store::SourceStored> {
        Self::fail()
    }

    async fn source_catch_up_one(
        &self,
        _: &str,
        _: &str,
        _: OwnWrite,
    ) -> Result<Option<fleetsync_store::ApplyOutcome>> {
        Self::fail()
    }
}

#[async_trait]
impl<const TRANSIENT: bool> Rollouts for Broken<TRANSIENT> {
    async fn revision_get(&self, _: &str, _: &str, _: i64) -> Result<Option<SyncSet>> {
        Self::fail()
    }

    async fn rollout_get(&self, _: &str, _: &str) -> Result<Option<rollout::RolloutState>> {
        Self::fail()
    }

    async fn rollout_list(
        &self,
        _: Option<&str>,
        _: Option<fleetsync_model::RolloutPhase>,
    ) -> Result<Vec<rollout::RolloutState>> {
        Self::fail()
    }

    async fn rollout_write(
        &self,
        _: &rollout::RolloutState,
        _: &[(String, i64)],
        _: Option<rollout::RolloutEvent>,
    ) -> Result<bool> {
        Self::fail()
    }
}

#[tokio::test]
async fn store_failures_are_hidden() {
    let permanent = over(Arc::new(Broken::<false>));
    let out_of_reach = over(Arc::new(Broken::<true>));
    let routes = [
        ("GET", "/metrics"),
        ("GET", "/v1/clusters"),
        ("GET", "/v1/syncsets/x"),
        ("GET", "/v1/status"),
        ("GET", "/v1/status?limit=5"),
        ("GET", "/v1/clusters?limit=5&labelSelector=a%3Db"),
        ("GET", "/v1/events"),
        ("GET", "/v1/events?watch=true"),
        ("POST", "/v1/apply"),
    ];
    let health = [("GET", "/healthz")];
    for (router, transient) in [(permanent, false), (out_of_reach, true)] {
        for (method, uri) in routes.iter().chain(&health) {
            let want = if transient || *uri == "/healthz" {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::INTERNAL_SERVER_ERROR
            };
            let body = if *method == "POST" { Body::from(crate::harness::FLEET) } else { Body::empty() };
            let req = Request::builder()
                .method(*method)
                .uri(*uri)
                .header("authorization", "Bearer fst_any")
                .header("content-type", "application/yaml");
            let req = req.body(body).expect("request");
            let resp = router.clone().oneshot(req).await.expect("infallible");
            assert_eq!(resp.status(), want, "{uri}, transient: {transient}");
            let retry_after = resp.headers().get("retry-after").cloned();
            let text =
                String::from_utf8_lossy(&to_bytes(resp.into_body(), usize::MAX).await.expect("body")).into_owned();
            assert!(!text.contains("SECRET"), "{uri} leaked: {text}");
            let json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            if want == StatusCode::INTERNAL_SERVER_ERROR {
                assert_eq!(json["error"], "internal error: see the server log", "{uri}");
            } else if *uri != "/healthz" {
                assert_eq!(retry_after.as_ref().map(|v| v.as_bytes()), Some(&b"1"[..]), "{uri}: {text}");
                assert!(json["error"].as_str().is_some_and(|e| e.contains("out of reach")), "{uri}: {text}");
            }
        }
    }
}
