//! The command line, with every knob also settable by an environment variable.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(name = "fleetsync", version, about = "Applies desired state to a fleet of targets, at fleet scale.")]
pub struct Cli {
    /// How logs are written to stderr: `text` (coloured only on a terminal) or `json`
    /// (one object per line, for log collectors). Levels: `RUST_LOG`.
    #[arg(long, global = true, env = "FLEETSYNC_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

/// The format of the logs (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the hub: the HTTP API and the workers (SQLite by default, or PostgreSQL).
    Serve(Box<ServeArgs>),
    /// Run workers only (no API) against a shared PostgreSQL store.
    Worker(WorkerArgs),
    /// Bring the PostgreSQL schema up to date and exit.
    Migrate(MigrateArgs),
    /// Create or update the Clusters, SyncSets and Secrets of YAML or JSON files (idempotent).
    Apply(ApplyArgs),
    /// Show how the objects of files differ from the hub's, as a unified diff per object
    /// (a server dry run; Secret values are never shown). Exit 0: no differences, 1:
    /// differences, 2: an error.
    Diff(DiffArgs),
    /// Show clusters, syncsets, secrets, status, events or members.
    Get(GetArgs),
    /// Delete a cluster, syncset or secret, by name, or what files name.
    Delete(DeleteArgs),
    /// Show a cluster or syncset in detail: metadata, spec, its keys' phases, the first
    /// failures, recent events.
    Describe(DescribeArgs),
    /// Wait until a SyncSet has applied everywhere (or a Cluster is Ready).
    Wait(WaitArgs),
    /// Run a SyncSet on a cluster again now (also a parked one).
    Retry(RetryArgs),
    /// Show or steer a SyncSet's staged rollout (`spec.rollout`).
    #[command(subcommand)]
    Rollout(RolloutCommand),
    /// Run an embedded hub against a simulated fleet and report how fast it converges.
    Demo(DemoArgs),
    /// Serve simulated Kubernetes clusters over HTTP (for tests and benchmarks): runs
    /// `fleetsync-bench sim` (built apart) with the arguments that follow.
    #[command(disable_help_flag = true)]
    Sim(PluginArgs),
    /// Run beside a cluster: report the live state of what fleetsync applied there.
    Agent(AgentArgs),
    /// Benchmarks: runs `fleetsync-bench` (built apart) with the arguments that follow.
    #[command(disable_help_flag = true)]
    Bench(PluginArgs),
    /// Issue, list and revoke the hub's bearer tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Print a completion script for a shell (e.g. `source <(fleetsync completion bash)`).
    Completion(CompletionArgs),
    /// Print the version of this client and, when it can tell, of the hub.
    Version(VersionArgs),
}

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// How a client reaches the hub and who it is there: flags, then environment, then
/// the current context of the config file.
#[derive(Debug, Clone, Default, Args)]
pub struct ConnArgs {
    /// The hub's API (default: the current context's, else http://127.0.0.1:8080).
    #[arg(long, env = "FLEETSYNC_SERVER")]
    pub server: Option<String>,
    /// How long one request to the hub may take, answer included (e.g. 30s, 500ms;
    /// default 30s); for `get events --watch` and `get status --watch`, how long the hub
    /// may take to start answering.
    #[arg(long, env = "FLEETSYNC_REQUEST_TIMEOUT", value_parser = humantime::parse_duration)]
    pub request_timeout: Option<Duration>,
    /// The bearer token to send (default: the context's, or for a hub on this machine
    /// the token `fleetsync serve` wrote beside its database).
    #[arg(long, env = "FLEETSYNC_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The context of the config file to use (default: its current-context).
    #[arg(long, env = "FLEETSYNC_CONTEXT")]
    pub context: Option<String>,
    /// Trust only this CA's certificates for the hub's https (PEM).
    #[arg(long, env = "FLEETSYNC_CERTIFICATE_AUTHORITY")]
    pub certificate_authority: Option<PathBuf>,
    /// Do not check the hub's certificate (insecure: for tests only).
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// A client certificate (PEM) for a hub that takes mTLS identities; with --client-key.
    #[arg(long, env = "FLEETSYNC_CLIENT_CERTIFICATE", requires = "client_key")]
    pub client_certificate: Option<PathBuf>,
    #[arg(long, env = "FLEETSYNC_CLIENT_KEY", requires = "client_certificate")]
    pub client_key: Option<PathBuf>,
}

