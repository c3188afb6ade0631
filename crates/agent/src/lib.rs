//! fleetsync's agent as a library ([`run`]; `fleetsync agent` is its command line):
//! runs beside a target cluster and reports the live state of the resources fleetsync
//! applied there to the hub, which stores it, shows drift in status and re-applies
//! what drifted. It talks to the hub through [`fleetsync_api::Client`].
//!
//! Two loops share an outbox (`outbox.rs`):
//! * the **watcher** learns from the hub what to watch (`GET /v1/agent/resources`,
//!   again every `--resources-interval`) and watches the target, one task per kind:
//!   a list (one request, all namespaces), then a Kubernetes watch from the list's
//!   version. Each change of a watched resource goes into the outbox as the watch
//!   delivers it. The first list reports every watched resource: on start the agent
//!   sends its full state. A watch the server ends (every `--relist-interval`), that
//!   breaks, or whose version is gone (`410`) is followed by a re-list, which reports
//!   what changed meanwhile, and objects that vanished as deleted.
//! * the **sender** sends the pending reports in batches and forgets each only once
//!   the hub has answered that it persisted it; while the hub is down, restarting or
//!   unreachable it resends with capped exponential backoff. Nothing is lost meanwhile:
//!   the outbox keeps the newest report of every resource.
//!
//! A refused token (401/403) ends the agent with the hub's message: retrying cannot fix it.

mod credentials;
mod hub;
mod metrics;
mod outbox;
mod target;
#[cfg(test)]
mod tls_tests;
mod token;

pub use credentials::{TargetConfigError, TargetSource};
use fleetsync_api::{describe, ClientBuildError, ClientError, ClientTls, ReportResult};
pub use fleetsync_kube_source::Credentials;
use fleetsync_model::names::check_dns1123_label;
use fleetsync_model::{LiveReport, LiveState, ResourceRef};
use fleetsync_policy::RetryPolicy;
use hub::Hub;
pub use metrics::AgentMetrics;
use outbox::Outbox;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
pub use target::TargetError;
use target::{ObjectKey, Target, WatchEvent};
pub use token::TokenError;
use token::TokenFile;

/// How an agent runs; each field is the `fleetsync agent` flag of the same name.
#[derive(Debug, Clone)]
pub struct Config {
    /// The hub's API.
    pub hub: String,
    /// How the agent speaks https to the hub: the CA it trusts, its client certificate.
    pub hub_tls: ClientTls,
    pub tenant: String,
    /// The cluster this agent reports for (its token must be that cluster's).
    pub cluster: String,
    /// A file holding the cluster's agent token.
    pub token_file: PathBuf,
    /// The cluster's Kubernetes API and the agent's credentials there: `--target` and
    /// its flags, or a kubeconfig, or the pod's service account.
    pub target: TargetSource,
    /// How long one watch of a kind lasts before the kind is listed again in full.
    pub relist_interval: Duration,
    /// How often the list of resources to watch is read from the hub again.
    pub resources_interval: Duration,
    /// Most reports in one request to the hub.
    pub batch: usize,
    /// The first wait before resending what the hub did not acknowledge (doubles up
    /// to `backoff_cap`).
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    /// How long one request (to the hub or the target) may take.
    pub request_timeout: Duration,
    /// Where the agent counts what it does (registered nowhere by default).
    pub metrics: AgentMetrics,
}

