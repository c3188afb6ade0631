//! The apply path under the mutation fuzzer (`FLEETSYNC_FUZZ_SECONDS`, default 3): every
//! mutated body posted to `POST /v1/apply` is answered without a 5xx, and whatever was
//! accepted can be read back everywhere (lists, each object, status) without a 5xx.

use crate::harness::{Api, FLEET};
use axum::http::StatusCode;
use fleetsync_testkit::fuzz::Fuzz;

const EXAMPLE: &str = include_str!("../../../../examples/fleet.yaml");

/// Every read a client can make of what was accepted answers 200.
async fn reads_back(api: &Api, input: &str) {
    for list in ["/v1/clusters", "/v1/syncsets", "/v1/secrets", "/v1/status"] {
        let a = api.get(list).await;
        assert_eq!(a.status, StatusCode::OK, "GET {list} after accepting {input:?}: {}", a.text);
    }
    for (plural, items) in
        [("syncsets", api.get("/v1/syncsets").await.json()), ("clusters", api.get("/v1/clusters").await.json())]
    {
        for item in items["items"].as_array().into_iter().flatten() {
            let (name, tenant) =
                (item["metadata"]["name"].as_str().unwrap_or(""), item["metadata"]["namespace"].as_str().unwrap_or(""));
            let a = api.get(&format!("/v1/{plural}/{name}?tenant={tenant}")).await;
            assert_eq!(a.status, StatusCode::OK, "GET {plural}/{name} after accepting {input:?}: {}", a.text);
        }
    }
}

#[tokio::test]
async fn fuzz_the_apply_path() {
    let api = Api::new();
    let mut fuzz = Fuzz::new(vec![FLEET.to_string(), EXAMPLE.to_string()]);
    let (mut tried, mut accepted) = (0u64, 0u64);
    while let Some(input) = fuzz.next_input() {
        tried += 1;
        let a = api.apply(&input).await;
        assert!(!a.status.is_server_error(), "{} on {input:?}: {}", a.status, a.text);
        if a.status == StatusCode::OK {
            accepted += 1;
            reads_back(&api, &input).await;
            fuzz.keep(input);
        }
    }
    eprintln!("fuzz: posted {tried} bodies in {}s (seed {}), {accepted} accepted", fuzz.seconds, fuzz.seed);
    assert!(tried > 0);
}
