//! The events view: the log's newest events of the tenant filtered by kind, actor and
//! object as the API lists them, and a new event that matches shown without a reload.

use crate::browser::{js, js_bool};
use crate::hub::Hub;
use crate::page::{eventually, eventually_value, Screenshots};
use crate::rollouts::staged;
use fantoccini::Client;

/// The `seq`s the events view shows, newest first.
async fn shown(browser: &Client) -> Vec<u64> {
    let seqs = js(
        browser,
        "return [...document.querySelectorAll('#event-list tr[data-seq]')].map(r => Number(r.dataset.seq))",
    )
    .await;
    serde_json::from_value(seqs).unwrap_or_default()
}

pub(crate) async fn events_are_filtered_and_followed(browser: &Client, hub: &Hub, shots: &Screenshots) {
    browser.goto(&hub.url("/#/events?kind=SyncSet&object=staged")).await.expect("open the events view");
    let api = hub.get("/v1/events?order=desc&limit=500").await;
    let want: Vec<u64> = api["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| {
            e["tenant"] == "default"
                && e["kind"] == "SyncSet"
                && e["name"].as_str().is_some_and(|n| n.contains("staged"))
        })
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect();
    assert!(!want.is_empty(), "the staged SyncSet has events: {api}");
    let seqs = eventually_value("the staged SyncSet's events", || async {
        let seqs = shown(browser).await;
        (seqs == want).then_some(seqs)
    })
    .await;
    js(browser, "window.notReloaded = true; return true").await;
    hub.apply(&staged("4")).await;
    eventually("the new generation's event on top, without a reload", || async {
        let now = shown(browser).await;
        now.len() == seqs.len() + 1 && now[0] > seqs[0] && now[1..] == seqs[..]
    })
    .await;
    assert!(js_bool(browser, "return window.notReloaded === true").await, "the page was reloaded");
    let top = js(
        browser,
        "const r = document.querySelector('#event-list tr[data-seq]'); return [...r.children].map(c => c.innerText)",
    )
    .await;
    let cells: Vec<String> = serde_json::from_value(top.clone()).unwrap_or_default();
    assert_eq!(
        (cells.get(2).map(String::as_str), cells.get(3).map(String::as_str)),
        (Some("SyncSet"), Some("staged")),
        "{top}"
    );
    assert!(cells.get(6).is_some_and(|a| a.starts_with("token:")), "the apply's actor: {top}");
    let count = js(browser, "return document.getElementById('event-count').textContent").await;
    assert!(count.as_str().is_some_and(|c| c.starts_with(&format!("{} events shown", seqs.len() + 1))), "{count}");
    shots.take(browser, "events").await;

    // Filtered by actor: nobody's changes are made by `token:nobody`.
    browser.goto(&hub.url("/#/events?actor=token%3Anobody")).await.expect("filter by an actor");
    eventually("no events of nobody", || async {
        js_bool(
            browser,
            "const c = document.getElementById('event-count'); return !!c && c.textContent.startsWith('0 events')",
        )
        .await
    })
    .await;
    assert_eq!(shown(browser).await, Vec::<u64>::new());
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
}