impl ConnArgs {
    /// The timeout of each request to the hub.
    pub fn timeout(&self) -> Duration {
        self.request_timeout.unwrap_or(Duration::from_secs(30))
    }
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Issue a token and print it alone on standard output (the only time it is shown).
    Create(TokenCreateArgs),
    /// The tokens: name, grant, expiry, issuer (never the tokens themselves).
    List(TokenListArgs),
    /// Revoke a token by name: it is refused from the next request on.
    Revoke(TokenRevokeArgs),
}

/// Where token commands act: on the store itself (`--db` or `--database-url`, for the
/// operator of the hub) or, with neither, through the hub's API as the caller.
#[derive(Debug, Clone, Args)]
pub struct TokenStoreArgs {
    /// The SQLite file of an embedded hub's store.
    #[arg(long, env = "FLEETSYNC_DB")]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub pg: PgArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    #[command(flatten)]
    pub store: TokenStoreArgs,
    /// The tenant the token is for (fleet-admin: every tenant).
    #[arg(long)]
    pub tenant: String,
    /// viewer, editor, admin, fleet-admin or agent.
    #[arg(long, required_unless_present = "agent")]
    pub role: Option<String>,
    /// An agent credential (the role `agent`) for the cluster given by --cluster.
    #[arg(long, requires = "cluster")]
    pub agent: bool,
    /// The cluster of an agent credential.
    #[arg(long)]
    pub cluster: Option<String>,
    /// How long it is valid (e.g. 30d, 12h); default: until revoked.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Option<Duration>,
    /// Its name (unique in its tenant; default: made from the grant).
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct TokenListArgs {
    #[command(flatten)]
    pub store: TokenStoreArgs,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    pub name: String,
    /// The tenant of the token (of its grant): needed only when tokens of that name are
    /// in several tenants you administer.
    #[arg(long)]
    pub tenant: Option<String>,
    #[command(flatten)]
    pub store: TokenStoreArgs,
}

/// Where the store is: a SQLite file (the default) or a PostgreSQL database.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// The SQLite file of the embedded store (when no --database-url is given).
    #[arg(long, env = "FLEETSYNC_DB", default_value = "fleetsync.db")]
    pub db: PathBuf,
    #[command(flatten)]
    pub pg: PgArgs,
    #[command(flatten)]
    pub seal: SealArgs,
}

/// What Secrets are sealed with at rest, in either store.
#[derive(Debug, Clone, Args)]
pub struct SealArgs {
    /// A file of keys that seal Secret values in the store (AES-256-GCM), one a line:
    /// `[NAME:]BASE64` of 32 random bytes (`head -c 32 /dev/urandom | base64`). The first
    /// key seals; every key opens. At start the hub seals again every Secret not sealed
    /// with the first key (a rotation), and refuses to start if one does not open.
    /// Without it, Secret values are kept in clear.
    #[arg(long, env = "FLEETSYNC_ENCRYPTION_KEY_FILE", value_name = "FILE")]
    pub encryption_key_file: Option<PathBuf>,
}

