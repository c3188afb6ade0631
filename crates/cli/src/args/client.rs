//! What the client commands take: how they reach the hub (`ConnArgs`), and `apply`, `diff`,
//! `get`, `delete`, `describe`, `wait`, `rollout` and `retry`.

use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

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
    /// Compare what this cluster gets from each SyncSet of the files (rendered for it)
    /// with what it gets from the hub's, instead of the objects themselves.
    #[arg(long, value_name = "CLUSTER")]
    pub cluster: Option<String>,
    #[command(flatten)]
    pub conn: ConnArgs,
}

/// What `get` lists; each also by its singular and, as kubectl's `deploy`, a short name.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Resource {
    /// Clusters (`cl`).
    #[value(aliases = ["cluster", "cl"])]
    Clusters,
    /// SyncSets (`ss`).
    #[value(aliases = ["syncset", "ss"])]
    Syncsets,
    /// Secrets, values never shown.
    #[value(alias = "secret")]
    Secrets,
    /// Sources of both kinds (GitRepositories and OCIRepositories), with a KIND column (`src`).
    #[value(aliases = ["source", "src"])]
    Sources,
    /// GitRepositories: where SyncSets read their resources, and the revision stored (`gitrepo`).
    #[value(name = "gitrepositories", aliases = ["gitrepository", "gitrepo"])]
    GitRepositories,
    /// OCIRepositories: artifacts of a registry SyncSets read their resources from (`ocirepo`).
    #[value(name = "ocirepositories", aliases = ["ocirepository", "ocirepo"])]
    OciRepositories,
    /// Notifiers: where each event of the tenant is sent, and which events.
    #[value(alias = "notifier")]
    Notifiers,
    Status,
    /// Events (`ev`).
    #[value(aliases = ["event", "ev"])]
    Events,
    /// Worker processes: shards owned and keys in flight.
    #[value(alias = "member")]
    Members,
}

impl Resource {
    /// The kinds of objects the resource lists (none: status, members, events).
    pub fn kinds(self) -> &'static [fleetsync_model::Kind] {
        use fleetsync_model::Kind;
        match self {
            Resource::Clusters => &[Kind::Cluster],
            Resource::Syncsets => &[Kind::SyncSet],
            Resource::Secrets => &[Kind::Secret],
            Resource::Sources => &[Kind::GitRepository, Kind::OCIRepository],
            Resource::GitRepositories => &[Kind::GitRepository],
            Resource::OciRepositories => &[Kind::OCIRepository],
            Resource::Notifiers => &[Kind::Notifier],
            Resource::Status | Resource::Members | Resource::Events => &[],
        }
    }
}

/// `-o` of `get`: a format, or a template over the JSON `-o json` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Format(Format),
    /// `jsonpath=TEMPLATE`.
    JsonPath(String),
    /// `custom-columns=HEADER:PATH,…`.
    CustomColumns(String),
}

impl Output {
    /// What is read and printed: a template reads the JSON.
    pub fn format(&self) -> Format {
        match self {
            Output::Format(f) => *f,
            Output::JsonPath(_) | Output::CustomColumns(_) => Format::Json,
        }
    }

