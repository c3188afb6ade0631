//! The Kubernetes applier: server-side apply of any kind through kube-rs.
//!
//! * A cluster is reached by URL (`http` endpoints), by the kubeconfig in a fleetsync
//!   Secret (`kubeconfig`, read through [`SecretSource`]; see [`crate::kubeconfig`]), or
//!   through the pod's service account (`inCluster`). `https` uses rustls.
//! * One client per cluster, created on first use and reused, dropped after it has
//!   been idle for `idle_after`, or when more than `max_clients` clusters have one
//!   (least recently used first). A kubeconfig client re-reads its Secret for a run
//!   claimed after its last read, so that the run a Secret change enqueued uses the
//!   new Secret, and is rebuilt only when the Secret's generation changed (see
//!   `clients.rs`). Its connection pool keeps at most
//!   `max_idle_connections` idle connections, closed after `connection_idle` — a
//!   cluster's SyncSets open many connections at once and then go quiet, and with
//!   hyper's defaults (unbounded, 90 s) a fleet of a thousand clusters would hold
//!   tens of thousands of idle sockets.
//! * Kinds are resolved through discovery and cached per cluster; a 404 drops the
//!   cached entry, so a kind installed or removed later is found on the next try.
//! * Every applied object carries the key's fencing token as the annotation
//!   `fleetsync.io/fence` (with `fleetsync.io/key`, `/generation`, `/index`), and
//!   deletes carry them as headers, so a target that checks them (`fleetsync sim`, or
//!   an admission webhook on a real cluster) refuses a worker that lost its lease.
//! * Every endpoint's host, and every address a host name resolves to, is checked
//!   against the hub's [`EgressPolicy`] (`KubeConfig::egress`); a refusal is
//!   [`ApplyError::Egress`] (shown as `forbidden:`; the key is parked at once) and
//!   names the rule.
//! * Errors are typed from the API's `Status` (409, 403, 404, 422, 5xx) or the
//!   transport (unreachable, timeout). A transport error names the address of the
//!   request (the cluster's URL and the API path, never user info or a query) and
//!   every cause down to the innermost (connection refused, a DNS failure, a TLS
//!   certificate problem, a connect timeout), each text once, at most
//!   [`MAX_ERROR`](crate::error::MAX_ERROR) bytes with the middle cut out if need be,
//!   e.g. `unreachable: https://10.0.0.5:6443/api/v1: client error (Connect): tcp
//!   connect error: Connection refused (os error 111)`. Only a `Status` body's reason and message reach
//!   the error, at most [`MAX_MESSAGE`] bytes; any other body (an HTML page, a service
//!   that is not Kubernetes) is reduced to its HTTP status code and reason phrase, so a
//!   target's response never lands verbatim in a key's `lastError`.

mod classify;

use crate::clients::{lock, Checked, Clients, ClusterClient, Source};
use crate::egress::{EgressPolicy, PolicyResolver};
use crate::error::{causes, shorten, MAX_ERROR};
use crate::gate;
use crate::kubeconfig::{config_from_secret, fetch, in_cluster_config, SecretSource};
use crate::{Applier, ApplyContext, ApplyError, Moment};
use async_trait::async_trait;
use classify::{base_of, classify, limited, target_of, TimedOut};
use fleetsync_model::{Cluster, Endpoint, Manifest, ResourceRef};
use kube::api::{DeleteParams, DynamicObject, GetParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind, Resource};
use kube::discovery::Scope;
use std::sync::Arc;
use std::time::Duration;

/// The annotation that carries the fencing token on applied objects.
pub const FENCE_ANNOTATION: &str = "fleetsync.io/fence";
/// The annotation that names the key (`tenant/cluster/syncset`).
pub const KEY_ANNOTATION: &str = "fleetsync.io/key";
pub const GENERATION_ANNOTATION: &str = "fleetsync.io/generation";
pub const INDEX_ANNOTATION: &str = "fleetsync.io/index";
/// Headers that carry the key and fence on deletes (which have no body to annotate).
pub const FENCE_HEADER: &str = "x-fleetsync-fence";
pub const KEY_HEADER: &str = "x-fleetsync-key";
/// Longest text of a target's answer kept in an error (cut on a character boundary).
pub const MAX_MESSAGE: usize = 512;
/// Default [`KubeConfig::max_response_bytes`]: 8 MiB.
pub const MAX_RESPONSE_BYTES: usize = 8 << 20;

