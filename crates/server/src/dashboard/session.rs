//! Dashboard sessions: a browser signs in once with an API token and then carries a
//! random session id in a cookie (`HttpOnly`, `SameSite=Strict`, `Path=/`, `Secure`
//! over https). The token stays in the hub's memory, never in the browser's storage
//! or in an answer, and is checked again on every request, so that revoking it or its
//! expiry ends the session too.
//!
//! Signing in is rate-limited per client address and per credential
//! ([`super::sign_in_limits`]); an agent's credential opens no session; each identity
//! holds at most [`SessionLimits::max_per_identity`] sessions (its next sign-in ends its
//! own oldest), and a hub whose sessions are all taken refuses a sign-in rather than
//! end anybody else's session.
//!
//! A session is a credential for reading and for the page's few actions: the access
//! layer accepts the cookie on `GET` and `HEAD` requests whose `Origin`, if any, is the
//! hub's own, and on the actions of [`routes::SESSION_ACTIONS`] (retries, rollout
//! controls) only with the hub's own `Origin` ([`credential`]), so a page of another
//! site can make a browser change nothing. Each action is still authorized by the
//! token's role, and recorded with its subject as the actor.

use super::origin::Origin;
use super::sign_in_limits::{SignInBuckets, SignInLimits};
use crate::access::{routes, Access};
use crate::error::{ApiError, Result};
use crate::tls::{ClientIdentity, OverTls};
use crate::AppState;
use axum::body::{to_bytes, Body};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use fleetsync_api::WhoAmI;
use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The cookie's name.
pub const COOKIE: &str = "fleetsync_session";
/// How long a session lasts (the token's own expiry ends it sooner).
pub const SESSION_TTL: Duration = Duration::from_secs(8 * 3600);
/// Sessions kept at most, by everyone (see [`SessionLimits`]).
pub const MAX_SESSIONS: usize = 10_000;
/// Sessions one identity keeps at most; its next sign-in ends its own oldest.
pub const MAX_SESSIONS_PER_IDENTITY: usize = 10;
/// The largest sign-in body (`{"token": "..."}`; an OIDC token takes a few KiB).
pub const MAX_SIGN_IN_BYTES: usize = 16 * 1024;

/// How many sessions a hub keeps, and how fast it may be signed in to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions in all; when they are all taken a sign-in is refused (429), never
    /// made by ending another identity's session.
    pub max_sessions: usize,
    /// Sessions of one identity (`token:NAME`, `oidc:SUB`, `cert:CN`); its sign-in past
    /// it ends its own oldest.
    pub max_per_identity: usize,
    pub sign_in: SignInLimits,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            max_sessions: MAX_SESSIONS,
            max_per_identity: MAX_SESSIONS_PER_IDENTITY,
            sign_in: SignInLimits::default(),
        }
    }
}

/// The sessions of a hub, in memory: by the SHA-256 of their id, the token each
/// signed in with and who that is.
#[derive(Clone)]
pub struct Sessions {
    limits: SessionLimits,
    open: Arc<Mutex<HashMap<[u8; 32], Session>>>,
    sign_ins: Arc<Mutex<SignInBuckets>>,
}

impl Default for Sessions {
    fn default() -> Self {
        Self::with_limits(SessionLimits::default())
    }
}

struct Session {
    token: String,
    subject: String,
    started: Instant,
    ends: Instant,
}

/// Why no session was started: every one is taken, by others; one ends after
/// `retry_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full {
    pub retry_after: Duration,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").field("open", &self.lock().len()).finish()
    }
}

