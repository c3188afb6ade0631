//! Connection settings, after PostgreSQL's conventions.
//!
//! The URL (`postgres://user:password@host:port/db?option=…`) or a `key=value`
//! connection string is parsed by `tokio-postgres`, except `sslmode` and `sslrootcert`,
//! which are taken out first and read here (tokio-postgres knows neither `verify-ca`,
//! `verify-full` nor `sslrootcert`). What the string leaves unset comes from the usual
//! environment variables, as with libpq: `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`,
//! `PGDATABASE`, `PGOPTIONS`, `PGAPPNAME`, `PGCONNECT_TIMEOUT`, `PGSSLMODE` and
//! `PGSSLROOTCERT`. Then fleetsync's defaults: host `localhost` (libpq would try its Unix
//! socket first; give `host=/var/run/postgresql` for that), user = the OS user,
//! application name `fleetsync`, connect timeout 10 s, and TCP keepalives after 30 s
//! idle so a dead peer is noticed within about a minute.
//!
//! TLS follows libpq's `sslmode` (default `prefer`: encrypted if the server offers it,
//! the certificate not checked); what each mode checks is in `tls.rs`. Not supported:
//! client certificates (`sslcert`, `sslkey`), certificate revocation lists, `.pgpass`
//! and service files.
//!
//! A schema, if given, becomes the session's `search_path` (through the startup
//! `options`), so every table fleetsync uses lives in it. The options also say which
//! schema version this build keeps (`fleetsync.schema_version`): schema 9 refuses
//! writes to `work` from sessions that do not say 9 or later (see `due.rs`). And they
//! turn bitmap scans off (`enable_bitmapscan`): fleetsync's statements read a bounded
//! window of an index in order, or a list of rows by id, and a bitmap heap scan of the
//! window's range instead reads every due key and sorts them, on every claim. The
//! planner picks it when statistics are missing or stale, as they are right after a
//! fleet-sized apply (`postgres::tests::the_claim_reads_only_its_window`).

use super::tls::{TlsParams, TlsSettings};
use crate::{Result, StoreError};
use std::num::ParseIntError;
use std::ops::Range;
use std::time::Duration;
use tokio_postgres::Config;

