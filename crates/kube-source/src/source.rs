//! The run loop: watch the custom resources, hand every event to the handlers,
//! reconcile the states the [tracker](crate::expect) lets through, and write each
//! reconcile's status back to the object's `status` subresource.
//!
//! One task does it all, in watch order, so handlers see events in order and a
//! reconcile never runs beside another one of the same object.

use crate::expect::{version, Tracker};
use crate::handler::{Change, CrKind, CrReconciler, ReconcileError, SourceEvent, SourceEventHandler};
use futures_util::stream::{self, BoxStream, StreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::runtime::watcher;
use kube::Client;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How the source runs.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Watch one namespace (tenant), or all of them.
    pub namespace: Option<String>,
    /// How long to hold an object after the source's own status write while waiting
    /// for the watch to deliver it (5 s by default; see [`crate::expect`]).
    pub own_write_timeout: Duration,
    /// The pause after a watch error before the watch is retried.
    pub retry_after: Duration,
    /// How often the status of objects whose spec did not change is refreshed
    /// (see [`CrReconciler::refresh`]); 5 s by default.
    pub status_interval: Duration,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            own_write_timeout: Duration::from_secs(5),
            retry_after: Duration::from_millis(200),
            status_interval: Duration::from_secs(5),
        }
    }
}

/// Why no client for the hub cluster could be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("invalid hub cluster URL {url:?}: {reason} (give http://HOST:PORT[/path] or https://…)")]
    Url { url: String, reason: String },
    #[error("cannot make a client for the hub cluster at {url}: {reason}")]
    Client { url: String, reason: String },
    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error("no credentials for the hub cluster: no kubeconfig (KUBECONFIG or ~/.kube/config) and not in a pod with a service account")]
    Infer(#[source] kube::config::InferConfigError),
    /// The kubeconfig named, or its context, could not be used.
    #[error("cannot use the kubeconfig{}", context.as_ref().map(|c| format!(" context {c:?}")).unwrap_or_default())]
    Kubeconfig {
        context: Option<String>,
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The credentials were found but make no client (e.g. a CA that does not load).
    #[error("cannot make a client for the hub cluster from its credentials")]
    Credentials(#[source] kube::Error),
}

/// A client for the hub cluster's API server at `url`, without credentials: for
/// `fleetsync sim` or a local authenticating proxy such as `kubectl proxy`.
pub fn client_for(url: &str) -> Result<Client, ConnectError> {
    let bad = |reason: String| ConnectError::Url { url: url.to_string(), reason };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(bad("the scheme must be http or https".into()));
    }
    let uri: http::Uri = url.parse().map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host".into()));
    }
    Client::try_from(kube::Config::new(uri))
        .map_err(|e| ConnectError::Client { url: url.to_string(), reason: e.to_string() })
}

/// Where the hub cluster's credentials come from when no URL is given: found the
/// way kubectl and kube-rs find them.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    /// A kubeconfig file; when not given, `KUBECONFIG` or `~/.kube/config`, and
    /// without either (and without a context) the pod's service account
    /// (`KUBERNETES_SERVICE_HOST` and the mounted token and CA).
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use; its current context when not given.
    pub context: Option<String>,
}

/// A client for the hub cluster with credentials found as [`Credentials`] says:
/// a kubeconfig (with its certificates, tokens, exec plugins) or the in-cluster
/// service account, whose token is read again as it rotates.
pub async fn client_inferred(credentials: &Credentials) -> Result<Client, ConnectError> {
    let config = config_inferred(credentials).await?;
    tracing::debug!(url = %config.cluster_url, "hub cluster credentials found");
    Client::try_from(config).map_err(ConnectError::Credentials)
}

/// The client configuration [`Credentials`] find, the way kubectl finds it: the
/// kubeconfig given (and its context), else `KUBECONFIG` or `~/.kube/config`, else
/// (without a context) the pod's service account. Also the agent's, for its target.
pub async fn config_inferred(credentials: &Credentials) -> Result<kube::Config, ConnectError> {
    let context = credentials.context.clone();
    let options = kube::config::KubeConfigOptions { context: context.clone(), ..Default::default() };
    let kubeconfig_error = |source| ConnectError::Kubeconfig { context: context.clone(), source };
    Ok(match (&credentials.kubeconfig, &credentials.context) {
        (Some(path), _) => {
            let file = kube::config::Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
            kube::Config::from_custom_kubeconfig(file, &options).await.map_err(kubeconfig_error)?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options).await.map_err(kubeconfig_error)?,
        (None, None) => kube::Config::infer().await.map_err(ConnectError::Infer)?,
    })
}

