//! The hub's processes: `serve`, `worker` and `demo`, with their limits, quotas, Kubernetes
//! source, event retention, engine knobs, https and access settings.

use super::store::{PgArgs, SealArgs, StoreArgs};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub pg: PgArgs,
    #[command(flatten)]
    pub seal: SealArgs,
    /// Where the worker serves /livez, /readyz (the store is ready) and /metrics, with
    /// no credential: bind the pod's address, not a public one. None unless given.
    #[arg(long, env = "FLEETSYNC_LISTEN")]
    pub listen: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Where the HTTP API listens.
    #[arg(long, env = "FLEETSYNC_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: String,
    /// A cluster with neither a successful run nor a report from its agent for this
    /// long is counted stale. Keep it above --resync-every, which re-applies every key
    /// (and so gives each healthy cluster a successful run) that often.
    #[arg(long, env = "FLEETSYNC_STALE_AFTER", default_value = "3h", value_parser = humantime::parse_duration)]
    pub stale_after: Duration,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Fraction of simulated applies that fail (clusters with a `simulator` endpoint).
    #[arg(long, env = "FLEETSYNC_SIM_FAIL_RATE", default_value_t = 0.0)]
    pub sim_fail_rate: f64,
    #[command(flatten)]
    pub retention: RetentionArgs,
    #[command(flatten)]
    pub kube_source: KubeSourceArgs,
    #[command(flatten)]
    pub access: AccessArgs,
    #[command(flatten)]
    pub quotas: QuotaArgs,
    #[command(flatten)]
    pub tls: ServeTlsArgs,
    #[command(flatten)]
    pub limits: ServeLimitsArgs,
}

/// Bounds on the API's connections and event watches, whatever clients do.
#[derive(Debug, Clone, Args)]
pub struct ServeLimitsArgs {
    /// Connections open at once; at the cap a new one takes the slot of the longest-idle
    /// one. Keep it below the process's file-descriptor limit.
    #[arg(long, env = "FLEETSYNC_MAX_CONNECTIONS", default_value_t = 1000)]
    pub max_connections: usize,
    /// How long a client may take to send a whole request head.
    #[arg(long, env = "FLEETSYNC_HEADER_READ_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may stay open with no request.
    #[arg(long, env = "FLEETSYNC_IDLE_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// How long a client may take to send a request's body (then 408).
    #[arg(long, env = "FLEETSYNC_BODY_READ_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub body_read_timeout: Duration,
    /// Event watches open at once.
    #[arg(long, env = "FLEETSYNC_MAX_WATCHES", default_value_t = 500)]
    pub max_watches: usize,
    /// Event watches open at once by one caller.
    #[arg(long, env = "FLEETSYNC_MAX_WATCHES_PER_IDENTITY", default_value_t = 100)]
    pub max_watches_per_identity: usize,
    /// Event watches open at once that carry one tenant's events (a watch counts for
    /// each tenant its caller reads; a fleet-admin's for none).
    #[arg(long, env = "FLEETSYNC_MAX_WATCHES_PER_TENANT", default_value_t = 250)]
    pub max_watches_per_tenant: usize,
}

/// What each tenant may hold: `clusters`, `syncsets`, `keys` (a SyncSet on a cluster)
/// and `bytes` (its documents as stored), as `NAME=NUMBER,...`; sizes take Ki, Mi, Gi.
/// An apply that would exceed one is refused whole (403). No limits unless given.
#[derive(Debug, Clone, Args)]
pub struct QuotaArgs {
    /// The quota of every tenant, e.g. `clusters=1000,keys=100000,bytes=256Mi`.
    #[arg(long = "quota", env = "FLEETSYNC_QUOTA", value_name = "LIMITS")]
    pub default: Option<fleetsync_store::Quota>,
    /// One tenant's limits in place of the default's, as `TENANT:LIMITS`, e.g.
    /// `team-a:keys=1000000` (repeat for more tenants).
    #[arg(long = "tenant-quota", value_name = "TENANT:LIMITS", value_parser = tenant_quota)]
    pub tenants: Vec<(String, fleetsync_store::Quota)>,
}

