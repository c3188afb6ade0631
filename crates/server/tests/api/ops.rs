//! Events, health, metrics, and what happens on requests the API does not know.

use crate::harness::{Api, FLEET};
use axum::http::StatusCode;

#[tokio::test]
async fn metrics_after_apply() {
    let api = Api::new();
    api.apply(FLEET).await;
    let m = api.get("/metrics").await;
    assert_eq!(m.status, StatusCode::OK);
    assert_eq!(
        m.content_type, "text/plain; version=0.0.4; charset=utf-8",
        "the classic format unless OpenMetrics is asked for"
    );
    assert!(m.text.contains("fleetsync_keys{phase=\"Pending\"} 2\n"), "{}", m.text);
    assert!(m.text.contains("fleetsync_keys{phase=\"Parked\"} 0\n"), "{}", m.text);
    assert!(m.text.contains("fleetsync_oldest_ready_age_seconds "), "{}", m.text);
    assert!(m.text.contains("fleetsync_parked_keys 0\n"), "{}", m.text);
    assert!(m.text.contains("fleetsync_event_log_last_seq 3\n"), "{}", m.text);
    assert!(m.text.contains("fleetsync_build_info{version=\""), "{}", m.text);
    assert!(!m.text.contains("# EOF"), "{}", m.text);
}

#[tokio::test]
async fn events_page_from_a_cursor() {
    let api = Api::new();
    api.apply(FLEET).await;
    let all = api.get("/v1/events").await.json();
    let items = all["items"].as_array().cloned().expect("items");
    assert_eq!(items.len(), 3);
    assert_eq!(items[0]["action"], "Created");
    let after = api.get("/v1/events?after=2&limit=5").await.json();
    assert_eq!(after["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(after["items"][0]["seq"], 3);
    assert_eq!(api.get("/v1/events?limit=1").await.json()["items"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn bad_event_parameters_are_400_json() {
    let api = Api::new();
    for (uri, param) in [
        ("/v1/events?after=abc", "after"),
        ("/v1/events?after=-1", "after"),
        ("/v1/events?limit=0", "limit"),
        ("/v1/events?limit=10001", "limit"),
        ("/v1/events?limit=x", "limit"),
        ("/v1/events?tenant=a", "tenant"),
    ] {
        let a = api.get(uri).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{uri}");
        assert!(a.content_type.starts_with("application/json"), "{uri}: {}", a.content_type);
        assert!(a.error().contains(&format!("`{param}`")), "{uri}: {}", a.text);
    }
    assert_eq!(api.get("/v1/events?limit=10000").await.status, StatusCode::OK);
}

#[tokio::test]
async fn healthz() {
    let a = Api::new().get("/healthz").await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.json(), serde_json::json!({"status": "ok"}));
}

#[tokio::test]
async fn unknown_routes_and_methods_are_json() {
    let api = Api::new();
    let a = api.get("/v2/nothing").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert_eq!(a.error(), "no route for GET /v2/nothing");
    let m = api.call("PUT", "/v1/clusters", "").await;
    assert_eq!(m.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(m.error().contains("PUT"), "{}", m.text);
    assert_eq!(api.get("/v1/apply").await.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// Odd input never panics, and every answer is JSON below 500.
#[tokio::test]
async fn odd_requests_get_json_answers() {
    let api = Api::new();
    let uris = [
        "/v1/clusters?tenant=%ff",
        "/v1/clusters/%ff%fe",
        "/v1/clusters/%00",
        "/v1/clusters?tenant=a&tenant=b",
        "/v1/status?cluster=&syncset=",
        "/v1/events?after=99999999999999999999999",
        "/v1/events?after=18446744073709551615",
        "/v1/status/clusters/a/syncsets/b/retry",
        "/v1/clusters//",
        "/v1/%",
    ];
    for uri in uris {
        for method in ["GET", "POST", "DELETE"] {
            let a = api.call(method, uri, "\u{0}---\n[").await;
            assert!(a.status.as_u16() < 500, "{method} {uri}: {} {}", a.status, a.text);
            assert!(a.json().is_object(), "{method} {uri}: {}", a.text);
        }
    }
    for body in ["---\n---\n", "[]", "42", "{", "a: &x [*x]", "apiVersion: fleetsync.io/v1\nkind: [x]\n"] {
        let a = api.apply(body).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body:?}: {}", a.text);
    }
}
