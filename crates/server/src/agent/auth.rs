//! Agent tokens: a cluster's `spec.agent.tokenSecretRef` names a Secret whose
//! `token` value the cluster's agent sends as `Authorization: Bearer TOKEN`. A token
//! reports for its own cluster only.

use crate::error::{ApiError, Result};
use axum::http::{header, HeaderMap};
use fleetsync_model::{Cluster, Kind, AGENT_TOKEN_KEY};
use fleetsync_store::{Objects, StoreError};

/// Lets the request through if it carries the token of `tenant/cluster`'s agent:
/// 401 without a token or with one no agent has, 403 with another cluster's token.
pub async fn authorize(store: &dyn Objects, headers: &HeaderMap, tenant: &str, cluster: &str) -> Result<()> {
    let token = bearer(headers)?;
    let Some(target) = store.cluster_get(tenant, cluster).await? else {
        return Err(StoreError::not_found(Kind::Cluster, tenant, cluster).into());
    };
    if token_of(store, &target).await?.is_some_and(|t| same(t.as_bytes(), token.as_bytes())) {
        return Ok(());
    }
    // Only on failure, so the common case reads one Secret: whose token is it?
    for other in store.cluster_list(None).await? {
        if token_of(store, &other).await?.is_some_and(|t| same(t.as_bytes(), token.as_bytes())) {
            let (t, c) = (other.metadata.tenant(), &other.metadata.name);
            return Err(ApiError::Forbidden(format!(
                "this token belongs to the agent of cluster {t}/{c}; it may only report for that cluster, not {tenant}/{cluster}"
            )));
        }
    }
    Err(ApiError::Unauthorized(match &target.spec.agent {
        Some(a) => format!(
            "the token is not the one of cluster {tenant}/{cluster}'s agent (the `{AGENT_TOKEN_KEY}` of Secret {tenant}/{})",
            a.token_secret_ref
        ),
        None => format!("cluster {tenant}/{cluster} has no agent: set spec.agent.tokenSecretRef to a Secret with a `{AGENT_TOKEN_KEY}`"),
    }))
}

/// The token of a cluster's agent, if it has one (and its Secret exists).
async fn token_of(store: &dyn Objects, c: &Cluster) -> Result<Option<String>> {
    let Some(agent) = &c.spec.agent else { return Ok(None) };
    let secret = store.secret_get(c.metadata.tenant(), &agent.token_secret_ref).await?;
    Ok(secret.and_then(|s| s.get(AGENT_TOKEN_KEY).map(|v| v.expose().to_string())).filter(|t| !t.is_empty()))
}

fn bearer(headers: &HeaderMap) -> Result<&str> {
    let value = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    match value.strip_prefix("Bearer ").map(str::trim) {
        Some(t) if !t.is_empty() => Ok(t),
        _ => Err(ApiError::Unauthorized("missing token: send `Authorization: Bearer TOKEN` with the cluster's agent token".into())),
    }
}

/// Compares in time that depends on the length only, not on where bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }

    #[test]
    fn bearer_is_required() {
        let mut h = HeaderMap::new();
        assert!(matches!(bearer(&h), Err(ApiError::Unauthorized(_))));
        h.insert(header::AUTHORIZATION, "Bearer  t0k ".parse().expect("header"));
        assert_eq!(bearer(&h).ok(), Some("t0k"));
        h.insert(header::AUTHORIZATION, "Basic x".parse().expect("header"));
        assert!(bearer(&h).is_err());
    }
}
