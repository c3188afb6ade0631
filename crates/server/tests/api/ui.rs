//! The dashboard over plain HTTP: its page and its headers, signing in and out, and
//! what a session cookie may do — read, from the hub's own pages, with the rights of
//! the token it signed in with; never write, never from another origin.

use crate::access::FLEET;
use crate::harness::{Answer, Api};
use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use tower::ServiceExt;

const HOST: &str = "hub.test:8080";
const ORIGIN: &str = "http://hub.test:8080";

/// A request with these headers; answers the status, the headers we look at, the body.
async fn send(
    api: &Api,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (Answer, Option<String>, Option<String>) {
    let mut req = Request::builder().method(method).uri(uri).header("host", HOST);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp =
        api.router.clone().oneshot(req.body(Body::from(body.to_string())).expect("request")).await.expect("infallible");
    let status = resp.status();
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (content_type, cookie, csp) =
        (header("content-type").unwrap_or_default(), header("set-cookie"), header("content-security-policy"));
    let bytes = to_bytes(resp.into_body(), usize::MAX).await.expect("body");
    (Answer { status, content_type, text: String::from_utf8_lossy(&bytes).into_owned() }, cookie, csp)
}

/// Signs in with `token` from the hub's page: the `name=value` of the session cookie.
async fn sign_in(api: &Api, token: &str) -> String {
    let body = serde_json::json!({ "token": token }).to_string();
    let (answer, cookie, _) =
        send(api, "POST", "/ui/session", &[("origin", ORIGIN), ("content-type", "application/json")], &body).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert!(!answer.text.contains(token), "the sign-in echoed the token");
    let cookie = cookie.expect("a session cookie");
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(part), "{cookie} lacks {part}");
    }
    assert!(!cookie.contains("Secure"), "not over https: {cookie}");
    assert!(!cookie.contains(token), "the cookie carries the token itself: {cookie}");
    cookie.split(';').next().expect("name=value").to_string()
}

#[tokio::test]
async fn the_page_and_its_assets_forbid_what_they_do_not_need() {
    let api = Api::new();
    for (path, kind) in [("/", "text/html"), ("/ui/app.js", "text/javascript"), ("/ui/app.css", "text/css")] {
        let req = Request::builder().uri(path).body(Body::empty()).expect("request");
        let resp = api.router.clone().oneshot(req).await.expect("infallible");
        assert_eq!(resp.status(), StatusCode::OK, "{path}");
        let h = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        assert!(h("content-type").starts_with(kind), "{path}: {}", h("content-type"));
        assert!(h("content-security-policy").starts_with("default-src 'self'"), "{path}");
        assert!(h("content-security-policy").contains("frame-ancestors 'none'"), "{path}");
        assert_eq!((h("x-content-type-options"), h("x-frame-options")), ("nosniff".into(), "DENY".into()), "{path}");
    }
}

#[tokio::test]
async fn a_session_reads_with_the_rights_of_its_token() {
    let api = Api::new();
    assert_eq!(api.apply(FLEET).await.status, StatusCode::OK);
    let viewer_b = api.issue("b:viewer", None).await;
    let cookie = sign_in(&api, &viewer_b).await;
    let get = |uri: &'static str| {
        let cookie = cookie.clone();
        let api = &api;
        async move { send(api, "GET", uri, &[("cookie", &cookie)], "").await.0 }
    };
    let me = get("/v1/whoami").await;
    assert_eq!(me.status, StatusCode::OK, "{}", me.text);
    assert_eq!(me.json()["grants"], serde_json::json!(["b:viewer"]));
    let own = get("/v1/clusters?tenant=b&limit=10").await;
    assert_eq!(own.json()["items"][0]["metadata"]["name"], "c2", "{}", own.text);
    for uri in
        ["/v1/clusters?tenant=a", "/v1/status?tenant=a", "/v1/status/syncsets/s1?tenant=a&limit=1", "/v1/members"]
    {
        assert_eq!(get(uri).await.status, StatusCode::FORBIDDEN, "{uri}");
    }
    // A same-origin GET with its Origin header is fine too.
    let (answer, _, _) = send(&api, "GET", "/v1/whoami", &[("cookie", &cookie), ("origin", ORIGIN)], "").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
}

