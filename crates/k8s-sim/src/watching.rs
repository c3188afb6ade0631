//! Serving one watch (`GET <collection>?watch=true`): newline-delimited JSON
//! events, as kube-rs's `watcher` reads them.
//!
//! * `resourceVersion=N` resumes after N from the cluster's [`Feed`]; absent or `0`
//!   starts with a synthetic `ADDED` per existing object, then follows (as the API
//!   server does). Too old a version is answered the way the API server answers it: a
//!   `200` whose only event is an `ERROR` carrying a `410 Expired` `Status`, so a
//!   client re-lists (kube-rs's watcher only recovers from a 410 seen as an event).
//! * `sendInitialEvents=true` (streaming lists) ends the initial events with a
//!   `BOOKMARK` annotated `k8s.io/initial-events-end`.
//! * `timeoutSeconds` ends the stream (default 30 minutes), with a `BOOKMARK` at the
//!   last version covered when `allowWatchBookmarks=true`.
//! * The cluster's `watchDelayMs` fault holds every event until that long after its
//!   write, order kept: a watcher sees a stale view for that long.
//!
//! A watcher that falls more than the feed's channel behind is cut off; it resumes
//! from the last version it saw, as after any dropped connection.

use crate::cluster::Cluster;
use crate::discovery::ResourceType;
use crate::feed::Change;
use crate::selector::Filter;
use crate::status::{ApiError, Result};
use axum::body::Body;
use axum::http::{header, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

/// How long a watch lasts when the client names no `timeoutSeconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The query of a list or watch.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListQuery {
    watch: Option<String>,
    resource_version: Option<String>,
    timeout_seconds: Option<u64>,
    allow_watch_bookmarks: Option<String>,
    send_initial_events: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
}

fn truthy(v: Option<&str>) -> bool {
    matches!(v, Some("true" | "1"))
}

impl ListQuery {
    pub fn from_uri(uri: &Uri) -> Result<Self> {
        let q = axum::extract::Query::<Self>::try_from_uri(uri).map_err(|e| ApiError::BadRequest(e.body_text()))?;
        Ok(q.0)
    }

    pub fn is_watch(&self) -> bool {
        truthy(self.watch.as_deref())
    }

    pub fn filter(&self) -> Result<Filter> {
        Filter::parse(self.label_selector.as_deref(), self.field_selector.as_deref())
    }

    /// The version to resume after; `None` for "now, with the current objects".
    fn resume_after(&self) -> Result<Option<u64>> {
        match self.resource_version.as_deref() {
            None | Some("" | "0") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::BadRequest(format!("resourceVersion: {v:?} is not a version this server issued"))
            }),
        }
    }
}

/// What one watch serves: which kind, where, and which objects.
#[derive(Debug)]
pub struct Scope {
    pub kind_id: u8,
    pub kind: &'static ResourceType,
    pub namespace: Option<String>,
    pub filter: Filter,
}

/// Starts a watch: lines already due (initial objects, or the `410`), then the
/// backlog and live changes, as a streaming response.
pub fn serve(cluster: Arc<Cluster>, scope: Scope, q: &ListQuery, closing: watch::Receiver<bool>) -> Result<Response> {
    let resume = q.resume_after()?;
    let mut lines = VecDeque::new();
    let (following, progress) = {
        let mut state = cluster.lock();
        let current = state.objects.resource_version();
        if resume.is_none() {
            for object in state.objects.items(scope.kind_id, scope.namespace.as_deref(), &scope.filter)? {
                lines.push_back(line("ADDED", &object));
            }
        }
        let from = resume.unwrap_or(current);
        match state.objects.feed.follow(from, current) {
            Ok(f) => (Some(f), from),
            Err(e) => {
                lines.push_back(line("ERROR", &e.to_status().to_string()));
                (None, from)
            }
        }
    };
    if following.is_some() && truthy(q.send_initial_events.as_deref()) {
        lines.push_back(bookmark(scope.kind, progress, true));
    }
    let timeout = q.timeout_seconds.map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    let (backlog, live) = following.map_or((VecDeque::new(), None), |f| (f.backlog.into(), Some(f.live)));
    let stream = Stream {
        lines,
        source: Source { backlog, live, cluster, kind_id: scope.kind_id },
        scope,
        progress,
        deadline: Instant::now() + timeout,
        bookmarks: truthy(q.allow_watch_bookmarks.as_deref()),
        closing,
    };
    let body = futures_util::stream::unfold(stream, |mut s| async move {
        s.next_line().await.map(|l| (Ok::<_, Infallible>(l), s))
    });
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], Body::from_stream(body)).into_response())
}

