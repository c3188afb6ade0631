//! What every route needs: the one table the access layer reads. A route the table
//! does not name is refused (fail closed), so a route cannot be added without its rule.

use super::rules::Right;
use axum::http::Method;

/// What a route needs from its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Nobody needs a credential (probes).
    Public,
    /// `/metrics`: public, or any caller but an agent with `--metrics-require-auth`.
    Metrics,
    /// `right` in the tenant of `?tenant=` (default `default`).
    InTenant(Right),
    /// Any caller; the handler checks each tenant the request names (the documents of
    /// an apply, an agent's cluster, a token's grant) or shows only what the caller may
    /// read (the event log).
    Checked,
    /// `fleet-admin`.
    Fleet,
    /// No bearer credential: the request is signed with a secret the handler checks
    /// (a source's push notifications, see [`crate::hook`]).
    Signed,
}

/// One route and its need.
#[derive(Debug, Clone)]
pub struct Rule {
    pub method: Method,
    pub path: &'static str,
    pub need: Need,
}

const fn rule(method: Method, path: &'static str, need: Need) -> Rule {
    Rule { method, path, need }
}

/// Every route of the API, as the router matches it.
pub const RULES: &[Rule] = &[
    rule(Method::GET, "/livez", Need::Public),
    rule(Method::GET, "/readyz", Need::Public),
    rule(Method::GET, "/healthz", Need::Public),
    rule(Method::GET, "/metrics", Need::Metrics),
    // The dashboard: its page and assets hold no data; its session routes check what
    // they are sent (and a session cookie reads the `/v1` routes below, by their rules).
    rule(Method::GET, "/", Need::Public),
    rule(Method::GET, "/ui/app.js", Need::Public),
    rule(Method::GET, "/ui/app.css", Need::Public),
    rule(Method::POST, "/ui/session", Need::Public),
    rule(Method::DELETE, "/ui/session", Need::Public),
    rule(Method::POST, "/v1/apply", Need::Checked),
    rule(Method::GET, "/v1/clusters", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/clusters/{name}", Need::InTenant(Right::Read)),
    rule(Method::DELETE, "/v1/clusters/{name}", Need::InTenant(Right::Edit)),
    rule(Method::GET, "/v1/syncsets", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/syncsets/{name}", Need::InTenant(Right::Read)),
    rule(Method::DELETE, "/v1/syncsets/{name}", Need::InTenant(Right::Edit)),
    rule(Method::GET, "/v1/syncsets/{name}/render", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/secrets", Need::InTenant(Right::Admin)),
    rule(Method::GET, "/v1/secrets/{name}", Need::InTenant(Right::Admin)),
    rule(Method::DELETE, "/v1/secrets/{name}", Need::InTenant(Right::Admin)),
    rule(Method::GET, "/v1/gitrepositories", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/gitrepositories/{name}", Need::InTenant(Right::Read)),
    rule(Method::DELETE, "/v1/gitrepositories/{name}", Need::InTenant(Right::Edit)),
    rule(Method::POST, "/v1/gitrepositories/{name}/reconcile", Need::InTenant(Right::Edit)),
    rule(Method::GET, "/v1/ocirepositories", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/ocirepositories/{name}", Need::InTenant(Right::Read)),
    rule(Method::DELETE, "/v1/ocirepositories/{name}", Need::InTenant(Right::Edit)),
    rule(Method::POST, "/v1/ocirepositories/{name}/reconcile", Need::InTenant(Right::Edit)),
    rule(Method::GET, "/v1/notifiers", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/notifiers/{name}", Need::InTenant(Right::Read)),
    rule(Method::DELETE, "/v1/notifiers/{name}", Need::InTenant(Right::Edit)),
    rule(Method::POST, "/v1/notifiers/{name}/reconcile", Need::InTenant(Right::Edit)),
    rule(Method::POST, "/v1/sources/{tenant}/{name}/hook", Need::Signed),
    rule(Method::GET, "/v1/members", Need::Fleet),
    rule(Method::GET, "/v1/status", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/status/summary", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/status/clusters/{name}", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/status/syncsets/{name}", Need::InTenant(Right::Read)),
    rule(Method::POST, "/v1/status/clusters/{cluster}/syncsets/{syncset}/retry", Need::InTenant(Right::Edit)),
    rule(Method::POST, "/v1/status/clusters/{name}/retry", Need::InTenant(Right::Edit)),
    rule(Method::GET, "/v1/status/failures", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/status/clusters", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/status/heatmap", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/status/activity", Need::InTenant(Right::Read)),
    rule(Method::POST, "/v1/status/failures/retry", Need::InTenant(Right::Edit)),
    rule(Method::GET, "/v1/status/clusters/{cluster}/syncsets/{syncset}/events", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/rollouts", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/rollouts/{name}", Need::InTenant(Right::Read)),
    rule(Method::POST, "/v1/rollouts/{name}/{control}", Need::InTenant(Right::Edit)),
    rule(Method::GET, "/v1/events", Need::Checked),
    rule(Method::POST, "/v1/agent/reports", Need::Checked),
    rule(Method::GET, "/v1/agent/resources", Need::Checked),
    rule(Method::GET, "/v1/live", Need::InTenant(Right::Read)),
    rule(Method::GET, "/v1/whoami", Need::Checked),
    rule(Method::GET, "/v1/version", Need::Checked),
    rule(Method::POST, "/v1/tokens", Need::Checked),
    rule(Method::GET, "/v1/tokens", Need::Checked),
    rule(Method::DELETE, "/v1/tokens/{name}", Need::Checked),
];

/// The writes a dashboard session may make, besides reading: the page's actions (retry a
/// key, a cluster's or a failure group's keys; pause, resume, promote or abort a
/// rollout), each still under its rule above. Every other write needs a bearer token.
pub const SESSION_ACTIONS: &[(Method, &str)] = &[
    (Method::POST, "/v1/status/clusters/{cluster}/syncsets/{syncset}/retry"),
    (Method::POST, "/v1/status/clusters/{name}/retry"),
    (Method::POST, "/v1/status/failures/retry"),
    (Method::POST, "/v1/rollouts/{name}/{control}"),
];

/// Whether a dashboard session may make `method` on the route `path` (see [`SESSION_ACTIONS`]).
pub fn session_action(method: &Method, path: &str) -> bool {
    SESSION_ACTIONS.iter().any(|(m, p)| m == method && *p == path)
}

/// The need of `method` on the route `path` (as matched, with `{params}`); `None` if
/// the table has no row for it.
pub fn need(method: &Method, path: &str) -> Option<Need> {
    // HEAD is answered by GET routes.
    let method = if method == Method::HEAD { &Method::GET } else { method };
    RULES.iter().find(|r| r.method == method && r.path == path).map(|r| r.need)
}

/// Whether the table has a row for `path` with any method.
pub fn known(path: &str) -> bool {
    RULES.iter().any(|r| r.path == path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_actions_are_writes_of_routes_that_need_a_tenants_edit_right() {
        for (method, path) in SESSION_ACTIONS {
            assert_eq!(*method, Method::POST, "{path}");
            assert_eq!(need(method, path), Some(Need::InTenant(Right::Edit)), "{path}");
        }
        assert!(!session_action(&Method::POST, "/v1/apply") && !session_action(&Method::POST, "/v1/tokens"));
    }

    #[test]
    fn every_row_is_unique_and_v1_routes_need_a_credential() {
        for (i, r) in RULES.iter().enumerate() {
            assert!(RULES[..i].iter().all(|o| (o.method.clone(), o.path) != (r.method.clone(), r.path)), "{r:?} twice");
            if r.path.starts_with("/v1/") {
                assert!(!matches!(r.need, Need::Public | Need::Metrics), "{r:?} is open");
            }
        }
        assert_eq!(need(&Method::HEAD, "/healthz"), Some(Need::Public));
        assert_eq!(need(&Method::PUT, "/v1/apply"), None);
    }
}
