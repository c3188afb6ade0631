//! The bodies the hub answers with, defined once: the server serializes them and the
//! [`Client`](crate::Client) reads them back. Field names are camelCase on the wire;
//! optional fields are left out when empty, and default to empty when read.
//!
//! Objects (`GET /v1/clusters/...`) are not here: they are documents as users write
//! them (`fleetsync_model::Document::to_value`), carried as JSON.

use fleetsync_model::{ClusterConditions, KeyStatus, StatusSummary, SyncSetProgress};
use fleetsync_model::{Grant, Kind, ResourceRef, TokenRecord, WorkKey};
use serde::{Deserialize, Serialize};

/// Defined with the model: the store keeps them as clients read them.
pub use fleetsync_model::{Event, LiveResource};

/// `{"items": [...]}`, the shape of every list; a page of a paged list also carries
/// `"continue"`, the token of the next page (absent on the last page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Items<T> {
    pub items: Vec<T>,
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_: Option<String>,
}

impl<T> Items<T> {
    /// A whole list (no next page).
    pub fn all(items: Vec<T>) -> Self {
        Self { items, continue_: None }
    }
}

/// `POST /v1/apply`: what happened to each document, in order — or, for a dry run
/// (`?dryRun=All`, `"dryRun": true`), what would have happened, nothing written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyResponse {
    pub results: Vec<ApplyResult>,
    /// Present (`true`) on the answer to a dry run only.
    #[serde(default, rename = "dryRun", skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// What happened to one applied document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyResult {
    pub kind: Kind,
    pub tenant: String,
    pub name: String,
    pub generation: i64,
    /// `created`, `updated` or `unchanged`.
    pub result: String,
    /// How many keys this change enqueued.
    pub enqueued: u64,
    /// What the change may not do as meant, e.g. a SyncSet that selects no cluster or
    /// names a cluster that does not exist (the apply succeeded all the same).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// A SyncSet's new generation that its rollout stages: where it starts, e.g.
    /// `rollout step 1 of 3 (2 clusters)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged: Option<String>,
}

/// `DELETE /v1/<plural>/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteResponse {
    pub deleted: Deleted,
}

/// The object a delete removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub kind: Kind,
    pub tenant: String,
    pub name: String,
}

/// `GET /v1/status/syncsets/{name}`: a SyncSet's summary and its keys on every cluster
/// (all of them, or one page with `?limit=`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SyncSetStatus {
    pub tenant: String,
    pub syncset: String,
    /// The SyncSet's current generation, to compare with each key's.
    pub generation: i64,
    /// Counts of all its keys, whatever the page.
    pub summary: StatusSummary,
    /// How far it is: keys by the generation each is told to run, and whether it is
    /// applied (the one notion of done that `describe`, `wait` and the dashboard show).
    pub progress: SyncSetProgress,
    pub items: Vec<KeyStatus>,
    /// The token of the next page; absent on the last (or only) page.
    #[serde(default, rename = "continue", skip_serializing_if = "Option::is_none")]
    pub continue_: Option<String>,
}

/// `GET /v1/version`: the hub's build, and the schema of its store (`null` when the
/// store cannot be read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerVersion {
    pub version: String,
    #[serde(default)]
    pub schema: Option<SchemaVersion>,
}

/// The schema a hub's store holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaVersion {
    /// `sqlite` or `postgres`.
    pub store: String,
    /// Migrations applied to the store.
    pub version: u64,
    /// The newest migration the hub's build keeps.
    pub latest: u64,
}

/// `GET /v1/status/summary`: every key of a tenant summed up, as a SyncSet's are (each
/// failure names its SyncSet).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantStatus {
    pub tenant: String,
    pub summary: StatusSummary,
    /// The tenant's clusters that have keys, by condition.
    #[serde(default)]
    pub clusters: ClusterConditions,
}

/// `POST /v1/status/clusters/{cluster}/syncsets/{syncset}/retry` (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retried {
    pub retried: WorkKey,
}

/// `GET /v1/status/failures`: the failed and parked keys grouped by cause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureGroups {
    pub groups: Vec<fleetsync_model::FailureGroup>,
    /// Failing keys read.
    pub keys: u64,
    /// Whether more failing keys exist than were read (the hub reads at most 20,000).
    pub truncated: bool,
}

/// `POST /v1/status/failures/retry` and `POST /v1/status/clusters/{name}/retry` (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetriedKeys {
    pub retried: u64,
    /// Whether failing keys past the most a request reads (20,000) were not looked at (retry again for them).
    pub truncated: bool,
}

/// `GET /v1/status/clusters`: one cluster found, with its condition and whether it is stale.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterListItem {
    #[serde(flatten)]
    pub row: fleetsync_model::cluster_list::ClusterRow,
    pub condition: fleetsync_model::cluster_list::Condition,
    pub stale: bool,
}

