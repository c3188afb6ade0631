//! The command line of `fleetsync-bench`: the same subcommands and flags as
//! `fleetsync bench …` (which runs this binary), and `sim`, which `fleetsync sim …` runs.

use clap::{Args, Parser, Subcommand, ValueEnum};
use fleetsync::args::EngineArgs;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "fleetsync-bench",
    version,
    about = "fleetsync's benchmarks and its Kubernetes API simulator (also run as `fleetsync bench …` and `fleetsync sim …`)."
)]
pub struct Cli {
    /// The hub's API, for apply, get and delete.
    // Unused here: `fleetsync bench …` accepted this global flag of `fleetsync`, so
    // `fleetsync-bench` takes it too, for the same flags and help.
    #[arg(long, global = true, env = "FLEETSYNC_SERVER", default_value = "http://127.0.0.1:8080")]
    pub server: String,
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The hive-fleet workload through the Kubernetes applier over loopback HTTP.
    HiveFleet(HiveFleetArgs),
    /// The engine alone: items/s through enqueue → claim → complete with no-op applies.
    Drain(DrainArgs),
    /// What a page of the event log costs a tenant with no events while another tenant
    /// has many.
    EventsPage(EventsPageArgs),
    /// Desired state from Git: push → first apply and push → fleet converged, with the
    /// revisions and bytes stored per push.
    Sources(SourcesArgs),
    /// Serve simulated Kubernetes clusters over HTTP (for tests and benchmarks; also
    /// `fleetsync sim`).
    Sim(SimArgs),
    /// One consumer process of `hive-fleet --baseline hive-rabbitmq` (started by it).
    #[command(hide = true)]
    RabbitConsumer(crate::rabbit::consumer::ConsumerArgs),
    /// The publisher process of `hive-fleet --baseline hive-rabbitmq` (started by it).
    #[command(hide = true)]
    RabbitPublisher(crate::rabbit::publisher::PublisherArgs),
}

#[derive(Debug, Args)]
pub struct EventsPageArgs {
    /// Events of the other tenant.
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
    /// Events of the other tenant in the run compared with.
    #[arg(long, default_value_t = 1_000)]
    pub baseline_events: u64,
    /// Requests of each call at each size.
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// Measure on this PostgreSQL (a fresh schema per size, dropped afterwards)
    /// instead of a SQLite file.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Print one JSON object on stdout and nothing else.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Baseline {
    /// Today's controllers: a fixed pool of workers, each applying a whole cluster's
    /// SyncSets one resource after another.
    Hive,
    /// The Hive proposal's design: a RabbitMQ work queue with one message per changed
    /// (cluster, SyncSet), consumer processes that apply and then ack, republish on
    /// failure, and a per-cluster ClusterSync status on the hub's API.
    HiveRabbitmq,
}

