//! `fleetsync bench …` runs the `fleetsync-bench` binary, the way `git foo` runs
//! `git-foo`: the benchmarks (and their graphile_worker peer) ship apart, out of the
//! production binary. The arguments after `bench` are passed on as given; stdin,
//! stdout, stderr and the exit status are the plugin's.

use std::ffi::OsString;
use std::process::{Command, ExitCode};

/// The plugin's file name.
pub const BENCH: &str = "fleetsync-bench";

/// Runs `fleetsync-bench ARGS…` found next to this executable, else on `PATH`. On
/// Unix the plugin replaces this process, so signals and the exit status are its own.
pub fn run_bench(args: Vec<OsString>) -> ExitCode {
    let Some(exe) = fleetsync::sibling::find(BENCH) else {
        eprintln!(
            "error: the benchmarks ship as the `{BENCH}` binary, which was found neither next to this \
             executable nor on PATH; build it with `cargo build --release -p {BENCH}` (it is put next \
             to `fleetsync` in target/release) or put it on PATH"
        );
        return ExitCode::FAILURE;
    };
    let mut cmd = Command::new(&exe);
    cmd.args(args);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // clap names the program by argv[0]: usage lines read `fleetsync bench drain`.
        let e = cmd.arg0("fleetsync bench").exec();
        eprintln!("error: cannot run {}: {e}", exe.display());
        ExitCode::FAILURE
    }
    #[cfg(not(unix))]
    match cmd.status() {
        Ok(status) => status.code().and_then(|c| u8::try_from(c).ok()).map_or(ExitCode::FAILURE, ExitCode::from),
        Err(e) => {
            eprintln!("error: cannot run {}: {e}", exe.display());
            ExitCode::FAILURE
        }
    }
}