#[derive(Debug, Clone)]
pub struct KubeConfig {
    /// The server-side apply field manager.
    pub field_manager: String,
    /// Take over fields owned by other managers (`force=true`).
    pub force: bool,
    /// Longest time one request may take, its answer's body read in full included.
    pub request_timeout: Duration,
    /// Most bytes of one answer's body the hub reads; a longer body fails the call
    /// ([`ApplyError::Transient`], naming the limit) instead of filling the hub's
    /// memory. Kubernetes keeps an object under 1.5 MiB, so the default leaves room.
    pub max_response_bytes: usize,
    /// Drop a cluster's client after this long unused.
    pub idle_after: Duration,
    /// Clusters with a client at most; past it the least recently used lose theirs.
    pub max_clients: usize,
    /// Idle connections kept per cluster. Few: over HTTP/1.1 a cluster's SyncSets
    /// open a connection each at once, and at 100,000 clusters × 6 SyncSets eight
    /// kept per cluster for `connection_idle` ran the hub out of file descriptors.
    pub max_idle_connections: usize,
    /// How long an idle connection is kept.
    pub connection_idle: Duration,
    /// How often a kubeconfig client checks whether its Secret changed, for calls
    /// that carry no claim ([`ApplyContext::claimed_at`] `None`); a run's calls check
    /// it once per claim.
    pub secret_refresh: Duration,
    /// Which hosts and addresses endpoints may reach (default: the built-in deny of
    /// loopback, link-local, unspecified and cloud metadata addresses).
    pub egress: EgressPolicy,
}

impl Default for KubeConfig {
    fn default() -> Self {
        Self {
            field_manager: "fleetsync".into(),
            force: true,
            request_timeout: Duration::from_secs(30),
            max_response_bytes: MAX_RESPONSE_BYTES,
            idle_after: Duration::from_secs(600),
            max_clients: 10_000,
            max_idle_connections: 2,
            connection_idle: Duration::from_secs(5),
            secret_refresh: Duration::from_secs(10),
            egress: EgressPolicy::default(),
        }
    }
}

/// Applies to clusters whose endpoint is `http` (a Kubernetes API URL), `kubeconfig`
/// (given [`SecretSource`]) or `inCluster`.
#[derive(Clone)]
pub struct KubeApplier {
    config: KubeConfig,
    clients: Arc<Clients>,
    credentials: Option<Arc<dyn SecretSource>>,
    egress: Arc<EgressPolicy>,
}

impl KubeApplier {
    pub fn new(config: KubeConfig) -> Self {
        let clients = Arc::new(Clients::new(config.idle_after, config.max_clients));
        let egress = Arc::new(config.egress.clone());
        Self { config, clients, credentials: None, egress }
    }

    /// Lets the applier read the Secrets that `kubeconfig` endpoints name.
    pub fn with_credentials(mut self, credentials: Arc<dyn SecretSource>) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// How many cluster clients are open.
    pub fn open_clients(&self) -> usize {
        self.clients.open()
    }

