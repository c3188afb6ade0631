//! Where a client command connects and as whom, as kubectl users expect: flags, then
//! environment variables, then the current context of the config file
//! (`~/.config/fleetsync/config.yaml`, or `FLEETSYNC_CONFIG`):
//!
//! ```yaml
//! current-context: prod
//! contexts:
//!   - name: prod
//!     server: https://hub.example.com:8443
//!     certificate-authority: /etc/fleetsync/ca.pem
//!     token-file: /home/me/.fleetsync/prod.token   # or token: fst_…
//!     tenant: team-a
//! ```
//!
//! With no token from any of those, a client of a hub on this machine reads the token
//! `fleetsync serve` wrote beside its database (`FLEETSYNC_DB`, default `fleetsync.db`,
//! plus `.admin-token`), so a local quick start needs no setup.

use crate::args::ConnArgs;
use anyhow::{anyhow, bail, Context as _, Result};
use fleetsync_api::{Client, ClientTls};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where the hub is when nothing says.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:8080";

/// The config file.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Config {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_context: Option<String>,
    #[serde(default)]
    pub contexts: Vec<Context>,
}

/// One named way to reach a hub.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Context {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authority: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure_skip_tls_verify: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// A client command's connection, resolved.
#[derive(Debug)]
pub struct Conn {
    pub client: Client,
    /// The tenant to use when the command names none.
    pub tenant: String,
}

impl Conn {
    pub fn tenant_or(&self, given: &Option<String>) -> String {
        given.clone().unwrap_or_else(|| self.tenant.clone())
    }
}

pub(crate) fn config_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FLEETSYNC_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(base.join("fleetsync").join("config.yaml"))
}

/// Reads the config file; none is an empty config, but one named by `FLEETSYNC_CONFIG`
/// must exist.
pub(crate) fn load_config() -> Result<Config> {
    read_config(std::env::var_os("FLEETSYNC_CONFIG").is_none())
}

/// Reads the config file to change it: none yet (wherever it is) is an empty config.
pub(crate) fn load_config_to_edit() -> Result<Config> {
    read_config(true)
}

fn read_config(missing_ok: bool) -> Result<Config> {
    let Some(path) = config_path() else { return Ok(Config::default()) };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && missing_ok => return Ok(Config::default()),
        Err(e) => return Err(e).with_context(|| format!("cannot read the config file {}", path.display())),
    };
    if text.trim().is_empty() {
        return Ok(Config::default());
    }
    serde_saphyr::from_str(&text).with_context(|| format!("the config file {} is not valid", path.display()))
}

/// The context to use: `--context`, else the file's current-context, else none.
fn pick(config: Config, wanted: Option<&str>) -> Result<Context> {
    let name = wanted.map(str::to_string).or(config.current_context);
    let Some(name) = name else { return Ok(Context::default()) };
    let known = config.contexts.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    config.contexts.into_iter().find(|c| c.name == name).ok_or_else(|| {
        anyhow!(
            "no context named {name:?} in the config file (it has: {})",
            if known.is_empty() { "none".into() } else { known.join(", ") }
        )
    })
}

/// Resolves the connection of a client command.
pub fn connect(a: &ConnArgs) -> Result<Conn> {
    let ctx = pick(load_config()?, a.context.as_deref())?;
    let server = a.server.clone().or(ctx.server.clone()).unwrap_or_else(|| DEFAULT_SERVER.to_string());
    let tls = ClientTls {
        ca_file: a.certificate_authority.clone().or(ctx.certificate_authority.clone()),
        insecure_skip_verify: a.insecure_skip_tls_verify || ctx.insecure_skip_tls_verify,
        client_cert: match (&a.client_certificate, &a.client_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            _ => ctx.client_certificate.clone().zip(ctx.client_key.clone()),
        },
    };
    let token = match (&a.token, &ctx.token, &ctx.token_file) {
        (Some(t), _, _) | (None, Some(t), _) => Some(t.clone()),
        (None, None, Some(f)) => Some(read_token(f)?),
        (None, None, None) if is_local(&server) => local_token()?,
        _ => None,
    };
    let mut client =
        Client::build(&server, &tls, Some(a.timeout())).map_err(|e| anyhow!("{}", fleetsync_api::describe(&e)))?;
    if let Some(t) = token {
        client = client.with_token(t);
    }
    Ok(Conn { client, tenant: ctx.tenant.unwrap_or_else(|| fleetsync_model::document::DEFAULT_TENANT.to_string()) })
}

fn read_token(path: &Path) -> Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("the token file {} is empty", path.display());
    }
    Ok(token.to_string())
}

/// Whether `server` is on this machine (a loopback address or `localhost`).
fn is_local(server: &str) -> bool {
    let rest = server.split_once("://").map_or(server, |(_, r)| r);
    let host = rest.split(['/', '?']).next().unwrap_or_default();
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Where an embedded hub on this machine writes its admin token: beside its database,
/// `$FLEETSYNC_DB` (`fleetsync.db` in the working directory by default).
pub(crate) fn local_token_file() -> PathBuf {
    let db = std::env::var_os("FLEETSYNC_DB").map_or_else(|| PathBuf::from("fleetsync.db"), PathBuf::from);
    fleetsync_server::access::tokens::bootstrap_file(&db)
}

/// The token an embedded hub on this machine wrote beside its database, if there is one.
fn local_token() -> Result<Option<String>> {
    let file = local_token_file();
    if !file.exists() {
        return Ok(None);
    }
    read_token(&file).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_servers_are_recognised() {
        for s in ["http://127.0.0.1:8080", "http://localhost:1", "https://[::1]:8443/x", "127.0.0.5:80"] {
            assert!(is_local(s), "{s}");
        }
        for s in ["https://hub.example.com", "http://10.0.0.1:8080", "http://127.0.0.1.example.com"] {
            assert!(!is_local(s), "{s}");
        }
    }

    #[test]
    fn contexts_are_picked_by_name_or_current() {
        let config: Config = serde_saphyr::from_str(
            "current-context: b\ncontexts:\n  - {name: a, server: 'https://a', tenant: ta}\n  - {name: b, server: 'https://b'}\n",
        )
        .expect("config");
        assert_eq!(pick(config, None).expect("current").server.as_deref(), Some("https://b"));
        let config: Config = serde_saphyr::from_str("contexts:\n  - {name: a, tenant: ta}\n").expect("config");
        assert_eq!(pick(config, Some("a")).expect("named").tenant.as_deref(), Some("ta"));
        let err = pick(Config::default(), Some("zz")).expect_err("unknown");
        assert!(err.to_string().contains("no context named \"zz\""), "{err}");
        assert!(serde_saphyr::from_str::<Config>("contexts: [{name: a, sever: x}]").is_err(), "typos are refused");
    }
}
