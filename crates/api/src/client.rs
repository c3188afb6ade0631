//! The typed client of the hub: one method per route, answers read into the
//! [wire types](crate::wire), every failure a [`ClientError`].

use crate::tls::{ClientBuildError, ClientTls};
use crate::wire::{
    Acks, ApplyResponse, DeleteResponse, Deleted, ErrorBody, Event, Health, Items, LiveResource, Member, Retried,
    SyncSetStatus, WatchLine,
};
use crate::wire::{ClusterList, IssuedToken, Rendered, Revoked, ServerVersion, TenantStatus, TokenCreate, WhoAmI};
use crate::ApplyResult;
use fleetsync_model::{ClusterStatus, KeyStatus, Kind, ReportBatch, ResourceRef, RolloutStatus, TokenRecord, WorkKey};
use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::time::Duration;

/// Why a call to the hub did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The hub could not be reached, or the connection broke before the answer was read.
    #[error("cannot reach the hub at {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The hub did not answer (or finish answering) within the client's timeout.
    #[error("no answer from {url} within {}", seconds(*after))]
    TimedOut { url: String, after: Duration },
    /// The hub answered with an error status and its message.
    #[error("the hub answered {status}: {message}")]
    Refused { status: StatusCode, message: String },
    /// The event cursor fell off the log: every event up to `horizon` is gone. Re-list
    /// (without a cursor) and resume from the newest `seq` read.
    #[error("the cursor {cursor} fell off the event log (oldest kept is {})", horizon + 1)]
    CursorExpired { cursor: u64, horizon: u64 },
    /// The hub answered a dry run as an apply: it does not know dry runs, and the
    /// documents were applied.
    #[error("the hub at {url} applied the documents instead of a dry run (it predates dry runs?)")]
    NotDryRun { url: String },
    /// The hub answered something this client cannot read (a different version?).
    #[error("the hub's answer to {what} is not understood")]
    Undecodable {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// The error status the hub answered with, if it answered with one.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ClientError::Refused { status, .. } => Some(*status),
            ClientError::CursorExpired { .. } => Some(StatusCode::GONE),
            _ => None,
        }
    }

    /// The error from an error answer's status and body: an expired cursor if the body
    /// says where the log starts, else a refusal with the hub's message.
    pub fn from_answer(status: StatusCode, body: &[u8]) -> ClientError {
        let body: ErrorBody = serde_json::from_slice(body).unwrap_or_else(|_| ErrorBody::message("no message"));
        match (status, body.cursor, body.horizon) {
            (StatusCode::GONE, Some(cursor), Some(horizon)) => ClientError::CursorExpired { cursor, horizon },
            _ => ClientError::Refused { status, message: body.error },
        }
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// A timeout as people write it: `30s`, `1.5s`, `250ms`.
fn seconds(d: Duration) -> String {
    match (d.subsec_millis(), d.as_secs()) {
        (0, s) => format!("{s}s"),
        (ms, 0) => format!("{ms}ms"),
        _ => format!("{}s", d.as_secs_f64()),
    }
}

/// An error and each of its causes, joined by `: ` (for logs, which show one line).
pub fn describe(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        s.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    s
}

/// Which key statuses `GET /v1/status` answers with.
#[derive(Debug, Clone, Default)]
pub struct StatusFilter {
    /// `None`: the default tenant.
    pub tenant: Option<String>,
    pub cluster: Option<String>,
    pub syncset: Option<String>,
    /// Phases, comma-separated (`Failed,Parked`): keys in any of them.
    pub phase: Option<String>,
    /// Only keys that have not applied their SyncSet's generation yet.
    pub stale: bool,
}

impl StatusFilter {
    /// The filter as query parameters (`limit` and `continue` left to the caller).
    pub(crate) fn query(&self) -> Vec<(&'static str, String)> {
        let params =
            [("tenant", &self.tenant), ("cluster", &self.cluster), ("syncset", &self.syncset), ("phase", &self.phase)];
        let mut query: Vec<(&str, String)> = params.iter().filter_map(|(k, v)| Some((*k, (*v).clone()?))).collect();
        if self.stale {
            query.push(("stale", "true".into()));
        }
        query
    }
}

/// The hub's HTTP API at one base URL; cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    /// Sent as `Authorization: Bearer` (the agent routes need a cluster's token).
    token: Option<String>,
    /// How long a request may take, set on each request rather than on `http`, so that
    /// an event watch can be exempt (it is meant to last).
    timeout: Option<Duration>,
}