impl QuotaArgs {
    pub fn quotas(&self) -> fleetsync_store::Quotas {
        fleetsync_store::Quotas {
            default: self.default.unwrap_or_default(),
            tenants: self.tenants.iter().cloned().collect(),
        }
    }
}

fn tenant_quota(s: &str) -> Result<(String, fleetsync_store::Quota), String> {
    let (tenant, limits) = s.split_once(':').ok_or("expected TENANT:LIMITS, e.g. team-a:keys=1000")?;
    fleetsync_model::names::check_dns1123_label(tenant).map_err(|e| format!("tenant {tenant:?}: {e}"))?;
    Ok((tenant.to_string(), limits.parse()?))
}

/// SyncSets and Clusters kept as custom resources (`fleetsync.io/v1`) in a hub
/// Kubernetes cluster, watched into the store, with status written back.
#[derive(Debug, Clone, Args)]
pub struct KubeSourceArgs {
    /// The hub cluster's API server, reached without credentials (`fleetsync sim`,
    /// or a local `kubectl proxy`). Off when neither this, --kube-source nor
    /// --kube-source-context is given.
    #[arg(long, env = "FLEETSYNC_KUBE_SOURCE_URL")]
    pub kube_source_url: Option<String>,
    /// Watch the hub cluster with credentials found as kubectl finds them: KUBECONFIG
    /// or ~/.kube/config, else the pod's service account.
    #[arg(long, env = "FLEETSYNC_KUBE_SOURCE", conflicts_with = "kube_source_url")]
    pub kube_source: bool,
    /// The kubeconfig context of the hub cluster (implies --kube-source).
    #[arg(long, env = "FLEETSYNC_KUBE_SOURCE_CONTEXT", conflicts_with = "kube_source_url")]
    pub kube_source_context: Option<String>,
    /// Watch one namespace (tenant) only; all when not given.
    #[arg(long, env = "FLEETSYNC_KUBE_SOURCE_NAMESPACE")]
    pub kube_source_namespace: Option<String>,
    /// After its own status write, how long the source waits for the watch to deliver
    /// that version before it acts on the object again.
    #[arg(long, env = "FLEETSYNC_KUBE_SOURCE_OWN_WRITE_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub kube_source_own_write_timeout: Duration,
}

/// How much of the event log the hub keeps, of each tenant on its own (one tenant's
/// changes never push out another's). A consumer whose cursor falls behind what is
/// kept gets 410 Gone and re-lists.
#[derive(Debug, Clone, Args)]
pub struct RetentionArgs {
    /// Keep at most this many events of each tenant ("0": no limit by count).
    #[arg(long, env = "FLEETSYNC_EVENT_RETENTION_COUNT", default_value_t = 1_000_000)]
    pub event_retention_count: u64,
    /// Drop a tenant's events older than this ("0s": no limit by age).
    #[arg(long, env = "FLEETSYNC_EVENT_RETENTION_AGE", default_value = "7d", value_parser = humantime::parse_duration)]
    pub event_retention_age: Duration,
    /// How often the hub trims the log.
    #[arg(long, env = "FLEETSYNC_EVENT_TRIM_EVERY", default_value = "1m", value_parser = humantime::parse_duration)]
    pub event_trim_every: Duration,
}