    /// The cluster's client for a call of a run claimed at `claimed_at`: the cached one
    /// if it is current for that run (see [`crate::clients`]), else built, or confirmed
    /// by reading its Secret again, one call at a time per cluster.
    async fn client(&self, cluster: &Cluster, claimed_at: Option<Moment>) -> Result<Arc<ClusterClient>, ApplyError> {
        let id = format!("{}/{}", cluster.metadata.namespace, cluster.metadata.name);
        let (endpoint, refresh) = (&cluster.spec.endpoint, self.config.secret_refresh);
        let slot = self.clients.slot(&id);
        if let Some(c) = slot.current(endpoint, claimed_at, refresh) {
            return Ok(c);
        }
        let _turn = slot.turn().await;
        // Another call may have done it while this one waited.
        if let Some(c) = slot.current(endpoint, claimed_at, refresh) {
            return Ok(c);
        }
        let read = Checked::now();
        let (source, config) = match endpoint {
            Endpoint::Http { url } => {
                let uri: http::Uri =
                    url.parse().map_err(|e| ApplyError::Invalid(format!("cluster URL {url:?}: {e}")))?;
                (Source::Url(url.clone()), kube::Config::new(uri))
            }
            Endpoint::Kubeconfig { secret_ref } => {
                let credentials = self.credentials.as_deref().ok_or_else(|| {
                    ApplyError::Unsupported("kubeconfig endpoint, but this applier was given no Secrets to read".into())
                })?;
                let secret = fetch(credentials, &cluster.metadata.namespace, secret_ref).await?;
                let source = Source::Secret { name: secret_ref.clone(), generation: secret.metadata.generation };
                if let Some(c) = slot.confirm(&source, read) {
                    return Ok(c);
                }
                (source, config_from_secret(&secret).await?)
            }
            Endpoint::InCluster {} => (Source::InCluster, in_cluster_config()?),
            other => {
                return Err(ApplyError::Unsupported(format!(
                    "the Kubernetes applier does not handle {} endpoints",
                    other.kind_name()
                )))
            }
        };
        let base = base_of(&config.cluster_url);
        let host = config
            .cluster_url
            .host()
            .ok_or_else(|| ApplyError::Invalid(format!("cluster URL {base:?} names no host")))?;
        self.egress.check_host(host).map_err(|e| ApplyError::Egress(shorten(&e.to_string(), MAX_ERROR)))?;
        let client = self.build_client(config).map_err(|e| {
            ApplyError::Unreachable(shorten(&format!("creating a client for {base}: {}", causes(&e)), MAX_ERROR))
        })?;
        Ok(slot.install(ClusterClient::new(client, base, source, read)))
    }

    /// A kube client over our own hyper pool (bounded idle connections), with kube's
    /// base-URI and auth layers; `https` clusters get rustls with the kubeconfig's CA
    /// and client certificate. Host names are resolved through the egress policy.
    fn build_client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        use hyper_util::client::legacy::connect::HttpConnector;
        use kube::client::ConfigExt;
        let mut connector = HttpConnector::new_with_resolver(PolicyResolver::new(self.egress.clone()));
        connector.set_connect_timeout(Some(self.config.request_timeout));
        connector.set_nodelay(true);
        if config.cluster_url.scheme_str() == Some("https") {
            connector.enforce_http(false);
            let tls = config.rustls_https_connector_with_connector(connector)?;
            self.client_over(config, tls)
        } else {
            self.client_over(config, connector)
        }
    }

    fn client_over<C>(&self, config: kube::Config, connector: C) -> Result<kube::Client, kube::Error>
    where
        C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
    {
        use kube::client::ConfigExt;
        let pool = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_max_idle_per_host(self.config.max_idle_connections)
            .pool_idle_timeout(self.config.connection_idle)
            // Without a timer the pool never closes an idle connection by itself, only
            // when the cluster's next request finds it expired: a cluster that goes
            // quiet keeps its connections until its client is dropped.
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build::<_, gate::Gated>(connector);
        let limit = self.config.max_response_bytes;
        let service = tower::ServiceBuilder::new()
            .map_response(move |r| limited(r, limit))
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer()?)
            .map_request(gate::gated)
            .map_err(tower::BoxError::from)
            .service(pool);
        Ok(kube::Client::new(service, config.default_namespace))
    }

    /// Resolves a kind through discovery (cached).
    async fn resolve(&self, c: &ClusterClient, r: &ResourceRef) -> Result<(ApiResource, bool), ApplyError> {
        let gvk = gvk(r);
        if let Some(hit) = lock(&c.kinds).get(&gvk) {
            return Ok(hit.clone());
        }
        let found = self.timed(kube::discovery::pinned_kind(&c.client, &gvk)).await;
        // The request discovery makes for one kind: its group version's resources.
        let target = match gvk.group.as_str() {
            "" => format!("{}/api/{}", c.base, gvk.version),
            group => format!("{}/apis/{group}/{}", c.base, gvk.version),
        };
        let (ar, caps) = found.map_err(|e| match classify(e, &target) {
            ApplyError::NotFound(m) => {
                ApplyError::NotFound(format!("kind {} {} is not served by the cluster: {m}", r.api_version, r.kind))
            }
            other => other,
        })?;
        let entry = (ar, caps.scope == Scope::Namespaced);
        lock(&c.kinds).insert(gvk, entry.clone());
        Ok(entry)
    }

    fn forget_kind(c: &ClusterClient, r: &ResourceRef) {
        lock(&c.kinds).remove(&gvk(r));
    }

    async fn timed<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, kube::Error> {
        match tokio::time::timeout(self.config.request_timeout, call).await {
            Ok(r) => r,
            Err(_) => Err(kube::Error::Service(Box::new(TimedOut(self.config.request_timeout)))),
        }
    }
}