impl Client {
    /// A client of the hub at `base` (`http://host:port`), with no request timeout.
    pub fn new(base: &str) -> Client {
        Client::with_http(base, reqwest::Client::new())
    }

    /// A client whose every request may take at most `timeout`.
    pub fn with_timeout(base: &str, timeout: Duration) -> reqwest::Result<Client> {
        Ok(Client { timeout: Some(timeout), ..Client::with_http(base, reqwest::Client::builder().build()?) })
    }

    /// A client of the hub at `base` (`http://` or `https://`), speaking https as
    /// `tls` says; every request may take at most `timeout`, if given (an event
    /// watch: until its answer starts, see [`Client::watch_events`]).
    pub fn build(base: &str, tls: &ClientTls, timeout: Option<Duration>) -> Result<Client, ClientBuildError> {
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientBuildError::NoScheme { url: base.to_string() });
        }
        let http = tls.builder()?.build().map_err(ClientBuildError::Http)?;
        Ok(Client { timeout, ..Client::with_http(base, http) })
    }

    fn with_http(base: &str, http: reqwest::Client) -> Client {
        Client { http, base: base.trim_end_matches('/').to_string(), token: None, timeout: None }
    }

    /// The same client, sending `token` as a bearer token.
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        self.token = Some(token.into());
        self
    }

    /// The base URL requests go to.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/apply`: applies YAML or JSON documents in one transaction.
    pub async fn apply(&self, documents: String) -> Result<Vec<ApplyResult>> {
        let req = self.http.post(self.url("/v1/apply")).header("content-type", "application/yaml").body(documents);
        Ok(self.call::<ApplyResponse>(req, "POST /v1/apply").await?.results)
    }

    /// `POST /v1/apply?dryRun=All`: what applying the documents would do — the same
    /// checks, refusals and results as [`Client::apply`] — with nothing written. An
    /// answer that does not say it was a dry run is an error: the hub applied them.
    pub async fn apply_dry_run(&self, documents: String) -> Result<Vec<ApplyResult>> {
        let req = self.http.post(self.url("/v1/apply")).query(&[("dryRun", "All")]);
        let req = req.header("content-type", "application/yaml").body(documents);
        let answer = self.call::<ApplyResponse>(req, "POST /v1/apply?dryRun=All").await?;
        match answer.dry_run {
            true => Ok(answer.results),
            false => Err(ClientError::NotDryRun { url: self.base.clone() }),
        }
    }

    /// `GET /v1/<plural>`: every object of `kind` in `tenant`, as users write them.
    pub async fn list(&self, kind: Kind, tenant: &str) -> Result<Vec<Value>> {
        let path = format!("/v1/{}", plural(kind));
        Ok(self.get_json::<Items<Value>>(&path, &[("tenant", tenant)]).await?.items)
    }

    /// `GET /v1/<plural>/{name}`: one object, as users write it (a Secret's values
    /// redacted).
    pub async fn get(&self, kind: Kind, tenant: &str, name: &str) -> Result<Value> {
        self.get_json(&format!("/v1/{}/{name}", plural(kind)), &[("tenant", tenant)]).await
    }

    /// `DELETE /v1/<plural>/{name}`.
    pub async fn delete(&self, kind: Kind, tenant: &str, name: &str) -> Result<Deleted> {
        let path = format!("/v1/{}/{name}", plural(kind));
        let req = self.http.delete(self.url(&path)).query(&[("tenant", tenant)]);
        Ok(self.call::<DeleteResponse>(req, &format!("DELETE {path}")).await?.deleted)
    }

    /// `GET /v1/status`: the status of every key that matches.
    pub async fn status(&self, filter: &StatusFilter) -> Result<Vec<KeyStatus>> {
        let query = filter.query();
        let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Ok(self.get_json::<Items<KeyStatus>>("/v1/status", &query).await?.items)
    }

    /// `GET /v1/status/clusters/{name}`: a cluster's condition and its keys.
    pub async fn cluster_status(&self, tenant: &str, cluster: &str) -> Result<ClusterStatus> {
        self.get_json(&format!("/v1/status/clusters/{cluster}"), &[("tenant", tenant)]).await
    }

    /// `GET /v1/status/clusters`: a page of the tenant's clusters found by `query`
    /// (`name`, `labelSelector`, `condition`, `stale`, `sort`, `limit`, `offset`).
    pub async fn cluster_list(&self, tenant: &str, query: &[(&str, &str)]) -> Result<ClusterList> {
        let mut params = vec![("tenant", tenant)];
        params.extend_from_slice(query);
        self.get_json("/v1/status/clusters", &params).await
    }

    /// `GET /v1/status/syncsets/{name}`: a SyncSet's summary and all its keys on every cluster.
    pub async fn syncset_status(&self, tenant: &str, syncset: &str) -> Result<SyncSetStatus> {
        self.get_json(&format!("/v1/status/syncsets/{syncset}"), &[("tenant", tenant)]).await
    }

    /// `GET /v1/syncsets/{name}/render`: the SyncSet's resources as `cluster` gets them.
    pub async fn render(&self, tenant: &str, syncset: &str, cluster: &str) -> Result<Rendered> {
        self.get_json(&format!("/v1/syncsets/{syncset}/render"), &[("tenant", tenant), ("cluster", cluster)]).await
    }

    /// `GET /v1/status/summary`: every key of the tenant summed up.
    pub async fn tenant_summary(&self, tenant: &str) -> Result<TenantStatus> {
        self.get_json("/v1/status/summary", &[("tenant", tenant)]).await
    }

    /// `POST /v1/status/clusters/{cluster}/syncsets/{syncset}/retry`: runs the key again.
    pub async fn retry(&self, tenant: &str, cluster: &str, syncset: &str) -> Result<WorkKey> {
        let path = format!("/v1/status/clusters/{cluster}/syncsets/{syncset}/retry");
        let req = self.http.post(self.url(&path)).query(&[("tenant", tenant)]);
        Ok(self.call::<Retried>(req, &format!("POST {path}")).await?.retried)
    }

    /// `POST /v1/gitrepositories/{name}/reconcile`: fetches the source now.
    pub async fn fetch_now(&self, tenant: &str, name: &str) -> Result<WorkKey> {
        let path = format!("/v1/gitrepositories/{name}/reconcile");
        let req = self.http.post(self.url(&path)).query(&[("tenant", tenant)]);
        Ok(self.call::<Retried>(req, &format!("POST {path}")).await?.retried)
    }

    /// `POST /v1/notifiers/{name}/reconcile`: the notifier sends what it has not sent, now.
    pub async fn deliver_now(&self, tenant: &str, name: &str) -> Result<WorkKey> {
        let path = format!("/v1/notifiers/{name}/reconcile");
        let req = self.http.post(self.url(&path)).query(&[("tenant", tenant)]);
        Ok(self.call::<Retried>(req, &format!("POST {path}")).await?.retried)
    }

    /// `GET /v1/rollouts`: every rollout of the tenant (per-step counts for those not
    /// completed).
    pub async fn rollouts(&self, tenant: &str) -> Result<Vec<RolloutStatus>> {
        Ok(self.get_json::<Items<RolloutStatus>>("/v1/rollouts", &[("tenant", tenant)]).await?.items)
    }

    /// `GET /v1/rollouts/{syncset}`: where the SyncSet's rollout stands.
    pub async fn rollout(&self, tenant: &str, syncset: &str) -> Result<RolloutStatus> {
        self.get_json(&format!("/v1/rollouts/{syncset}"), &[("tenant", tenant)]).await
    }

    /// `POST /v1/rollouts/{syncset}/{control}`: pause, resume, promote or abort the
    /// SyncSet's rollout; the rollout as the control left it.
    pub async fn rollout_control(&self, tenant: &str, syncset: &str, control: &str) -> Result<RolloutStatus> {
        let path = format!("/v1/rollouts/{syncset}/{control}");
        let req = self.http.post(self.url(&path)).query(&[("tenant", tenant)]);
        self.call(req, &format!("POST {path}")).await
    }

    /// `GET /v1/members`: the live worker processes.
    pub async fn members(&self) -> Result<Vec<Member>> {
        Ok(self.get_json::<Items<Member>>("/v1/members", &[]).await?.items)
    }

    /// `GET /v1/events`: up to `limit` events after the cursor `after` (none: from the
    /// oldest kept), oldest first.
    pub async fn events(&self, after: Option<u64>, limit: Option<usize>) -> Result<Vec<Event>> {
        let (after, limit) = (after.map(|a| a.to_string()), limit.map(|l| l.to_string()));
        let params = [("after", &after), ("limit", &limit)];
        let query: Vec<(&str, &str)> = params.iter().filter_map(|(k, v)| Some((*k, v.as_deref()?))).collect();
        Ok(self.get_json::<Items<Event>>("/v1/events", &query).await?.items)
    }

    /// `GET /v1/events?order=desc`: up to `limit` of the newest events older than the
    /// cursor `before` (none: the newest of all), newest first.
    pub async fn events_newest(&self, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        let mut query = vec![("order", "desc".to_string()), ("limit", limit.to_string())];
        if let Some(before) = before {
            query.push(("before", before.to_string()));
        }
        let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        Ok(self.get_json::<Items<Event>>("/v1/events", &query).await?.items)
    }

    /// `GET /v1/events?watch=true`: the events after `after`, then each new one as the
    /// hub commits it. An expired cursor fails here, before any line. The client's
    /// timeout bounds the wait for the answer's head only, not the stream.
    pub async fn watch_events(&self, after: Option<u64>) -> Result<EventWatch> {
        let mut req = self.http.get(self.url("/v1/events")).query(&[("watch", "true")]);
        if let Some(after) = after {
            req = req.query(&[("after", after)]);
        }
        let response = match self.timeout {
            Some(limit) => tokio::time::timeout(limit, self.answer_within(req, None))
                .await
                .map_err(|_| ClientError::TimedOut { url: self.base.clone(), after: limit })??,
            None => self.answer_within(req, None).await?,
        };
        Ok(EventWatch { response, buffer: Vec::new(), url: self.base.clone() })
    }

    /// `GET /v1/agent/resources`: what the agent of a cluster is to watch (needs the
    /// cluster's token, [`Client::with_token`]).
    pub async fn agent_resources(&self, tenant: &str, cluster: &str) -> Result<Vec<ResourceRef>> {
        Ok(self
            .get_json::<Items<ResourceRef>>("/v1/agent/resources", &[("tenant", tenant), ("cluster", cluster)])
            .await?
            .items)
    }

    /// `POST /v1/agent/reports`: sends a batch; the hub acknowledges once it persisted it.
    pub async fn agent_report(&self, batch: &ReportBatch) -> Result<Acks> {
        let req = self.http.post(self.url("/v1/agent/reports")).json(batch);
        self.call(req, "POST /v1/agent/reports").await
    }

    /// `GET /v1/live`: the live state the hub stored for a cluster.
    pub async fn live(&self, tenant: &str, cluster: &str) -> Result<Vec<LiveResource>> {
        Ok(self.get_json::<Items<LiveResource>>("/v1/live", &[("tenant", tenant), ("cluster", cluster)]).await?.items)
    }

    /// `GET /healthz`: `Ok` while the hub can read its store.
    pub async fn health(&self) -> Result<Health> {
        self.get_json("/healthz", &[]).await
    }

    /// `GET /v1/version`: the hub's build.
    pub async fn server_version(&self) -> Result<ServerVersion> {
        self.get_json("/v1/version", &[]).await
    }

    /// `GET /v1/whoami`: who the hub takes this client for.
    pub async fn whoami(&self) -> Result<WhoAmI> {
        self.get_json("/v1/whoami", &[]).await
    }

    /// `POST /v1/tokens`: issues a token (shown in this answer only).
    pub async fn token_create(&self, req: &TokenCreate) -> Result<IssuedToken> {
        let req = self.http.post(self.url("/v1/tokens")).json(req);
        self.call(req, "POST /v1/tokens").await
    }

    /// `GET /v1/tokens`: the records of the tokens this client may administer.
    pub async fn token_list(&self) -> Result<Vec<TokenRecord>> {
        Ok(self.get_json::<Items<TokenRecord>>("/v1/tokens", &[]).await?.items)
    }

    /// `DELETE /v1/tokens/{name}` (`?tenant=`: which, when there are several so named).
    pub async fn token_revoke(&self, name: &str, tenant: Option<&str>) -> Result<Revoked> {
        let query: Vec<(&str, &str)> = tenant.map(|t| ("tenant", t)).into_iter().collect();
        let req = self.http.delete(self.url(&format!("/v1/tokens/{name}"))).query(&query);
        self.call(req, "DELETE /v1/tokens").await
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn get_json<T: DeserializeOwned>(&self, path: &str, query: &[(&str, &str)]) -> Result<T> {
        let req = self.http.get(self.url(path)).query(query);
        self.call(req, &format!("GET {path}")).await
    }

    /// Sends a request and reads a 2xx answer as `T`.
    async fn call<T: DeserializeOwned>(&self, req: reqwest::RequestBuilder, what: &str) -> Result<T> {
        let body = self.answer(req).await?.bytes().await.map_err(|source| self.unreachable(source))?;
        serde_json::from_slice(&body).map_err(|source| ClientError::Undecodable { what: what.to_string(), source })
    }

    /// Sends a request, bounded by the client's timeout; a 2xx answer is returned
    /// unread (its body within the same timeout), any other is the error it says.
    async fn answer(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        self.answer_within(req, self.timeout).await
    }

    async fn answer_within(
        &self,
        mut req: reqwest::RequestBuilder,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response> {
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(timeout) = timeout {
            req = req.timeout(timeout);
        }
        let resp = req.send().await.map_err(|source| self.unreachable(source))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body = resp.bytes().await.unwrap_or_default();
        Err(ClientError::from_answer(status, &body))
    }

    fn unreachable(&self, source: reqwest::Error) -> ClientError {
        match self.timeout {
            Some(after) if source.is_timeout() => ClientError::TimedOut { url: self.base.clone(), after },
            _ => ClientError::Unreachable { url: self.base.clone(), source },
        }
    }
}

/// The collection of a kind under `/v1`.
pub(crate) fn plural(kind: Kind) -> &'static str {
    match kind {
        Kind::Cluster => "clusters",
        Kind::SyncSet => "syncsets",
        Kind::Secret => "secrets",
        Kind::GitRepository => "gitrepositories",
        Kind::OCIRepository => "ocirepositories",
        Kind::Notifier => "notifiers",
    }
}