/// `GET /v1/status/clusters`: a page of the clusters found (`offset` onwards) and how
/// many were found in all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterList {
    pub items: Vec<ClusterListItem>,
    pub total: u64,
    pub offset: u64,
}

/// `GET /v1/status/heatmap?groupBy=LABEL`: the tenant's clusters by condition per value
/// of the label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeatMap {
    pub label: String,
    /// Clusters of the tenant, in all.
    pub clusters: u64,
    pub groups: Vec<fleetsync_model::cluster_list::HeatRow>,
}

/// `GET /v1/members`: a live worker process, as the store last heard from it, with
/// how many shards it owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    #[serde(flatten)]
    pub member: fleetsync_model::Member,
    /// Shards it owns (rendezvous hashing over the live members).
    pub shards: usize,
}

/// One line of `GET /v1/events?watch=true` (newline-delimited JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "UPPERCASE")]
pub enum WatchLine {
    /// The next event, in `seq` order, each once.
    Event { event: Event },
    /// Every event up to `seq` has been sent.
    Bookmark { seq: u64 },
    /// The last line: the watch fell behind the horizon (`code` 410) or the store
    /// failed (500).
    Error(WatchError),
    /// A line type of a newer hub: skipped.
    #[serde(other)]
    Unknown,
}

/// The error line of a watch: the error body of the answer a request would have had,
/// with its status code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchError {
    pub code: u16,
    #[serde(flatten)]
    pub body: ErrorBody,
}

/// The body of every error answer: the message, plus where a document broke a rule
/// or, for an expired event cursor (410), where the log now starts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    /// The document that broke a rule (`document 2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
    /// The field that broke a rule (`metadata.name`, `reports[2].object`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The cursor that fell off the event log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    /// The log's horizon: every event up to it is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon: Option<u64>,
}