impl Sessions {
    /// No session yet, under `limits`.
    pub fn with_limits(limits: SessionLimits) -> Self {
        Self { limits, open: Arc::default(), sign_ins: Arc::new(Mutex::new(SignInBuckets::new(limits.sign_in))) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 32], Session>> {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a sign-in from `client` with `token` against the rates, or says which
    /// one refused it (nothing counted then).
    fn admit(&self, client: IpAddr, token: &str) -> Result<()> {
        let mut buckets = self.sign_ins.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        buckets.take(client, &digest(token), Instant::now()).map_err(|refused| ApiError::RateLimited {
            what: format!("too many dashboard sign-ins {}", refused.scope),
            retry_after: refused.retry_after,
        })
    }

    /// A new session of `subject` for `token`: its id, for the cookie. Past its own
    /// cap, the identity's oldest session ends; when every session is taken by others,
    /// none is started.
    pub fn start(&self, token: String, subject: &str) -> Result<String, Full> {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let id: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let now = Instant::now();
        let mut open = self.lock();
        open.retain(|_, s| s.ends > now);
        let mine: Vec<([u8; 32], Instant)> =
            open.iter().filter(|(_, s)| s.subject == subject).map(|(k, s)| (*k, s.started)).collect();
        if mine.len() >= self.limits.max_per_identity {
            if let Some((oldest, _)) = mine.iter().min_by_key(|(_, started)| *started) {
                open.remove(oldest);
            }
        } else if open.len() >= self.limits.max_sessions {
            let first_end = open.values().map(|s| s.ends).min().unwrap_or(now + SESSION_TTL);
            return Err(Full { retry_after: first_end.saturating_duration_since(now) });
        }
        open.insert(
            digest(&id),
            Session { token, subject: subject.to_string(), started: now, ends: now + SESSION_TTL },
        );
        Ok(id)
    }

    /// The token of the session `id`, if it is open.
    pub fn token(&self, id: &str) -> Option<String> {
        let key = digest(id);
        let mut open = self.lock();
        match open.get(&key) {
            Some(s) if s.ends > Instant::now() => Some(s.token.clone()),
            Some(_) => {
                open.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the session `id`.
    pub fn end(&self, id: &str) {
        self.lock().remove(&digest(id));
    }
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

/// The session id in a request's cookies.
fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty())
}

/// The token a request's session cookie stands for, if the request carries no other
/// credential (a bearer token or a client certificate wins): refused unless the
/// request only reads and comes from the hub's own pages, or is one of the page's
/// actions (`path`, the matched route, in [`routes::SESSION_ACTIONS`]) and says it
/// comes from the hub's own pages (a browser sends `Origin` with every `POST`; with
/// the cookie's `SameSite=Strict` a page of another site can make it send neither).
pub fn credential(access: &Access, req: &Request, path: Option<&str>) -> Result<Option<String>> {
    let headers = req.headers();
    if headers.contains_key(header::AUTHORIZATION) || req.extensions().get::<ClientIdentity>().is_some() {
        return Ok(None);
    }
    let Some(id) = cookie(headers) else {
        return Ok(None);
    };
    let origin = Origin::of(headers, req.uri(), req.extensions().get::<OverTls>().is_some());
    if let Origin::Foreign(origin) = origin {
        return Err(foreign(origin));
    }
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    let action = path.is_some_and(|p| routes::session_action(req.method(), p));
    if action && origin == Origin::Absent {
        return Err(ApiError::Forbidden(
            "a dashboard action must say it comes from this hub's own pages (the Origin header)".into(),
        ));
    }
    if !reads && !action {
        return Err(ApiError::Unauthorized(format!(
            "a dashboard session only reads and takes the page's actions, it cannot {} this: send `Authorization: Bearer TOKEN`",
            req.method()
        )));
    }
    match access.sessions.token(id) {
        Some(token) => Ok(Some(token)),
        None => Err(ApiError::Unauthorized("the dashboard session has ended: sign in again".into())),
    }
}

fn foreign(origin: &str) -> ApiError {
    let origin: String = origin.chars().take(100).collect();
    ApiError::Forbidden(format!("the request comes from {origin:?}, not from this hub's own pages"))
}

/// `POST /ui/session`'s body.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SignIn {
    token: String,
}

/// `POST /ui/session` (`{"token": "..."}`, from the hub's own page): checks the token
/// as the API does, starts a session and sets its cookie; answers who signed in.
pub async fn sign_in(State(state): State<AppState>, req: Request) -> Result<Response> {
    let (parts, body) = req.into_parts();
    let https = match Origin::of_parts(&parts) {
        Origin::Same { https } => https,
        Origin::Absent => {
            return Err(ApiError::Forbidden(
                "signing in needs the Origin header a browser sends from this hub's page".into(),
            ))
        }
        Origin::Foreign(origin) => return Err(foreign(origin)),
    };
    let content_type = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if content_type.split(';').next().unwrap_or_default().trim() != "application/json" {
        let got: String =
            if content_type.is_empty() { "none".into() } else { content_type.chars().take(100).collect() };
        return Err(ApiError::UnsupportedMediaType { got });
    }
    let bytes = read(body, MAX_SIGN_IN_BYTES).await?;
    // serde's messages can quote the value: none of the body goes into the error.
    let sign_in: SignIn =
        serde_json::from_slice(&bytes).map_err(|_| ApiError::BadBody("expected {\"token\": \"API token\"}".into()))?;
    let token = sign_in.token.trim().to_string();
    if token.is_empty() {
        return Err(ApiError::InvalidField { field: "token".into(), rule: "must not be empty".into() });
    }
    let sessions = &state.access.sessions;
    // Counted before the credential is checked: a wrong one costs a try too.
    sessions.admit(client(&parts), &token)?;
    let caller = state.access.authenticator.identify_token(&token).await?;
    // Only a caller who reads some tenant opens a session; an agent's credential does not.
    if caller.visible().is_none() {
        return Err(ApiError::Forbidden(format!(
            "{} may not sign in to the dashboard: an agent's credential (or one with no grant) opens no session",
            caller.subject
        )));
    }
    let id = sessions.start(token, &caller.subject).map_err(|full| ApiError::RateLimited {
        what: format!("all {} dashboard sessions of this hub are taken", sessions.limits.max_sessions),
        retry_after: full.retry_after,
    })?;
    let secure = https || parts.extensions.get::<OverTls>().is_some();
    let cookie = set_cookie(&id, SESSION_TTL.as_secs(), secure)?;
    tracing::info!(subject = %caller.subject, "dashboard sign-in");
    let mut response = Json(WhoAmI { subject: caller.subject, grants: caller.grants }).into_response();
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The address the request came from; unspecified for a request that came through no
/// socket (in-process callers, tests), which then share one bucket.
fn client(parts: &Parts) -> IpAddr {
    parts.extensions.get::<ConnectInfo<SocketAddr>>().map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
}

/// `DELETE /ui/session`: ends the session and clears its cookie.
pub async fn sign_out(State(state): State<AppState>, parts: Parts) -> Result<Response> {
    if let Origin::Foreign(origin) = Origin::of_parts(&parts) {
        return Err(foreign(origin));
    }
    if let Some(id) = cookie(&parts.headers) {
        state.access.sessions.end(id);
    }
    let secure = parts.extensions.get::<OverTls>().is_some();
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(header::SET_COOKIE, set_cookie("", 0, secure)?);
    Ok(response)
}

/// The body, at most `limit` bytes (reading stops there: the rest is never buffered).
async fn read(body: Body, limit: usize) -> Result<axum::body::Bytes> {
    // Past the limit, or cut off: either way the client sent no whole small body.
    to_bytes(body, limit).await.map_err(|_| ApiError::BodyTooLarge { limit })
}

fn set_cookie(id: &str, max_age: u64, secure: bool) -> Result<HeaderValue> {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}"))
        .map_err(|e| ApiError::Internal { step: "setting the session cookie", message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_start_find_and_end() {
        let sessions = Sessions::default();
        let id = sessions.start("fst_secret".into(), "token:a").expect("start");
        assert_eq!(id.len(), 64);
        assert_eq!(sessions.token(&id).as_deref(), Some("fst_secret"));
        assert_eq!(sessions.token("other"), None);
        sessions.end(&id);
        assert_eq!(sessions.token(&id), None);
        assert!(!format!("{sessions:?}").contains("fst_secret"));
    }

    #[test]
    fn an_identity_past_its_cap_ends_its_own_oldest_and_a_full_hub_ends_nobody_elses() {
        let limits = SessionLimits { max_sessions: 4, max_per_identity: 2, ..SessionLimits::default() };
        let sessions = Sessions::with_limits(limits);
        let admin = sessions.start("fst_admin".into(), "token:admin").expect("admin");
        let first = sessions.start("fst_x".into(), "token:x").expect("x 1");
        let second = sessions.start("fst_x".into(), "token:x").expect("x 2");
        let third = sessions.start("fst_x".into(), "token:x").expect("x 3 ends x 1");
        assert_eq!(sessions.token(&first), None, "x's oldest ended");
        assert!(sessions.token(&second).is_some() && sessions.token(&third).is_some());
        sessions.start("fst_y".into(), "token:y").expect("y");
        let full = sessions.start("fst_z".into(), "token:z").expect_err("4 in all");
        assert!(full.retry_after <= SESSION_TTL, "{full:?}");
        sessions.start("fst_x".into(), "token:x").expect("x may still replace its own");
        assert_eq!(sessions.token(&admin).as_deref(), Some("fst_admin"), "nobody ended the admin's session");
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; fleetsync_session=abc ; b=2"));
        assert_eq!(cookie(&headers), Some("abc"));
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("fleetsync_session="));
        assert_eq!(cookie(&headers), None);
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_over_https() {
        let c = set_cookie("x", 10, true).expect("cookie");
        assert_eq!(
            c.to_str().expect("text"),
            "fleetsync_session=x; Path=/; HttpOnly; SameSite=Strict; Max-Age=10; Secure"
        );
        assert!(!set_cookie("x", 10, false).expect("cookie").to_str().expect("text").contains("Secure"));
    }
}
