//! A fleetsync hub as a library: what `fleetsync serve` and `fleetsync worker` run,
//! for a program that starts its own.
//!
//! Give [`Hub::new`] a store, the appliers and the runtime's configuration, and add
//! what this process also serves: the HTTP API on a listener ([`Hub::api`], over https
//! with [`Hub::api_tls`]), the event
//! log's trimming ([`Hub::event_trim`], see [`trim`]), the Kubernetes source
//! ([`Hub::kube_source`]), how the workers fetch GitRepositories ([`Hub::sources`]), the probes and metrics of a process without the API
//! ([`Hub::probes`]) and a metrics registry of your own ([`Hub::registry`]).
//! [`Hub::run`] runs it all until its shutdown token is cancelled, then drains — the
//! API lets requests in flight finish, the workers let runs in flight finish within
//! their grace — and returns.
//!
//! Opening the store, binding the listener and handling signals stay with the caller:
//! the hub runs on what it is given.

pub mod trim;

pub use fleetsync_server::{ConnectionLimits, TlsConfig, TlsError, WatchLimits};
pub use trim::{EventTrim, TrimError};

use fleetsync_applier::Applier;
use fleetsync_kube_source::KubeSource;
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeError, RuntimeMetrics, SyncSetReconciler};
use fleetsync_server::access::{Access, AccessSettings};
use fleetsync_server::metrics::process::ProcessCollector;
use fleetsync_server::probes::{serve_probes, ReadyCheck};
use fleetsync_server::{AppState, QueueMetrics, ServerTls};
use fleetsync_source::{SourceReconciler, WithSources};
use fleetsync_store::{Quotas, Store};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinError;
use tokio_util::sync::CancellationToken;

