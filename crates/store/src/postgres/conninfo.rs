//! Connection settings, after PostgreSQL's conventions.
//!
//! The URL (`postgres://user:password@host:port/db?option=…`) or a `key=value`
//! connection string is parsed by `tokio-postgres`. What it leaves unset comes from the
//! usual environment variables, as with libpq: `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGPASSWORD`, `PGDATABASE`, `PGOPTIONS`, `PGAPPNAME`, `PGCONNECT_TIMEOUT` and
//! `PGSSLMODE`. Then fleetsync's defaults: host `localhost` (libpq would try its Unix
//! socket first; give `host=/var/run/postgresql` for that), user = the OS user,
//! application name `fleetsync`, connect timeout 10 s, and TCP keepalives after 30 s
//! idle so a dead peer is noticed within about a minute. Not supported: TLS
//! (`sslmode=require` is refused with a clear error; `prefer`, the default, connects
//! without it), `.pgpass` and service files.
//!
//! A schema, if given, becomes the session's `search_path` (through the startup
//! `options`), so every table fleetsync uses lives in it.

use crate::{Result, StoreError};
use std::time::Duration;
use tokio_postgres::config::SslMode;
use tokio_postgres::Config;

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// tokio-postgres' own default keepalive idle time; a config still at it was not set.
const TOKIO_POSTGRES_KEEPALIVE_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// Settings from `url`, then the process's `PG*` environment variables.
pub(super) fn config(url: &str, schema: Option<&str>) -> Result<Config> {
    config_with(url, schema, |name| std::env::var(name).ok().filter(|v| !v.is_empty()))
}

/// Like [`config`], with the environment given (for tests).
pub(super) fn config_with(url: &str, schema: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Result<Config> {
    let invalid = |message: String| StoreError::Backend { step: "reading the database URL", message };
    let mut cfg: Config = url.trim().parse().map_err(|e: tokio_postgres::Error| {
        invalid(super::describe(&e))
    })?;
    if cfg.get_hosts().is_empty() {
        let hosts = env("PGHOST").unwrap_or_else(|| "localhost".into());
        for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            cfg.host(host);
        }
    }
    if cfg.get_ports().is_empty() {
        if let Some(port) = env("PGPORT") {
            for p in port.split(',').map(str::trim) {
                let p = p.parse::<u16>().map_err(|_| invalid(format!("invalid PGPORT {port:?}: not a port number")))?;
                cfg.port(p);
            }
        }
    }
    if cfg.get_user().is_none() {
        if let Some(user) = env("PGUSER") {
            cfg.user(user);
        }
    }
    if cfg.get_password().is_none() {
        if let Some(password) = env("PGPASSWORD") {
            cfg.password(password);
        }
    }
    if cfg.get_dbname().is_none() {
        if let Some(db) = env("PGDATABASE") {
            cfg.dbname(db);
        }
    }
    if cfg.get_application_name().is_none() {
        cfg.application_name(env("PGAPPNAME").unwrap_or_else(|| "fleetsync".into()));
    }
    if cfg.get_connect_timeout().is_none() {
        let timeout = match env("PGCONNECT_TIMEOUT") {
            Some(s) => Duration::from_secs(
                s.trim().parse::<u64>().map_err(|_| invalid(format!("invalid PGCONNECT_TIMEOUT {s:?}: not a number of seconds")))?,
            ),
            None => DEFAULT_CONNECT_TIMEOUT,
        };
        cfg.connect_timeout(timeout);
    }
    if cfg.get_ssl_mode() == SslMode::Prefer {
        match env("PGSSLMODE").as_deref() {
            None | Some("prefer" | "allow") => {}
            Some("disable") => {
                cfg.ssl_mode(SslMode::Disable);
            }
            Some(other) => return Err(invalid(format!("PGSSLMODE={other} needs TLS, which this build does not support"))),
        }
    }
    if cfg.get_ssl_mode() == SslMode::Require {
        return Err(invalid("sslmode=require needs TLS, which this build does not support".into()));
    }
    if cfg.get_keepalives_idle() == TOKIO_POSTGRES_KEEPALIVE_IDLE {
        cfg.keepalives_idle(KEEPALIVE_IDLE);
        cfg.keepalives_interval(KEEPALIVE_INTERVAL);
        cfg.keepalives_retries(3);
    }
    let mut options: Vec<String> = cfg.get_options().map(str::to_string).into_iter().collect();
    if options.is_empty() {
        options.extend(env("PGOPTIONS"));
    }
    if let Some(schema) = schema {
        check_schema_name(schema)?;
        options.push(format!("-c search_path={schema}"));
    }
    if !options.is_empty() {
        cfg.options(options.join(" "));
    }
    Ok(cfg)
}

/// Schema names are plain lower-case identifiers, so they need no quoting anywhere.
pub(super) fn check_schema_name(schema: &str) -> Result<()> {
    let mut chars = schema.chars();
    let ok = schema.len() <= 63
        && chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Backend {
            step: "reading the database schema name",
            message: format!(
                "invalid schema name {schema:?}: use at most 63 lower-case letters, digits and underscores, not starting with a digit"
            ),
        })
    }
}

/// Where a config points, for error messages (never the password).
pub(super) fn describe_target(cfg: &Config) -> String {
    let hosts: Vec<String> = cfg
        .get_hosts()
        .iter()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = cfg.get_ports().iter().map(u16::to_string).collect();
    let port = if ports.is_empty() { "5432".to_string() } else { ports.join(",") };
    format!(
        "host {} port {port}, database {}, user {}",
        hosts.join(","),
        cfg.get_dbname().or(cfg.get_user()).unwrap_or("(default)"),
        cfg.get_user().unwrap_or("(the OS user)")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn url_wins_over_environment_which_fills_the_rest() {
        let vars = [("PGHOST", "envhost"), ("PGPORT", "6543"), ("PGUSER", "envuser"), ("PGDATABASE", "envdb"), ("PGPASSWORD", "pw")];
        let cfg = config_with("postgres://alice@db.example:5433/", Some("fs_x"), env(&vars)).expect("config");
        assert_eq!(describe_target(&cfg), "host db.example port 5433, database envdb, user alice");
        assert_eq!(cfg.get_password(), Some(&b"pw"[..]));
        assert_eq!(cfg.get_options(), Some("-c search_path=fs_x"));
        assert_eq!(cfg.get_application_name(), Some("fleetsync"));
        assert_eq!(cfg.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));

        let cfg = config_with("", None, env(&vars)).expect("empty URL = all from the environment");
        assert_eq!(describe_target(&cfg), "host envhost port 6543, database envdb, user envuser");
        let cfg = config_with("host=/var/run/postgresql dbname=x", None, env(&[])).expect("key=value form");
        assert!(describe_target(&cfg).starts_with("host /var/run/postgresql port 5432, database x"));
    }

    #[test]
    fn bad_settings_name_the_problem() {
        let err = |url: &str, vars: &[(&str, &str)]| config_with(url, None, env(vars)).expect_err(url).to_string();
        assert!(err("postgres://h:notaport/db", &[]).contains("port"), "{}", err("postgres://h:notaport/db", &[]));
        assert!(err("host=h bogus_option=1", &[]).contains("bogus_option"));
        assert!(err("", &[("PGPORT", "x")]).contains("PGPORT"));
        assert!(err("postgres://h/db?sslmode=require", &[]).contains("TLS"));
        let bad_schema = config_with("postgres://h/db", Some("Robert'); DROP"), env(&[])).expect_err("schema");
        assert!(bad_schema.to_string().contains("invalid schema name"), "{bad_schema}");
    }
}