fn gvk(r: &ResourceRef) -> GroupVersionKind {
    let (group, version) = r.api_version.rsplit_once('/').unwrap_or(("", r.api_version.as_str()));
    GroupVersionKind::gvk(group, version, &r.kind)
}

/// The requests of the collection `r` lives in (its namespace, `default` if it names
/// none, for a namespaced kind).
fn collection(ar: &ApiResource, namespaced: bool, r: &ResourceRef) -> kube::core::Request {
    let ns = namespaced.then(|| r.namespace.as_deref().unwrap_or("default"));
    kube::core::Request::new(DynamicObject::url_path(ar, ns))
}

/// The manifest with the key's fencing annotations added, as the JSON sent. Edited
/// as JSON: a typed object would parse the manifest and write it back out on every
/// apply, for four annotations.
fn fenced(manifest: &Manifest, ctx: &ApplyContext) -> Result<serde_json::Value, ApplyError> {
    let mut obj = manifest.0.clone();
    let root = obj.as_object_mut().ok_or_else(|| not_an_object("the manifest"))?;
    let metadata = object_field(root, "metadata", "metadata")?;
    let annotations = object_field(metadata, "annotations", "metadata.annotations")?;
    annotations.insert(KEY_ANNOTATION.into(), ctx.key.to_string().into());
    annotations.insert(FENCE_ANNOTATION.into(), ctx.fence.to_string().into());
    annotations.insert(GENERATION_ANNOTATION.into(), ctx.generation.to_string().into());
    annotations.insert(INDEX_ANNOTATION.into(), ctx.index.to_string().into());
    Ok(obj)
}

/// The object at `map[field]`, made an empty one if absent or null; an error naming
/// `path` if it is something else.
fn object_field<'a>(
    map: &'a mut serde_json::Map<String, serde_json::Value>,
    field: &str,
    path: &str,
) -> Result<&'a mut serde_json::Map<String, serde_json::Value>, ApplyError> {
    let value = map.entry(field).or_insert(serde_json::Value::Null);
    if value.is_null() {
        *value = serde_json::Value::Object(serde_json::Map::new());
    }
    value.as_object_mut().ok_or_else(|| not_an_object(path))
}

fn not_an_object(what: &str) -> ApplyError {
    ApplyError::Invalid(format!("manifest is not an object: {what} is not a JSON object"))
}