/// One hub process, built up and then [run](Hub::run).
pub struct Hub {
    store: Arc<dyn Store>,
    applier: Arc<dyn Applier>,
    config: RuntimeConfig,
    api: Option<TcpListener>,
    probes: Option<TcpListener>,
    tls: Option<TlsConfig>,
    access: AccessSettings,
    quotas: Quotas,
    stale_after: Duration,
    connections: ConnectionLimits,
    watches: WatchLimits,
    trim: Option<EventTrim>,
    source: Option<KubeSource>,
    sources: SourceReconciler,
    registry: Registry,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("config", &self.config)
            .field("api", &self.api)
            .field("probes", &self.probes)
            .field("tls", &self.tls)
            .field("trim", &self.trim)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Why a hub would not start, or how it ended badly.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("the runtime's configuration is invalid")]
    Config(#[source] RuntimeError),
    #[error("the API's TLS files do not load")]
    Tls(#[source] TlsError),
    #[error("the HTTP server failed")]
    Serve(#[source] std::io::Error),
    #[error("the workers failed")]
    Workers(#[source] RuntimeError),
    #[error("the workers panicked")]
    WorkersPanicked(#[source] JoinError),
}

impl Hub {
    /// Workers on `store`, applying through `applier`: a `fleetsync worker`. Nothing
    /// else runs until added.
    pub fn new(store: Arc<dyn Store>, applier: Arc<dyn Applier>, config: RuntimeConfig) -> Hub {
        let access = AccessSettings::default();
        Hub {
            store,
            applier,
            config,
            api: None,
            probes: None,
            tls: None,
            access,
            quotas: Quotas::default(),
            stale_after: fleetsync_server::DEFAULT_STALE_AFTER,
            connections: ConnectionLimits::default(),
            watches: WatchLimits::default(),
            trim: None,
            source: None,
            sources: SourceReconciler::default(),
            registry: Registry::default(),
        }
    }

    /// Also serves the HTTP API (and `/metrics`) on `listener`.
    pub fn api(mut self, listener: TcpListener) -> Hub {
        self.api = Some(listener);
        self
    }

    /// Serves `/livez`, `/readyz` (the store is ready) and `/metrics` on `listener`:
    /// a worker's probes and metrics, on a process without the API (which serves the
    /// same itself).
    pub fn probes(mut self, listener: TcpListener) -> Hub {
        self.probes = Some(listener);
        self
    }

    /// Serves the API over https with the certificate and key `tls` names (re-read
    /// when they change), instead of plain http (with [`Hub::api`]; alone it does
    /// nothing). The files are loaded when the hub [runs](Hub::run), before anything
    /// starts.
    pub fn api_tls(mut self, tls: TlsConfig) -> Hub {
        self.tls = Some(tls);
        self
    }

    /// Who the API lets in beyond the store's tokens (OIDC), and the operator's
    /// choices about `/metrics` and `inCluster`. Default: the store's tokens only.
    pub fn access(mut self, access: AccessSettings) -> Hub {
        self.access = access;
        self
    }

    /// Limits what each tenant may hold, checked on every apply through the API.
    /// Default: no limits.
    pub fn quotas(mut self, quotas: Quotas) -> Hub {
        self.quotas = quotas;
        self
    }

    /// How long a cluster may go without a successful run or an agent report before
    /// the API counts it stale. Default: [`DEFAULT_STALE_AFTER`](fleetsync_server::DEFAULT_STALE_AFTER).
    pub fn stale_after(mut self, stale_after: Duration) -> Hub {
        self.stale_after = stale_after;
        self
    }

    /// Bounds on the API's connections: how many at once, and how long a request head
    /// and an idle keep-alive connection may take. Default: [`ConnectionLimits::default`].
    pub fn connection_limits(mut self, limits: ConnectionLimits) -> Hub {
        self.connections = limits;
        self
    }

    /// Caps on the API's open event watches, in all and per caller. Default:
    /// [`WatchLimits::default`].
    pub fn watch_limits(mut self, limits: WatchLimits) -> Hub {
        self.watches = limits;
        self
    }

    /// Also trims the event log (only if `trim` is [bounded](EventTrim::bounded)).
    pub fn event_trim(mut self, trim: EventTrim) -> Hub {
        self.trim = Some(trim);
        self
    }

    /// Also runs `source`: Clusters and SyncSets as custom resources in a hub
    /// Kubernetes cluster (give it a `StoreReconciler` on the same store).
    pub fn kube_source(mut self, source: KubeSource) -> Hub {
        self.source = Some(source);
        self
    }

    /// How the workers fetch GitRepositories (the egress policy their URLs meet, and
    /// the limits of what they hold). Default: [`SourceReconciler::default`], which
    /// holds them to the default egress policy and limits.
    pub fn sources(mut self, sources: SourceReconciler) -> Hub {
        self.sources = sources;
        self
    }

    /// The registry `/metrics` serves; the hub adds the runtime's and the queue's
    /// metrics to it. Default: an empty one.
    pub fn registry(mut self, registry: Registry) -> Hub {
        self.registry = registry;
        self
    }

    /// Runs until `shutdown` is cancelled (or the HTTP server fails), then stops the
    /// API, the workers, the trimming and the source, waits for each, and returns.
    /// `shutdown` itself is never cancelled here.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), HubError> {
        self.config.validate().map_err(HubError::Config)?;
        let tls = self.tls.map(ServerTls::load).transpose().map_err(HubError::Tls)?;
        let stop = shutdown.child_token();
        let mut registry = self.registry;
        ProcessCollector::register(&mut registry);
        let runtime_metrics = RuntimeMetrics::register(&mut registry);
        let api = self.api.map(|listener| (listener, QueueMetrics::register(&mut registry)));
        let registry = Arc::new(registry);
        let probes = self.probes.map(|listener| {
            let store = self.store.clone();
            let ready: ReadyCheck = Arc::new(move || {
                let store = store.clone();
                Box::pin(async move { fleetsync_server::health::store_readiness(store.as_ref()).await })
            });
            tokio::spawn(serve_probes(listener, registry.clone(), ready, stop.clone().cancelled_owned()))
        });

        let syncsets = SyncSetReconciler::new(self.applier, runtime_metrics.clone());
        let reconciler = Arc::new(WithSources::new(self.sources, syncsets));
        let runtime = Runtime::with_reconciler(self.store.clone(), reconciler, self.config, runtime_metrics);
        let workers = tokio::spawn(runtime.run(stop.clone()));
        let source = self.source.map(|source| tokio::spawn(source.run(stop.clone().cancelled_owned())));
        let trim = self.trim.filter(EventTrim::bounded);
        let trimmer = trim.map(|trim| tokio::spawn(trim.run(self.store.clone(), stop.clone())));

        let mut served = Ok(());
        if let Some((listener, queue_metrics)) = api {
            let mut state = AppState::new(self.store, registry, queue_metrics);
            state.access = Access::configured(state.access.authenticator.clone(), self.access);
            state.quotas = Arc::new(self.quotas);
            state.stale_after = self.stale_after;
            state.watches = state.watches.with_limits(self.watches);
            let stopped = stop.clone().cancelled_owned();
            served = fleetsync_server::serve_with(listener, state, tls, self.connections, stopped)
                .await
                .map_err(HubError::Serve);
            stop.cancel();
        }
        let workers = workers.await;
        stop.cancel();
        if let Some(p) = probes {
            if let Ok(Err(e)) = p.await {
                tracing::error!(error = %e, "the probes' server failed");
            }
        }
        if let Some(t) = trimmer {
            let _ = t.await;
        }
        if let Some(s) = source {
            let _ = s.await;
        }
        served?;
        workers.map_err(HubError::WorkersPanicked)?.map_err(HubError::Workers)
    }
}