/// An open event watch: its lines, read as they arrive.
#[derive(Debug)]
pub struct EventWatch {
    response: reqwest::Response,
    buffer: Vec<u8>,
    url: String,
}

impl EventWatch {
    /// The next line, or `None` once the hub ended the stream (it shuts down: resume
    /// from the last `seq` seen). A broken connection is [`ClientError::Unreachable`].
    pub async fn next(&mut self) -> Result<Option<WatchLine>> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let what = || format!("a watch line: {}", String::from_utf8_lossy(&line).trim_end());
                return serde_json::from_slice(&line)
                    .map(Some)
                    .map_err(|source| ClientError::Undecodable { what: what(), source });
            }
            match self.response.chunk().await {
                Ok(Some(bytes)) => self.buffer.extend_from_slice(&bytes),
                Ok(None) => return Ok(None),
                Err(source) => return Err(ClientError::Unreachable { url: self.url.clone(), source }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_410_with_the_horizon_is_an_expired_cursor() {
        let body = br#"{"error":"the cursor 5 fell off","cursor":5,"horizon":9}"#;
        let e = ClientError::from_answer(StatusCode::GONE, body);
        assert!(matches!(e, ClientError::CursorExpired { cursor: 5, horizon: 9 }), "{e:?}");
        assert_eq!(e.to_string(), "the cursor 5 fell off the event log (oldest kept is 10)");
    }

    #[test]
    fn an_error_answer_keeps_the_status_and_the_hubs_message() {
        let e = ClientError::from_answer(StatusCode::NOT_FOUND, br#"{"error":"Cluster default/x not found"}"#);
        assert_eq!(e.status(), Some(StatusCode::NOT_FOUND));
        assert_eq!(e.to_string(), "the hub answered 404 Not Found: Cluster default/x not found");
        let e = ClientError::from_answer(StatusCode::GONE, br#"{"error":"gone"}"#);
        assert!(matches!(e, ClientError::Refused { .. }), "a 410 without a horizon is a plain refusal: {e:?}");
    }

    #[test]
    fn an_error_answer_that_is_not_json_says_there_is_no_message() {
        let e = ClientError::from_answer(StatusCode::BAD_GATEWAY, b"<html>");
        assert_eq!(e.to_string(), "the hub answered 502 Bad Gateway: no message");
    }

    #[test]
    fn a_url_without_a_scheme_or_a_missing_ca_file_is_a_clear_error() {
        let e = Client::build("127.0.0.1:8080", &ClientTls::default(), None).expect_err("no scheme");
        assert_eq!(e.to_string(), "the hub's URL needs a scheme: http://127.0.0.1:8080 or https://127.0.0.1:8080");
        let tls = ClientTls { ca_file: Some("/nonexistent/ca.crt".into()), ..ClientTls::default() };
        let e = Client::build("https://hub:8443", &tls, None).expect_err("no CA file");
        assert_eq!(e.to_string(), "cannot read /nonexistent/ca.crt");
        assert!(Client::build("https://hub:8443/", &ClientTls::default(), None)
            .is_ok_and(|c| c.base() == "https://hub:8443"));
    }

    #[tokio::test]
    async fn a_hub_that_never_answers_times_out_and_says_after_how_long() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", silent.local_addr().expect("addr"));
        let client = Client::build(&url, &ClientTls::default(), Some(Duration::from_millis(300))).expect("client");
        let e = client.members().await.expect_err("no answer");
        assert!(matches!(&e, ClientError::TimedOut { .. }), "{e:?}");
        assert_eq!(e.to_string(), format!("no answer from {url} within 300ms"));
        let e = client.watch_events(None).await.expect_err("no answer to a watch either");
        assert!(matches!(&e, ClientError::TimedOut { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn a_hub_that_is_not_there_is_unreachable() {
        let e = Client::new("http://127.0.0.1:9/").members().await.expect_err("nothing listens on port 9");
        assert!(matches!(&e, ClientError::Unreachable { url, .. } if url == "http://127.0.0.1:9"), "{e:?}");
        assert!(describe(&e).starts_with("cannot reach the hub at http://127.0.0.1:9: "), "{}", describe(&e));
    }
}
