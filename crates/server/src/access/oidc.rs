//! Single sign-on: OIDC ID/access tokens (JWTs) signed by an identity provider.
//!
//! [`Oidc::load`] reads the provider's public keys (a JWKS, from a file or its
//! `jwks_uri`); [`Oidc::verify`] turns a bearer JWT into an [`OidcIdentity`]: its
//! subject and the [`Grant`]s listed in one claim ([`DEFAULT_GRANTS_CLAIM`] unless
//! configured otherwise), each written as [`Grant::parse`] reads it (`team-a:editor`,
//! `fleet-admin`, `team-a:agent:c1`).
//!
//! A token is accepted only if:
//! - it is signed with an asymmetric algorithm (RS*, PS*, ES256, ES384, EdDSA) by the
//!   JWKS key its `kid` names (or by the only key, if the JWKS holds one and the token
//!   names none), and that algorithm is one the *key* allows; `alg: none` and HS* are
//!   always refused;
//! - `iss` is the configured issuer and `aud` holds the configured audience;
//! - `exp` is present and not past, and `nbf` (if present) is past, give or take
//!   [`LEEWAY_SECS`];
//! - `sub` is present, and the grants claim holds at least one grant (values that are
//!   not grants are skipped).
//!
//! Keys rotate: [`Oidc::spawn_refresh`] re-reads the JWKS every
//! [`OidcConfig::refresh`], and early when a token names an unknown `kid` (at most once
//! per [`UNKNOWN_KEY_REFRESH_INTERVAL`], however many such tokens arrive): in the
//! background after [`Oidc::verify`], in place with [`Oidc::verify_or_refresh`]. A
//! failed refresh keeps the keys already loaded. Keys a token carries or points to
//! (`jwk`, `jku`, `x5u`, `x5c` headers) are never used.
//!
//! [`OidcError`]'s messages are meant for the client (a 401 body): they name what is
//! wrong with the token, never its content.

pub use super::jwks::JwksSource;

use super::jwks::{JwksError, JwksReader, KeySet};
use fleetsync_model::access::Grant;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The claim that carries the caller's grants unless [`OidcConfig::claim`] names another:
/// a string (grants separated by spaces) or an array of strings.
pub const DEFAULT_GRANTS_CLAIM: &str = "fleetsync_grants";

/// How often the JWKS is re-read unless [`OidcConfig::refresh`] says otherwise.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(5 * 60);

/// The shortest refresh period honoured; shorter ones are raised to it.
pub const MIN_REFRESH: Duration = Duration::from_millis(100);

/// The clock skew tolerated on `exp` and `nbf`, in seconds.
pub const LEEWAY_SECS: u64 = 30;

/// The least time between two refreshes caused by tokens naming an unknown `kid`.
pub const UNKNOWN_KEY_REFRESH_INTERVAL: Duration = Duration::from_secs(30);

/// Which tokens to trust, and where their grants are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// The provider's issuer identifier, compared exactly with `iss`.
    pub issuer: String,
    /// This hub's client ID at the provider; `aud` must hold it.
    pub audience: String,
    /// Where the provider's public keys are.
    pub jwks: JwksSource,
    /// The claim holding the grants (e.g. [`DEFAULT_GRANTS_CLAIM`], or `groups` if the
    /// provider's groups are named `team-a:editor`).
    pub claim: String,
    /// How often the JWKS is re-read.
    pub refresh: Duration,
}

impl OidcConfig {
    /// A configuration with the default claim and refresh period.
    pub fn new(issuer: impl Into<String>, audience: impl Into<String>, jwks: JwksSource) -> Self {
        Self {
            issuer: issuer.into(),
            audience: audience.into(),
            jwks,
            claim: DEFAULT_GRANTS_CLAIM.to_string(),
            refresh: DEFAULT_REFRESH,
        }
    }
}

