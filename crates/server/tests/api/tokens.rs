//! Hub-issued tokens over the API: a token's name is unique in its tenant (the tenant
//! of its grant), so one tenant's names neither block nor reveal another's; the token
//! routes are an admin's.

use crate::harness::Api;
use axum::http::StatusCode;

async fn create(api: &Api, token: &str, grant: &str, name: &str) -> crate::harness::Answer {
    let body = format!(r#"{{"grant": "{grant}", "name": "{name}"}}"#);
    api.call_as(Some(token), "POST", "/v1/tokens", Some("application/json"), body).await
}

async fn delete(api: &Api, token: &str, uri: &str) -> crate::harness::Answer {
    api.call_as(Some(token), "DELETE", uri, None, "").await
}

#[tokio::test]
async fn token_names_are_per_tenant_and_tell_nothing_of_other_tenants() {
    let api = Api::new();
    let admin_a = api.issue("a:admin", None).await;
    let admin_b = api.issue("b:admin", None).await;

    let a = create(&api, &admin_a, "a:editor", "ci").await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.text);
    let a_token = a.json()["token"].as_str().expect("token").to_string();
    // The name tenant a uses is free in tenant b: b's admin learns nothing of a's.
    let b = create(&api, &admin_b, "b:viewer", "ci").await;
    assert_eq!(b.status, StatusCode::CREATED, "{}", b.text);
    let b_token = b.json()["token"].as_str().expect("token").to_string();

    // Taken in one's own tenant: a 409 that names that tenant only.
    let again = create(&api, &admin_b, "b:editor", "ci").await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text);
    assert!(again.error().contains("in tenant b") && !again.error().contains("tenant a"), "{}", again.error());

    // Each admin lists and revokes its own tenant's `ci`, never the other's.
    let names = |a: &crate::harness::Answer| -> Vec<String> {
        a.json()["items"].as_array().expect("items").iter().map(|t| format!("{} {}", t["name"], t["grant"])).collect()
    };
    let listed = api.call_as(Some(&admin_b), "GET", "/v1/tokens", None, "").await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
    assert!(
        names(&listed).contains(&r#""ci" "b:viewer""#.to_string()) && !names(&listed).iter().any(|n| n.contains("a:")),
        "{:?}",
        names(&listed)
    );
    assert_eq!(delete(&api, &admin_b, "/v1/tokens/ci?tenant=a").await.status, StatusCode::NOT_FOUND, "not b's to see");
    let revoked = delete(&api, &admin_b, "/v1/tokens/ci").await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.text);
    assert_eq!(delete(&api, &admin_b, "/v1/tokens/ci").await.status, StatusCode::NOT_FOUND, "b's is gone");
    assert_eq!(api.call_as(Some(&b_token), "GET", "/v1/whoami", None, "").await.status, StatusCode::UNAUTHORIZED);
    let who = api.call_as(Some(&a_token), "GET", "/v1/whoami", None, "").await;
    assert_eq!(who.status, StatusCode::OK, "a's `ci` still works: {}", who.text);
}

#[tokio::test]
async fn a_caller_who_sees_several_tokens_of_a_name_says_which_tenant() {
    let api = Api::new();
    let fleet = api.admin_token().await;
    for grant in ["a:editor", "b:viewer"] {
        assert_eq!(create(&api, &fleet, grant, "deploy").await.status, StatusCode::CREATED);
    }
    let several = delete(&api, &fleet, "/v1/tokens/deploy").await;
    assert_eq!(several.status, StatusCode::CONFLICT, "{}", several.text);
    assert!(
        several.error().contains("tenant a, tenant b") && several.error().contains("?tenant="),
        "{}",
        several.error()
    );
    assert_eq!(delete(&api, &fleet, "/v1/tokens/deploy?tenant=a").await.status, StatusCode::OK);
    assert_eq!(delete(&api, &fleet, "/v1/tokens/deploy?tenant=a").await.status, StatusCode::NOT_FOUND);
    assert_eq!(delete(&api, &fleet, "/v1/tokens/deploy").await.status, StatusCode::OK, "one left: the name is enough");
    let bad = delete(&api, &fleet, "/v1/tokens/deploy?tenant=Not_A_Tenant").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.text);

    // A hub-wide (fleet-admin) token's name is the hub's: unique among all tokens.
    assert_eq!(create(&api, &fleet, "fleet-admin", "ops").await.status, StatusCode::CREATED);
    assert_eq!(create(&api, &fleet, "a:viewer", "ops").await.status, StatusCode::CONFLICT);
}

#[tokio::test]
async fn only_admins_list_or_revoke_tokens() {
    let api = Api::new();
    api.issue_named("a:viewer", "victim").await;
    for grant in ["a:viewer", "a:editor", "a:agent:c1"] {
        let token = api.issue(grant, None).await;
        let list = api.call_as(Some(&token), "GET", "/v1/tokens", None, "").await;
        assert_eq!(list.status, StatusCode::FORBIDDEN, "{grant}: {}", list.text);
        assert!(list.error().contains("needs role admin"), "{}", list.error());
        assert_eq!(delete(&api, &token, "/v1/tokens/victim").await.status, StatusCode::FORBIDDEN, "{grant}");
    }
}