/// The engine's tuning knobs, shared by `serve`, `worker`, `demo` and `bench`.
#[derive(Debug, Clone, Args)]
pub struct EngineArgs {
    /// This process's id among the members and on the leases it takes; must be unique
    /// among the processes on one store (default: host-pid-random, new at each start).
    #[arg(long, env = "FLEETSYNC_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Applies (keys) in flight at once in this process.
    #[arg(long, env = "FLEETSYNC_MAX_IN_FLIGHT", default_value_t = 4096)]
    pub max_in_flight: usize,
    /// Keys of one cluster in flight at once in this process, so one slow cluster
    /// cannot take every slot ("0" disables the limit).
    #[arg(long, env = "FLEETSYNC_MAX_PER_CLUSTER", default_value_t = 256)]
    pub max_per_cluster: u32,
    /// How long a claimed key stays leased without renewal.
    #[arg(long, env = "FLEETSYNC_LEASE_TTL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub lease_ttl: Duration,
    /// How often held leases are renewed.
    #[arg(long, env = "FLEETSYNC_RENEW_EVERY", default_value = "10s", value_parser = humantime::parse_duration)]
    pub renew_every: Duration,
    /// How long a process counts as a member without a heartbeat (it beats every third
    /// of it); then its shards move to the other processes.
    #[arg(long, env = "FLEETSYNC_MEMBER_TTL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub member_ttl: Duration,
    /// Delay after the first failure; doubles each time.
    #[arg(long, env = "FLEETSYNC_BACKOFF_BASE", default_value = "1s", value_parser = humantime::parse_duration)]
    pub backoff_base: Duration,
    /// Longest delay between retries.
    #[arg(long, env = "FLEETSYNC_BACKOFF_CAP", default_value = "6m", value_parser = humantime::parse_duration)]
    pub backoff_cap: Duration,
    /// Failed attempts of one generation before the key is parked.
    #[arg(long, env = "FLEETSYNC_MAX_ATTEMPTS", default_value_t = 10)]
    pub max_attempts: u32,
    /// Re-apply everything this often ("0s" disables it).
    #[arg(long, env = "FLEETSYNC_RESYNC_EVERY", default_value = "2h", value_parser = humantime::parse_duration)]
    pub resync_every: Duration,
    /// Safety-net poll when nothing wakes the workers.
    #[arg(long, env = "FLEETSYNC_POLL_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,
    /// With free slots and nothing ready in its own shards, a process takes keys of
    /// other processes' shards that have been due this long ("0s": never).
    #[arg(long, env = "FLEETSYNC_STEAL_AFTER", default_value = "1s", value_parser = humantime::parse_duration)]
    pub steal_after: Duration,
    /// A host name or CIDR cluster endpoints (and sources and notifiers) may reach although
    /// the built-in egress deny refuses it (loopback, link-local, cloud metadata); repeatable
    /// or comma-separated.
    #[arg(long, env = "FLEETSYNC_EGRESS_ALLOW", value_delimiter = ',', value_name = "HOST|CIDR")]
    pub egress_allow: Vec<String>,
    /// A host name or CIDR cluster endpoints (and sources and notifiers) may never reach
    /// (wins over --egress-allow).
    #[arg(long, env = "FLEETSYNC_EGRESS_DENY", value_delimiter = ',', value_name = "HOST|CIDR")]
    pub egress_deny: Vec<String>,
    /// Let GitRepositories name `file://` URLs, which read this machine's disk: for
    /// tests and local use, never on a shared hub.
    #[arg(long, env = "FLEETSYNC_ALLOW_LOCAL_SOURCES")]
    pub allow_local_sources: bool,
}

