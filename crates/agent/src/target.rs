//! The cluster the agent runs beside, read through its Kubernetes API: discovery
//! (the plural name of each kind), lists and watches of the kinds fleetsync applied.
//!
//! Requests go through kube's [`kube::Client`], built from a [`kube::Config`] (see
//! [`crate::credentials`]): it speaks TLS and sends credentials as kubectl does
//! (certificates, bearer tokens and token files it reads again as they rotate,
//! exec plugins). Each kind is listed and watched across all namespaces in one
//! request, so the cost does not grow with the number of objects. The watch is read
//! by hand (not with kube-rs's `watcher`) because the agent needs the list's
//! collection version: it is the version an absent object is reported deleted at,
//! and the hub refuses a report older than the one it holds.

use crate::token::TokenFile;
use fleetsync_model::ResourceRef;
use futures_util::io::AsyncBufReadExt;
use serde_json::Value;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Why reading the target failed. Each names the URL it was reading.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The request failed (no connection, TLS, credentials that cannot be had).
    #[error("GET {url}")]
    Unreachable {
        url: String,
        #[source]
        source: kube::Error,
    },
    /// The connection broke while the answer or a watch was read.
    #[error("GET {url}: the connection broke")]
    Broken {
        url: String,
        #[source]
        source: std::io::Error,
    },
    /// No answer (or, for a watch, no end) in time.
    #[error("GET {url}: no answer within {after:?}")]
    TimedOut { url: String, after: Duration },
    /// The target answered with an error status (`body`: the start of its message).
    #[error("GET {url}: {status}: {body}")]
    Refused { url: String, status: http::StatusCode, body: String },
    /// The answer or a watch line is not JSON.
    #[error("GET {url}: an answer that is not JSON")]
    NotJson {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    /// The server ended the watch with an error other than `410 Gone`.
    #[error("watch {url}: the server ended the watch: {message}")]
    WatchEnded { url: String, message: String },
    /// A watch event of a type Kubernetes does not send.
    #[error("watch {url}: an event of unknown type {kind:?}")]
    UnknownEvent { url: String, kind: Option<String> },
    /// Discovery does not list the kind.
    #[error("the target serves no kind {kind} in {api_version}")]
    NoSuchKind { api_version: String, kind: String },
}

/// What one list of a kind found: each object by (namespace, name), and the
/// collection's version (the version a deletion is reported at).
#[derive(Debug, Default)]
pub struct Listing {
    pub objects: HashMap<ObjectKey, Value>,
    pub resource_version: String,
}

/// One event of a watch.
#[derive(Debug)]
pub enum WatchEvent {
    /// `ADDED` or `MODIFIED`: the object as it now is.
    Applied(Value),
    /// `DELETED`: the object's last state, at the deletion's version.
    Deleted(Value),
    /// Every change up to this version has been sent.
    Bookmark(String),
    /// `410 Gone`: the version watched from is too old; re-list.
    Gone,
}