/// Who a verified token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcIdentity {
    /// The token's `sub`.
    pub subject: String,
    /// Never empty, without duplicates.
    pub grants: Vec<Grant>,
}

/// Why a token (or the configuration) was refused.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("invalid OIDC configuration: {0}")]
    Config(&'static str),
    #[error("the token is not a well-formed JWT")]
    Malformed {
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// `alg` is `none`, symmetric (HS*), unknown, or not one the named key allows.
    #[error("the token's signature algorithm {alg} is not allowed here (the identity provider's key decides: RS*, PS*, ES256, ES384 or EdDSA)")]
    AlgorithmNotAllowed { alg: String },
    /// The `kid` the token names is not in the JWKS (as last read).
    #[error("the token is signed with a key the identity provider's key set (JWKS) does not hold")]
    UnknownKey,
    #[error("the token names no key (kid) and the identity provider's key set (JWKS) holds several")]
    KeyNotNamed,
    #[error("the token's signature does not verify")]
    BadSignature,
    #[error("the token was not issued by {expected}")]
    WrongIssuer { expected: String },
    #[error("the token is not meant for this hub: its audience does not include {expected}")]
    WrongAudience { expected: String },
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the token has no `{claim}` claim")]
    MissingClaim { claim: String },
    #[error("the token names no subject (sub)")]
    NoSubject,
    #[error("the token grants nothing: its `{claim}` claim holds no grant such as team-a:editor or fleet-admin")]
    NoGrants { claim: String },
    #[error("the identity provider's keys (JWKS) are unreadable")]
    Jwks(#[from] JwksError),
}

/// A verifier of one identity provider's tokens. Cheap to clone: clones share the keys.
#[derive(Clone)]
pub struct Oidc {
    inner: Arc<Inner>,
}

struct Inner {
    config: OidcConfig,
    reader: JwksReader,
    keys: RwLock<Arc<KeySet>>,
    /// Wakes the refresh task early (a token named an unknown `kid`).
    wake: Notify,
    /// When a token last caused an early refresh.
    last_early_refresh: Mutex<Option<Instant>>,
}

impl fmt::Debug for Oidc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.inner.config.issuer)
            .field("audience", &self.inner.config.audience)
            .field("jwks", &self.inner.config.jwks)
            .field("keys", &self.keys().keys.len())
            .finish()
    }
}

impl Oidc {
    /// Reads the JWKS; fails if it cannot, or if it holds no usable key.
    pub async fn load(config: OidcConfig) -> Result<Oidc, OidcError> {
        if config.issuer.is_empty() {
            return Err(OidcError::Config("the issuer is empty"));
        }
        if config.audience.is_empty() {
            return Err(OidcError::Config("the audience is empty"));
        }
        if config.claim.is_empty() {
            return Err(OidcError::Config("the grants claim is empty"));
        }
        let reader = JwksReader::new(config.jwks.clone())?;
        let keys = reader.read().await?;
        tracing::info!(issuer = %config.issuer, jwks = %config.jwks, keys = keys.keys.len(), "OIDC keys loaded");
        let inner = Inner {
            config,
            reader,
            keys: RwLock::new(Arc::new(keys)),
            wake: Notify::new(),
            last_early_refresh: Mutex::new(None),
        };
        Ok(Oidc { inner: Arc::new(inner) })
    }

    /// The configuration this verifier was loaded with.
    pub fn config(&self) -> &OidcConfig {
        &self.inner.config
    }

    /// Re-reads the JWKS now; on failure the keys already loaded stay.
    pub async fn refresh(&self) -> Result<(), OidcError> {
        let keys = self.inner.reader.read().await?;
        tracing::debug!(jwks = %self.inner.config.jwks, keys = keys.keys.len(), "OIDC keys refreshed");
        *self.inner.keys.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(keys);
        Ok(())
    }

