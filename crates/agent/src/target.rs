//! The cluster the agent runs beside, read through its Kubernetes API: discovery
//! (the plural name of each kind), lists and watches of the kinds fleetsync applied.
//!
//! Each kind is listed and watched across all namespaces in one request, so the
//! cost does not grow with the number of objects. The watch is read by hand (not
//! with kube-rs's `watcher`) because the agent needs the list's collection version:
//! it is the version an absent object is reported deleted at, and the hub refuses a
//! report older than the one it holds.

use crate::token::TokenFile;
use fleetsync_api::{ClientBuildError, ClientTls};
use fleetsync_model::ResourceRef;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Why reading the target failed. Each names the URL it was reading.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The request failed, or the connection broke while the answer was read.
    #[error("GET {url}")]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The target answered with an error status (`body`: the start of its answer).
    #[error("GET {url}: {status}: {body}")]
    Refused { url: String, status: reqwest::StatusCode, body: String },
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
#[derive(Debug)]
pub struct Watch {
    response: reqwest::Response,
    buffer: Vec<u8>,
    url: String,
}

impl Watch {
    /// The next event, or `None` once the server ended the watch.
    pub async fn next(&mut self) -> Result<Option<WatchEvent>, TargetError> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return parse_event(&self.url, &line).map(Some);
            }
            match self.response.chunk().await {
                Ok(Some(bytes)) => self.buffer.extend_from_slice(&bytes),
                Ok(None) => return Ok(None),
                Err(source) => return Err(TargetError::Unreachable { url: self.url.clone(), source }),
            }
        }
    }
}

fn parse_event(url: &str, line: &[u8]) -> Result<WatchEvent, TargetError> {
    let event: Value = serde_json::from_slice(line).map_err(|source| TargetError::NotJson { url: url.to_string(), source })?;
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
#[derive(Debug, Clone)]
pub struct Target {
    http: reqwest::Client,
    base: String,
    timeout: Duration,
    /// Sent as `Authorization: Bearer`, if given.
    token: Option<Arc<TokenFile>>,
    /// `(apiVersion, kind)` → the collection's path, from discovery.
    paths: HashMap<(String, String), String>,
}

impl Target {
    /// The API at `base` (http or https, as `tls` says), with the bearer token in
    /// `token`'s file if given; each request may take at most `timeout`.
    pub fn new(base: &str, tls: &ClientTls, token: Option<Arc<TokenFile>>, timeout: Duration) -> Result<Target, ClientBuildError> {
        let http = tls.builder()?.timeout(timeout).build().map_err(ClientBuildError::Http)?;
        Ok(Target { http, base: base.trim_end_matches('/').to_string(), timeout, token, paths: HashMap::new() })
    }

    /// A GET of `url`, with the token if there is one.
    fn request(&self, url: &str) -> reqwest::RequestBuilder {
        let request = self.http.get(url);
        match &self.token {
            Some(token) => request.bearer_auth(token.current()),
            None => request,
        }
    }

    /// Lists every object of `r`'s kind (in all namespaces).
    pub async fn list(&mut self, r: &ResourceRef) -> Result<Listing, TargetError> {
        let path = self.collection(&r.api_version, &r.kind).await?;
        let list = self.get(&path).await?;
        let resource_version = list["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string();
        let objects = list["items"].as_array().into_iter().flatten().filter_map(|o| Some((key_of(o)?, o.clone()))).collect();
        Ok(Listing { objects, resource_version })
    }

    /// Watches `r`'s kind (in all namespaces) for changes after `resource_version`;
    /// the server ends the watch after `lasting` (with a bookmark).
    pub async fn watch(&mut self, r: &ResourceRef, resource_version: &str, lasting: Duration) -> Result<Watch, TargetError> {
        let path = self.collection(&r.api_version, &r.kind).await?;
        let seconds = lasting.as_secs().max(1);
        let url = format!(
            "{}{path}?watch=true&allowWatchBookmarks=true&resourceVersion={resource_version}&timeoutSeconds={seconds}",
            self.base
        );
        // The client's timeout bounds a whole request; a watch lasts `lasting`.
        let request = self.request(&url).timeout(lasting + self.timeout);
        let response = answer(request, &url).await?;
        Ok(Watch { response, buffer: Vec::new(), url })
    }

    /// The path of a kind's collection across namespaces, found by discovery once.
    async fn collection(&mut self, api_version: &str, kind: &str) -> Result<String, TargetError> {
        let id = (api_version.to_string(), kind.to_string());
        if let Some(p) = self.paths.get(&id) {
            return Ok(p.clone());
        }
        let prefix = if api_version.contains('/') { format!("/apis/{api_version}") } else { format!("/api/{api_version}") };
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
        let resp = answer(self.request(&url), &url).await?;
        let body = resp.bytes().await.map_err(|source| TargetError::Unreachable { url: url.clone(), source })?;
        serde_json::from_slice(&body).map_err(|source| TargetError::NotJson { url, source })
    }
}

/// Sends a request; a 2xx answer is returned unread, any other is a
/// [`TargetError::Refused`] with the start of its body.
async fn answer(request: reqwest::RequestBuilder, url: &str) -> Result<reqwest::Response, TargetError> {
    let response = request.send().await.map_err(|source| TargetError::Unreachable { url: url.to_string(), source })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let body = response.text().await.unwrap_or_default();
    Err(TargetError::Refused { url: url.to_string(), status, body: body.chars().take(200).collect() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_lines_become_events_and_a_gone_version_asks_for_a_relist() {
        let event = |line: &str| parse_event("u", line.as_bytes());
        let added = event(r#"{"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"3"}}}"#);
        assert!(matches!(added, Ok(WatchEvent::Applied(o)) if version_of(&o) == "3"));
        assert!(matches!(event(r#"{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}"#), Ok(WatchEvent::Bookmark(v)) if v == "9"));
        assert!(matches!(event(r#"{"type":"ERROR","object":{"code":410}}"#), Ok(WatchEvent::Gone)));
    }

    #[test]
    fn a_broken_watch_line_is_an_error_that_names_the_watch() {
        let e = parse_event("http://t/w", br#"{"type":"ERROR","object":{"code":500,"message":"boom"}}"#).expect_err("ended");
        assert_eq!(e.to_string(), "watch http://t/w: the server ended the watch: boom");
        let e = parse_event("http://t/w", b"{not json").expect_err("not JSON");
        assert!(matches!(e, TargetError::NotJson { .. }), "{e:?}");
        let e = parse_event("http://t/w", br#"{"type":"WHAT"}"#).expect_err("unknown");
        assert!(matches!(e, TargetError::UnknownEvent { kind: Some(k), .. } if k == "WHAT"));
    }
}
