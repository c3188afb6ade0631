//! fleetsync's HTTP API: objects, status, events, health and Prometheus metrics.
//!
//! [`router`] builds the API over any [`Store`]; [`serve`] runs it on a listener,
//! over http or https (`tls`), until a shutdown signal. Handlers are thin: they
//! check what came from the URL, call one store method, and shape the JSON. Every failure is an [`ApiError`], so
//! every error answer has the same JSON shape and never leaks internals.
//!
//! | Route | |
//! |---|---|
//! | `POST /v1/apply` | YAML/JSON documents → `{"results": [...]}` |
//! | `GET /v1/clusters`, `GET/DELETE /v1/clusters/{name}` | Clusters |
//! | `GET /v1/syncsets`, `GET/DELETE /v1/syncsets/{name}` | SyncSets |
//! | `GET /v1/status?cluster=&syncset=&phase=&stale=` | key status |
//! | `GET /v1/status/clusters/{name}`, `GET /v1/status/syncsets/{name}` | roll-ups |
//! | `POST /v1/status/clusters/{cluster}/syncsets/{syncset}/retry` | explicit retry |
//! | `GET /v1/status/clusters/{cluster}/syncsets/{syncset}/events?limit=&before=` | a key's newest events |
//! | `GET /v1/events?after=&limit=` | the event log (410 if the cursor was trimmed) |
//! | `GET /v1/events?after=&watch=true` | the event log, then each new event: NDJSON (`events`) |
//! | `POST /v1/agent/reports`, `GET /v1/agent/resources` | agents (token per cluster, `agent`) |
//! | `GET /v1/live?cluster=` | live state reported by agents |
//! | `POST /v1/tokens`, `GET /v1/tokens`, `DELETE /v1/tokens/{name}` | hub-issued tokens (`tokens`) |
//! | `GET /v1/whoami` | the caller's subject and grants |
//! | `GET /v1/version` | the hub's build |
//! | `GET /livez`, `GET /readyz`, `GET /healthz`, `GET /metrics` | operations |
//! | `GET /`, `/ui/…` | the dashboard (`dashboard`) |
//!
//! `?tenant=` selects the tenant (default `default`) wherever objects are named. The lists
//! of Clusters, SyncSets, Secrets, status and live state page with `?limit=&continue=`
//! (`paging`).
//! Every route but the probes (and `/metrics`, unless asked) needs a credential, and
//! what each route needs is one table ([`access::routes`]), checked before any handler.

pub mod access;
mod activity;
mod agent;
mod cluster_list;
mod conn;
mod dashboard;
mod error;
mod events;
mod extract;
mod failures;
mod feed;
pub mod health;
pub mod hook;
mod members;
pub mod metrics;
mod objects;
mod paging;
pub mod probes;
mod render;
mod rollouts;
pub mod serve;
mod status;
mod targets;
mod tls;
mod tokens;
mod watch_slots;
mod wire;

pub use conn::ConnectionLimits;
pub use error::ApiError;
pub use events::Watches;
pub use feed::EventFeed;
pub use fleetsync_api::Items;
pub use metrics::QueueMetrics;
pub use serve::{serve_router, serve_router_with, SHUTDOWN_GRACE};
pub use tls::{ClientIdentity, OverTls, ServerTls, TlsConfig, TlsError};
pub use watch_slots::WatchLimits;

use access::{Access, Authenticator};
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::routing::{delete, get, post};
use axum::Router;
use fleetsync_store::{Quotas, Store};
use objects::{Clusters, GitRepositories, Notifiers, OciRepositories, Secrets, SyncSets};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    /// Encoded whole at each scrape; holds the runtime's metrics too.
    pub registry: Arc<Registry>,
    /// Refreshed from the store at each scrape.
    pub queue_metrics: QueueMetrics,
    /// Event watch settings, and the switch [`serve`] uses to end the streams.
    pub watches: Watches,
    /// Who may call, and what each may do.
    pub access: Access,
    /// What each tenant may hold ([`fleetsync_store::quota`]); checked on every apply.
    pub quotas: Arc<Quotas>,
    /// The event log, and its one reader that feeds every watch.
    pub events: EventFeed,
    /// How long a cluster may go without a sign of life before the tenant's summary
    /// counts it stale ([`StatusRead::cluster_conditions`](fleetsync_store::StatusRead::cluster_conditions)).
    pub stale_after: Duration,
}

/// [`AppState::stale_after`] unless the operator chooses: above the default resync
/// interval (2 h), which gives every healthy cluster a successful run.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(3 * 3600);

impl AppState {
    /// The state with default watch settings, accepting the store's hub-issued tokens.
    pub fn new(store: Arc<dyn Store>, registry: Arc<Registry>, queue_metrics: QueueMetrics) -> Self {
        let access = Access::new(Authenticator::new(store.clone(), store.clock()));
        let events = EventFeed::new(store.clone());
        Self {
            store,
            registry,
            queue_metrics,
            watches: Watches::default(),
            access,
            quotas: Arc::default(),
            events,
            stale_after: DEFAULT_STALE_AFTER,
        }
    }
}

