//! Failures by cause and the page's actions: the groups the page shows are the API's,
//! a group's retry and a rollout's promote are made from the page (asked, confirmed,
//! recorded with the signed-in token as the actor) and their effect shows without a
//! reload.

use crate::browser::{js, js_bool};
use crate::hub::Hub;
use crate::page::{click, eventually, eventually_value, Screenshots};
use crate::rollouts::staged;
use fantoccini::Client;
use serde_json::Value;

/// `(cause, keys)` of each group, in order.
fn groups(of: &Value) -> Vec<(String, u64)> {
    let groups = of["groups"].as_array().cloned().unwrap_or_default();
    groups.iter().map(|g| (g["cause"].as_str().unwrap_or("").to_string(), g["keys"].as_u64().unwrap_or(0))).collect()
}

/// The page's failure groups equal `/v1/status/failures`; retrying the first from the
/// page runs its keys again, with a `Retry` event whose actor is the signed-in token.
pub(crate) async fn failures_are_grouped_and_retried(browser: &Client, hub: &Hub, shots: &Screenshots) {
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
    let shown = eventually_value("the failure groups as the API groups them", || async {
        let api = groups(&hub.get("/v1/status/failures?tenant=default").await);
        let page = js(
            browser,
            "return [...document.querySelectorAll('#failure-groups tr[data-cause]')].map(r => [r.dataset.cause, Number(r.dataset.keys)])",
        )
        .await;
        let page: Vec<(String, u64)> = serde_json::from_value(page).unwrap_or_default();
        (!api.is_empty() && page == api).then_some(page)
    })
    .await;
    let (cause, keys) = shown[0].clone();
    assert!(cause.contains("<cluster>"), "the cluster's name is taken out of the cause: {cause}");
    shots.take(browser, "failure-groups").await;

    js(browser, "window.notReloaded = true; return true").await;
    let seen = hub.get("/v1/events?limit=1&order=desc").await["items"][0]["seq"].as_u64().unwrap_or(0);
    click(browser, "#failure-groups tr[data-cause] button.retry-group").await;
    click(browser, "#failure-groups tr[data-cause] button.confirm").await;
    let said = eventually_value("the retry's result", || async {
        let text =
            js(browser, "const p = document.getElementById('action-result'); return p.hidden ? null : p.innerText")
                .await;
        text.as_str().map(str::to_string)
    })
    .await;
    assert_eq!(said, format!("Retried {keys} keys."));
    let events = hub.get(&format!("/v1/events?after={seen}")).await;
    let retries: Vec<&Value> = events["items"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["kind"] == "Status" && e["action"] == "Retry").collect())
        .unwrap_or_default();
    assert_eq!(retries.len() as u64, keys, "one retry per key of the group: {events}");
    assert!(
        retries.iter().all(|e| e["actor"].as_str().is_some_and(|a| a.starts_with("token:"))),
        "each retry names the signed-in token: {events}"
    );
    assert!(js_bool(browser, "return window.notReloaded === true").await, "the page was reloaded");
}

/// A rollout waiting for a manual promote is promoted from the rollouts panel: the row
/// moves to the completed ones without a reload, and the hub records the promote with
/// the signed-in token as its actor.
pub(crate) async fn a_rollout_is_promoted_from_the_page(browser: &Client, hub: &Hub, shots: &Screenshots) {
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
    hub.apply(&staged("3")).await;
    eventually("the staged rollout waiting at its first step, with its controls", || async {
        js_bool(
            browser,
            "return !!document.querySelector('tr[data-rollout=\"staged\"] button[data-control=\"promote\"]')",
        )
        .await
    })
    .await;
    js(browser, "window.notReloaded = true; return true").await;
    click(browser, "tr[data-rollout=\"staged\"] button[data-control=\"promote\"]").await;
    shots.take(browser, "promote-asked").await;
    click(browser, "tr[data-rollout=\"staged\"] button.confirm").await;
    eventually("the promoted rollout among the completed ones", || async {
        js_bool(browser, "return !!document.querySelector('#rollout-completed-list tr[data-rollout=\"staged\"]')").await
    })
    .await;
    assert!(js_bool(browser, "return window.notReloaded === true").await, "the page was reloaded");
    let rollout = hub.get("/v1/rollouts/staged?tenant=default").await;
    assert_eq!((rollout["phase"].as_str(), rollout["revision"].as_u64()), (Some("Completed"), Some(3)), "{rollout}");
    let events = hub.get("/v1/events?limit=50&order=desc").await;
    let promote = events["items"].as_array().and_then(|e| {
        e.iter().find(|e| e["kind"] == "Rollout" && e["name"] == "staged" && e["actor"].as_str().is_some())
    });
    assert!(
        promote.is_some_and(|e| e["actor"].as_str().is_some_and(|a| a.starts_with("token:"))),
        "the promote names the signed-in token: {events}"
    );
    shots.take(browser, "promoted-from-the-page").await;
}