/// An open watch: newline-delimited JSON events read as they arrive.
pub struct Watch {
    lines: Pin<Box<dyn futures_util::io::AsyncBufRead + Send>>,
    buffer: Vec<u8>,
    url: String,
    /// When the watch must have ended (the server's timeout, and a request's more).
    deadline: Instant,
    /// How long the watch may last in all.
    allowed: Duration,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("url", &self.url).field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl Watch {
    /// The next event, or `None` once the server ended the watch. Cancel-safe: a line
    /// read in part stays in the buffer for the next call.
    pub async fn next(&mut self) -> Result<Option<WatchEvent>, TargetError> {
        loop {
            let read = tokio::time::timeout_at(self.deadline, self.lines.read_until(b'\n', &mut self.buffer)).await;
            let read = read.map_err(|_| TargetError::TimedOut { url: self.url.clone(), after: self.allowed })?;
            let n = read.map_err(|source| TargetError::Broken { url: self.url.clone(), source })?;
            if n == 0 {
                return Ok(None);
            }
            let line = std::mem::take(&mut self.buffer);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return parse_event(&self.url, &line).map(Some);
        }
    }
}

fn parse_event(url: &str, line: &[u8]) -> Result<WatchEvent, TargetError> {
    let event: Value =
        serde_json::from_slice(line).map_err(|source| TargetError::NotJson { url: url.to_string(), source })?;
    let object = event["object"].clone();
    match event["type"].as_str() {
        Some("ADDED" | "MODIFIED") => Ok(WatchEvent::Applied(object)),
        Some("DELETED") => Ok(WatchEvent::Deleted(object)),
        Some("BOOKMARK") => Ok(WatchEvent::Bookmark(version_of(&object))),
        Some("ERROR") if object["code"] == 410 => Ok(WatchEvent::Gone),
        Some("ERROR") => {
            let message = object["message"].as_str().unwrap_or("no message").to_string();
            Err(TargetError::WatchEnded { url: url.to_string(), message })
        }
        other => Err(TargetError::UnknownEvent { url: url.to_string(), kind: other.map(str::to_string) }),
    }
}

/// An object's `metadata.resourceVersion` (empty if it has none).
pub fn version_of(object: &Value) -> String {
    object["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string()
}

/// Which object of a kind: `(namespace, name)`.
pub type ObjectKey = (Option<String>, String);

/// An object's `(namespace, name)`.
pub fn key_of(object: &Value) -> Option<ObjectKey> {
    let meta = &object["metadata"];
    Some((meta["namespace"].as_str().map(str::to_string), meta["name"].as_str()?.to_string()))
}

/// The target's API.
#[derive(Clone)]
pub struct Target {
    client: kube::Client,
    /// The API server's URL, for messages.
    base: String,
    timeout: Duration,
    /// `(apiVersion, kind)` → the collection's path, from discovery.
    paths: HashMap<(String, String), String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("base", &self.base).field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

impl Target {
    /// The API server `config` names, with its credentials; each request may take at
    /// most `timeout` (a watch: as long as it lasts, and `timeout` more).
    ///
    /// With `bearer`, each request carries its token (`--target-token-file`: read again
    /// as it rotates, and trimmed as kubectl trims it, which kube's own token files are not).
    pub fn new(
        mut config: kube::Config,
        timeout: Duration,
        bearer: Option<Arc<TokenFile>>,
    ) -> Result<Target, kube::Error> {
        let base = config.cluster_url.to_string().trim_end_matches('/').to_string();
        // Requests are bounded here, by `timeout`; a watch may be quiet for long.
        config.read_timeout = None;
        config.connect_timeout = Some(timeout);
        let builder = kube::client::ClientBuilder::try_from(config)?;
        let client = match bearer {
            None => builder.build(),
            Some(token) => builder
                .with_layer(&tower::util::MapRequestLayer::new(
                    move |mut request: http::Request<kube::client::Body>| {
                        if let Ok(mut value) = http::HeaderValue::try_from(format!("Bearer {}", token.current())) {
                            value.set_sensitive(true);
                            request.headers_mut().insert(http::header::AUTHORIZATION, value);
                        }
                        request
                    },
                ))
                .build(),
        };
        Ok(Target { client, base, timeout, paths: HashMap::new() })
    }

    /// Lists every object of `r`'s kind (in all namespaces).
    pub async fn list(&mut self, r: &ResourceRef) -> Result<Listing, TargetError> {
        let path = self.collection(&r.api_version, &r.kind).await?;
        let list = self.get(&path).await?;
        let resource_version = list["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string();
        let objects =
            list["items"].as_array().into_iter().flatten().filter_map(|o| Some((key_of(o)?, o.clone()))).collect();
        Ok(Listing { objects, resource_version })
    }

    /// Watches `r`'s kind (in all namespaces) for changes after `resource_version`;
    /// the server ends the watch after `lasting` (with a bookmark).
    pub async fn watch(
        &mut self,
        r: &ResourceRef,
        resource_version: &str,
        lasting: Duration,
    ) -> Result<Watch, TargetError> {
        let path = self.collection(&r.api_version, &r.kind).await?;
        let seconds = lasting.as_secs().max(1);
        let path = format!(
            "{path}?watch=true&allowWatchBookmarks=true&resourceVersion={resource_version}&timeoutSeconds={seconds}"
        );
        let url = format!("{}{path}", self.base);
        let allowed = lasting + self.timeout;
        let deadline = Instant::now() + allowed;
        let request = get_request(&path, &url)?;
        let lines = self.bounded(&url, self.client.request_stream(request)).await?;
        Ok(Watch { lines: Box::pin(lines), buffer: Vec::new(), url, deadline, allowed })
    }

    /// The path of a kind's collection across namespaces, found by discovery once.
    async fn collection(&mut self, api_version: &str, kind: &str) -> Result<String, TargetError> {
        let id = (api_version.to_string(), kind.to_string());
        if let Some(p) = self.paths.get(&id) {
            return Ok(p.clone());
        }
        let prefix =
            if api_version.contains('/') { format!("/apis/{api_version}") } else { format!("/api/{api_version}") };
        let resources = self.get(&prefix).await?;
        let plural = resources["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["kind"] == kind && r["name"].as_str().is_some_and(|n| !n.contains('/')))
            .and_then(|r| r["name"].as_str())
            .ok_or_else(|| TargetError::NoSuchKind { api_version: api_version.to_string(), kind: kind.to_string() })?;
        let path = format!("{prefix}/{plural}");
        self.paths.insert(id, path.clone());
        Ok(path)
    }

    async fn get(&self, path: &str) -> Result<Value, TargetError> {
        let url = format!("{}{path}", self.base);
        let request = get_request(path, &url)?;
        let text = self.bounded(&url, self.client.request_text(request)).await?;
        serde_json::from_str(&text).map_err(|source| TargetError::NotJson { url, source })
    }

    /// A request's answer within the timeout; an error status is a
    /// [`TargetError::Refused`] with the start of the server's message.
    async fn bounded<T>(
        &self,
        url: &str,
        request: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, TargetError> {
        let answer = tokio::time::timeout(self.timeout, request).await;
        match answer.map_err(|_| TargetError::TimedOut { url: url.to_string(), after: self.timeout })? {
            Ok(t) => Ok(t),
            Err(e) => Err(answer_error(url, e)),
        }
    }
}

/// A GET of `path` (under the API server's URL).
fn get_request(path: &str, url: &str) -> Result<http::Request<Vec<u8>>, TargetError> {
    http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| TargetError::Unreachable { url: url.to_string(), source: kube::Error::HttpError(e) })
}

/// kube's error for a request: an error status is [`TargetError::Refused`], the rest
/// [`TargetError::Unreachable`].
fn answer_error(url: &str, e: kube::Error) -> TargetError {
    match e {
        kube::Error::Api(status) if status.code != 0 => TargetError::Refused {
            url: url.to_string(),
            status: http::StatusCode::from_u16(status.code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR),
            body: status.message.chars().take(200).collect(),
        },
        source => TargetError::Unreachable { url: url.to_string(), source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_lines_become_events_and_a_gone_version_asks_for_a_relist() {
        let event = |line: &str| parse_event("u", line.as_bytes());
        let added = event(r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"3"}}}"#);
        assert!(matches!(added, Ok(WatchEvent::Applied(o)) if version_of(&o) == "3"));
        assert!(
            matches!(event(r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#), Ok(WatchEvent::Bookmark(v)) if v == "9")
        );
        assert!(matches!(event(r#"{"type":"ERROR","object":{"code":410}}"#), Ok(WatchEvent::Gone)));
    }

    #[test]
    fn a_broken_watch_line_is_an_error_that_names_the_watch() {
        let e = parse_event("http://t/w", br#"{"type":"ERROR","object":{"code":500,"message":"boom"}}"#)
            .expect_err("ended");
        assert_eq!(e.to_string(), "watch http://t/w: the server ended the watch: boom");
        let e = parse_event("http://t/w", b"{not json").expect_err("not JSON");
        assert!(matches!(e, TargetError::NotJson { .. }), "{e:?}");
        let e = parse_event("http://t/w", br#"{"type":"WHAT"}"#).expect_err("unknown");
        assert!(matches!(e, TargetError::UnknownEvent { kind: Some(k), .. } if k == "WHAT"));
    }
}