impl ErrorBody {
    /// A body with only a message.
    pub fn message(error: impl Into<String>) -> Self {
        Self { error: error.into(), ..Self::default() }
    }
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`, or `unavailable` (503) when the store is not ready (unreachable, or its schema behind this build's).
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What happened to one agent report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReportResult {
    /// Persisted as the resource's latest state.
    Stored,
    /// Already persisted at this version (a resend).
    Duplicate,
    /// Older than the version persisted.
    Stale,
    /// Not a resource fleetsync applies to this cluster: not stored.
    Unmanaged,
}

/// One acknowledged report: the agent may forget it (unless it has a newer one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ack {
    pub resource: ResourceRef,
    pub resource_version: String,
    pub result: ReportResult,
    /// Where the live state differs from the desired one, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<String>,
}

/// `POST /v1/agent/reports`: the answer to a batch, sent only after it was committed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Acks {
    pub items: Vec<Ack>,
    /// SyncSets enqueued again on this cluster because their resources drifted.
    pub requeued: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{LiveState, Timestamp};
    use serde_json::json;

    fn round_trip<T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
        value: &T,
    ) -> serde_json::Value {
        let json = serde_json::to_value(value).expect("serializes");
        let back: T = serde_json::from_value(json.clone()).expect("reads back");
        assert_eq!(&back, value);
        json
    }

    fn resource() -> ResourceRef {
        ResourceRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("apps".into()),
            name: "web".into(),
        }
    }

    #[test]
    fn an_expired_cursor_body_carries_the_cursor_and_the_horizon() {
        let body = ErrorBody { cursor: Some(5), horizon: Some(9), ..ErrorBody::message("gone") };
        assert_eq!(round_trip(&body), json!({ "error": "gone", "cursor": 5, "horizon": 9 }));
    }

    #[test]
    fn an_error_body_leaves_out_what_it_does_not_have() {
        assert_eq!(round_trip(&ErrorBody::message("no")), json!({ "error": "no" }));
        let v = ErrorBody {
            document: Some("document 2".into()),
            field: Some("kind".into()),
            rule: Some("unknown".into()),
            ..ErrorBody::message("bad")
        };
        assert_eq!(
            round_trip(&v),
            json!({ "error": "bad", "document": "document 2", "field": "kind", "rule": "unknown" })
        );
    }

    #[test]
    fn watch_lines_are_tagged_by_type() {
        let event = Event {
            seq: 3,
            at: Timestamp(0),
            tenant: "t".into(),
            kind: "Cluster".into(),
            name: "c".into(),
            action: "Created".into(),
            generation: 1,
            actor: None,
        };
        let line = round_trip(&WatchLine::Event { event });
        assert_eq!((&line["type"], &line["event"]["seq"]), (&json!("EVENT"), &json!(3)));
        assert_eq!(round_trip(&WatchLine::Bookmark { seq: 7 }), json!({ "type": "BOOKMARK", "seq": 7 }));
        let gone = WatchLine::Error(WatchError {
            code: 410,
            body: ErrorBody { cursor: Some(1), horizon: Some(4), ..ErrorBody::message("gone") },
        });
        assert_eq!(
            round_trip(&gone),
            json!({ "type": "ERROR", "code": 410, "error": "gone", "cursor": 1, "horizon": 4 })
        );
    }

    #[test]
    fn a_watch_line_of_an_unknown_type_is_read_as_unknown() {
        let line: WatchLine = serde_json::from_value(json!({ "type": "SOMETHING_NEW", "x": 1 })).expect("reads");
        assert_eq!(line, WatchLine::Unknown);
    }

    #[test]
    fn report_results_and_acks_are_camel_case() {
        let ack =
            Ack { resource: resource(), resource_version: "7".into(), result: ReportResult::Unmanaged, drift: None };
        let v = round_trip(&Acks { items: vec![ack], requeued: vec!["base".into()] });
        assert_eq!(v["items"][0]["result"], "unmanaged");
        assert_eq!(v["items"][0]["resourceVersion"], "7");
        assert!(v["items"][0].get("drift").is_none(), "no drift, no field: {v}");
        let drifted = Ack {
            resource: resource(),
            resource_version: "8".into(),
            result: ReportResult::Stored,
            drift: Some("data.k".into()),
        };
        assert_eq!(round_trip(&drifted)["drift"], "data.k");
    }

    #[test]
    fn members_and_live_resources_are_camel_case() {
        let member = fleetsync_model::Member {
            id: "w1".into(),
            started_at: Timestamp(0),
            heartbeat_at: Timestamp(1),
            expires_at: Timestamp(2),
            in_flight: 3,
            max_in_flight: 6,
        };
        let m = Member { member, shards: 4 };
        let v = round_trip(&m);
        assert_eq!((&v["inFlight"], &v["maxInFlight"], &v["shards"]), (&json!(3), &json!(6), &json!(4)));
        assert!(v.get("heartbeatAt").is_some() && v.get("startedAt").is_some() && v.get("expiresAt").is_some(), "{v}");
        let live = LiveResource {
            syncset: "base".into(),
            resource: resource(),
            resource_version: "9".into(),
            state: LiveState::Deleted,
            drift: Some("deleted".into()),
            versions: 2,
            updated_at: Timestamp(5),
        };
        let v = round_trip(&live);
        assert_eq!(
            (&v["state"], &v["resourceVersion"], &v["updatedAt"].is_string()),
            (&json!("deleted"), &json!("9"), &true)
        );
    }

    #[test]
    fn apply_results_name_the_kind_as_documents_do() {
        let r = ApplyResult {
            kind: Kind::SyncSet,
            tenant: "default".into(),
            name: "base".into(),
            generation: 2,
            result: "updated".into(),
            enqueued: 3,
            warnings: vec![],
            staged: None,
        };
        assert_eq!(
            round_trip(&ApplyResponse { results: vec![r.clone()], dry_run: false }),
            json!({ "results": [{ "kind": "SyncSet", "tenant": "default", "name": "base", "generation": 2, "result": "updated", "enqueued": 3 }] })
        );
        let dry = round_trip(&ApplyResponse { results: vec![r], dry_run: true });
        assert_eq!(dry["dryRun"], json!(true), "a dry run says so: {dry}");
        let d =
            DeleteResponse { deleted: Deleted { kind: Kind::Cluster, tenant: "default".into(), name: "c1".into() } };
        assert_eq!(round_trip(&d), json!({ "deleted": { "kind": "Cluster", "tenant": "default", "name": "c1" } }));
    }
}

/// `POST /v1/tokens`: what to issue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenCreate {
    /// `team-a:editor`, `fleet-admin`, `team-a:agent:c1`.
    pub grant: Grant,
    /// Default: made from the grant, with a random suffix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Seconds until it expires; none: it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
}

/// `POST /v1/tokens`' answer: the token, shown this once, and its record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IssuedToken {
    pub token: String,
    #[serde(flatten)]
    pub record: TokenRecord,
}

/// `GET /v1/whoami`: who the hub takes the caller for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhoAmI {
    pub subject: String,
    pub grants: Vec<Grant>,
}

/// `DELETE /v1/tokens/{name}`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revoked {
    pub revoked: String,
}

/// `GET /v1/syncsets/{name}/render?cluster=`: what a templated SyncSet's resources are
/// on one cluster (Kubernetes Secret values redacted), and the hash of that rendering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rendered {
    pub syncset: String,
    pub cluster: String,
    /// The SyncSet generation rendered.
    pub generation: i64,
    /// [`fleetsync_model::template::rendered_hash`] of the resources as applied (before
    /// redaction).
    pub hash: String,
    pub resources: Vec<fleetsync_model::Manifest>,
}
