//! Push notifications: signed with the source's webhook secret they make its key run
//! now; anything else is the same 401, and no answer holds the secret.

use crate::harness::Api;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use fleetsync_model::{Phase, WorkKey};
use ring::hmac;

const SECRET: &str = "MARKER-hook-secret";

const SOURCES: &str = r#"
apiVersion: fleetsync.io/v1
kind: Secret
metadata: {name: hook, namespace: a}
stringData: {token: MARKER-hook-secret}
---
apiVersion: fleetsync.io/v1
kind: GitRepository
metadata: {name: fleet, namespace: a}
spec: {url: "https://git.example/fleet.git", ref: {branch: main}, webhookSecretRef: {name: hook}}
---
apiVersion: fleetsync.io/v1
kind: GitRepository
metadata: {name: quiet, namespace: a}
spec: {url: "https://git.example/quiet.git", ref: {branch: main}}
"#;

fn signed(path: &str, body: &str, header: &str, value: String) -> Request<Body> {
    let req = Request::builder().method("POST").uri(path).header("content-type", "application/json");
    req.header(header, value).body(Body::from(body.to_string())).expect("request")
}

fn github(secret: &str, body: &str) -> String {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes()), body.as_bytes());
    format!("sha256={}", tag.as_ref().iter().map(|b| format!("{b:02x}")).collect::<String>())
}

#[tokio::test]
async fn a_signed_notification_fetches_now_and_anything_else_is_refused_alike() {
    let api = Api::new();
    assert_eq!(api.apply(SOURCES).await.status, StatusCode::OK);
    let key = WorkKey::source("a", "fleet");
    // The key runs once (its first fetch) and waits for its interval.
    let store = api.store.clone();
    let item = store.work_claim(fleetsync_store::ClaimParams::new("w", 10, std::time::Duration::from_secs(30))).await;
    let item = item.expect("claim").into_iter().find(|i| i.key == key).expect("the source's key");
    let done = fleetsync_store::RunOutcome::Requeue {
        generation: item.generation,
        inventory: Vec::new(),
        after: std::time::Duration::from_secs(300),
    };
    let completion =
        fleetsync_store::Completion { key: key.clone(), fence: item.fence, outcome: done, resources: vec![] };
    store.work_complete(vec![completion]).await.expect("complete");
    let waiting = store.status_get(&key).await.expect("status").expect("a key");
    assert!(waiting.next_attempt_at.is_some(), "{waiting:?}");

    let body = r#"{"ref": "refs/heads/main"}"#;
    let path = "/v1/sources/a/fleet/hook";
    let mut refusals = Vec::new();
    for req in [
        signed(path, body, "x-hub-signature-256", github("wrong", body)),
        signed(path, body, "x-gitlab-token", "wrong".into()),
        signed(path, body, "x-unknown", "x".into()),
        signed("/v1/sources/a/quiet/hook", body, "x-hub-signature-256", github(SECRET, body)),
        signed("/v1/sources/a/absent/hook", body, "x-hub-signature-256", github(SECRET, body)),
        signed("/v1/sources/b/fleet/hook", body, "x-hub-signature-256", github(SECRET, body)),
    ] {
        let answer = api.send(req).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{}", answer.text);
        assert!(!answer.text.contains("MARKER"), "{}", answer.text);
        refusals.push(answer.error());
    }
    refusals.dedup();
    assert_eq!(refusals.len(), 1, "every refusal reads the same: {refusals:?}");
    let still = store.status_get(&key).await.expect("status").expect("a key");
    assert_eq!(still.next_attempt_at, waiting.next_attempt_at, "a refused notification changes nothing");

    for req in [
        signed(path, body, "x-hub-signature-256", github(SECRET, body)),
        signed(path, body, "x-gitlab-token", SECRET.into()),
        signed(path, body, "x-signature", github(SECRET, body)),
    ] {
        let answer = api.send(req).await;
        assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.text);
        assert!(!answer.text.contains("MARKER"), "{}", answer.text);
        let now = store.status_get(&key).await.expect("status").expect("a key");
        assert_eq!((now.phase, now.next_attempt_at), (Phase::Pending, None), "{now:?}");
    }
}

#[tokio::test]
async fn a_notification_over_its_size_limit_is_refused_naming_the_limit() {
    let api = Api::new();
    assert_eq!(api.apply(SOURCES).await.status, StatusCode::OK);
    let limit = fleetsync_server::hook::MAX_NOTIFICATION_BYTES;
    let body = format!("{{\"pad\": \"{}\"}}", "x".repeat(limit));
    let resp = api.send(signed("/v1/sources/a/fleet/hook", &body, "x-hub-signature-256", github(SECRET, &body))).await;
    assert_eq!(resp.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", resp.text);
    assert!(resp.text.contains(&limit.to_string()), "{}", resp.text);
    let fits = r#"{"ref": "refs/heads/main"}"#;
    let resp = api.send(signed("/v1/sources/a/fleet/hook", fits, "x-hub-signature-256", github(SECRET, fits))).await;
    assert_eq!(resp.status, StatusCode::ACCEPTED, "{}", resp.text);
}
