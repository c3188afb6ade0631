//! `fleetsync bench …` and `fleetsync sim …` run the `fleetsync-bench` binary, the way
//! `git foo` runs `git-foo`: the benchmarks (and their graphile_worker peer) and the
//! Kubernetes API simulator ship apart, out of the production binary. The arguments
//! after the command are passed on as given; stdin, stdout, stderr and the exit status
//! are the plugin's.

use std::ffi::OsString;
use std::process::{Command, ExitCode};

/// The plugin's file name.
pub const BENCH: &str = "fleetsync-bench";

/// `fleetsync bench ARGS…`: runs `fleetsync-bench ARGS…`.
pub fn run_bench(args: Vec<OsString>) -> ExitCode {
    // clap names the program by argv[0]: usage lines read `fleetsync bench drain`.
    run(Plugin { what: "the benchmarks", arg0: "fleetsync bench", args })
}

/// `fleetsync sim ARGS…`: runs `fleetsync-bench sim ARGS…`.
pub fn run_sim(args: Vec<OsString>) -> ExitCode {
    // Usage lines read `fleetsync sim`.
    let args = std::iter::once(OsString::from("sim")).chain(args).collect();
    run(Plugin { what: "the Kubernetes API simulator and the benchmarks", arg0: "fleetsync", args })
}

/// One run of the plugin.
struct Plugin {
    /// What the plugin is needed for, in the error when it is missing.
    what: &'static str,
    /// The program name it is given, which its usage lines show.
    arg0: &'static str,
    args: Vec<OsString>,
}

/// Runs the plugin found next to this executable, else on `PATH`. On Unix it replaces
/// this process, so signals and the exit status are its own.
fn run(p: Plugin) -> ExitCode {
    let Some(exe) = fleetsync::sibling::find(BENCH) else {
        eprintln!(
            "error: {} ship in the `{BENCH}` binary, which was found neither next to this \
             executable nor on PATH; build it with `cargo build --release -p {BENCH}` (it is put next \
             to `fleetsync` in target/release) or put it on PATH",
            p.what
        );
        return ExitCode::FAILURE;
    };
    let mut cmd = Command::new(&exe);
    cmd.args(p.args);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let e = cmd.arg0(p.arg0).exec();
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