#[async_trait]
impl Applier for KubeApplier {
    async fn apply(&self, cluster: &Cluster, resource: &Manifest, ctx: &ApplyContext) -> Result<(), ApplyError> {
        let c = self.client(cluster, ctx.claimed_at).await?;
        let r = resource.resource_ref().map_err(|e| ApplyError::Invalid(format!("{} {}", e.field, e.message)))?;
        let (ar, namespaced) = self.resolve(&c, &r).await?;
        let obj = fenced(resource, ctx)?;
        let mut params = PatchParams::apply(&self.config.field_manager);
        params.force = self.config.force;
        let mut req = collection(&ar, namespaced, &r)
            .patch(&r.name, &params, &Patch::Apply(&obj))
            .map_err(|e| ApplyError::Invalid(format!("building the apply of {r}: {e}")))?;
        req.extensions_mut().insert(ctx.deadline.clone());
        let target = target_of(&c, &req);
        // The answer's body is not parsed: an error status is classified all the same
        // (`request_text` reads a `Status` out of it), and the object sent back is not used.
        match self.timed(c.client.request_text(req)).await.map_err(|e| classify(e, &target)) {
            Ok(_) => Ok(()),
            Err(e @ ApplyError::NotFound(_)) => {
                // The kind may have gone away: look it up afresh next time.
                Self::forget_kind(&c, &r);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, cluster: &Cluster, resource: &ResourceRef, ctx: &ApplyContext) -> Result<(), ApplyError> {
        let c = self.client(cluster, ctx.claimed_at).await?;
        let (ar, namespaced) = match self.resolve(&c, resource).await {
            Ok(found) => found,
            // A kind the cluster no longer serves has nothing left to delete.
            Err(ApplyError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut req = collection(&ar, namespaced, resource)
            .delete(&resource.name, &DeleteParams::default())
            .map_err(|e| ApplyError::Invalid(format!("building the delete of {resource}: {e}")))?;
        req.extensions_mut().insert(ctx.deadline.clone());
        let headers = req.headers_mut();
        for (name, value) in [(FENCE_HEADER, ctx.fence.to_string()), (KEY_HEADER, ctx.key.to_string())] {
            if let Ok(v) = http::HeaderValue::from_str(&value) {
                headers.insert(name, v);
            }
        }
        let target = target_of(&c, &req);
        match self.timed(c.client.request_status::<DynamicObject>(req)).await.map_err(|e| classify(e, &target)) {
            Ok(_) | Err(ApplyError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn read(
        &self,
        cluster: &Cluster,
        resource: &ResourceRef,
        ctx: &ApplyContext,
    ) -> Result<Option<serde_json::Value>, ApplyError> {
        let c = self.client(cluster, ctx.claimed_at).await?;
        let (ar, namespaced) = self.resolve(&c, resource).await?;
        let mut req = collection(&ar, namespaced, resource)
            .get(&resource.name, &GetParams::default())
            .map_err(|e| ApplyError::Invalid(format!("building the read of {resource}: {e}")))?;
        req.extensions_mut().insert(ctx.deadline.clone());
        let target = target_of(&c, &req);
        match self.timed(c.client.request::<serde_json::Value>(req)).await.map_err(|e| classify(e, &target)) {
            Ok(object) => Ok(Some(object)),
            Err(ApplyError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{ClusterSpec, Fence, ObjectMeta, WorkKey};
    use serde_json::json;

    #[test]
    fn group_version_kind_of_core_and_grouped_kinds() {
        let r =
            |v: &str, k: &str| ResourceRef { api_version: v.into(), kind: k.into(), namespace: None, name: "x".into() };
        assert_eq!(gvk(&r("v1", "ConfigMap")), GroupVersionKind::gvk("", "v1", "ConfigMap"));
        assert_eq!(gvk(&r("apps/v1", "Deployment")), GroupVersionKind::gvk("apps", "v1", "Deployment"));
    }

    #[test]
    fn applied_objects_carry_the_fence() {
        let m = Manifest(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "annotations": {"keep": "me"}}}),
        );
        let ctx = ApplyContext::new(WorkKey::new("t", "c", "s"), Fence::new(42), 3, 1);
        let obj = fenced(&m, &ctx).expect("object");
        let a = &obj["metadata"]["annotations"];
        assert_eq!(a[FENCE_ANNOTATION], "42");
        assert_eq!(a[KEY_ANNOTATION], "t/c/s");
        assert_eq!(a[GENERATION_ANNOTATION], "3");
        assert_eq!(a[INDEX_ANNOTATION], "1");
        assert_eq!(a["keep"], "me");
        let bare =
            Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "annotations": null}}));
        assert_eq!(fenced(&bare, &ctx).expect("object")["metadata"]["annotations"][FENCE_ANNOTATION], "42");
        let odd =
            Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": []}}));
        assert!(matches!(fenced(&odd, &ctx), Err(ApplyError::Invalid(m)) if m.contains("metadata.annotations")));
    }

    /// These tests' targets listen on loopback, which the built-in policy refuses.
    fn loopback_allowed() -> EgressPolicy {
        EgressPolicy::default().allowing("127.0.0.1".parse().expect("rule"))
    }

    struct OneSecret(fleetsync_model::Secret);

    #[async_trait]
    impl SecretSource for OneSecret {
        async fn secret(
            &self,
            _: &str,
            _: &str,
        ) -> Result<Option<fleetsync_model::Secret>, crate::kubeconfig::CredentialsError> {
            Ok(Some(self.0.clone()))
        }
    }

    /// An `https` server in a kubeconfig gets a rustls client (built, then refused a
    /// connection: nothing listens), and an `inCluster` endpoint outside a pod says so.
    #[tokio::test]
    async fn https_and_in_cluster_endpoints() {
        let kubeconfig = "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n";
        let mut secret = fleetsync_model::Secret { metadata: ObjectMeta::new("kc"), string_data: Default::default() };
        secret.string_data.insert("kubeconfig".into(), fleetsync_model::SecretValue::new(kubeconfig));
        let config =
            KubeConfig { request_timeout: Duration::from_secs(5), egress: loopback_allowed(), ..KubeConfig::default() };
        let k = KubeApplier::new(config).with_credentials(Arc::new(OneSecret(secret)));
        let ctx = ApplyContext::new(WorkKey::new("t", "c", "s"), Fence::new(1), 1, 0);
        let m = Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}));
        let by_secret = Cluster {
            metadata: ObjectMeta::new("c"),
            spec: ClusterSpec::new(Endpoint::Kubeconfig { secret_ref: "kc".into() }),
        };
        let err = k.apply(&by_secret, &m, &ctx).await.expect_err("nothing listens");
        assert!(matches!(err, ApplyError::Unreachable(_)), "{err}");
        assert_eq!(k.open_clients(), 1);
        let in_pod = Cluster { metadata: ObjectMeta::new("p"), spec: ClusterSpec::new(Endpoint::InCluster {}) };
        let err = k.apply(&in_pod, &m, &ctx).await.expect_err("not in a pod");
        assert!(
            matches!(&err, ApplyError::Unsupported(msg) if msg.contains("not running in a Kubernetes pod")),
            "{err}"
        );
    }