/// Which object: kind, namespace, name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    pub kind: CrKind,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    fn of(kind: CrKind, o: &DynamicObject) -> Self {
        let namespace = o.metadata.namespace.clone().unwrap_or_default();
        Self { kind, namespace, name: o.metadata.name.clone().unwrap_or_default() }
    }
}

/// The watch events of one kind, tagged with it.
type WatchEvents = BoxStream<'static, (CrKind, Result<watcher::Event<DynamicObject>, watcher::Error>)>;

/// Watches SyncSet and Cluster custom resources in a hub cluster.
pub struct KubeSource {
    client: Client,
    config: SourceConfig,
    reconciler: Arc<dyn CrReconciler>,
    handlers: Vec<Arc<dyn SourceEventHandler>>,
}

impl std::fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSource").field("config", &self.config).field("handlers", &self.handlers.len()).finish()
    }
}

/// The custom resource type of a kind, for kube-rs's dynamic API.
pub fn api_resource(kind: CrKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("fleetsync.io", "v1", kind.kind()), kind.plural())
}

impl KubeSource {
    pub fn new(client: Client, reconciler: Arc<dyn CrReconciler>) -> Self {
        Self { client, config: SourceConfig::default(), reconciler, handlers: Vec::new() }
    }

    pub fn config(mut self, config: SourceConfig) -> Self {
        self.config = config;
        self
    }

    /// Adds an event handler (called in the order added).
    pub fn handler(mut self, handler: Arc<dyn SourceEventHandler>) -> Self {
        self.handlers.push(handler);
        self
    }