/// One open watch.
struct Stream {
    /// Lines to send before anything else.
    lines: VecDeque<String>,
    source: Source,
    scope: Scope,
    /// Every change up to this version has been delivered or filtered out.
    progress: u64,
    deadline: Instant,
    bookmarks: bool,
    closing: watch::Receiver<bool>,
}

impl Stream {
    /// The next line to send; `None` ends the stream.
    async fn next_line(&mut self) -> Option<String> {
        if let Some(l) = self.lines.pop_front() {
            return Some(l);
        }
        self.source.live.as_ref()?;
        loop {
            let change = tokio::select! {
                c = self.source.next(self.progress) => c,
                () = tokio::time::sleep_until(self.deadline) => None,
                _ = self.closing.wait_for(|c| *c) => None,
            };
            let Some(change) = change else { return self.finish() };
            self.progress = change.resource_version;
            if let Some(l) = self.render(&change) {
                return Some(l);
            }
        }
    }

    /// The change as a line, if this watch selects it.
    fn render(&self, change: &Change) -> Option<String> {
        let in_namespace = self.scope.namespace.as_deref().is_none_or(|ns| *change.namespace == *ns);
        (in_namespace && self.scope.filter.matches_json(&change.object))
            .then(|| line(change.event.as_str(), &change.object))
    }

    /// Ends the stream, with a last bookmark if the client takes them.
    fn finish(&mut self) -> Option<String> {
        self.source.live = None;
        self.bookmarks.then(|| bookmark(self.scope.kind, self.progress, false))
    }
}

/// Where a watch's changes come from: the backlog, then the live channel.
struct Source {
    backlog: VecDeque<Arc<Change>>,
    /// `None` when the stream only delivers its first lines (an expired version).
    live: Option<broadcast::Receiver<Arc<Change>>>,
    cluster: Arc<Cluster>,
    kind_id: u8,
}

impl Source {
    /// The next change of this kind after version `after`, held until the cluster's
    /// watch delay after its write has passed; `None` if the watcher fell too far
    /// behind.
    async fn next(&mut self, after: u64) -> Option<Arc<Change>> {
        let change = loop {
            let c = match self.backlog.pop_front() {
                Some(c) => c,
                None => match self.live.as_mut()?.recv().await {
                    Ok(c) => c,
                    Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => return None,
                },
            };
            if c.resource_version > after && c.kind == self.kind_id {
                break c;
            }
        };
        let delay = self.cluster.lock().faults.watch_delay();
        if !delay.is_zero() {
            tokio::time::sleep_until(change.at + delay).await;
        }
        Some(change)
    }
}

fn line(event: &str, object: &str) -> String {
    format!("{{\"type\":\"{event}\",\"object\":{object}}}\n")
}

/// A `BOOKMARK`: every change up to `resource_version` has been sent.
fn bookmark(kind: &ResourceType, resource_version: u64, initial_end: bool) -> String {
    let annotations = if initial_end { r#","annotations":{"k8s.io/initial-events-end":"true"}"# } else { "" };
    let object = format!(
        r#"{{"kind":"{}","apiVersion":"{}","metadata":{{"resourceVersion":"{resource_version}"{annotations}}}}}"#,
        kind.kind, kind.api_version
    );
    line("BOOKMARK", &object)
}