    /// Refreshes the keys every [`OidcConfig::refresh`], and early when a token names an
    /// unknown `kid`, until `stop` is cancelled. Without this task the keys never change.
    pub fn spawn_refresh(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let oidc = self.clone();
        let period = self.inner.config.refresh.max(MIN_REFRESH);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(period) => {}
                    () = oidc.inner.wake.notified() => {}
                }
                let result = tokio::select! {
                    () = stop.cancelled() => return,
                    result = oidc.refresh() => result,
                };
                if let Err(e) = result {
                    tracing::warn!(jwks = %oidc.inner.config.jwks, error = %fleetsync_model::error::causes(&e), "cannot refresh the OIDC keys; keeping the ones loaded");
                }
            }
        })
    }

    /// The identity a bearer JWT speaks for, if it is valid now (see the module docs).
    ///
    /// A token naming an unknown `kid` is refused ([`OidcError::UnknownKey`]) and wakes
    /// the refresh task (if it runs), so the key is known to the next request;
    /// [`Oidc::verify_or_refresh`] refreshes in place instead.
    pub fn verify(&self, token: &str) -> Result<OidcIdentity, OidcError> {
        let verified = self.verify_now(token);
        if matches!(verified, Err(OidcError::UnknownKey)) && self.take_early_refresh() {
            self.inner.wake.notify_one();
        }
        verified
    }

    /// Like [`Oidc::verify`], but a token naming an unknown `kid` makes this call
    /// re-read the JWKS and try once more (unless a token caused a refresh less than
    /// [`UNKNOWN_KEY_REFRESH_INTERVAL`] ago), so the first token signed with a new key
    /// is accepted.
    pub async fn verify_or_refresh(&self, token: &str) -> Result<OidcIdentity, OidcError> {
        let verified = self.verify_now(token);
        if !matches!(verified, Err(OidcError::UnknownKey)) || !self.take_early_refresh() {
            return verified;
        }
        if let Err(e) = self.refresh().await {
            tracing::warn!(jwks = %self.inner.config.jwks, error = %fleetsync_model::error::causes(&e), "cannot refresh the OIDC keys; keeping the ones loaded");
            return verified;
        }
        self.verify_now(token)
    }

    fn verify_now(&self, token: &str) -> Result<OidcIdentity, OidcError> {
        let header = peek_header(token)?;
        let alg = asymmetric(&header.alg)?;
        let keys = self.keys();
        let key = match (keys.find(header.kid.as_deref()), &header.kid) {
            (Some(key), _) => key,
            (None, Some(_)) => return Err(OidcError::UnknownKey),
            (None, None) => return Err(OidcError::KeyNotNamed),
        };
        if !key.algorithms.contains(&alg) {
            return Err(OidcError::AlgorithmNotAllowed { alg: header.alg });
        }
        let config = &self.inner.config;
        let mut validation = Validation::new(alg);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let claims = jsonwebtoken::decode::<Map<String, Value>>(token, &key.decoding, &validation)
            .map_err(|e| self.refusal(e))?
            .claims;
        let subject = match claims.get("sub") {
            Some(Value::String(sub)) if !sub.is_empty() => sub.clone(),
            _ => return Err(OidcError::NoSubject),
        };
        let grants = grants_in(claims.get(&config.claim), &config.claim)?;
        Ok(OidcIdentity { subject, grants })
    }

    fn keys(&self) -> Arc<KeySet> {
        self.inner.keys.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Whether a token may cause a refresh now: true at most once per
    /// [`UNKNOWN_KEY_REFRESH_INTERVAL`].
    fn take_early_refresh(&self) -> bool {
        let mut last = self.inner.last_early_refresh.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|at| at.elapsed() < UNKNOWN_KEY_REFRESH_INTERVAL) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    fn refusal(&self, e: jsonwebtoken::errors::Error) -> OidcError {
        let config = &self.inner.config;
        match e.kind() {
            ErrorKind::InvalidSignature | ErrorKind::Crypto(_) => OidcError::BadSignature,
            ErrorKind::ExpiredSignature => OidcError::Expired,
            ErrorKind::ImmatureSignature => OidcError::NotYetValid,
            ErrorKind::InvalidIssuer => OidcError::WrongIssuer { expected: config.issuer.clone() },
            ErrorKind::InvalidAudience => OidcError::WrongAudience { expected: config.audience.clone() },
            ErrorKind::MissingRequiredClaim(claim) if claim == "sub" => OidcError::NoSubject,
            ErrorKind::MissingRequiredClaim(claim) => OidcError::MissingClaim { claim: claim.clone() },
            _ => OidcError::Malformed { source: Some(Box::new(e)) },
        }
    }
}

