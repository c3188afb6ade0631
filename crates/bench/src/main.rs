//! `fleetsync-bench`: fleetsync's benchmarks, out of the production binary. Run as
//! `fleetsync-bench hive-fleet …` / `fleetsync-bench drain …`, or through the main
//! binary as `fleetsync bench …`, which runs this one with the same arguments.

mod args;
mod drain;
mod fleetsync_exe;
mod hive_fleet;
mod processes;

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
    fleetsync::init_tracing("warn");
    fleetsync::run_command(async move {
        match cli.command {
            BenchCommand::HiveFleet(a) => hive_fleet::run(a).await,
            BenchCommand::Drain(a) => drain::run(a).await,
        }
    })
}
