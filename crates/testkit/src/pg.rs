//! A throwaway PostgreSQL server, for tests that stop, restart or crash the database
//! and so must never touch the shared one.
//!
//! [`ThrowawayPg::start`] runs `initdb` into a fresh directory under the system temp
//! directory and starts the server on a free port of 127.0.0.1, with its Unix socket
//! inside that directory, trust authentication and `fsync` on. When the current user is
//! root the binaries run as the `postgres` OS user (PostgreSQL refuses to run as root),
//! which then owns the directory. Dropping the value stops the server and removes the
//! directory, also when the test panics; directories left by test processes that were
//! killed outright are swept (their servers stopped) by the next `start`.
//!
//! The binaries come from `FLEETSYNC_PG_BIN` (a directory) if set, else the newest
//! `/usr/lib/postgresql/*/bin`, else `PATH`. Every call blocks (it runs `pg_ctl`); from
//! an async test call it through `tokio::task::block_in_place` or `spawn_blocking`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How `pg_ctl` stops the server (its `-m` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Disconnects clients, rolls back open transactions, checkpoints: an orderly
    /// restart such as an operator or a package upgrade does.
    Fast,
    /// Kills the server processes without a checkpoint: on the next start PostgreSQL
    /// recovers from its WAL, as after a crash or power loss.
    Immediate,
}