    pub fn parse(s: &str) -> Result<Output, String> {
        if let Some(template) = s.strip_prefix("jsonpath=") {
            return Ok(Output::JsonPath(template.to_string()));
        }
        if let Some(spec) = s.strip_prefix("custom-columns=") {
            return Ok(Output::CustomColumns(spec.to_string()));
        }
        Format::from_str(s, true).map(Output::Format).map_err(|_| {
            format!("{s:?}: use table, wide, json, yaml, name, jsonpath=TEMPLATE or custom-columns=HEADER:PATH,…")
        })
    }
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
    #[arg(add = crate::completer::object_names())]
    pub name: Option<String>,
    /// `table`, `wide`, `json`, `yaml`, `name`, `jsonpath=TEMPLATE` (kubectl's, e.g.
    /// `{.items[*].metadata.name}`) or `custom-columns=HEADER:PATH,…`.
    #[arg(short = 'o', long = "output", value_parser = Output::parse, default_value = "table")]
    pub output: Output,
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
    /// Objects: only those whose labels match this selector, in kubectl's syntax
    /// (`env=prod,tier in (a,b),!canary`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Status: only keys in these phases, comma-separated (`Failed,Parked`).
    #[arg(long)]
    pub phase: Option<String>,
    /// Status: only keys that have not applied their SyncSet's generation yet.
    #[arg(long)]
    pub stale: bool,
    /// Print at most this many items of a list (the first ones, in the list's order);
    /// the hub is read only until they are in.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,
    /// Read lists from the hub in pages of this many items (1 to 5000), as kubectl's
    /// `--chunk-size`; the output holds them all (or `--limit`).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u16).range(1..=5000))]
    pub chunk_size: u16,
    /// Print tables without their header line.
    #[arg(long)]
    pub no_headers: bool,
    /// Add a LABELS column (clusters show theirs always).
    #[arg(long)]
    pub show_labels: bool,
    /// Sort a list by the value this path (kubectl's, e.g. `.metadata.generation`)
    /// finds in each item: numbers by value, then text.
    #[arg(long, value_name = "JSONPATH")]
    pub sort_by: Option<String>,
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// `cluster`, `syncset`, `secret`, `gitrepository` or `ocirepository` (with a name or
    /// -l), unless -f is given.
    pub kind: Option<String>,
    #[arg(add = crate::completer::object_names())]
    pub name: Option<String>,
    /// Every object of the kind whose labels match this selector, in kubectl's syntax
    /// (`env=prod,tier in (a,b),!canary`).
    #[arg(short = 'l', long, conflicts_with_all = ["name", "files"])]
    pub selector: Option<String>,
    /// Delete every object in these files or directories (as `apply -f` reads them):
    /// SyncSets first, then, once their cleanup on the Clusters to delete is done,
    /// Clusters, then Secrets.
    #[arg(short = 'f', long = "filename", conflicts_with_all = ["kind", "name"])]
    pub files: Vec<PathBuf>,
    /// Read the directories given with -f recursively.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// An object that is not there is not an error (nothing to delete).
    #[arg(long)]
    pub ignore_not_found: bool,
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
    /// `cluster`, `syncset`, `source` (a GitRepository or OCIRepository) or `notifier`.
    #[arg(value_parser = ["cluster", "clusters", "cl", "syncset", "syncsets", "ss", "source", "sources", "src", "gitrepository", "gitrepositories", "gitrepo", "ocirepository", "ocirepositories", "ocirepo", "notifier", "notifiers"])]
    pub kind: String,
    #[arg(add = crate::completer::object_names())]
    pub name: String,
    #[command(flatten)]
    pub at: TenantArgs,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// `syncset/NAME`.
    pub target: String,
    /// The cluster to render for.
    #[arg(long)]
    pub cluster: String,
    /// `yaml` (the resources as YAML documents after a comment with the hash) or `json`
    /// (the hub's answer whole).
    #[arg(short = 'o', long = "output", value_parser = ["yaml", "json"], default_value = "yaml")]
    pub output: String,
    #[command(flatten)]
    pub at: TenantArgs,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// What to wait for: `syncset/NAME` (every cluster it selects applied its current
    /// generation, its rollout completed) or `cluster/NAME` (Ready); with -l, the kind
    /// alone (`syncsets`, `clusters`).
    pub target: String,
    /// Wait for every object of the kind whose labels match this selector, in kubectl's
    /// syntax (`team=web,region in (eu,us)`).
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// The condition: `condition=Applied` for a SyncSet, `condition=Ready` for a
    /// Cluster, or `delete` (any kind: until the object is gone).
    #[arg(long = "for", value_name = "condition=NAME|delete")]
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

/// What `reconcile` runs now.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReconcileKind {
    /// A GitRepository or OCIRepository: fetched at once, not at its next interval.
    #[value(aliases = ["gitrepository", "git", "ocirepository", "oci"])]
    Source,
    /// A Notifier: sends what it has not sent now, not after its backoff (also a parked one).
    Notifier,
}

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    pub kind: ReconcileKind,
    pub name: String,
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