    fn api(&self, kind: CrKind, namespace: Option<&str>) -> Api<DynamicObject> {
        let ar = api_resource(kind);
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        }
    }

    /// Runs until `shutdown` completes.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let streams: Vec<WatchEvents> = CrKind::ALL
            .into_iter()
            .map(|kind| {
                let api = self.api(kind, self.config.namespace.as_deref());
                watcher(api, watcher::Config::default()).map(move |e| (kind, e)).boxed()
            })
            .collect();
        let mut events = stream::select_all(streams);
        let mut state = RunState::new(self.config.own_write_timeout);
        let mut refresh = tokio::time::interval(self.config.status_interval);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            let deadline = state.tracker.next_deadline();
            tokio::select! {
                () = &mut shutdown => return,
                next = events.next() => match next {
                    Some((kind, Ok(event))) => self.on_event(&mut state, kind, event).await,
                    Some((kind, Err(e))) => {
                        tracing::warn!(%kind, error = %e, "watch failed; retrying");
                        tokio::time::sleep(self.config.retry_after).await;
                    }
                    None => return,
                },
                _ = refresh.tick() => self.refresh(&mut state).await,
                () = sleep_until(deadline) => {
                    for (key, object) in state.tracker.expire(Instant::now()) {
                        tracing::debug!(?key, "own write not seen in time: acting on the newest known state");
                        self.reconcile(&mut state, &key, object).await;
                    }
                }
            }
        }
    }

    async fn on_event(&self, state: &mut RunState, kind: CrKind, event: watcher::Event<DynamicObject>) {
        match event {
            watcher::Event::Init => {
                state.relisted.insert(kind, HashSet::new());
            }
            watcher::Event::InitApply(object) => {
                state.relisted.entry(kind).or_default().insert(ObjectKey::of(kind, &object));
                self.applied(state, kind, object).await;
            }
            watcher::Event::InitDone => {
                // Objects deleted while the watch was broken: a re-list no longer has them.
                let listed = state.relisted.remove(&kind).unwrap_or_default();
                let gone: Vec<(ObjectKey, DynamicObject)> = state
                    .delivered
                    .iter()
                    .filter(|(k, _)| k.kind == kind && !listed.contains(k))
                    .map(|(k, d)| (k.clone(), d.last.clone()))
                    .collect();
                for (_, object) in gone {
                    self.deleted(state, kind, object).await;
                }
            }
            watcher::Event::Apply(object) => self.applied(state, kind, object).await,
            watcher::Event::Delete(object) => self.deleted(state, kind, object).await,
        }
    }

    async fn applied(&self, state: &mut RunState, kind: CrKind, object: DynamicObject) {
        let key = ObjectKey::of(kind, &object);
        let delivered = state.delivered.get(&key).map(|d| d.version.clone());
        if delivered.as_ref() != Some(&object.metadata.resource_version) {
            self.notify(kind, Change::Applied, &object).await;
            let d = Delivered { version: object.metadata.resource_version.clone(), last: object.clone() };
            state.delivered.insert(key.clone(), d);
        }
        if let Some(due) = state.tracker.observed(&key, object, Instant::now()) {
            self.reconcile(state, &key, due).await;
        }
    }

    async fn deleted(&self, state: &mut RunState, kind: CrKind, object: DynamicObject) {
        let key = ObjectKey::of(kind, &object);
        state.delivered.remove(&key);
        state.tracker.forget(&key);
        self.notify(kind, Change::Deleted, &object).await;
        if let Err(e) = self.reconciler.deleted(kind, &object).await {
            tracing::warn!(?key, error = %e, "handling a deletion failed");
        }
    }

    async fn notify(&self, kind: CrKind, change: Change, object: &DynamicObject) {
        let event = SourceEvent { kind, change, object: object.clone() };
        for h in &self.handlers {
            h.handle(&event).await;
        }
    }

    /// Reconciles one state and writes the outcome to the object's status; the
    /// version that write produced holds the object (see [`Tracker::wrote`]).
    async fn reconcile(&self, state: &mut RunState, key: &ObjectKey, object: DynamicObject) {
        let generation = object.metadata.generation.unwrap_or(0);
        let outcome = self.reconciler.reconcile(key.kind, &object).await;
        state.tracker.acted(key, generation);
        let status = status_of(outcome, &object, Timestamp::now());
        self.write_status(state, key, status).await;
    }

    /// Asks the reconciler for the current status of every settled object (neither
    /// held nor due for a reconcile) and writes the ones that changed.
    async fn refresh(&self, state: &mut RunState) {
        let keys: Vec<ObjectKey> = state.delivered.keys().cloned().collect();
        for key in keys {
            let Some(object) = state.tracker.settled(&key, Instant::now()).cloned() else { continue };
            match self.reconciler.refresh(key.kind, &object).await {
                None => {}
                Some(Err(e)) => tracing::warn!(?key, error = %e, "refreshing status failed"),
                Some(Ok(status)) => {
                    let status = status_of(Ok(status), &object, Timestamp::now());
                    if !unchanged(&status, object.data.get("status")) {
                        self.write_status(state, &key, status).await;
                    }
                }
            }
        }
    }

    async fn write_status(&self, state: &mut RunState, key: &ObjectKey, status: Value) {
        let api = self.api(key.kind, Some(&key.namespace));
        let patch = Patch::Merge(json!({"status": status}));
        match api.patch_status(&key.name, &PatchParams::default(), &patch).await {
            Ok(written) => {
                tracing::debug!(?key, version = ?version(&written), "status written");
                state.tracker.wrote(key, written, Instant::now());
            }
            Err(e) => tracing::warn!(?key, error = %e, "writing status failed"),
        }
    }
}