/// Why connection settings cannot be used. Never shows the password: a value is quoted
/// only for the settings named (ports, timeouts, TLS settings, the schema).
#[derive(Debug, thiserror::Error)]
pub enum ConnInfoError {
    /// A part of the URL's query that is not UTF-8 once percent-decoded.
    #[error("{0:?} in the URL's query is not UTF-8 once percent-decoded")]
    NotUtf8(String, #[source] std::str::Utf8Error),
    /// tokio-postgres cannot parse the string (it says where, never the password).
    #[error("{}", super::describe(.0))]
    Unparsable(#[source] tokio_postgres::Error),
    #[error("invalid PGPORT {0:?}: not a port number")]
    Port(String, #[source] ParseIntError),
    #[error("invalid PGCONNECT_TIMEOUT {0:?}: not a number of seconds")]
    ConnectTimeout(String, #[source] ParseIntError),
    #[error("invalid schema name {0:?}: use at most 63 lower-case letters, digits and underscores, not starting with a digit")]
    SchemaName(String),
}

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// tokio-postgres' own default keepalive idle time; a config still at it was not set.
const TOKIO_POSTGRES_KEEPALIVE_IDLE: Duration = Duration::from_secs(2 * 60 * 60);

/// Where and how to connect: tokio-postgres' settings, and the TLS settings it cannot
/// hold (its `ssl_mode` is set to the negotiation they need).
#[derive(Debug, Clone)]
pub(super) struct ConnInfo {
    pub(super) pg: Config,
    pub(super) tls: TlsSettings,
}

/// Settings from `url`, then the process's `PG*` environment variables.
pub(super) fn config(url: &str, schema: Option<&str>) -> Result<ConnInfo> {
    config_with(url, schema, |name| std::env::var(name).ok().filter(|v| !v.is_empty()))
}

/// Like [`config`], with the environment given (for tests).
pub(super) fn config_with(url: &str, schema: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Result<ConnInfo> {
    let invalid = |e: ConnInfoError| StoreError::backend("reading the database URL", false, e);
    let (rest, tls_params) = take_tls_params(url.trim()).map_err(invalid)?;
    let mut cfg: Config = rest.parse().map_err(|e| invalid(ConnInfoError::Unparsable(e)))?;
    if cfg.get_hosts().is_empty() {
        let hosts = env("PGHOST").unwrap_or_else(|| "localhost".into());
        for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
            cfg.host(host);
        }
    }
    if cfg.get_ports().is_empty() {
        if let Some(port) = env("PGPORT") {
            for p in port.split(',').map(str::trim) {
                let p = p.parse::<u16>().map_err(|e| invalid(ConnInfoError::Port(port.clone(), e)))?;
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
                s.trim().parse::<u64>().map_err(|e| invalid(ConnInfoError::ConnectTimeout(s.clone(), e)))?,
            ),
            None => DEFAULT_CONNECT_TIMEOUT,
        };
        cfg.connect_timeout(timeout);
    }
    let tls = TlsSettings::resolve(tls_params, &env)?;
    cfg.ssl_mode(tls.mode.negotiation());
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
    options.push(format!("-c fleetsync.schema_version={}", super::schema::latest()));
    options.push("-c enable_bitmapscan=off".into());
    cfg.options(options.join(" "));
    Ok(ConnInfo { pg: cfg, tls })
}

/// Takes `sslmode` and `sslrootcert` out of a URL or key=value string, leaving the rest
/// as it was for tokio-postgres. The last of repeated settings wins, as in libpq.
fn take_tls_params(s: &str) -> Result<(String, TlsParams), ConnInfoError> {
    if s.starts_with("postgres://") || s.starts_with("postgresql://") {
        take_from_url(s)
    } else {
        Ok(take_from_keywords(s))
    }
}

/// The query's `&`-separated pairs, found where tokio-postgres looks: after the user
/// info (up to the first `@`), from the next `?`.
fn take_from_url(url: &str) -> Result<(String, TlsParams), ConnInfoError> {
    let after_user = url.find('@').map_or(0, |i| i + 1);
    let Some(query) = url[after_user..].find('?').map(|i| after_user + i) else {
        return Ok((url.to_string(), TlsParams::default()));
    };
    let mut params = TlsParams::default();
    let mut kept = Vec::new();
    for pair in url[query + 1..].split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match decode(key)?.as_str() {
            "sslmode" => &mut params.mode,
            "sslrootcert" => &mut params.root_cert,
            _ => {
                kept.push(pair);
                continue;
            }
        };
        *slot = Some(decode(value)?);
    }
    let mut rest = url[..query].to_string();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, params))
}

fn decode(s: &str) -> Result<String, ConnInfoError> {
    let decoded = percent_encoding::percent_decode_str(s).decode_utf8();
    decoded.map(|d| d.into_owned()).map_err(|e| ConnInfoError::NotUtf8(s.to_string(), e))
}

/// A malformed string is left whole: tokio-postgres then says what is wrong with it.
fn take_from_keywords(s: &str) -> (String, TlsParams) {
    let Some(pairs) = Scanner::new(s).pairs() else {
        return (s.to_string(), TlsParams::default());
    };
    let mut params = TlsParams::default();
    let (mut rest, mut from) = (String::with_capacity(s.len()), 0);
    for pair in pairs {
        let slot = match pair.key {
            "sslmode" => &mut params.mode,
            "sslrootcert" => &mut params.root_cert,
            _ => continue,
        };
        *slot = Some(pair.value);
        rest.push_str(&s[from..pair.span.start]);
        from = pair.span.end;
    }
    rest.push_str(&s[from..]);
    (rest, params)
}

/// One `keyword = value` of a key=value string: where it is, and its value unquoted.
struct Pair<'a> {
    key: &'a str,
    value: String,
    span: Range<usize>,
}