/// A PostgreSQL store: a URL (or key=value string) plus the usual PG* variables.
#[derive(Debug, Clone, Args)]
pub struct PgArgs {
    /// e.g. postgres://user@host:5432/db; unset parts come from PGHOST, PGUSER, … .
    #[arg(long, env = "FLEETSYNC_DATABASE_URL")]
    pub database_url: Option<String>,
    /// The schema fleetsync's tables live in (created if missing).
    #[arg(long, env = "FLEETSYNC_DATABASE_SCHEMA")]
    pub schema: Option<String>,
    /// Connections in the pool.
    #[arg(long, env = "FLEETSYNC_DATABASE_POOL", default_value_t = 16)]
    pub pool_size: usize,
    /// Do not migrate at start (run `fleetsync migrate` instead).
    #[arg(long)]
    pub no_migrate: bool,
}

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
pub struct MigrateArgs {
    /// e.g. postgres://user@host:5432/db; unset parts come from PGHOST, PGUSER, … .
    #[arg(long, env = "FLEETSYNC_DATABASE_URL")]
    pub database_url: Option<String>,
    /// The schema fleetsync's tables live in (created if missing).
    #[arg(long, env = "FLEETSYNC_DATABASE_SCHEMA")]
    pub schema: Option<String>,
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
    /// A host name or CIDR cluster endpoints may reach although the built-in egress
    /// deny refuses it (loopback, link-local, cloud metadata); repeatable or comma-separated.
    #[arg(long, env = "FLEETSYNC_EGRESS_ALLOW", value_delimiter = ',', value_name = "HOST|CIDR")]
    pub egress_allow: Vec<String>,
    /// A host name or CIDR cluster endpoints may never reach (wins over --egress-allow).
    #[arg(long, env = "FLEETSYNC_EGRESS_DENY", value_delimiter = ',', value_name = "HOST|CIDR")]
    pub egress_deny: Vec<String>,
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
        .collect()
    }
}

/// `bench …` and `sim …`: every argument after the command, as given, for the
/// `fleetsync-bench` plugin.
#[derive(Debug, Args)]
pub struct PluginArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    pub args: Vec<std::ffi::OsString>,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A YAML or JSON file of Clusters, SyncSets and Secrets (a `kind: List` stands for
    /// its items), a directory of them (.yaml, .yml, .json, in name order), or - for
    /// standard input; repeat for more. All are applied in one transaction.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Read the directories given with -f recursively.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// `server`: the hub runs the whole apply (rights, quotas, what would change) and
    /// writes nothing; `client`: only check the files here, without the hub; `none`:
    /// apply.
    #[arg(long, value_enum, default_value_t = DryRun::None, require_equals = true, value_name = "none|client|server")]
    pub dry_run: DryRun,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// `apply --dry-run=…`, as kubectl spells it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum DryRun {
    #[default]
    None,
    Client,
    Server,
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The files, directories or - (standard input) to compare with the hub, as
    /// `apply -f` reads them; repeat for more.
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<PathBuf>,
    /// Read the directories given with -f recursively.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Resource {
    #[value(alias = "cluster")]
    Clusters,
    #[value(alias = "syncset")]
    Syncsets,
    /// Secrets, values never shown.
    #[value(alias = "secret")]
    Secrets,
    Status,
    #[value(alias = "event")]
    Events,
    /// Worker processes: shards owned and keys in flight.
    #[value(alias = "member")]
    Members,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Table,
    /// The table with more columns (clusters, syncsets, status).
    Wide,
    Json,
    Yaml,
    /// `kind/name` per line (Clusters, SyncSets and Secrets), for scripts.
    Name,
}