/// Why the agent could not start, or stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("--{flag} {value:?}: {rule}")]
    InvalidName { flag: &'static str, value: String, rule: fleetsync_model::names::NameError },
    #[error("--{flag} must be an http:// or https:// URL, got {url:?}")]
    NotHttp { flag: &'static str, url: String },
    #[error("--batch must be at least 1")]
    EmptyBatch,
    #[error("cannot read the token file {}", path.display())]
    TokenUnreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the token file {} is empty: put the cluster's agent token in it", path.display())]
    TokenEmpty { path: PathBuf },
    /// The client of the hub could not be built (a CA or client certificate file
    /// that does not load).
    #[error("cannot build the HTTP client of the {which}")]
    Client {
        which: &'static str,
        #[source]
        source: ClientBuildError,
    },
    /// No client configuration for the target (no `--target`, kubeconfig or pod;
    /// a kubeconfig or context that cannot be used).
    #[error(transparent)]
    TargetConfig(#[from] TargetConfigError),
    /// The target's client could not be built from its configuration (a CA, client
    /// certificate or token file that cannot be read).
    #[error("cannot build the client of the target {url}")]
    TargetClient {
        url: String,
        #[source]
        source: kube::Error,
    },
    #[error("--target-token-file")]
    TargetToken(#[source] TokenError),
    /// The hub refused the agent's token (401/403): retrying cannot help.
    #[error("the hub refused the agent")]
    Refused(#[source] ClientError),
}

impl Config {
    /// Checks what can be checked before starting: names, URLs, the batch size.
    pub fn check(&self) -> Result<(), AgentError> {
        for (flag, value) in [("cluster", &self.cluster), ("tenant", &self.tenant)] {
            check_dns1123_label(value).map_err(|rule| AgentError::InvalidName { flag, value: value.clone(), rule })?;
        }
        let target = match &self.target {
            TargetSource::Url { url, .. } => Some(url),
            TargetSource::Found(_) => None,
        };
        for (flag, url) in std::iter::once(("hub", &self.hub)).chain(target.map(|t| ("target", t))) {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(AgentError::NotHttp { flag, url: url.clone() });
            }
        }
        if self.batch == 0 {
            return Err(AgentError::EmptyBatch);
        }
        Ok(())
    }
}

/// Runs the agent until the hub refuses its token or the process is interrupted.
pub async fn run(a: Config) -> Result<(), AgentError> {
    a.check()?;
    let target_config = a.target.config().await?;
    let token = read_token(&a.token_file)?;
    let client = |which| move |source| AgentError::Client { which, source };
    let hub = Hub::new(&a.hub, &a.hub_tls, token, &a.tenant, &a.cluster, a.request_timeout).map_err(client("hub"))?;
    let target_url = target_config.cluster_url.to_string();
    let bearer = match &a.target {
        TargetSource::Url { token_file: Some(path), .. } => {
            Some(Arc::new(TokenFile::open(path, TokenFile::REFRESH).map_err(AgentError::TargetToken)?))
        }
        _ => None,
    };
    let target = Target::new(target_config, a.request_timeout, bearer)
        .map_err(|source| AgentError::TargetClient { url: target_url.clone(), source })?;
    let outbox = Arc::new(Outbox::default());
    let backoff = RetryPolicy { base: a.backoff_base, cap: a.backoff_cap, max_attempts: u32::MAX, jitter: 0.2 };
    tracing::info!(hub = a.hub, target = target_url, cluster = a.cluster, "agent starting");
    let sender = send_loop(hub.clone(), outbox.clone(), a.batch, backoff, a.metrics.clone());
    let watcher = watch_loop(hub, target, outbox, &a, backoff);
    tokio::select! {
        r = sender => r,
        r = watcher => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

fn read_token(path: &Path) -> Result<String, AgentError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| AgentError::TokenUnreadable { path: path.into(), source })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(AgentError::TokenEmpty { path: path.into() });
    }
    Ok(token.to_string())
}

/// Sends pending reports until the hub acknowledges them; backs off while it cannot.
async fn send_loop(
    hub: Hub,
    outbox: Arc<Outbox>,
    batch: usize,
    backoff: RetryPolicy,
    metrics: AgentMetrics,
) -> Result<(), AgentError> {
    let mut failures = 0u32;
    loop {
        let reports = outbox.batch(batch);
        metrics.pending(outbox.len());
        if reports.is_empty() {
            outbox.wait().await;
            continue;
        }
        let sent = reports.len();
        match hub.send(reports).await {
            Ok(acks) => {
                outbox.ack(acks.iter().map(|a| (&a.resource, a.resource_version.as_str())));
                metrics.acknowledged(acks.len(), outbox.len());
                if failures > 0 {
                    tracing::info!(after_failures = failures, "the hub acknowledges again");
                }
                failures = 0;
                let stored = acks.iter().filter(|a| a.result == ReportResult::Stored).count();
                tracing::debug!(
                    sent,
                    acknowledged = acks.len(),
                    stored,
                    pending = outbox.len(),
                    "reports acknowledged"
                );
            }
            Err(e) if hub::is_fatal(&e) => return Err(AgentError::Refused(e)),
            Err(e) => {
                failures = failures.saturating_add(1);
                metrics.not_acknowledged(outbox.len());
                let wait = backoff.next_delay(failures);
                tracing::warn!(error = %describe(&e), retry_in = ?wait, pending = outbox.len(), "reports not acknowledged; will resend");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// What the watcher last put into the outbox for a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Version(String),
    Deleted,
}

/// The kind of a resource: `(apiVersion, kind)`.
type KindId = (String, String);

/// The watched resources of one kind, by `(namespace, name)`.
type Watched = HashMap<ObjectKey, ResourceRef>;

/// A running watch of one kind, and how to tell it which of its resources to report.
struct KindWatch {
    watched: tokio::sync::watch::Sender<Watched>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KindWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Learns from the hub what to watch, and keeps one [`watch_kind`] task per kind.
async fn watch_loop(
    hub: Hub,
    target: Target,
    outbox: Arc<Outbox>,
    a: &Config,
    backoff: RetryPolicy,
) -> Result<(), AgentError> {
    let mut kinds: HashMap<KindId, KindWatch> = HashMap::new();
    let mut failures = 0u32;
    loop {
        let list = match hub.resources().await {
            Ok(list) => list,
            Err(e) if hub::is_fatal(&e) => return Err(AgentError::Refused(e)),
            Err(e) => {
                failures = failures.saturating_add(1);
                a.metrics.hub_answered(false);
                tracing::warn!(error = %describe(&e), "cannot read what to watch from the hub");
                tokio::time::sleep(backoff.next_delay(failures)).await;
                continue;
            }
        };
        failures = 0;
        a.metrics.hub_answered(true);
        let mut by_kind: BTreeMap<KindId, Watched> = BTreeMap::new();
        for r in list {
            let key = (r.namespace.clone(), r.name.clone());
            by_kind.entry((r.api_version.clone(), r.kind.clone())).or_default().insert(key, r);
        }
        kinds.retain(|k, _| by_kind.contains_key(k));
        for (kind, resources) in by_kind {
            match kinds.get(&kind) {
                Some(w) => {
                    w.watched.send_if_modified(|old| std::mem::replace(old, resources.clone()) != resources);
                }
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(resources);
                    let watch =
                        watch_kind(target.clone(), rx, outbox.clone(), a.relist_interval, backoff, a.metrics.clone());
                    kinds.insert(kind, KindWatch { watched: tx, task: tokio::spawn(watch) });
                }
            }
        }
        a.metrics.watching(kinds.len());
        tokio::time::sleep(a.resources_interval).await;
    }
}

/// What one kind's watch knows of the target: every object of the kind, and the
/// newest version it has seen of the collection.
#[derive(Default)]
struct KindState {
    objects: HashMap<ObjectKey, serde_json::Value>,
    resource_version: String,
    seen: HashMap<ResourceRef, Seen>,
}

impl KindState {
    /// Puts a report into the outbox for each watched resource whose state differs
    /// from the last one reported (every one, the first time): the full state after
    /// a (re-)list, including, as deleted, objects that vanished meanwhile.
    fn report_all(&mut self, watched: &Watched, outbox: &Outbox) {
        self.seen.retain(|r, _| watched.get(&(r.namespace.clone(), r.name.clone())) == Some(r));
        for (key, r) in watched {
            let report = match self.objects.get(key) {
                Some(object) => live_report(r, target::version_of(object), LiveState::Present, Some(object.clone())),
                None => live_report(r, self.resource_version.clone(), LiveState::Deleted, None),
            };
            self.report(report, outbox);
        }
    }

    /// Applies one watch event; reports it if it is about a watched resource.
    fn apply(&mut self, event: WatchEvent, watched: &Watched, outbox: &Outbox) {
        let (object, state) = match event {
            WatchEvent::Applied(o) => (o, LiveState::Present),
            WatchEvent::Deleted(o) => (o, LiveState::Deleted),
            WatchEvent::Bookmark(version) => {
                self.resource_version = version;
                return;
            }
            WatchEvent::Gone => return,
        };
        let Some(key) = target::key_of(&object) else { return };
        let version = target::version_of(&object);
        self.resource_version.clone_from(&version);
        let watched = watched.get(&key);
        match state {
            LiveState::Present => {
                self.objects.insert(key, object.clone());
            }
            LiveState::Deleted => {
                self.objects.remove(&key);
            }
        }
        if let Some(r) = watched {
            let object = (state == LiveState::Present).then_some(object);
            self.report(live_report(r, version, state, object), outbox);
        }
    }

    fn report(&mut self, report: LiveReport, outbox: &Outbox) {
        let now = match report.state {
            LiveState::Present => Seen::Version(report.resource_version.clone()),
            LiveState::Deleted => Seen::Deleted,
        };
        if self.seen.get(&report.resource) != Some(&now) {
            self.seen.insert(report.resource.clone(), now);
            outbox.put(report);
        }
    }
}

/// Watches one kind: lists it (the full state), then follows its watch, putting
/// each change of a watched resource into the outbox as it arrives. A watch that
/// ends (every `relist`), breaks or answers `410 Gone` is followed by a re-list.
async fn watch_kind(
    mut target: Target,
    mut watched: tokio::sync::watch::Receiver<Watched>,
    outbox: Arc<Outbox>,
    relist: Duration,
    backoff: RetryPolicy,
    metrics: AgentMetrics,
) {
    let mut state = KindState::default();
    let mut failures = 0u32;
    loop {
        if failures > 0 {
            tokio::time::sleep(backoff.next_delay(failures)).await;
        }
        let Some(kind) = watched.borrow_and_update().values().next().cloned() else { return };
        match follow(&mut target, &kind, &mut watched, &mut state, &outbox, relist).await {
            Ok(()) => failures = 0,
            Err(e) => {
                failures = failures.saturating_add(1);
                metrics.watch_failed();
                tracing::warn!(kind = kind.kind, error = %describe(&e), "cannot watch the target; will re-list");
            }
        }
    }
}

/// One list and the watch that follows it, until the watch ends.
async fn follow(
    target: &mut Target,
    kind: &ResourceRef,
    watched: &mut tokio::sync::watch::Receiver<Watched>,
    state: &mut KindState,
    outbox: &Outbox,
    relist: Duration,
) -> Result<(), TargetError> {
    let listing = target.list(kind).await?;
    state.objects = listing.objects;
    state.resource_version = listing.resource_version;
    state.report_all(&watched.borrow_and_update(), outbox);
    let mut watch = target.watch(kind, &state.resource_version, relist).await?;
    loop {
        tokio::select! {
            event = watch.next() => match event? {
                Some(WatchEvent::Gone) => {
                    tracing::info!(kind = kind.kind, "the watch's version is gone; re-listing");
                    return Ok(());
                }
                Some(event) => state.apply(event, &watched.borrow(), outbox),
                None => return Ok(()),
            },
            changed = watched.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                state.report_all(&watched.borrow_and_update(), outbox);
            }
        }
    }
}

fn live_report(
    r: &ResourceRef,
    resource_version: String,
    state: LiveState,
    object: Option<serde_json::Value>,
) -> LiveReport {
    LiveReport { resource: r.clone(), resource_version, state, object }
}