/// Whether `token` has the shape of a JWT: three base64url segments separated by dots
/// (the last, the signature, may be empty, so that unsigned tokens reach
/// [`Oidc::verify`] and are refused there with a clear reason). Hub-issued tokens
/// (`fst_…`) never do.
pub fn looks_like_jwt(token: &str) -> bool {
    let base64url = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let parts: Vec<&str> = token.split('.').collect();
    match parts.as_slice() {
        [header, payload, signature] => {
            !header.is_empty() && !payload.is_empty() && base64url(header) && base64url(payload) && base64url(signature)
        }
        _ => false,
    }
}

/// What [`Oidc::verify`] reads of the header before choosing a key.
#[derive(serde::Deserialize)]
struct PeekedHeader {
    alg: String,
    kid: Option<String>,
    /// Extensions the token says must be understood: none are, so its presence refuses.
    crit: Option<Value>,
}

fn peek_header(token: &str) -> Result<PeekedHeader, OidcError> {
    use base64::Engine as _;
    let malformed = |source: Box<dyn std::error::Error + Send + Sync>| OidcError::Malformed { source: Some(source) };
    if !looks_like_jwt(token) {
        return Err(OidcError::Malformed { source: None });
    }
    let encoded = token.split('.').next().unwrap_or_default();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded).map_err(|e| malformed(Box::new(e)))?;
    let header: PeekedHeader = serde_json::from_slice(&json).map_err(|e| malformed(Box::new(e)))?;
    if header.crit.is_some() {
        return Err(OidcError::Malformed { source: None });
    }
    Ok(header)
}

/// The algorithm `alg` names, if it is an asymmetric one.
fn asymmetric(alg: &str) -> Result<Algorithm, OidcError> {
    use Algorithm::*;
    let refused = || {
        // Named back only if it is a short plain word: the header is the caller's text.
        let shown =
            if alg.len() <= 8 && alg.bytes().all(|b| b.is_ascii_alphanumeric()) { alg } else { "(unrecognised)" };
        OidcError::AlgorithmNotAllowed { alg: shown.to_string() }
    };
    match alg.parse::<Algorithm>() {
        Ok(a @ (RS256 | RS384 | RS512 | PS256 | PS384 | PS512 | ES256 | ES384 | EdDSA)) => Ok(a),
        Ok(HS256 | HS384 | HS512) | Err(_) => Err(refused()),
    }
}

/// The grants `value` (the grants claim) holds; values that are not grants are skipped.
fn grants_in(value: Option<&Value>, claim: &str) -> Result<Vec<Grant>, OidcError> {
    let texts: Vec<&str> = match value {
        Some(Value::String(s)) => s.split_whitespace().collect(),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let mut grants: Vec<Grant> = Vec::new();
    for text in texts {
        match Grant::parse(text) {
            Ok(grant) if !grants.contains(&grant) => grants.push(grant),
            Ok(_) => {}
            Err(reason) => tracing::debug!(claim, %reason, "OIDC: skipping a value that is not a grant"),
        }
    }
    if grants.is_empty() {
        return Err(OidcError::NoGrants { claim: claim.to_string() });
    }
    Ok(grants)
}
