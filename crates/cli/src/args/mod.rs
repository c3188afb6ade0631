//! The command line, with every knob also settable by an environment variable.

use clap::{Args, Parser, Subcommand, ValueEnum};

mod agent;
mod client;
mod config;
mod hub;
mod store;
mod tokens;

pub use agent::*;
pub use client::*;
pub use config::*;
pub use hub::*;
pub use store::*;
pub use tokens::*;

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
    /// Show a SyncSet's resources as one cluster gets them (a templated SyncSet rendered
    /// for it), with the rendering's hash.
    Render(RenderArgs),
    /// Wait until a SyncSet has applied everywhere (or a Cluster is Ready).
    Wait(WaitArgs),
    /// Run a SyncSet on a cluster again now (also a parked one).
    Retry(RetryArgs),
    /// Fetch a source now (`reconcile source NAME`), rather than at its next interval.
    Reconcile(ReconcileArgs),
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
    /// Show, switch and set the contexts of the config file (as `kubectl config`).
    #[command(subcommand)]
    Config(ConfigCommand),
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

/// `bench …` and `sim …`: every argument after the command, as given, for the
/// `fleetsync-bench` plugin.
#[derive(Debug, Args)]
pub struct PluginArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    pub args: Vec<std::ffi::OsString>,
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