#[derive(Debug, Args)]
pub struct SourcesArgs {
    #[arg(long, default_value_t = 1000)]
    pub clusters: usize,
    /// SyncSets, each reading its own directory of the repository.
    #[arg(long, default_value_t = 20)]
    pub syncsets: usize,
    /// Manifests in the repository, spread evenly over the SyncSets' directories.
    #[arg(long, default_value_t = 200)]
    pub manifests: usize,
    /// Commits pushed, one after another, each changing one file.
    #[arg(long, default_value_t = 10)]
    pub pushes: usize,
    /// Multiply the simulated clusters' apply latencies by this.
    #[arg(long, default_value_t = 0.0)]
    pub latency_scale: f64,
    /// Give up on a push (or the first revision) not converged by then.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Print one JSON object on stdout and nothing else.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct HiveFleetArgs {
    #[arg(long, default_value_t = 1000)]
    pub clusters: usize,
    #[arg(long, default_value_t = 60)]
    pub syncsets: usize,
    #[arg(long, default_value_t = 10)]
    pub resources: usize,
    /// Fraction of applies the simulator fails (transiently).
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// Template every resource (`templated: true`: values and the cluster's name and
    /// labels rendered per cluster), to measure what rendering costs.
    #[arg(long)]
    pub templated: bool,
    /// Also run the baseline and report the speed-up.
    #[arg(long, value_enum)]
    pub baseline: Option<Baseline>,
    /// Workers of the baseline pool.
    #[arg(long, default_value_t = 20)]
    pub baseline_workers: usize,
    /// How long the baseline runs; its rate is measured over this window
    /// (`--baseline hive`; hive-rabbitmq runs until converged or --timeout).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub baseline_window: Duration,
    /// Consumer processes of `--baseline hive-rabbitmq` (default: --processes). Each
    /// gets a prefetch of its share of fleetsync's applies in flight in all
    /// (--max-in-flight × --processes), so both sides have the same in-flight limit.
    #[arg(long)]
    pub baseline_consumers: Option<usize>,
    /// `--baseline hive-rabbitmq` with the proposal's dead-letter queue: a message that
    /// failed --baseline-dlq-after times goes there, and a scanner moves it back to the
    /// work queue every --baseline-dlq-scan.
    #[arg(long)]
    pub baseline_dlq: bool,
    #[arg(long, default_value_t = 5)]
    pub baseline_dlq_after: u32,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub baseline_dlq_scan: Duration,
    /// `--baseline hive-rabbitmq` writes each ClusterSync status entry with one JSON
    /// merge patch (no read, no conflict) instead of as the controller does today:
    /// read, change, write conditioned on the version read, again on a conflict.
    #[arg(long)]
    pub baseline_status_patch: bool,
    /// RabbitMQ for `--baseline hive-rabbitmq` (queues of the run's own, deleted
    /// afterwards).
    #[arg(long, env = "FLEETSYNC_BENCH_AMQP_URL", default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub amqp_url: String,
    /// Disturb the run, on both sides: one worker process (and one baseline consumer)
    /// killed with SIGKILL at 30% of the applies and started again, and every fifth
    /// SyncSet edited (revision r2, generation 2) at 50%. Needs --database-url and
    /// --processes 2 or more (the hub's worker processes are what is killed).
    #[arg(long)]
    pub churn: bool,
    /// Use a running `fleetsync sim` at this URL instead of starting one.
    #[arg(long)]
    pub sim: Option<String>,
    /// Multiply every simulated latency by this (only for a sim this command starts).
    #[arg(long, default_value_t = 1.0)]
    pub latency_scale: f64,
    /// Print one JSON object on stdout and nothing else.
    #[arg(long)]
    pub json: bool,
    /// Give up if the fleet has not settled by then.
    #[arg(long, default_value = "20m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// Run the hub as `fleetsync worker` processes on this PostgreSQL (a fresh schema
    /// per run, dropped afterwards) instead of in this process on SQLite.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Worker processes (needs --database-url above 1). Each gets the engine knobs
    /// given here, so --max-in-flight is a per-process limit: to measure scaling, fix
    /// it low enough that the limit, not the CPU, bounds a process's throughput.
    #[arg(long, default_value_t = 1)]
    pub processes: usize,
    /// PostgreSQL connections in each worker process's pool (with --database-url).
    #[arg(long, default_value_t = 16)]
    pub pool_size: usize,
    /// Keep the embedded store in this file (a new one) instead of a temporary one, to
    /// serve the converged fleet afterwards (`fleetsync serve --db FILE`).
    #[arg(long, conflicts_with = "database_url")]
    pub db: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

/// A job queue to run the same drain through, for a ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Peer {
    /// The `graphile_worker` crate (a Rust port of Graphile Worker) on the same
    /// PostgreSQL, in its own schema, with a no-op task.
    GraphileWorker,
}

/// `bench drain`. Its flags and JSON are a fixed interface: scripts depend on them.
#[derive(Debug, Args)]
#[command(after_help = "Times the drain only (from the workers' start until every item is committed); \
the enqueue before it is timed apart and reported beside it.")]
pub struct DrainArgs {
    /// PostgreSQL to drain on (a fresh schema per run, dropped afterwards); without it,
    /// the embedded SQLite store in a temporary file (WAL, synchronous=FULL).
    #[arg(long)]
    pub database_url: Option<String>,
    /// Work items (keys) to enqueue and drain. The default drains in ~3 s on SQLite and
    /// ~10 s on PostgreSQL (~10 s more with the peer) on a 2-core machine.
    #[arg(long, default_value_t = 50_000)]
    pub items: usize,
    /// Also drain the same number of items through this peer (needs --database-url).
    #[arg(long, value_enum)]
    pub peer: Option<Peer>,
    /// Print one JSON object on stdout and nothing else.
    #[arg(long)]
    pub json: bool,
    /// PostgreSQL connections in fleetsync's pool (and in the peer's).
    #[arg(long, default_value_t = 16)]
    pub pool_size: usize,
    /// Give up if a drain has not finished by then.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// After the drain, this many churn rounds (needs --database-url): each re-applies
    /// every item's SyncSet at a new revision and drains it again, while another
    /// connection holds a transaction open so vacuum cannot remove a dead row. Reports
    /// each round's rate and the loss of the last against the first. 12 rounds of the
    /// default 50,000 items are 600,000 key runs: an hour of a 60,000-key fleet (1,000
    /// clusters × 60 SyncSets) whose every key changes every 6 minutes.
    #[arg(long, default_value_t = 0)]
    pub churn: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
}

#[derive(Debug, Args)]
pub struct SimArgs {
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: String,
    /// Multiply every simulated latency by this (1 = the hive-fleet distribution).
    #[arg(long, default_value_t = 1.0)]
    pub latency_scale: f64,
    /// Fraction of applies and deletes that fail.
    #[arg(long, default_value_t = 0.0)]
    pub fail_rate: f64,
    /// The HTTP status of an injected failure.
    #[arg(long, default_value_t = 500)]
    pub fail_status: u16,
}
