//! Authentication: who a request comes from, from the credential it carries — a
//! hub-issued bearer token, an OIDC JWT, or a verified mTLS client certificate.

use super::oidc::Oidc;
use super::rules::Caller;
use super::tokens;
use crate::error::ApiError;
use crate::tls::ClientIdentity;
use axum::http::{header, Extensions, HeaderMap};
use fleetsync_model::{Clock, Grant};
use fleetsync_store::Tokens;
use std::sync::Arc;

/// How the hub recognises its callers.
#[derive(Clone)]
pub struct Authenticator {
    tokens: Arc<dyn Tokens>,
    clock: Arc<dyn Clock>,
    oidc: Option<Oidc>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator").field("oidc", &self.oidc.is_some()).finish_non_exhaustive()
    }
}

const HOW: &str = "send `Authorization: Bearer TOKEN` (fleetsync token create, or an OIDC token)";

impl Authenticator {
    /// Hub-issued tokens from `tokens`, judged for expiry by `clock`.
    pub fn new(tokens: Arc<dyn Tokens>, clock: Arc<dyn Clock>) -> Authenticator {
        Authenticator { tokens, clock, oidc: None }
    }

    /// Also accepts JWTs of this OIDC issuer.
    pub fn with_oidc(mut self, oidc: Oidc) -> Authenticator {
        self.oidc = Some(oidc);
        self
    }

    /// The caller of a request: from its bearer token if it has one (a bad one is a
    /// 401 even if a client certificate came along), else from its client certificate.
    pub async fn identify(&self, headers: &HeaderMap, extensions: &Extensions) -> Result<Caller, ApiError> {
        if let Some(value) = headers.get(header::AUTHORIZATION) {
            let token = bearer(value.to_str().unwrap_or_default())?;
            return self.caller_of_token(token).await;
        }
        if let Some(id) = extensions.get::<ClientIdentity>() {
            return Ok(from_certificate(id));
        }
        Err(ApiError::Unauthorized(format!("no credential: {HOW}")))
    }

    /// The caller a bearer token (hub-issued or OIDC) stands for, as if it came in an
    /// `Authorization` header: what a dashboard sign-in and its session are judged by.
    pub async fn identify_token(&self, token: &str) -> Result<Caller, ApiError> {
        self.caller_of_token(token).await
    }

    async fn caller_of_token(&self, token: &str) -> Result<Caller, ApiError> {
        if tokens::is_hub_token(token) {
            return match tokens::find(self.tokens.as_ref(), token, self.clock.now()).await? {
                Ok(record) => Ok(Caller { subject: format!("token:{}", record.name), grants: vec![record.grant] }),
                Err(refused) => Err(ApiError::Unauthorized(refused.to_string())),
            };
        }
        match &self.oidc {
            Some(oidc) if super::oidc::looks_like_jwt(token) => {
                let id = oidc
                    .verify_or_refresh(token)
                    .await
                    .map_err(|e| ApiError::Unauthorized(format!("OIDC token refused: {e}")))?;
                Ok(Caller { subject: format!("oidc:{}", id.subject), grants: id.grants })
            }
            Some(_) => Err(ApiError::Unauthorized("the bearer token is neither a token of this hub nor a JWT".into())),
            None => Err(ApiError::Unauthorized(
                "the bearer token is not a token of this hub (OIDC is not configured)".into(),
            )),
        }
    }
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(value: &str) -> Result<&str, ApiError> {
    match value.strip_prefix("Bearer ").map(str::trim) {
        Some(t) if !t.is_empty() => Ok(t),
        _ => Err(ApiError::Unauthorized(format!("the Authorization header is not a bearer token: {HOW}"))),
    }
}

/// A verified client certificate's caller: its common name, and a grant for each of
/// its organizations that reads as one (`team-a:editor`, `fleet-admin`).
fn from_certificate(id: &ClientIdentity) -> Caller {
    let grants = id.organizations.iter().filter_map(|o| Grant::parse(o).ok()).collect();
    Caller { subject: format!("cert:{}", id.common_name), grants }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bearer_tokens_are_taken() {
        assert_eq!(bearer("Bearer  fst_x ").ok(), Some("fst_x"));
        assert!(bearer("Basic abc").is_err());
        assert!(bearer("Bearer ").is_err());
    }

    #[test]
    fn certificates_grant_what_their_organizations_say() {
        let id = ClientIdentity {
            common_name: "ci".into(),
            organizations: vec!["a:editor".into(), "not a grant".into(), "a:fleet-admin".into()],
        };
        let c = from_certificate(&id);
        assert_eq!(c.subject, "cert:ci");
        assert_eq!(c.grants, vec![Grant::parse("a:editor").expect("grant")], "O=a:fleet-admin is not fleet-admin");
    }
}