    #[tokio::test]
    async fn other_endpoints_are_refused_and_bad_urls_named() {
        let k = KubeApplier::new(KubeConfig::default());
        let sim = Cluster { metadata: ObjectMeta::new("c"), spec: ClusterSpec::new(Endpoint::Simulator {}) };
        let ctx = ApplyContext::new(WorkKey::new("t", "c", "s"), Fence::new(1), 1, 0);
        let m = Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}));
        assert!(matches!(k.apply(&sim, &m, &ctx).await, Err(ApplyError::Unsupported(_))));
        let bad = Cluster {
            metadata: ObjectMeta::new("c"),
            spec: ClusterSpec::new(Endpoint::Http { url: "http://[::1".into() }),
        };
        let err = k.apply(&bad, &m, &ctx).await.expect_err("bad URL");
        assert!(matches!(&err, ApplyError::Invalid(m) if m.contains("http://[::1")), "{err}");
    }

    /// One Secret that a test can change (each change a new generation), counting reads.
    #[derive(Default)]
    struct Rotating {
        secret: std::sync::Mutex<Option<fleetsync_model::Secret>>,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl Rotating {
        fn point_at(&self, server: &str) {
            let kubeconfig = format!("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: c, cluster: {{server: '{server}'}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n");
            let mut held = lock(&self.secret);
            let mut secret =
                fleetsync_model::Secret { metadata: ObjectMeta::new("kc"), string_data: Default::default() };
            secret.metadata.generation = held.as_ref().map_or(1, |s| s.metadata.generation + 1);
            secret.string_data.insert("kubeconfig".into(), fleetsync_model::SecretValue::new(kubeconfig));
            *held = Some(secret);
        }

        fn reads(&self) -> usize {
            self.reads.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    #[async_trait]
    impl SecretSource for Arc<Rotating> {
        async fn secret(
            &self,
            _: &str,
            _: &str,
        ) -> Result<Option<fleetsync_model::Secret>, crate::kubeconfig::CredentialsError> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // A store round trip, so that calls arriving together overlap.
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(lock(&self.secret).clone())
        }
    }

    fn by_secret(secret: &Arc<Rotating>) -> (KubeApplier, Cluster) {
        secret.point_at("http://127.0.0.1:1/old");
        let config = KubeConfig { egress: loopback_allowed(), ..KubeConfig::default() };
        let k = KubeApplier::new(config).with_credentials(Arc::new(secret.clone()));
        let c = Cluster {
            metadata: ObjectMeta::new("c"),
            spec: ClusterSpec::new(Endpoint::Kubeconfig { secret_ref: "kc".into() }),
        };
        (k, c)
    }

    /// A run claimed after the client's last Secret read reads it again (and gets a new
    /// client only if it changed); the calls of one run, and runs claimed earlier, do not.
    #[tokio::test]
    async fn a_run_claimed_after_the_last_secret_read_reads_it_again() {
        let secret = Arc::new(Rotating::default());
        let (k, c) = by_secret(&secret);
        let first = Moment::now();
        let old = k.client(&c, Some(first)).await.expect("client");
        assert!(Arc::ptr_eq(&old, &k.client(&c, Some(first)).await.expect("client")), "same run, same client");
        assert_eq!(secret.reads(), 1, "a run reads the Secret once");

        let unchanged = Moment::now();
        assert!(
            Arc::ptr_eq(&old, &k.client(&c, Some(unchanged)).await.expect("client")),
            "same generation, warm client kept"
        );
        assert_eq!(secret.reads(), 2, "a later claim reads it again");

        secret.point_at("http://127.0.0.1:1/new");
        let rotated = Moment::now();
        let new = k.client(&c, Some(rotated)).await.expect("client");
        assert!(!Arc::ptr_eq(&old, &new), "a new generation, a new client");
        assert!(
            Arc::ptr_eq(&new, &k.client(&c, Some(first)).await.expect("client")),
            "an older run gets the newer client"
        );
        assert_eq!(secret.reads(), 3);
        assert_eq!(k.open_clients(), 1);
    }

    /// A cluster's keys claimed together: one Secret read (and one client) for all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_burst_of_runs_claimed_together_reads_the_secret_once() {
        let secret = Arc::new(Rotating::default());
        let (k, c) = by_secret(&secret);
        for burst in 1..=2 {
            let claimed = Moment::now();
            let mut runs = tokio::task::JoinSet::new();
            for _ in 0..50 {
                let (k, c) = (k.clone(), c.clone());
                runs.spawn(async move { k.client(&c, Some(claimed)).await.map(|c| Arc::as_ptr(&c) as usize) });
            }
            let clients: std::collections::HashSet<usize> =
                runs.join_all().await.into_iter().map(|c| c.expect("client")).collect();
            assert_eq!(clients.len(), 1, "one client");
            assert_eq!(secret.reads(), burst, "one read per burst");
        }
    }

    /// Calls without a claim re-read the Secret every `secret_refresh`.
    #[tokio::test(start_paused = true)]
    async fn without_a_claim_the_secret_is_read_every_secret_refresh() {
        let secret = Arc::new(Rotating::default());
        let (k, c) = by_secret(&secret);
        k.client(&c, None).await.expect("client");
        tokio::time::advance(Duration::from_secs(9)).await;
        k.client(&c, None).await.expect("client");
        assert_eq!(secret.reads(), 1);
        tokio::time::advance(Duration::from_secs(1)).await;
        k.client(&c, None).await.expect("client");
        assert_eq!(secret.reads(), 2);
    }
}
