//! The access matrix: every route × every kind of caller gets exactly the status it
//! should, and a refused request leaves the store as it was. The table is keyed by the
//! access layer's own route table, so a route cannot be added without its row here.

use crate::harness::Api;
use axum::http::StatusCode;
use fleetsync_model::Kind;
use fleetsync_server::access::RULES;
use fleetsync_store::{StatusFilter, Store};
use std::time::Duration;

/// Tenant `a` holds cluster c1, SyncSet s1 (on c1), Secret sec1 and GitRepository g1, OCIRepository o1,
/// Notifier n1;
/// tenant `b` holds c2.
pub(crate) const FLEET: &str = r#"
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: c1, namespace: a}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: s1, namespace: a}
spec:
  clusterNames: [c1]
  rollout: {steps: [{percent: 100}]}
  resources:
    - {apiVersion: v1, kind: Namespace, metadata: {name: app}}
---
apiVersion: fleetsync.io/v1
kind: Secret
metadata: {name: sec1, namespace: a}
stringData: {token: s3cr3t}
---
apiVersion: fleetsync.io/v1
kind: GitRepository
metadata: {name: g1, namespace: a}
spec: {url: "https://git.example/fleet.git", ref: {branch: main}}
---
apiVersion: fleetsync.io/v1
kind: OCIRepository
metadata: {name: o1, namespace: a}
spec: {url: "oci://registry.example/fleet"}
---
apiVersion: fleetsync.io/v1
kind: Notifier
metadata: {name: n1, namespace: a}
spec: {webhook: {url: "https://hooks.example/fleet"}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: c2, namespace: b}
spec: {endpoint: {simulator: {}}}
"#;

/// Who calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Anonymous,
    Expired,
    Revoked,
    ViewerA,
    EditorA,
    AdminA,
    AdminB,
    Fleet,
    AgentA,
}

const EVERYONE: [Who; 9] = [
    Who::Anonymous,
    Who::Expired,
    Who::Revoked,
    Who::ViewerA,
    Who::EditorA,
    Who::AdminA,
    Who::AdminB,
    Who::Fleet,
    Who::AgentA,
];

/// The token `who` sends, issued in `api`'s store.
async fn token(api: &Api, who: Who) -> Option<String> {
    let grant = match who {
        Who::Anonymous => return None,
        Who::Expired => {
            let t = api.issue("a:admin", Some(Duration::from_millis(1))).await;
            tokio::time::sleep(Duration::from_millis(20)).await;
            return Some(t);
        }
        Who::Revoked => {
            let t = api.issue("fleet-admin", None).await;
            revoke_by_token(api, &t).await;
            return Some(t);
        }
        Who::ViewerA => "a:viewer",
        Who::EditorA => "a:editor",
        Who::AdminA => "a:admin",
        Who::AdminB => "b:admin",
        Who::Fleet => "fleet-admin",
        Who::AgentA => "a:agent:c1",
    };
    Some(api.issue(grant, None).await)
}

async fn revoke_by_token(api: &Api, token: &str) {
    let hash = fleetsync_server::access::tokens::hash(token);
    let record = api.store.token_find(&hash).await.expect("find").expect("issued");
    assert!(api.store.token_revoke(record.grant.tenant(), &record.name).await.expect("revoke"));
}

