//! `fleetsync-bench`: fleetsync's benchmarks and its Kubernetes API simulator, out of
//! the production binary. Run as `fleetsync-bench hive-fleet …` / `fleetsync-bench
//! drain …` / `fleetsync-bench sim …`, or through the main binary as `fleetsync bench
//! …` and `fleetsync sim …`, which run this one with the same arguments.

mod args;
mod drain;
mod events_page;
mod fleetsync_exe;
mod hive_fleet;
mod processes;
mod rabbit;
mod sim;
mod sources;

use args::{BenchCommand, Cli};
use clap::Parser;
use std::process::ExitCode;

/// The hub under measurement runs in this process (hive-fleet on SQLite, drain), so
/// it gets the production binary's allocator: mimalloc, built with `no_thp` (see
/// `crates/cli/src/main.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Only warnings, so stdout stays clean for scripts.
    let _telemetry = fleetsync::init_tracing("warn", fleetsync::args::LogFormat::Text);
    fleetsync::run_command(async move {
        match cli.command {
            BenchCommand::HiveFleet(a) => hive_fleet::run(a).await,
            BenchCommand::Drain(a) => drain::run(a).await,
            BenchCommand::EventsPage(a) => events_page::run(a).await,
            BenchCommand::Sim(a) => sim::run(a).await.map(|()| true),
            BenchCommand::Sources(a) => sources::run(a).await,
            BenchCommand::RabbitConsumer(a) => rabbit::consumer::run(a).await.map(|()| true),
            BenchCommand::RabbitPublisher(a) => rabbit::publisher::run(a).await.map(|()| true),
        }
    })
}