#[derive(Debug, Args)]
pub struct GetArgs {
    pub resource: Resource,
    /// One object by name (for status: a cluster, rolled up).
    pub name: Option<String>,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Default: the context's tenant, else `default`.
    #[arg(short = 'n', long, alias = "namespace")]
    pub tenant: Option<String>,
    /// Every tenant the caller can see (its grants; for a fleet-admin, every tenant
    /// named in the event log), with a TENANT column.
    #[arg(short = 'A', long, conflicts_with = "tenant")]
    pub all_tenants: bool,
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Events: keep following the log and print each new event as it is committed,
    /// from now on unless --after or --since says otherwise (reconnects, resuming from
    /// the last event seen, when the hub restarts). Status: print it again after each
    /// change.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Events: only those after this sequence number (a cursor), oldest first.
    #[arg(long)]
    pub after: Option<u64>,
    /// Events: only those of this last while (e.g. 10m, 2h), newest first (with
    /// --watch: oldest first, then following). Without it or --after: the newest 10,000.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<Duration>,
    /// Clusters: only those whose labels match this selector, in kubectl's syntax
    /// (`env=prod,tier in (a,b),!canary`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Status: only keys in these phases, comma-separated (`Failed,Parked`).
    #[arg(long)]
    pub phase: Option<String>,
    /// Status: only keys that have not applied their SyncSet's generation yet.
    #[arg(long)]
    pub stale: bool,
    /// Lists are read from the hub in pages of this many items (1 to 5000); the output
    /// holds them all.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u16).range(1..=5000))]
    pub limit: u16,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// `cluster`, `syncset` or `secret` (with a name), unless -f is given.
    pub kind: Option<String>,
    pub name: Option<String>,
    /// Delete every object in these files or directories (as `apply -f` reads them):
    /// SyncSets first, then, once their cleanup on the Clusters to delete is done,
    /// Clusters, then Secrets.
    #[arg(short = 'f', long = "filename", conflicts_with_all = ["kind", "name"])]
    pub files: Vec<PathBuf>,
    /// Read the directories given with -f recursively.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// With -f: how long to wait for the deleted SyncSets' cleanup on the Clusters
    /// about to be deleted (past it, those Clusters and the Secrets are left in place).
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub cleanup_timeout: Duration,
    /// Default: the context's tenant, else `default`.
    #[arg(short = 'n', long, alias = "namespace")]
    pub tenant: Option<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// Where a command about one object of one tenant acts.
#[derive(Debug, Clone, Args)]
pub struct TenantArgs {
    /// Default: the context's tenant, else `default`.
    #[arg(short = 'n', long, alias = "namespace")]
    pub tenant: Option<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct DescribeArgs {
    /// `cluster` or `syncset`.
    #[arg(value_parser = ["cluster", "clusters", "syncset", "syncsets"])]
    pub kind: String,
    pub name: String,
    #[command(flatten)]
    pub at: TenantArgs,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// What to wait for: `syncset/NAME` (every cluster it selects applied its current
    /// generation, its rollout completed) or `cluster/NAME` (Ready).
    pub target: String,
    /// The condition: `condition=Applied` for a SyncSet, `condition=Ready` for a Cluster.
    #[arg(long = "for", value_name = "condition=NAME")]
    pub condition: String,
    /// Give up after this long, exiting non-zero.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Count a SyncSet that selects no cluster as applied (by default `wait` fails at
    /// once: it would apply nothing anywhere).
    #[arg(long)]
    pub allow_empty: bool,
    #[command(flatten)]
    pub at: TenantArgs,
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Phase, current step, revision, and per step how many clusters are updated,
    /// healthy, failed and pending.
    Status(RolloutArgs),
    /// Start no further step until resumed.
    Pause(RolloutArgs),
    /// Go on after a pause, or judge a failed step again.
    Resume(RolloutArgs),
    /// Pass the current step's wait (a manual promote or minSuccessTime) once it is healthy.
    Promote(RolloutArgs),
    /// Roll back to the stable revision now.
    Abort(RolloutArgs),
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// The SyncSet.
    pub syncset: String,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
    #[command(flatten)]
    pub at: TenantArgs,
}

#[derive(Debug, Args)]
pub struct RetryArgs {
    pub cluster: String,
    pub syncset: String,
    #[command(flatten)]
    pub at: TenantArgs,
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

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The hub's API.
    #[arg(long, env = "FLEETSYNC_AGENT_HUB")]
    pub hub: String,
    #[arg(long, env = "FLEETSYNC_AGENT_TENANT", default_value = "default")]
    pub tenant: String,
    /// The cluster this agent reports for (its token must be that cluster's).
    #[arg(long, env = "FLEETSYNC_AGENT_CLUSTER")]
    pub cluster: String,
    /// A file holding the cluster's agent credential (`fleetsync token create --agent
    /// --tenant T --cluster C`).
    #[arg(long, env = "FLEETSYNC_AGENT_TOKEN_FILE")]
    pub token_file: PathBuf,
    /// The cluster's Kubernetes API, e.g. http://HOST:PORT/clusters/NAME of `fleetsync sim`,
    /// with the --target-* flags. Without it, the agent finds its cluster as kubectl
    /// does: --kubeconfig (or KUBECONFIG, or ~/.kube/config), else the pod's service account.
    #[arg(long, env = "FLEETSYNC_AGENT_TARGET")]
    pub target: Option<String>,
    /// A kubeconfig naming the cluster and the agent's credentials there (its current
    /// context, or --context); default: KUBECONFIG, else ~/.kube/config, else the
    /// pod's service account.
    #[arg(long, env = "FLEETSYNC_AGENT_KUBECONFIG", conflicts_with = "target")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use (default: its current-context).
    #[arg(long, env = "FLEETSYNC_AGENT_CONTEXT", conflicts_with = "target")]
    pub context: Option<String>,
    /// How long one watch of a kind lasts before the agent lists the kind again in
    /// full (a safety net: changes arrive through the watch at once).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub relist_interval: Duration,
    /// How often the list of resources to watch is read from the hub again.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub resources_interval: Duration,
    /// Most reports in one request to the hub.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// The first wait before resending reports the hub did not acknowledge (doubles
    /// with each failure, up to --backoff-cap).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub backoff_base: Duration,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub backoff_cap: Duration,
    /// How long one request (to the hub or the target) may take.
    #[arg(long, env = "FLEETSYNC_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Where the agent serves /livez, /readyz (its last exchange with the hub
    /// succeeded) and /metrics, with no credential: bind the pod's address, not a
    /// public one. None unless given.
    #[arg(long, env = "FLEETSYNC_AGENT_LISTEN")]
    pub listen: Option<String>,
    #[command(flatten)]
    pub tls: AgentTlsArgs,
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

/// How `fleetsync agent` speaks https to the hub and to its target.
#[derive(Debug, Clone, Args)]
pub struct AgentTlsArgs {
    /// Trust only the CA certificates (PEM) in this file for the hub's certificate
    /// (default: the system's roots).
    #[arg(long, env = "FLEETSYNC_AGENT_CERTIFICATE_AUTHORITY")]
    pub certificate_authority: Option<PathBuf>,
    /// Do not verify the hub's certificate (insecure: anyone may pose as the hub).
    #[arg(long, env = "FLEETSYNC_AGENT_INSECURE_SKIP_TLS_VERIFY")]
    pub insecure_skip_tls_verify: bool,
    /// A client certificate (PEM) to present to the hub, with --client-key.
    #[arg(long, env = "FLEETSYNC_AGENT_CLIENT_CERTIFICATE", requires = "client_key")]
    pub client_certificate: Option<PathBuf>,
    /// The private key (PEM) of --client-certificate.
    #[arg(long, env = "FLEETSYNC_AGENT_CLIENT_KEY", requires = "client_certificate")]
    pub client_key: Option<PathBuf>,
    /// Trust only the CA certificates (PEM) in this file for the --target API server.
    #[arg(long, env = "FLEETSYNC_AGENT_TARGET_CERTIFICATE_AUTHORITY", requires = "target")]
    pub target_certificate_authority: Option<PathBuf>,
    /// Do not verify the --target API server's certificate (insecure).
    #[arg(long, env = "FLEETSYNC_AGENT_TARGET_INSECURE_SKIP_TLS_VERIFY", requires = "target")]
    pub target_insecure_skip_tls_verify: bool,
    /// A file holding a bearer token for the --target API server (e.g. a Kubernetes
    /// service-account token); read again each minute, so a rotated token is used.
    #[arg(long, env = "FLEETSYNC_AGENT_TARGET_TOKEN_FILE", requires = "target")]
    pub target_token_file: Option<PathBuf>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_knobs_survive_the_trip_to_a_child_process() {
        let given = [
            "fleetsync",
            "worker",
            "--max-in-flight",
            "7",
            "--max-per-cluster",
            "0",
            "--lease-ttl",
            "2s",
            "--renew-every",
            "500ms",
            "--member-ttl",
            "1s 250ms",
            "--backoff-base",
            "3s",
            "--backoff-cap",
            "1m",
            "--max-attempts",
            "4",
            "--resync-every",
            "0s",
            "--poll-interval",
            "40ms",
            "--steal-after",
            "250ms",
            "--worker-id",
            "w-1",
        ];
        let Command::Worker(w) = Cli::parse_from(given).command else { panic!("a worker") };
        let forwarded: Vec<String> =
            ["fleetsync".to_string(), "worker".to_string()].into_iter().chain(w.engine.to_args()).collect();
        let Command::Worker(back) = Cli::parse_from(forwarded).command else { panic!("a worker") };
        let expected = EngineArgs { worker_id: None, ..w.engine };
        assert_eq!(format!("{:?}", back.engine), format!("{expected:?}"));
    }
}