impl StopMode {
    fn arg(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

/// Why a throwaway server could not be set up, started, stopped or restarted.
#[derive(Debug, thiserror::Error)]
pub enum ThrowawayError {
    /// A step on the server's directory failed.
    #[error("{step} {}: {source}", path.display())]
    Dir {
        step: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A program could not be run at all.
    #[error("running {}: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A program ran and failed; what it printed.
    #[error("{command} failed ({status}): {stdout}{stderr}")]
    Failed { command: String, status: ExitStatus, stdout: String, stderr: String },
    /// `pg_ctl` failed; with the server's log.
    #[error("{cause}\n--- server log ---\n{log}")]
    Server {
        #[source]
        cause: Box<ThrowawayError>,
        log: String,
    },
    #[error("no `postgres` OS user to run PostgreSQL as (id {flag} postgres: {stderr})")]
    NoPostgresUser {
        flag: &'static str,
        stderr: String,
        #[source]
        source: std::num::ParseIntError,
    },
    #[error("finding a free port: {0}")]
    FreePort(#[source] std::io::Error),
}

/// A PostgreSQL server of this test's own; stopped and deleted on drop.
#[derive(Debug)]
pub struct ThrowawayPg {
    /// Holds `data/`, the server log and the Unix socket.
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    /// Run the binaries as the `postgres` OS user (we are root).
    as_postgres: bool,
}

const DIR_PREFIX: &str = "fleetsync-pg-";
const PG_CTL_WAIT_SECS: &str = "60";

impl ThrowawayPg {
    /// Creates and starts a new server; fails with the server log if it cannot.
    pub fn start() -> Result<ThrowawayPg, ThrowawayError> {
        let pg = ThrowawayPg::create()?;
        let data = pg.data();
        pg.run(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
        )?;
        pg.start_on_a_free_port()
    }

    /// Creates and starts a hot standby of `primary`: a base backup of it, streaming its
    /// WAL as the client `name` (the name `synchronous_standby_names` lists). The
    /// primary's `initdb` trusts replication connections from 127.0.0.1.
    pub fn standby_of(primary: &ThrowawayPg, name: &str) -> Result<ThrowawayPg, ThrowawayError> {
        let pg = ThrowawayPg::create()?;
        let (data, port) = (pg.data(), primary.port.to_string());
        let from = ["-h", "127.0.0.1", "-p", &port, "-U", "postgres"];
        pg.run("pg_basebackup", &[&["-D", &data, "-X", "stream", "-R", "--no-sync"][..], &from[..]].concat())?;
        let conninfo = format!("host=127.0.0.1 port={port} user=postgres application_name={name}");
        let conf = pg.dir.join("data/postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&conf).map_err(|source| ThrowawayError::Dir {
            step: "reading",
            path: conf.clone(),
            source,
        })?;
        text.push_str(&format!("primary_conninfo = '{conninfo}'\n"));
        std::fs::write(&conf, text).map_err(|source| ThrowawayError::Dir { step: "writing", path: conf, source })?;
        pg.start_on_a_free_port()
    }

    /// Sets a server setting (`ALTER SYSTEM`) and reloads the configuration.
    pub fn set(&self, setting: &str, value: &str) -> Result<(), ThrowawayError> {
        self.psql(&format!("ALTER SYSTEM SET {setting} = '{value}'"))?;
        self.psql("SELECT pg_reload_conf()").map(drop)
    }

    /// Runs one SQL statement with `psql` as `postgres`; its rows, unaligned.
    pub fn psql(&self, sql: &str) -> Result<String, ThrowawayError> {
        let port = self.port.to_string();
        let args = ["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres", "-XAtqc", sql];
        self.run("psql", &args)
    }

    /// Promotes a standby to a primary (`pg_ctl promote`), once it accepts writes.
    pub fn promote(&self) -> Result<(), ThrowawayError> {
        self.pg_ctl(&["promote"])
    }

    /// A new directory for a server, owned by the user that runs it.
    fn create() -> Result<ThrowawayPg, ThrowawayError> {
        sweep_abandoned();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let bin = bin_dir();
        let as_postgres = running_as_root();
        let name = format!("{DIR_PREFIX}{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let dir = std::env::temp_dir().join(name);
        std::fs::create_dir(&dir).map_err(|source| ThrowawayError::Dir {
            step: "creating",
            path: dir.clone(),
            source,
        })?;
        let pg = ThrowawayPg { dir, bin, port: 0, as_postgres };
        if as_postgres {
            let (uid, gid) = (id_of("-u")?, id_of("-g")?);
            std::os::unix::fs::chown(&pg.dir, Some(uid), Some(gid)).map_err(|source| ThrowawayError::Dir {
                step: "chown",
                path: pg.dir.clone(),
                source,
            })?;
        }
        Ok(pg)
    }

    /// Starts the server in this directory on a free port of 127.0.0.1. The port is
    /// free when we look; another process may take it before the server binds it, so
    /// this tries a few.
    fn start_on_a_free_port(mut self) -> Result<ThrowawayPg, ThrowawayError> {
        let mut tries = 1;
        loop {
            self.port = free_port()?;
            match self.pg_ctl(&["start"]) {
                Ok(()) => return Ok(self),
                Err(e) if tries == 5 => return Err(e),
                Err(_) => tries += 1,
            }
        }
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `pg_ctl restart -m fast`; returns how long the server was unavailable for (stop
    /// and start, as `pg_ctl` waits for both).
    pub fn restart(&self) -> Result<Duration, ThrowawayError> {
        self.restart_with(StopMode::Fast)
    }

    /// `pg_ctl restart -m MODE`; returns how long it took.
    pub fn restart_with(&self, mode: StopMode) -> Result<Duration, ThrowawayError> {
        let start = Instant::now();
        self.pg_ctl(&["-m", mode.arg(), "restart"])?;
        Ok(start.elapsed())
    }

    /// Stops the server (it can be started again with [`start_again`](Self::start_again)).
    pub fn stop(&self, mode: StopMode) -> Result<(), ThrowawayError> {
        self.pg_ctl(&["-m", mode.arg(), "stop"])
    }

    /// Starts the server again after [`stop`](Self::stop), on the same port.
    pub fn start_again(&self) -> Result<(), ThrowawayError> {
        self.pg_ctl(&["start"])
    }

    /// The server's log so far, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    /// Runs `pg_ctl ACTION` on this server with its options, waiting for it to finish.
    fn pg_ctl(&self, action: &[&str]) -> Result<(), ThrowawayError> {
        let (data, log) = (self.data(), self.dir.join("log").display().to_string());
        let options = format!("-c listen_addresses=127.0.0.1 -p {} -k {}", self.port, self.dir.display());
        let mut args = vec!["-D", &data, "-l", &log, "-w", "-t", PG_CTL_WAIT_SECS, "-o", &options];
        args.extend_from_slice(action);
        self.run("pg_ctl", &args).map(drop).map_err(|e| ThrowawayError::Server { cause: Box::new(e), log: self.log() })
    }

    /// Runs one of the PostgreSQL binaries (as `postgres` if we are root); what it
    /// printed.
    fn run(&self, program: &str, args: &[&str]) -> Result<String, ThrowawayError> {
        let exe = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        // The postgres user may not be allowed into the test's working directory.
        let out = cmd
            .args(args)
            .current_dir(&self.dir)
            .output()
            .map_err(|source| ThrowawayError::Spawn { program: exe, source })?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(ThrowawayError::Failed {
                command: format!("{program} {}", args.join(" ")),
                status: out.status,
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            })
        }
    }
}

impl Drop for ThrowawayPg {
    fn drop(&mut self) {
        if self.port != 0 {
            let _ = self.pg_ctl(&["-m", "immediate", "stop"]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Stops the servers of, and removes, directories whose test process is gone (killed
/// before its `Drop` could run).
fn sweep_abandoned() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(DIR_PREFIX).and_then(|rest| rest.split('-').next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = entry.path();
        let data = dir.join("data");
        if data.join("postmaster.pid").exists() {
            let owner = ThrowawayPg { dir: dir.clone(), bin: bin_dir(), port: 0, as_postgres: running_as_root() };
            let _ =
                owner.run("pg_ctl", &["-D", &data.display().to_string(), "-w", "-t", "30", "-m", "immediate", "stop"]);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Where `initdb` and `pg_ctl` are.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FLEETSYNC_PG_BIN") {
        return PathBuf::from(dir);
    }
    let newest = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("pg_ctl").exists())
        .max_by_key(|(version, _)| *version);
    // An empty directory means "look the name up in PATH".
    newest.map(|(_, bin)| bin).unwrap_or_default()
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `id -u postgres` / `id -g postgres`.
fn id_of(flag: &'static str) -> Result<u32, ThrowawayError> {
    let out = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .map_err(|source| ThrowawayError::Spawn { program: "id".into(), source })?;
    String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|source| ThrowawayError::NoPostgresUser {
        flag,
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        source,
    })
}

fn free_port() -> Result<u16, ThrowawayError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(ThrowawayError::FreePort)?;
    listener.local_addr().map(|a| a.port()).map_err(ThrowawayError::FreePort)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    fn accepts(port: u16) -> bool {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    }

    #[test]
    fn starts_restarts_and_cleans_up() {
        let pg = ThrowawayPg::start().expect("start a throwaway server");
        let (port, dir) = (pg.port(), pg.dir.clone());
        assert!(accepts(port), "listening on {}", pg.url());
        assert!(dir.join("data").join("PG_VERSION").exists());
        pg.restart().expect("restart -m fast");
        assert!(accepts(port), "listening again after the restart");
        pg.restart_with(StopMode::Immediate).expect("restart -m immediate");
        assert!(accepts(port), "listening again after crash recovery");
        drop(pg);
        assert!(!dir.exists(), "directory removed");
        assert!(!accepts(port), "server stopped");
    }
}