/// Reads a key=value string by tokio-postgres' (and libpq's) rules: keywords end at
/// white space or `=`; a value is `'quoted'` or runs to white space; `\` escapes the
/// next character in both.
struct Scanner<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn new(s: &'a str) -> Self {
        Scanner { s, pos: 0 }
    }

    fn pairs(mut self) -> Option<Vec<Pair<'a>>> {
        let mut pairs = Vec::new();
        loop {
            self.skip_white();
            let start = self.pos;
            let key = self.keyword();
            if key.is_empty() {
                return (self.pos == self.s.len()).then_some(pairs);
            }
            self.skip_white();
            if self.bump() != Some('=') {
                return None;
            }
            self.skip_white();
            let value = self.value()?;
            pairs.push(Pair { key, value, span: start..self.pos });
        }
    }

    fn peek(&self) -> Option<char> {
        self.s[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn skip_white(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    fn keyword(&mut self) -> &'a str {
        let start = self.pos;
        while self.peek().is_some_and(|c| !c.is_whitespace() && c != '=') {
            self.bump();
        }
        &self.s[start..self.pos]
    }

    /// The value, unescaped; `None` if it is missing or its quote is not closed.
    fn value(&mut self) -> Option<String> {
        let quoted = self.peek() == Some('\'');
        if quoted {
            self.bump();
        }
        let mut value = String::new();
        loop {
            match self.peek() {
                Some('\'') if quoted => {
                    self.bump();
                    return Some(value);
                }
                Some(c) if !quoted && c.is_whitespace() => break,
                None if quoted => return None,
                None => break,
                Some(_) => {}
            }
            match self.bump() {
                Some('\\') => value.extend(self.bump()),
                Some(c) => value.push(c),
                None => break,
            }
        }
        (!value.is_empty()).then_some(value)
    }
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
        Err(StoreError::backend(
            "reading the database schema name",
            false,
            ConnInfoError::SchemaName(schema.to_string()),
        ))
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
    use super::super::tls::{Roots, SslMode, Verify};
    use super::*;
    use tokio_postgres::config::SslMode as Wire;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    fn file(path: &str, setting: &'static str) -> Roots {
        Roots::File { path: path.into(), setting }
    }

    #[test]
    fn url_wins_over_environment_which_fills_the_rest() {
        let vars = [
            ("PGHOST", "envhost"),
            ("PGPORT", "6543"),
            ("PGUSER", "envuser"),
            ("PGDATABASE", "envdb"),
            ("PGPASSWORD", "pw"),
        ];
        let cfg = config_with("postgres://alice@db.example:5433/", Some("fs_x"), env(&vars)).expect("config").pg;
        assert_eq!(describe_target(&cfg), "host db.example port 5433, database envdb, user alice");
        assert_eq!(cfg.get_password(), Some(&b"pw"[..]));
        let ours = format!("-c fleetsync.schema_version={} -c enable_bitmapscan=off", super::super::schema::latest());
        assert_eq!(cfg.get_options(), Some(format!("-c search_path=fs_x {ours}").as_str()));
        assert_eq!(cfg.get_application_name(), Some("fleetsync"));
        assert_eq!(cfg.get_connect_timeout(), Some(&DEFAULT_CONNECT_TIMEOUT));

        let cfg = config_with("", None, env(&vars)).expect("empty URL = all from the environment").pg;
        assert_eq!(describe_target(&cfg), "host envhost port 6543, database envdb, user envuser");
        let cfg = config_with("host=/var/run/postgresql dbname=x", None, env(&[])).expect("key=value form").pg;
        assert!(describe_target(&cfg).starts_with("host /var/run/postgresql port 5432, database x"));
    }

    #[test]
    fn tls_settings_are_taken_out_of_either_form_and_the_rest_still_parses() {
        let url = "postgres://u:p?w@h:5433/db?application_name=a&sslmode=verify-full&sslrootcert=%2Fetc%2Fmy%20ca.pem&connect_timeout=3";
        let info = config_with(url, None, env(&[])).expect("URL");
        assert_eq!(info.tls.mode, SslMode::VerifyFull);
        assert_eq!(info.tls.verify, Verify::ChainAndName(file("/etc/my ca.pem", "sslrootcert")));
        assert_eq!(info.pg.get_ssl_mode(), Wire::Require);
        assert_eq!(info.pg.get_application_name(), Some("a"));
        assert_eq!(info.pg.get_connect_timeout(), Some(&Duration::from_secs(3)));
        assert_eq!(info.pg.get_password(), Some(&b"p?w"[..]));

        let only = config_with("postgresql://h/db?sslmode=verify-ca", None, env(&[])).expect("TLS setting alone");
        assert_eq!(only.tls.verify, Verify::Chain(Roots::System));
        assert_eq!(describe_target(&only.pg), "host h port 5432, database db, user (the OS user)");

        let kv = r"host=h sslmode = 'verify-ca' sslrootcert='/a b/c\'s.pem' dbname=d options='-c x=1'";
        let info = config_with(kv, None, env(&[])).expect("key=value");
        assert_eq!(info.tls.verify, Verify::Chain(file("/a b/c's.pem", "sslrootcert")));
        assert_eq!(info.pg.get_dbname(), Some("d"));
        let ours = format!("-c fleetsync.schema_version={} -c enable_bitmapscan=off", super::super::schema::latest());
        assert_eq!(info.pg.get_options(), Some(format!("-c x=1 {ours}").as_str()), "the user's options stay");

        let last = config_with("host=h sslmode=require sslmode=disable", None, env(&[])).expect("repeated");
        assert_eq!((last.tls.mode, last.pg.get_ssl_mode()), (SslMode::Disable, Wire::Disable), "the last one wins");
    }

    #[test]
    fn tls_settings_come_from_the_environment_when_the_string_has_none() {
        let mode = |url: &str, vars: &[(&str, &str)]| config_with(url, None, env(vars)).expect(url).tls;

        let default = mode("postgres://h/db", &[]);
        assert_eq!((default.mode, default.verify), (SslMode::Prefer, Verify::Nothing), "prefer checks nothing");
        assert_eq!(config_with("postgres://h/db", None, env(&[])).expect("default").pg.get_ssl_mode(), Wire::Prefer);

        let vars = [("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", "/env/ca.pem")];
        assert_eq!(mode("postgres://h/db", &vars).verify, Verify::ChainAndName(file("/env/ca.pem", "PGSSLROOTCERT")));
        let given = mode("postgres://h/db?sslmode=verify-ca&sslrootcert=/url/ca.pem", &vars);
        assert_eq!(given.verify, Verify::Chain(file("/url/ca.pem", "sslrootcert")), "the string wins");

        assert_eq!(mode("host=h", &[("PGSSLMODE", "allow")]).mode, SslMode::Allow);
        assert_eq!(mode("host=h", &[("PGSSLMODE", "require")]).verify, Verify::Nothing);
        // libpq's compatibility rule: require with a root certificate checks the chain.
        let with_root = mode("host=h", &[("PGSSLMODE", "require"), ("PGSSLROOTCERT", "/ca")]);
        assert_eq!(with_root.verify, Verify::Chain(file("/ca", "PGSSLROOTCERT")));
        assert_eq!(
            mode("postgres://h/db?sslmode=verify-ca&sslrootcert=", &[]).verify,
            Verify::Chain(Roots::System),
            "empty = not given"
        );
        // sslrootcert=system makes verify-full the default.
        assert_eq!(mode("host=h sslrootcert=system", &[]).verify, Verify::ChainAndName(Roots::System));
    }

    #[test]
    fn the_default_root_file_is_used_only_where_libpq_uses_it() {
        let home = tempfile::tempdir().expect("tempdir");
        let home_str = home.path().to_str().expect("UTF-8 temp path");
        let root = home.path().join(".postgresql/root.crt");
        let verify = |mode: &str| {
            config_with(&format!("host=h sslmode={mode}"), None, env(&[("HOME", home_str)])).expect(mode).tls.verify
        };

        assert_eq!(verify("verify-ca"), Verify::Chain(Roots::System), "no file yet: the system's roots");
        std::fs::create_dir(root.parent().expect("parent")).expect("mkdir");
        std::fs::write(&root, "not read while parsing").expect("write");
        let found = Roots::File { path: root, setting: "~/.postgresql/root.crt (libpq's default root file)" };
        assert_eq!(verify("verify-full"), Verify::ChainAndName(found.clone()));
        assert_eq!(verify("require"), Verify::Chain(found));
        assert_eq!(verify("prefer"), Verify::Nothing);
    }

    #[test]
    fn bad_settings_name_the_problem() {
        let err = |url: &str, vars: &[(&str, &str)]| config_with(url, None, env(vars)).expect_err(url).to_string();
        assert!(err("postgres://h:notaport/db", &[]).contains("port"), "{}", err("postgres://h:notaport/db", &[]));
        assert!(err("host=h bogus_option=1", &[]).contains("bogus_option"));
        assert!(err("", &[("PGPORT", "x")]).contains("PGPORT"));
        let bad_schema = config_with("postgres://h/db", Some("Robert'); DROP"), env(&[])).expect_err("schema");
        assert!(bad_schema.to_string().contains("invalid schema name"), "{bad_schema}");

        let e = err("postgres://h/db?sslmode=verify_full", &[]);
        assert!(e.contains(r#"sslmode="verify_full" is not an sslmode"#) && e.contains("verify-full"), "{e}");
        let e = err("host=h", &[("PGSSLMODE", "on")]);
        assert!(e.contains(r#"PGSSLMODE="on""#), "{e}");
        let e = err("postgres://h/db?sslmode=require&sslrootcert=system", &[]);
        assert!(e.contains("sslrootcert=system") && e.contains("use sslmode=verify-full"), "{e}");
        let e = err("postgres://h/db?sslrootcert=%FF", &[]);
        assert!(e.contains("%FF") && e.contains("UTF-8"), "{e}");
        let e = err("host=h sslmode='require", &[]);
        assert!(e.contains("unterminated"), "a malformed string is tokio-postgres' to report: {e}");
    }
}