/// The API over `state`'s store.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/apply", post(objects::apply))
        .route("/v1/clusters", get(objects::list::<Clusters>))
        .route("/v1/clusters/{name}", get(objects::get::<Clusters>).delete(objects::delete::<Clusters>))
        .route("/v1/syncsets", get(objects::list::<SyncSets>))
        .route("/v1/syncsets/{name}", get(objects::get::<SyncSets>).delete(objects::delete::<SyncSets>))
        .route("/v1/syncsets/{name}/render", get(render::render))
        .route("/v1/secrets", get(objects::list::<Secrets>))
        .route("/v1/secrets/{name}", get(objects::get::<Secrets>).delete(objects::delete::<Secrets>))
        .route("/v1/gitrepositories", get(objects::list::<GitRepositories>))
        .route(
            "/v1/gitrepositories/{name}",
            get(objects::get::<GitRepositories>).delete(objects::delete::<GitRepositories>),
        )
        .route("/v1/gitrepositories/{name}/reconcile", post(status::fetch_now))
        .route("/v1/ocirepositories", get(objects::list::<OciRepositories>))
        .route(
            "/v1/ocirepositories/{name}",
            get(objects::get::<OciRepositories>).delete(objects::delete::<OciRepositories>),
        )
        .route("/v1/ocirepositories/{name}/reconcile", post(status::fetch_now))
        .route("/v1/notifiers", get(objects::list::<Notifiers>))
        .route("/v1/notifiers/{name}", get(objects::get::<Notifiers>).delete(objects::delete::<Notifiers>))
        .route("/v1/notifiers/{name}/reconcile", post(status::deliver_now))
        .route(
            "/v1/sources/{tenant}/{name}/hook",
            post(hook::hook).layer(DefaultBodyLimit::max(hook::MAX_NOTIFICATION_BYTES)),
        )
        .route("/v1/members", get(members::list))
        .route("/v1/status", get(status::list))
        .route("/v1/status/summary", get(status::summary))
        .route("/v1/status/clusters/{name}", get(status::cluster))
        .route("/v1/status/syncsets/{name}", get(status::syncset))
        .route("/v1/status/clusters/{cluster}/syncsets/{syncset}/retry", post(status::retry))
        .route("/v1/status/clusters/{name}/retry", post(failures::retry_cluster))
        .route("/v1/status/failures", get(failures::list))
        .route("/v1/status/clusters", get(cluster_list::list))
        .route("/v1/status/heatmap", get(cluster_list::heatmap))
        .route("/v1/status/activity", get(activity::activity))
        .route("/v1/status/failures/retry", post(failures::retry_cause))
        .route("/v1/status/clusters/{cluster}/syncsets/{syncset}/events", get(status::key_events))
        .route("/v1/rollouts", get(rollouts::list))
        .route("/v1/rollouts/{name}", get(rollouts::get))
        .route("/v1/rollouts/{name}/{control}", post(rollouts::control))
        .route("/v1/events", get(events::list))
        .route("/v1/agent/reports", post(agent::report))
        .route("/v1/agent/resources", get(agent::resources))
        .route("/v1/live", get(agent::live))
        .route("/v1/tokens", post(tokens::create).get(tokens::list))
        .route("/v1/tokens/{name}", delete(tokens::revoke))
        .route("/v1/whoami", get(tokens::whoami))
        .route("/v1/version", get(health::version))
        .route("/livez", get(health::livez))
        .route("/readyz", get(health::healthz))
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(metrics::scrape))
        .merge(dashboard::routes())
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), access::guard))
        .layer(axum::middleware::from_fn_with_state(state.clone(), metrics::http::record))
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(close_after_refused_body))
        .with_state(state)
}

/// A `413` or a `408` closes its HTTP/1 connection (`Connection: close`): the rest of
/// the body it refused (too large, or too slow) is never read, so the connection can
/// carry no further request, and the client learns at once that it may stop.
async fn close_after_refused_body(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::StatusCode;
    let http1 = req.version() < axum::http::Version::HTTP_2;
    let mut response = next.run(req).await;
    if http1 && matches!(response.status(), StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT) {
        response.headers_mut().insert(axum::http::header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    }
    response
}

/// Serves the API on `listener` (over https with `tls`, see the `tls` module) with the default
/// [`ConnectionLimits`]; see [`serve_with`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    tls: Option<ServerTls>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, state, tls, ConnectionLimits::default(), shutdown).await
}

/// Serves the API on `listener` (over https with `tls`, see the `tls` module) within `limits`
/// until `shutdown` completes; then ends the event watch streams and lets requests in flight finish,
/// for at most [`SHUTDOWN_GRACE`] (a client that stopped reading a stream cannot hold
/// the server up).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    tls: Option<ServerTls>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let watches = state.watches.clone();
    let signal = async move {
        shutdown.await;
        watches.close();
    };
    serve_router_with(listener, router(state), tls, limits, signal).await
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NoRoute { method: method.to_string(), path: uri.path().to_string() }
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed { method: method.to_string(), path: uri.path().to_string() }
}