/// The status to write for a reconcile's outcome on `object`: `observedGeneration`,
/// `error` (null when it succeeded), and the conditions in Kubernetes' standard shape,
/// each stamped with the generation and with the time its status last changed (kept
/// from the object's current status while the status stays the same).
fn status_of(outcome: Result<Value, ReconcileError>, object: &DynamicObject, now: Timestamp) -> Value {
    let generation = object.metadata.generation.unwrap_or(0);
    let mut status = match outcome {
        Ok(status) => status,
        Err(e) => {
            let failed = |kind: &str| json!({"type": kind, "status": "False", "reason": "ReconcileFailed", "message": e.to_string()});
            json!({"error": e.to_string(), "conditions": [failed(SYNCED), failed(READY)]})
        }
    };
    let Some(map) = status.as_object_mut() else { return status };
    map.insert("observedGeneration".into(), generation.into());
    map.entry("error").or_insert(Value::Null);
    let previous = object.data.get("status").and_then(|s| s.get("conditions")).and_then(Value::as_array);
    if let Some(conditions) = map.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conditions.iter_mut().filter_map(Value::as_object_mut) {
            let before = previous.and_then(|p| p.iter().find(|p| p.get("type") == c.get("type")));
            let since = match before {
                Some(b) if b.get("status") == c.get("status") => b.get("lastTransitionTime").cloned(),
                _ => None,
            };
            let now = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            c.insert("lastTransitionTime".into(), since.unwrap_or_else(|| now.into()));
            c.insert("observedGeneration".into(), generation.into());
        }
    }
    status
}

/// Whether writing `status` would change nothing in `current`.
fn unchanged(status: &Value, current: Option<&Value>) -> bool {
    let (Some(new), Some(current)) = (status.as_object(), current) else { return false };
    new.iter().all(|(k, v)| current.get(k).unwrap_or(&Value::Null) == v)
}

/// The condition that the spec was accepted into fleetsync's store.
pub const SYNCED: &str = "Synced";
/// The condition that what the object asks for is in place (for a SyncSet: applied
/// on every cluster it selects).
pub const READY: &str = "Ready";

/// What was last delivered to handlers for one object.
struct Delivered {
    version: Option<String>,
    last: DynamicObject,
}

/// The loop's state.
struct RunState {
    tracker: Tracker<ObjectKey>,
    delivered: HashMap<ObjectKey, Delivered>,
    /// Objects seen by a re-list in progress, per kind.
    relisted: HashMap<CrKind, HashSet<ObjectKey>>,
}

impl RunState {
    fn new(timeout: Duration) -> Self {
        Self { tracker: Tracker::new(timeout), delivered: HashMap::new(), relisted: HashMap::new() }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "fleetsync.io/v1", "kind": "SyncSet",
            "metadata": {"name": "s", "namespace": "t", "generation": 4}, "status": status,
        }))
        .expect("object")
    }

    fn ready(status: &str) -> Value {
        json!({"conditions": [{"type": READY, "status": status, "reason": "R", "message": "m"}]})
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).expect("time")
    }

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let first = status_of(Ok(ready("False")), &object(Value::Null), at(1_000_000_000));
        let c = &first["conditions"][0];
        assert_eq!(
            (c["lastTransitionTime"].as_str(), c["observedGeneration"].as_i64()),
            (Some("2001-09-09T01:46:40Z"), Some(4))
        );
        assert_eq!((first["observedGeneration"].as_i64(), first["error"].is_null()), (Some(4), true));

        let same = status_of(Ok(ready("False")), &object(first.clone()), at(1_000_000_100));
        assert_eq!(same["conditions"][0]["lastTransitionTime"], c["lastTransitionTime"]);
        assert!(unchanged(&same, Some(&first)), "nothing to write");

        let flipped = status_of(Ok(ready("True")), &object(first.clone()), at(1_000_000_100));
        assert_eq!(flipped["conditions"][0]["lastTransitionTime"], "2001-09-09T01:48:20Z");
        assert!(!unchanged(&flipped, Some(&first)));
    }

    #[test]
    fn a_failed_reconcile_is_neither_synced_nor_ready() {
        let s = status_of(Err(ReconcileError("spec.x: bad".into())), &object(Value::Null), at(0));
        assert_eq!(s["error"], "spec.x: bad");
        for (i, kind) in [SYNCED, READY].into_iter().enumerate() {
            let c = &s["conditions"][i];
            assert_eq!(
                (c["type"].as_str(), c["status"].as_str(), c["reason"].as_str()),
                (Some(kind), Some("False"), Some("ReconcileFailed"))
            );
            assert_eq!(c["message"], "spec.x: bad");
        }
    }
}
