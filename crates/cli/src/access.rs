//! `fleetsync serve`'s access: the operator's settings from its flags, and the first
//! token of an embedded hub.

use crate::args::AccessArgs;
use anyhow::{bail, Context, Result};
use fleetsync_model::names::check_dns1123_label;
use fleetsync_model::SystemClock;
use fleetsync_server::access::oidc::{JwksSource, Oidc, OidcConfig, DEFAULT_GRANTS_CLAIM};
use fleetsync_server::access::tokens::{bootstrap as issue_first, bootstrap_file};
use fleetsync_server::access::AccessSettings;
use fleetsync_store::Tokens;
use std::path::Path;
use tokio_util::sync::CancellationToken;

/// The access settings the flags ask for; loads the OIDC issuer's keys if one is given,
/// and re-reads them until `stop`.
pub async fn settings(a: &AccessArgs, stop: CancellationToken) -> Result<AccessSettings> {
    for t in &a.allow_in_cluster_tenants {
        check_dns1123_label(t).with_context(|| format!("--allow-in-cluster-tenant {t:?}"))?;
    }
    let oidc = match (&a.oidc_issuer, &a.oidc_audience) {
        (Some(issuer), Some(audience)) => {
            let jwks = match (&a.oidc_jwks_file, &a.oidc_jwks_url) {
                (Some(f), None) => JwksSource::File(f.clone()),
                (None, Some(u)) => JwksSource::Url(u.clone()),
                _ => bail!("--oidc-issuer needs the issuer's keys: --oidc-jwks-file or --oidc-jwks-url"),
            };
            let claim = a.oidc_grants_claim.clone().unwrap_or_else(|| DEFAULT_GRANTS_CLAIM.to_string());
            let config = OidcConfig {
                issuer: issuer.clone(),
                audience: audience.clone(),
                jwks,
                claim,
                refresh: fleetsync_server::access::oidc::DEFAULT_REFRESH,
            };
            let oidc = Oidc::load(config).await.context("--oidc-issuer: cannot load the issuer's keys")?;
            oidc.spawn_refresh(stop);
            tracing::info!(issuer, audience, "accepting OIDC tokens");
            Some(oidc)
        }
        _ => None,
    };
    Ok(AccessSettings {
        oidc,
        metrics_require_auth: a.metrics_require_auth,
        in_cluster_tenants: a.allow_in_cluster_tenants.iter().cloned().collect(),
    })
}

/// An embedded hub's first token: if the store holds none, issues a fleet-admin token
/// into a file beside the database (mode 0600) and logs where (never the token).
pub async fn bootstrap(store: &dyn Tokens, db: &Path) -> Result<()> {
    let file = bootstrap_file(db);
    if issue_first(store, &SystemClock, &file)
        .await
        .with_context(|| format!("issuing the first token into {}", file.display()))?
    {
        tracing::info!(file = %file.display(), "no token yet: issued a fleet-admin token into this file (clients on this machine use it)");
    }
    Ok(())
}