/// A concrete request for each route: method, URI, body.
fn request(method: &str, path: &str) -> (String, String) {
    let report = r#"{"tenant": "a", "cluster": "c1", "reports": []}"#;
    let (uri, body) = match (method, path) {
        ("POST", "/v1/apply") => ("/v1/apply".into(), "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: s2, namespace: a}\nspec: {clusterNames: [c1], resources: []}\n"),
        ("POST", "/v1/agent/reports") => ("/v1/agent/reports".into(), report),
        ("GET", "/v1/agent/resources") => ("/v1/agent/resources?tenant=a&cluster=c1".into(), ""),
        ("GET", "/v1/live") => ("/v1/live?tenant=a&cluster=c1".into(), ""),
        ("POST", "/v1/tokens") => ("/v1/tokens".into(), r#"{"grant": "a:viewer"}"#),
        ("DELETE", "/v1/tokens/{name}") => ("/v1/tokens/victim".into(), ""),
        ("POST", "/v1/status/clusters/{cluster}/syncsets/{syncset}/retry") => ("/v1/status/clusters/c1/syncsets/s1/retry?tenant=a".into(), ""),
        ("GET", "/v1/status/clusters/{cluster}/syncsets/{syncset}/events") => ("/v1/status/clusters/c1/syncsets/s1/events?tenant=a".into(), ""),
        ("GET", "/v1/rollouts/{name}") => ("/v1/rollouts/s1?tenant=a".into(), ""),
        ("GET", "/v1/status/heatmap") => ("/v1/status/heatmap?tenant=a&groupBy=region".into(), ""),
        ("POST", "/v1/status/failures/retry") => ("/v1/status/failures/retry?tenant=a&cause=boom".into(), ""),
        ("POST", "/v1/sources/{tenant}/{name}/hook") => ("/v1/sources/a/g1/hook".into(), "{}"),
        ("POST", "/v1/rollouts/{name}/{control}") => ("/v1/rollouts/s1/pause?tenant=a".into(), ""),
        ("GET", "/v1/syncsets/{name}/render") => ("/v1/syncsets/s1/render?tenant=a&cluster=c1".into(), ""),
        (_, p) if p.starts_with("/v1/") => {
            let p = p.replace("/v1/clusters/{name}", "/v1/clusters/c1").replace("/v1/syncsets/{name}", "/v1/syncsets/s1");
            let p = p.replace("/v1/secrets/{name}", "/v1/secrets/sec1").replace("/v1/status/clusters/{name}", "/v1/status/clusters/c1");
            let p = p.replace("/v1/status/syncsets/{name}", "/v1/status/syncsets/s1");
            let p = p.replace("/v1/gitrepositories/{name}", "/v1/gitrepositories/g1");
            let p = p.replace("/v1/ocirepositories/{name}", "/v1/ocirepositories/o1");
            let p = p.replace("/v1/notifiers/{name}", "/v1/notifiers/n1");
            let tenant = if matches!(p.as_str(), "/v1/events" | "/v1/members" | "/v1/tokens" | "/v1/whoami" | "/v1/version") { "" } else { "?tenant=a" };
            (format!("{p}{tenant}"), "")
        }
        (_, p) => (p.to_string(), ""),
    };
    (uri, body.to_string())
}

/// What each caller gets on each route (in the order of [`EVERYONE`]).
fn expected(method: &str, path: &str) -> [u16; 9] {
    // Anonymous, expired and revoked callers get 401 on every /v1/ route.
    let row = |viewer, editor, admin_a, admin_b, fleet, agent| {
        [401, 401, 401, viewer, editor, admin_a, admin_b, fleet, agent]
    };
    match (method, path) {
        ("GET", "/livez" | "/readyz" | "/healthz" | "/metrics") => [200; 9],
        // The dashboard's page and assets; a sign-in without the page's Origin is
        // refused whoever signs in, and signing out needs nothing.
        ("GET", "/" | "/ui/app.js" | "/ui/app.css") => [200; 9],
        ("POST", "/ui/session") => [403; 9],
        ("DELETE", "/ui/session") => [204; 9],
        ("POST", "/v1/apply") => row(403, 200, 200, 403, 200, 403),
        (
            "GET",
            "/v1/clusters"
            | "/v1/clusters/{name}"
            | "/v1/syncsets"
            | "/v1/syncsets/{name}"
            | "/v1/syncsets/{name}/render",
        ) => row(200, 200, 200, 403, 200, 403),
        (
            "GET",
            "/v1/status"
            | "/v1/status/summary"
            | "/v1/status/clusters/{name}"
            | "/v1/status/syncsets/{name}"
            | "/v1/status/failures"
            | "/v1/status/clusters"
            | "/v1/status/heatmap"
            | "/v1/status/activity"
            | "/v1/live",
        )
        | ("GET", "/v1/status/clusters/{cluster}/syncsets/{syncset}/events") => row(200, 200, 200, 403, 200, 403),
        (
            "GET",
            "/v1/gitrepositories"
            | "/v1/gitrepositories/{name}"
            | "/v1/ocirepositories"
            | "/v1/ocirepositories/{name}"
            | "/v1/notifiers"
            | "/v1/notifiers/{name}",
        ) => row(200, 200, 200, 403, 200, 403),
        (
            "DELETE",
            "/v1/clusters/{name}"
            | "/v1/syncsets/{name}"
            | "/v1/gitrepositories/{name}"
            | "/v1/ocirepositories/{name}"
            | "/v1/notifiers/{name}",
        ) => row(403, 200, 200, 403, 200, 403),
        (
            "POST",
            "/v1/gitrepositories/{name}/reconcile"
            | "/v1/ocirepositories/{name}/reconcile"
            | "/v1/notifiers/{name}/reconcile",
        ) => row(403, 202, 202, 403, 202, 403),
        // Signed with the source's webhook secret, or refused whoever calls.
        ("POST", "/v1/sources/{tenant}/{name}/hook") => [401; 9],
        (
            "POST",
            "/v1/status/clusters/{cluster}/syncsets/{syncset}/retry"
            | "/v1/status/clusters/{name}/retry"
            | "/v1/status/failures/retry",
        ) => row(403, 202, 202, 403, 202, 403),
        ("GET", "/v1/rollouts" | "/v1/rollouts/{name}") => row(200, 200, 200, 403, 200, 403),
        // Allowed callers reach the handler, which refuses to pause a completed rollout.
        ("POST", "/v1/rollouts/{name}/{control}") => row(403, 409, 409, 403, 409, 403),
        ("GET" | "DELETE", "/v1/secrets" | "/v1/secrets/{name}") => row(403, 403, 200, 403, 200, 403),
        ("GET", "/v1/members") => row(403, 403, 403, 403, 200, 403),
        ("GET", "/v1/events") => row(200, 200, 200, 200, 200, 403),
        ("POST", "/v1/agent/reports") | ("GET", "/v1/agent/resources") => row(403, 403, 403, 403, 403, 200),
        ("GET", "/v1/whoami" | "/v1/version") => row(200, 200, 200, 200, 200, 200),
        // The token routes are an admin's (of some tenant) or a fleet-admin's.
        ("GET", "/v1/tokens") => row(403, 403, 200, 200, 200, 403),
        ("POST", "/v1/tokens") => row(403, 403, 201, 403, 201, 403),
        ("DELETE", "/v1/tokens/{name}") => row(403, 403, 200, 404, 200, 403),
        (m, p) => panic!("no row for {m} {p}: add one to the access matrix"),
    }
}

/// Everything a request could change, as text.
async fn snapshot(store: &dyn Store) -> String {
    let mut out = String::new();
    for kind in [Kind::Cluster, Kind::SyncSet, Kind::Secret, Kind::GitRepository, Kind::OCIRepository, Kind::Notifier] {
        let names: Vec<String> = match kind {
            Kind::Cluster => {
                store.cluster_list(None).await.expect("list").into_iter().map(|c| format!("{c:?}")).collect()
            }
            Kind::SyncSet => {
                store.syncset_list(None).await.expect("list").into_iter().map(|s| format!("{s:?}")).collect()
            }
            Kind::Secret => {
                store.secret_list(None).await.expect("list").into_iter().map(|s| s.metadata.name.clone()).collect()
            }
            Kind::GitRepository => {
                store.git_repository_list(None).await.expect("list").into_iter().map(|g| format!("{g:?}")).collect()
            }
            Kind::OCIRepository => {
                store.oci_repository_list(None).await.expect("list").into_iter().map(|o| format!("{o:?}")).collect()
            }
            Kind::Notifier => {
                store.notifier_list(None).await.expect("list").into_iter().map(|n| format!("{n:?}")).collect()
            }
        };
        out.push_str(&format!("{names:?}\n"));
    }
    let status = store.status_list(&StatusFilter::default()).await.expect("status");
    out.push_str(&format!("{status:?}\n"));
    out.push_str(&format!("{:?}\n", store.events_read(0, 10_000).await.expect("events")));
    out.push_str(&format!("{:?}\n", store.token_list().await.expect("tokens")));
    out
}

#[tokio::test]
async fn every_route_answers_every_caller_as_it_should() {
    let mut failures = Vec::new();
    for rule in RULES {
        let (method, path) = (rule.method.as_str(), rule.path);
        let want = expected(method, path);
        let (uri, body) = request(method, path);
        for (who, want) in EVERYONE.into_iter().zip(want) {
            let api = Api::new();
            assert_eq!(api.apply(FLEET).await.status, StatusCode::OK);
            api.issue_named("a:viewer", "victim").await;
            let token = token(&api, who).await;
            let before = snapshot(api.store.as_ref()).await;
            let content_type =
                (method == "POST").then(|| if path == "/v1/apply" { "application/yaml" } else { "application/json" });
            let got = api.call_as(token.as_deref(), method, &uri, content_type, body.clone()).await;
            if got.status.as_u16() != want {
                failures.push(format!("{method} {uri} as {who:?}: got {}, want {want}: {}", got.status, got.text));
            }
            if !got.status.is_success() {
                assert_eq!(
                    snapshot(api.store.as_ref()).await,
                    before,
                    "{method} {uri} as {who:?} was refused but changed the store"
                );
            }
            if let Some(t) = &token {
                assert!(!got.text.contains(t.as_str()), "{method} {uri} as {who:?} echoed the token");
            }
        }
    }
    assert!(failures.is_empty(), "{} wrong answers:\n{}", failures.len(), failures.join("\n"));
}

/// `n` Clusters in `tenant`, named from `from`: one event each.
fn clusters(tenant: &str, from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{i}, namespace: {tenant}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// Reads a watch until a bookmark at `seq` or later; returns the events seen.
async fn events_until(lines: &mut crate::harness::Lines, seq: u64) -> Vec<serde_json::Value> {
    let mut events = Vec::new();
    loop {
        for line in lines.expect_chunk().await {
            match line["type"].as_str() {
                Some("EVENT") => events.push(line["event"].clone()),
                Some("BOOKMARK") if line["seq"].as_u64() >= Some(seq) => return events,
                _ => {}
            }
        }
    }
}

/// The event log is shown by tenant: a watcher of tenant `b` sees none of 1,000 changes
/// in tenant `a` (only its own), a watcher of `a` sees all of them, in order; pages of
/// the list skip what the caller may not see without ending early.
#[tokio::test]
async fn the_event_log_shows_each_caller_its_own_tenants() {
    let api = Api::new();
    let (a, b) = (api.issue("a:viewer", None).await, api.issue("b:viewer", None).await);
    let (_, _, mut watch_a) = api.stream_as(Some(&a), "/v1/events?watch=true&limit=100").await;
    let (_, _, mut watch_b) = api.stream_as(Some(&b), "/v1/events?watch=true&limit=100").await;
    for round in 0..10 {
        assert_eq!(api.apply(&clusters("a", round * 100, 100)).await.status, StatusCode::OK);
    }
    assert_eq!(api.apply(&clusters("b", 0, 1)).await.status, StatusCode::OK);
    let last = api.store.events_read(0, 10_000).await.expect("events").last().expect("events").seq;

    let seen_a = events_until(&mut watch_a, last).await;
    assert_eq!(seen_a.len(), 1000);
    assert!(seen_a.iter().all(|e| e["tenant"] == "a"));
    let seqs: Vec<u64> = seen_a.iter().map(|e| e["seq"].as_u64().expect("seq")).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order");
    let seen_b = events_until(&mut watch_b, last).await;
    assert_eq!(seen_b.len(), 1, "b sees its own change only: {seen_b:?}");
    assert_eq!(seen_b[0]["tenant"], "b");

    let page = api.call_as(Some(&b), "GET", "/v1/events?limit=10", None, "").await;
    let items = page.json()["items"].as_array().cloned().expect("items");
    assert_eq!(items.len(), 1, "a page reads past 1,000 events of another tenant: {}", page.text);
    let agent = api.issue("a:agent:c1", None).await;
    assert_eq!(api.call_as(Some(&agent), "GET", "/v1/events", None, "").await.status, StatusCode::FORBIDDEN);
}

/// What the operator chooses: `/metrics` behind a credential (any but an agent's), and
/// the `inCluster` endpoint for the tenants allowed only; bodies are YAML or JSON only.
#[tokio::test]
async fn operator_settings_and_content_types_are_enforced() {
    let in_cluster = "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: hub, namespace: ops}\nspec: {endpoint: {inCluster: {}}}\n";
    let open = Api::new();
    let fleet = open.admin_token().await;
    assert_eq!(open.call_as(None, "GET", "/metrics", None, "").await.status, StatusCode::OK);
    let refused = open.call_as(Some(&fleet), "POST", "/v1/apply", Some("application/yaml"), in_cluster).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
    assert!(refused.error().contains("inCluster"), "{}", refused.text);
    assert!(open.store.cluster_list(None).await.expect("list").is_empty(), "nothing written");
    for ct in
        [Some("text/plain"), Some("application/x-www-form-urlencoded"), Some("multipart/form-data; boundary=x"), None]
    {
        let a = open.call_as(Some(&fleet), "POST", "/v1/apply", ct, crate::harness::FLEET).await;
        assert_eq!(a.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{ct:?}: {}", a.text);
    }
    assert!(open.store.cluster_list(None).await.expect("list").is_empty(), "nothing written");

    let strict = Api::with_access(|a| {
        a.metrics_require_auth = true;
        a.in_cluster_tenants.insert("ops".into());
    });
    let (fleet, viewer, agent) =
        (strict.admin_token().await, strict.issue("ops:viewer", None).await, strict.issue("ops:agent:hub", None).await);
    assert_eq!(strict.call_as(None, "GET", "/metrics", None, "").await.status, StatusCode::UNAUTHORIZED);
    assert_eq!(strict.call_as(Some(&agent), "GET", "/metrics", None, "").await.status, StatusCode::FORBIDDEN);
    assert_eq!(strict.call_as(Some(&viewer), "GET", "/metrics", None, "").await.status, StatusCode::OK);
    assert_eq!(strict.call_as(None, "GET", "/livez", None, "").await.status, StatusCode::OK);
    let allowed = strict.call_as(Some(&fleet), "POST", "/v1/apply", Some("application/yaml"), in_cluster).await;
    assert_eq!(allowed.status, StatusCode::OK, "{}", allowed.text);
}