impl EngineArgs {
    /// These knobs as command-line flags, for a child process (`bench hive-fleet
    /// --processes` starts `fleetsync worker`s with the knobs it was given). Every
    /// field is written, so the child's environment cannot override them; the worker
    /// id is left out, since each child needs its own.
    pub fn to_args(&self) -> Vec<String> {
        let d = |v: Duration| humantime::format_duration(v).to_string();
        [
            ("--max-in-flight", self.max_in_flight.to_string()),
            ("--max-per-cluster", self.max_per_cluster.to_string()),
            ("--lease-ttl", d(self.lease_ttl)),
            ("--renew-every", d(self.renew_every)),
            ("--member-ttl", d(self.member_ttl)),
            ("--backoff-base", d(self.backoff_base)),
            ("--backoff-cap", d(self.backoff_cap)),
            ("--max-attempts", self.max_attempts.to_string()),
            ("--resync-every", d(self.resync_every)),
            ("--poll-interval", d(self.poll_interval)),
            ("--steal-after", d(self.steal_after)),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .chain(self.egress_allow.iter().flat_map(|v| ["--egress-allow".to_string(), v.clone()]))
        .chain(self.egress_deny.iter().flat_map(|v| ["--egress-deny".to_string(), v.clone()]))
        .chain(self.allow_local_sources.then(|| "--allow-local-sources".to_string()))
        .collect()
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    #[arg(long, default_value_t = 100)]
    pub clusters: usize,
    #[arg(long, default_value_t = 60)]
    pub syncsets: usize,
    #[arg(long, default_value_t = 10)]
    pub resources: usize,
    /// Fraction of applies that fail transiently.
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// Print one JSON object on stdout and nothing else.
    #[arg(long)]
    pub json: bool,
    /// Multiply every simulated latency by this (1 = the hive-fleet distribution).
    #[arg(long, default_value_t = 1.0)]
    pub latency_scale: f64,
    /// Give up if the fleet has not settled by then.
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Keep the store in this file instead of a temporary one.
    #[arg(long)]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// https for `fleetsync serve`'s API: a certificate and key, re-read when they change.
#[derive(Debug, Clone, Args)]
pub struct ServeTlsArgs {
    /// The API's certificate chain (PEM); with --tls-private-key-file the API serves
    /// https instead of http.
    #[arg(long, env = "FLEETSYNC_TLS_CERT_FILE", requires = "tls_private_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The private key of --tls-cert-file (PEM: PKCS#8, RSA or SEC1).
    #[arg(long, env = "FLEETSYNC_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// CA certificates (PEM) that client certificates are verified against; clients
    /// without a certificate still connect (needs --tls-cert-file).
    #[arg(long, env = "FLEETSYNC_CLIENT_CA_FILE", requires = "tls_cert_file")]
    pub client_ca_file: Option<PathBuf>,
    /// How often the TLS files are checked for changes (a rotated certificate is
    /// served to new connections).
    #[arg(long, env = "FLEETSYNC_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub tls_reload_interval: Duration,
}

/// Who may call the hub, beyond the tokens it issues.
#[derive(Debug, Clone, Args)]
pub struct AccessArgs {
    /// `/metrics` needs a credential (any but an agent's).
    #[arg(long, env = "FLEETSYNC_METRICS_REQUIRE_AUTH")]
    pub metrics_require_auth: bool,
    /// A tenant whose Clusters may use the `inCluster` endpoint, i.e. apply to the hub's
    /// own cluster with the hub's service account (repeat, or separate with commas).
    #[arg(long = "allow-in-cluster-tenant", env = "FLEETSYNC_ALLOW_IN_CLUSTER_TENANTS", value_delimiter = ',')]
    pub allow_in_cluster_tenants: Vec<String>,
    /// Accept JWTs of this OIDC issuer (its `iss`), for single sign-on.
    #[arg(long, env = "FLEETSYNC_OIDC_ISSUER", requires_all = ["oidc_audience"])]
    pub oidc_issuer: Option<String>,
    /// The audience (`aud`) the JWTs must be for.
    #[arg(long, env = "FLEETSYNC_OIDC_AUDIENCE", requires = "oidc_issuer")]
    pub oidc_audience: Option<String>,
    /// The issuer's signing keys, as a JWKS file.
    #[arg(long, env = "FLEETSYNC_OIDC_JWKS_FILE", conflicts_with = "oidc_jwks_url", requires = "oidc_issuer")]
    pub oidc_jwks_file: Option<PathBuf>,
    /// The issuer's signing keys, as a JWKS URL (its `jwks_uri`).
    #[arg(long, env = "FLEETSYNC_OIDC_JWKS_URL", requires = "oidc_issuer")]
    pub oidc_jwks_url: Option<String>,
    /// The claim that lists the caller's grants (`team-a:editor`, `fleet-admin`).
    #[arg(long, env = "FLEETSYNC_OIDC_GRANTS_CLAIM")]
    pub oidc_grants_claim: Option<String>,
}