#[tokio::test]
async fn a_session_writes_nothing_but_the_pages_actions() {
    let api = Api::new();
    assert_eq!(api.apply(FLEET).await.status, StatusCode::OK);
    let admin = api.admin_token().await;
    let cookie = sign_in(&api, &admin).await;
    let doc = "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: c9, namespace: a}\nspec: {endpoint: {simulator: {}}}\n";
    let writes = [
        ("POST", "/v1/apply", "application/yaml", doc),
        ("DELETE", "/v1/clusters/c1?tenant=a", "", ""),
        ("POST", "/v1/tokens", "application/json", r#"{"grant": "fleet-admin"}"#),
        ("POST", "/v1/gitrepositories/g1/reconcile?tenant=a", "", ""),
    ];
    for (method, uri, content_type, body) in writes {
        let mut headers = vec![("cookie", cookie.as_str()), ("origin", ORIGIN)];
        if !content_type.is_empty() {
            headers.push(("content-type", content_type));
        }
        let (answer, _, _) = send(&api, method, uri, &headers, body).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{method} {uri}: {}", answer.text);
        assert!(answer.error().contains("only reads"), "{}", answer.error());
    }
    let clusters = api.get("/v1/clusters?tenant=a").await.json();
    assert_eq!(clusters["items"].as_array().map(Vec::len), Some(1), "nothing was written: {clusters}");
    assert_eq!(api.get("/v1/tokens").await.json()["items"].as_array().map(Vec::len), Some(1), "no token was issued");

    // The page's actions: from the hub's own page only, under the token's role, with
    // the token's subject as the actor.
    let retry = "/v1/status/clusters/c1/syncsets/s1/retry?tenant=a";
    for (origin, want) in [(None, StatusCode::FORBIDDEN), (Some("http://evil.example"), StatusCode::FORBIDDEN)] {
        let mut headers = vec![("cookie", cookie.as_str())];
        headers.extend(origin.map(|o| ("origin", o)));
        let (answer, _, _) = send(&api, "POST", retry, &headers, "").await;
        assert_eq!(answer.status, want, "{origin:?}: {}", answer.text);
    }
    let (answer, _, _) = send(&api, "POST", retry, &[("cookie", &cookie), ("origin", ORIGIN)], "").await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.text);
    let events = api.get("/v1/events").await.json();
    let retried = events["items"].as_array().and_then(|e| e.iter().rev().find(|e| e["kind"] == "Status")).cloned();
    let actor = retried.as_ref().and_then(|e| e["actor"].as_str().map(str::to_string));
    assert!(actor.is_some_and(|a| a.starts_with("token:")), "the retry's event names its actor: {events}");
    let (answer, _, _) =
        send(&api, "POST", "/v1/status/clusters/c1/retry?tenant=a", &[("cookie", &cookie), ("origin", ORIGIN)], "")
            .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.text);

    let viewer = sign_in(&api, &api.issue("a:viewer", None).await).await;
    let (answer, _, _) = send(&api, "POST", retry, &[("cookie", &viewer), ("origin", ORIGIN)], "").await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN, "a viewer retries nothing: {}", answer.text);
}

#[tokio::test]
async fn a_session_is_refused_from_another_origin() {
    let api = Api::new();
    let cookie = sign_in(&api, &api.admin_token().await).await;
    for origin in ["http://evil.example", "http://hub.test:8081", "https://hub.test.evil.example:8080", "null"] {
        let (answer, _, _) = send(&api, "GET", "/v1/whoami", &[("cookie", &cookie), ("origin", origin)], "").await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{origin}: {}", answer.text);
    }
}

#[tokio::test]
async fn signing_in_needs_the_hubs_page_a_json_body_and_a_good_token() {
    let api = Api::new();
    let token = api.issue("a:viewer", None).await;
    let body = serde_json::json!({ "token": token }).to_string();
    let json = ("content-type", "application/json");
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Headers, String, StatusCode); 7] = [
        (&[json], body.clone(), StatusCode::FORBIDDEN),
        (&[json, ("origin", "http://evil.example")], body.clone(), StatusCode::FORBIDDEN),
        (
            &[("origin", ORIGIN), ("content-type", "application/x-www-form-urlencoded")],
            format!("token={token}"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (&[("origin", ORIGIN), json], serde_json::json!({ "token": "fst_0000" }).to_string(), StatusCode::UNAUTHORIZED),
        (&[("origin", ORIGIN), json], serde_json::json!(token).to_string(), StatusCode::BAD_REQUEST),
        (
            &[("origin", ORIGIN), json],
            serde_json::json!({ "token": "  " }).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            &[("origin", ORIGIN), json],
            serde_json::json!({ "token": "x".repeat(20_000) }).to_string(),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
    ];
    for (headers, body, want) in cases {
        let (answer, cookie, _) = send(&api, "POST", "/ui/session", headers, &body).await;
        assert_eq!(answer.status, want, "{headers:?}: {}", answer.text);
        assert!(cookie.is_none(), "{headers:?}: no session");
        assert!(!answer.text.contains(&token), "{headers:?}: the answer echoed the token");
    }
}

#[tokio::test]
async fn signing_out_or_revoking_the_token_ends_the_session() {
    let api = Api::new();
    let token = api.issue_named("a:viewer", "browser").await;
    let cookie = sign_in(&api, &token).await;
    let whoami = |cookie: String| {
        let api = &api;
        async move { send(api, "GET", "/v1/whoami", &[("cookie", &cookie)], "").await.0.status }
    };
    assert_eq!(whoami(cookie.clone()).await, StatusCode::OK);
    let (answer, cleared, _) =
        send(&api, "DELETE", "/ui/session", &[("cookie", &cookie), ("origin", ORIGIN)], "").await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{}", answer.text);
    assert!(cleared.is_some_and(|c| c.contains("Max-Age=0")), "the cookie is cleared");
    assert_eq!(whoami(cookie).await, StatusCode::UNAUTHORIZED);

    let cookie = sign_in(&api, &token).await;
    assert_eq!(api.call("DELETE", "/v1/tokens/browser", Body::empty()).await.status, StatusCode::OK);
    assert_eq!(whoami(cookie).await, StatusCode::UNAUTHORIZED, "a revoked token's session reads nothing");
}
