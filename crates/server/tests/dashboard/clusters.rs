//! The heat map by label and the clusters list: the page's bars and rows are what
//! `/v1/status/heatmap` and `/v1/status/clusters` answer, a bar's part and a counter
//! lead to the clusters behind them, and the search form finds by name.

use crate::browser::{js, js_bool};
use crate::hub::Hub;
use crate::page::{click, eventually, eventually_value, Screenshots};
use fantoccini::Client;
use serde_json::{json, Value};

/// The names the clusters list shows, once it shows the count `total` says.
async fn listed(browser: &Client) -> Option<(u64, Vec<String>)> {
    let shown = js(
        browser,
        "const n = document.getElementById('cluster-count'); if (!n) return null;
         return [Number(n.dataset.total), [...document.querySelectorAll('#cluster-list tr[data-cluster]')].map(r => r.dataset.cluster)];",
    )
    .await;
    serde_json::from_value(shown).ok()
}

fn names(list: &Value) -> Vec<String> {
    list["items"].as_array().expect("items").iter().map(|c| c["name"].as_str().expect("name").to_string()).collect()
}

/// Waits until the clusters list shows what `/v1/status/clusters?{query}` answers.
async fn list_matches(browser: &Client, hub: &Hub, query: &str) -> Vec<String> {
    eventually_value(&format!("the clusters list of {query}"), || async {
        let api = hub.get(&format!("/v1/status/clusters?tenant=default&{query}")).await;
        let page = listed(browser).await?;
        (page == (api["total"].as_u64()?, names(&api))).then_some(page.1)
    })
    .await
}

/// The fleet page's chart shows a column a minute of the last hour, and in all the
/// applies and failures `/v1/status/activity` counts.
pub(crate) async fn the_chart_counts_what_the_api_counts(browser: &Client, hub: &Hub) {
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
    eventually("the chart's totals as the API counts them", || async {
        let api = hub.get("/v1/status/activity?tenant=default").await;
        let minutes = api["minutes"].as_array().cloned().unwrap_or_default();
        let sum = |f: &str| minutes.iter().map(|m| m[f].as_u64().unwrap_or(0)).sum::<u64>();
        let page = js(
            browser,
            "const t = document.getElementById('activity-totals'); if (!t) return null;
             return [document.querySelectorAll('#activity-chart .minute').length, Number(t.dataset.applied), Number(t.dataset.failed)]",
        )
        .await;
        // The page reads every 30 s: a reload reads now.
        let same = page == json!([60, sum("applied"), sum("failed")]) && sum("applied") > 0 && sum("failed") > 0;
        if !same && !page.is_null() {
            browser.refresh().await.expect("reload");
        }
        same
    })
    .await;
}

pub(crate) async fn clusters_are_mapped_and_searched(browser: &Client, hub: &Hub, shots: &Screenshots) {
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
    js(
        browser,
        "const g = document.getElementById('group-by'); g.value = 'fleet'; g.dispatchEvent(new Event('change')); return true",
    )
    .await;
    let api = hub.get("/v1/status/heatmap?tenant=default&groupBy=fleet").await;
    let want: Vec<Value> = api["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| json!([g["value"].as_str().unwrap_or("(no fleet)"), g["clusters"], g["byCondition"]]))
        .collect();
    eventually("the heat map by the label fleet, as the API counts it", || async {
        let page = js(
            browser,
            "return [...document.querySelectorAll('#heat-table tr[data-value]')].map(r => {
               const by = {}; r.querySelectorAll('a.seg').forEach(s => by[s.dataset.condition] = Number(s.dataset.n));
               return [r.dataset.value, Number(r.children[1].textContent), by]; })",
        )
        .await;
        page.as_array() == Some(&want)
    })
    .await;
    shots.take(browser, "heat-map").await;

    // The unlabelled cluster that fails, from its bar's part.
    click(browser, "#heat-table tr[data-value='(no fleet)'] a.seg[data-condition='Degraded']").await;
    let found = list_matches(browser, hub, "labelSelector=%21fleet&condition=Degraded").await;
    assert_eq!(found, ["unreachable"]);

    // The unreachable clusters, from the search form.
    js(browser, "document.querySelector('#cluster-search [name=labelSelector]').value = ''; return true").await;
    js(browser, "document.querySelector('#cluster-search [name=condition]').value = ''; return true").await;
    js(browser, "document.querySelector('#cluster-search [name=reachability]').value = 'Unreachable'; return true")
        .await;
    click(browser, "#cluster-search button[type=submit]").await;
    let found = list_matches(browser, hub, "reachability=Unreachable").await;
    assert_eq!(found, ["unreachable"]);

    // A counter of the fleet page: every degraded cluster.
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
    click(browser, "a[data-condition-card='Degraded']").await;
    let degraded = list_matches(browser, hub, "condition=Degraded&sort=name").await;
    assert!(degraded.contains(&"unreachable".to_string()), "{degraded:?}");

    // The search form: part of a name, sorted by condition.
    js(browser, "document.querySelector('#cluster-search [name=condition]').value = ''; return true").await;
    js(browser, "document.querySelector('#cluster-search [name=name]').value = '0000'; return true").await;
    js(browser, "document.querySelector('#cluster-search [name=sort]').value = 'condition'; return true").await;
    click(browser, "#cluster-search button[type=submit]").await;
    let found = list_matches(browser, hub, "name=0000&sort=condition").await;
    assert!(found.len() >= 5 && found.iter().all(|n| n.contains("0000")), "{found:?}");
    assert!(js_bool(browser, "return location.hash.includes('name=0000')").await, "the search is in the URL");
    shots.take(browser, "clusters-found").await;
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
}
