//! `fleetsync`: the hub (`serve`), the client (`apply`, `get`, `delete`), and `demo`.

mod agent;
mod args;
mod bench;
mod bench_processes;
mod client;
mod demo;
mod drain;
mod engine;
mod output;
mod process;
mod report;
mod serve;
mod sim;
mod stores;

use args::{Cli, Command};
use clap::Parser;
use std::process::ExitCode;

/// mimalloc: a profile of the hub under load showed a quarter of its CPU in glibc's
/// malloc and free (many small allocations per HTTP request). Built with `no_thp`:
/// with transparent huge pages its peak RSS in `bench hive-fleet` doubled.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli.command);
    // Few blocking threads: the SQLite store runs its calls there, on two connections
    // behind locks, so more threads only wait — and each idle one keeps its stack and
    // allocator heap resident (tokio's default of 512 cost `bench hive-fleet` ~400
    // threads and a few hundred MiB of RSS).
    let runtime = match tokio::runtime::Builder::new_multi_thread().max_blocking_threads(16).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(a) => serve::run(a).await.map(|()| true),
            Command::Worker(a) => stores::worker(a).await.map(|()| true),
            Command::Migrate(a) => stores::migrate(a).await.map(|()| true),
            Command::Apply(a) => client::apply(&cli.server, a).await.map(|()| true),
            Command::Get(a) => client::get(&cli.server, a).await.map(|()| true),
            Command::Delete(a) => client::delete(&cli.server, a).await.map(|()| true),
            Command::Demo(a) => demo::run(a).await,
            Command::Sim(a) => sim::run(a).await.map(|()| true),
            Command::Agent(a) => agent::run(a).await.map(|()| true),
            Command::Bench(args::BenchCommand::HiveFleet(a)) => bench::run(a).await,
            Command::Bench(args::BenchCommand::Drain(a)) => drain::run(a).await,
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr; `RUST_LOG` overrides. The hub logs at info, one-shot commands
/// only warn, so their stdout stays clean for scripts.
fn init_tracing(command: &Command) {
    let default = if matches!(command, Command::Serve(_) | Command::Worker(_) | Command::Agent(_)) { "info" } else { "warn" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}
