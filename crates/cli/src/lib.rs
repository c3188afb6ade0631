//! What the `fleetsync` binary shares with `fleetsync-bench` (crates/bench): the
//! command line's engine knobs and their store and runtime configuration, the report
//! of `demo` and the benchmarks, output helpers, process usage, and how both binaries
//! start their runtime and logs.

pub mod args;
pub mod completer;
pub mod engine;
pub mod jsonpath;
#[cfg(feature = "otel")]
pub mod otel;
pub mod output;
pub mod process;
pub mod report;
pub mod sibling;

/// The async runtime of both binaries. Few blocking threads: the SQLite store runs its
/// calls there, on two connections behind locks, so more threads only wait — and each
/// idle one keeps its stack and allocator heap resident (tokio's default of 512 cost
/// `bench hive-fleet` ~400 threads and a few hundred MiB of RSS).
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().max_blocking_threads(16).enable_all().build()
}

/// Runs a command on [`runtime`] and turns its result into the process's exit code:
/// `Ok(true)` succeeds, `Ok(false)` fails quietly (the command said why), and an error
/// is printed with its causes.
pub fn run_command(command: impl std::future::Future<Output = anyhow::Result<bool>>) -> std::process::ExitCode {
    use std::process::ExitCode;
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(command) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        // The reader of standard output went away (`| head`): it has what it wanted.
        Err(e) if output::is_closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr at `default` level (`RUST_LOG` overrides), as text — coloured only
/// when stderr is a terminal and `NO_COLOR` is not set ([`coloured`]), so files and
/// pipes get no escape codes — or as one JSON
/// object per line. With the `otel` feature, spans are also exported over OpenTelemetry
/// when an endpoint is configured ([`otel`]). Keep what this returns until the process
/// ends: dropping it sends the spans still batched.
/// Whether text logs are coloured: on a terminal, unless `NO_COLOR` is set to anything
/// but the empty string (<https://no-color.org>).
fn coloured(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[must_use = "dropping it stops the export of spans"]
pub fn init_tracing(default: &str, format: args::LogFormat) -> Telemetry {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        args::LogFormat::Text => {
            logs.with_ansi(coloured(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref())).boxed()
        }
        args::LogFormat::Json => logs.json().with_current_span(true).boxed(),
    };
    let registry = tracing_subscriber::registry().with(filter).with(logs);
    #[cfg(feature = "otel")]
    {
        let (layer, exporter) = otel::layer().unzip();
        registry.with(layer).init();
        Telemetry { _exporter: exporter }
    }
    #[cfg(not(feature = "otel"))]
    {
        registry.init();
        Telemetry {}
    }
}

/// What [`init_tracing`] set up that needs the end of the process (see there).
pub struct Telemetry {
    #[cfg(feature = "otel")]
    _exporter: Option<otel::Exporter>,
}

#[cfg(test)]
mod tests {
    use super::coloured;
    use std::ffi::OsStr;

    #[test]
    fn no_color_turns_colour_off_on_a_terminal() {
        assert!(coloured(true, None));
        assert!(coloured(true, Some(OsStr::new(""))), "set but empty: ignored, as no-color.org says");
        assert!(!coloured(true, Some(OsStr::new("1"))));
        assert!(!coloured(false, None), "never into files and pipes");
    }
}
