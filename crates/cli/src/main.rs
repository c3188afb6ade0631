//! `fleetsync`: the hub (`serve`), the client (`apply`, `get`, `delete`), and `demo`.
//! `bench` and `sim` run the `fleetsync-bench` binary ([`plugin`]).

mod about;
mod access;
mod agent;
mod client;
mod complete_names;
mod context;
mod contexts;
mod delete;
mod demo;
mod describe;
mod details;
mod diff;
mod diff_cluster;
mod events;
mod inputs;
mod plugin;
mod render;
mod retry;
mod rollout;
mod serve;
mod status;
mod stores;
mod tables;
mod tenants;
mod token;
mod wait;

use clap::Parser;
use fleetsync::args::{Cli, Command, TokenCommand};
use fleetsync::{args, engine, output, process, report};
use std::process::ExitCode;

/// mimalloc: a profile of the hub under load showed a quarter of its CPU in glibc's
/// malloc and free (many small allocations per HTTP request). Built with `no_thp`:
/// with transparent huge pages its peak RSS in `bench hive-fleet` doubled.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // A shell asking for completions (`COMPLETE=bash fleetsync -- …`) is answered here,
    // and the process ends.
    fleetsync::completer::set_lister(complete_names::list);
    clap_complete::CompleteEnv::with_factory(<Cli as clap::CommandFactory>::command).complete();
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(a) => return plugin::run_bench(a.args),
        Command::Sim(a) => return plugin::run_sim(a.args),
        _ => {}
    }
    let _telemetry = init_tracing(&cli.command, cli.log_format);
    let command = match cli.command {
        // Exits as `kubectl diff` does: 1 says differences were found, 2 an error.
        Command::Diff(a) => return diff::run(a),
        other => other,
    };
    fleetsync::run_command(async move {
        match command {
            Command::Serve(a) => serve::run(*a).await.map(|()| true),
            Command::Worker(a) => stores::worker(a).await.map(|()| true),
            Command::Migrate(a) => stores::migrate(a).await.map(|()| true),
            Command::Apply(a) => client::apply(a).await.map(|()| true),
            Command::Get(a) => client::get(a).await.map(|()| true),
            Command::Delete(a) => delete::delete(a).await.map(|()| true),
            Command::Describe(a) => describe::describe(a).await.map(|()| true),
            Command::Render(a) => render::render(a).await.map(|()| true),
            Command::Wait(a) => wait::wait(a).await.map(|()| true),
            Command::Retry(a) => retry::retry(a).await.map(|()| true),
            Command::Reconcile(a) => retry::reconcile(a).await.map(|()| true),
            Command::Rollout(c) => rollout::run(c).await.map(|()| true),
            Command::Token(TokenCommand::Create(a)) => token::create(a).await.map(|()| true),
            Command::Token(TokenCommand::List(a)) => token::list(a).await.map(|()| true),
            Command::Token(TokenCommand::Revoke(a)) => token::revoke(a).await.map(|()| true),
            Command::Demo(a) => demo::run(a).await,
            Command::Agent(a) => agent::run(a).await.map(|()| true),
            Command::Config(c) => contexts::config(c).map(|()| true),
            Command::Completion(a) => about::completion(a).map(|()| true),
            Command::Version(a) => about::version(a).await.map(|()| true),
            Command::Bench(_) | Command::Sim(_) | Command::Diff(_) => unreachable!("run above"),
        }
    })
}

/// The hub logs at info, one-shot commands only warn, so their stdout stays clean for
/// scripts.
fn init_tracing(command: &Command, format: args::LogFormat) -> fleetsync::Telemetry {
    let default =
        if matches!(command, Command::Serve(_) | Command::Worker(_) | Command::Agent(_)) { "info" } else { "warn" };
    fleetsync::init_tracing(default, format)
}
