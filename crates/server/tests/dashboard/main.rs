//! The dashboard in a real browser: Debian's headless Chromium, driven through
//! `chromedriver` (WebDriver), against a hub served on a loopback port with the real
//! runtime applying to the simulated fleet.
//!
//! Signed in as a fleet-admin, the page's counts match the API, the phase filter
//! narrows the matrix, drill-downs show a cluster's and a SyncSet's keys and a key's
//! resources and recent events, the rollouts panel shows each rollout's phase, step and
//! counts as `/v1/rollouts` does and follows a promote, failures are grouped by cause
//! as `/v1/status/failures` groups them, a group's retry and a rollout's promote are
//! made from the page with the signed-in token as their actor, the heat map and the
//! clusters list show what the API counts and finds, the chart of applies and failures
//! what `/v1/status/activity` counts, the events view filters the log as
//! the API lists it and follows it live, a SyncSet's page shows its spec and manifests
//! (a Secret redacted) and its rendering for a cluster, an apply made through the API
//! appears without a reload, the sources page lists what the API holds, and signing out
//! ends the session; signed in as a viewer
//! of tenant `b`, the page shows nothing of the other tenant. Screenshots of each step
//! are kept in `target/dashboard-screenshots/`.
//!
//! Needs `chromium` and `chromium-driver`: when `chromedriver` is missing, the test
//! installs them (as root, with apt-get), or fails naming them. It never skips.

mod actions;
#[path = "../support/browser.rs"]
mod browser;
mod clusters;
mod events;
mod hub;
mod page;
mod rollouts;
mod sources;
mod syncset_page;

use actions::{a_rollout_is_promoted_from_the_page, failures_are_grouped_and_retried};
use browser::{js, js_bool, submit_token, ChromeDriver};
use clusters::{clusters_are_mapped_and_searched, the_chart_counts_what_the_api_counts};
use events::events_are_filtered_and_followed;
use fantoccini::Client;
use fleetsync_model::{Document, Endpoint, Grant};
use fleetsync_testkit::{hive_fleet, hive_syncset, FleetShape};
use hub::{text, Hub};
use page::{choose, click, closing, data_rows, eventually, eventually_value, page_totals, shows_of_a, Screenshots};
use rollouts::rollouts_show_their_phase_and_step;
use serde_json::json;
use sources::sources_show_what_the_api_holds;
use std::time::{Duration, Instant};
use syncset_page::a_syncset_shows_its_spec_manifests_and_rendering;

/// How long a step may take before the test fails (a bound on failure, not a delay).
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) const SHAPE: FleetShape = FleetShape { clusters: 5, syncsets: 3, resources: 2 };

/// Beside the hive fleet (tenant `default`): a cluster nobody can reach, so that one
/// key fails with a reason, and tenant `b`'s own cluster and SyncSet.
const EXTRA: &str = r#"
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: unreachable}
spec: {endpoint: {http: {url: "http://127.0.0.1:9"}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: broken}
spec:
  clusterNames: [unreachable]
  resources:
    - {apiVersion: v1, kind: ConfigMap, metadata: {name: broken-cm, namespace: fleet-apps}, data: {k: v}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: tenant-b-cluster, namespace: b}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: tenant-b-base, namespace: b}
spec:
  clusterNames: [tenant-b-cluster]
  resources:
    - {apiVersion: v1, kind: Namespace, metadata: {name: tenant-b-ns}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_in_a_headless_browser() {
    let hub = Hub::start().await;
    hub.apply(&text(&hive_fleet(SHAPE, |_| Endpoint::Simulator {}, "r1"))).await;
    hub.apply(EXTRA).await;
    hub.settle().await;
    let driver = ChromeDriver::start();
    let shots = Screenshots::new();

    let admin = hub.token(Grant::Fleet).await;
    let browser = driver.browser().await;
    let steps = async {
        sign_in(&browser, &hub, &admin, &shots).await;
        counts_match_the_api(&browser, &hub, "default", &shots).await;
        saturation_is_the_members_in_flight_against_their_limits(&browser, &hub).await;
        the_phase_filter_narrows_the_matrix(&browser, &hub, &shots).await;
        a_drill_down_shows_a_keys_resources(&browser, &hub, &shots).await;
        rollouts_show_their_phase_and_step(&browser, &hub, &shots).await;
        failures_are_grouped_and_retried(&browser, &hub, &shots).await;
        a_rollout_is_promoted_from_the_page(&browser, &hub, &shots).await;
        clusters_are_mapped_and_searched(&browser, &hub, &shots).await;
        the_chart_counts_what_the_api_counts(&browser, &hub).await;
        events_are_filtered_and_followed(&browser, &hub, &shots).await;
        a_syncset_shows_its_spec_manifests_and_rendering(&browser, &hub, &shots).await;
        an_apply_appears_without_a_reload(&browser, &hub, &shots).await;
        sources_show_what_the_api_holds(&browser, &hub, &shots).await;
        signing_out_ends_the_session(&browser).await;
    };
    closing(&browser, &shots, steps).await;
    browser.close().await.expect("close the browser");

    let viewer_b = hub.token(Grant::parse("b:viewer").expect("grant")).await;
    let browser = driver.browser().await;
    closing(&browser, &shots, a_viewer_of_b_sees_nothing_of_a(&browser, &hub, &viewer_b, &shots)).await;
    browser.close().await.expect("close the browser");
    hub.stop().await;
}

async fn sign_in(browser: &Client, hub: &Hub, token: &str, shots: &Screenshots) {
    browser.goto(&hub.url("/")).await.expect("open the page");
    eventually("the sign-in form", || async {
        js_bool(browser, "return !document.getElementById('sign-in').hidden").await
    })
    .await;
    shots.take(browser, "sign-in").await;
    submit_token(browser, token).await;
    eventually("the fleet view after sign-in", || async {
        js_bool(browser, "return !!document.getElementById('total')").await
    })
    .await;
    let source = browser.source().await.expect("source");
    assert!(!source.contains(token), "the page shows the token");
    let cookie_visible = js(browser, "return document.cookie").await;
    assert_eq!(cookie_visible, json!(""), "the session cookie is HttpOnly");
}

/// The totals the fleet view shows equal the sums of the API's SyncSet summaries, and
/// its clusters by condition equal the keys' roll-up per cluster.
async fn counts_match_the_api(browser: &Client, hub: &Hub, tenant: &str, shots: &Screenshots) {
    let start = Instant::now();
    let last = loop {
        let api = hub.totals(tenant).await;
        let page = page_totals(browser).await;
        if api == page {
            break api;
        }
        assert!(start.elapsed() < PATIENCE, "the page's totals never matched the API's: API {api} page {page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(last["total"].as_u64() > Some(0), "{last}");
    shots.take(browser, &format!("fleet-{tenant}")).await;
}

/// A fleet-admin sees how full the queue is: the members' keys in flight against the
/// sum of their limits, as `/v1/members` tells them.
async fn saturation_is_the_members_in_flight_against_their_limits(browser: &Client, hub: &Hub) {
    let members = hub.get("/v1/members").await;
    let limit: u64 =
        members["items"].as_array().expect("items").iter().map(|m| m["maxInFlight"].as_u64().unwrap_or(0)).sum();
    assert!(limit > 0, "the hub's worker tells its limit: {members}");
    let shown = eventually_value("the saturation line", || async {
        js(browser, "const s = document.getElementById('saturation'); return s && [Number(s.dataset.inFlight), Number(s.dataset.limit), s.innerText]")
            .await
            .as_array()
            .cloned()
    })
    .await;
    assert_eq!(shown[1], json!(limit), "the page's limit is the members' sum: {shown:?}");
    assert!(shown[0].as_u64() <= Some(limit), "in flight within the limit: {shown:?}");
    assert!(shown[2].as_str().is_some_and(|t| t.contains(&format!("of {limit}"))), "{shown:?}");
}

async fn the_phase_filter_narrows_the_matrix(browser: &Client, hub: &Hub, shots: &Screenshots) {
    let all = eventually_value("the matrix", || async {
        let n = js(browser, "return document.querySelectorAll('#matrix td[data-phase]').length")
            .await
            .as_u64()
            .unwrap_or(0);
        (n > 0).then_some(n)
    })
    .await;
    let failed = eventually_value("a failed key", || async {
        let n = hub.get("/v1/status?phase=Failed,Parked&limit=100").await["items"].as_array().map(Vec::len).unwrap_or(0)
            as u64;
        (n > 0).then_some(n)
    })
    .await;
    assert!(failed > 0 && failed < all, "the fleet has a failed key among others: {failed} of {all}");
    choose(browser, "phase-filter", "Failed,Parked").await;
    let phases = eventually_value("the matrix narrowed to failed keys", || async {
        let phases =
            js(browser, "return [...document.querySelectorAll('#matrix td[data-phase]')].map(c => c.dataset.phase)")
                .await;
        let phases: Vec<String> = serde_json::from_value(phases).unwrap_or_default();
        (!phases.is_empty() && phases.len() as u64 == failed).then_some(phases)
    })
    .await;
    assert!(phases.iter().all(|p| p == "Failed" || p == "Parked"), "{phases:?}");
    let reason = js(browser, "return document.querySelector('#matrix td[data-phase]').title").await;
    assert!(
        reason.as_str().is_some_and(|r| r.contains("unreachable / broken") && r.contains(" — ")),
        "the cell names its reason: {reason}"
    );
    let failures = js(browser, "return document.getElementById('failure-groups').innerText").await;
    assert!(
        failures.as_str().is_some_and(|f| f.contains("broken") && f.contains("unreachable")),
        "failures first, by cause, with their SyncSets and clusters: {failures}"
    );
    shots.take(browser, "matrix-failed").await;
    // The Failed card leads to the matrix narrowed to failed keys.
    choose(browser, "phase-filter", "").await;
    click(browser, "a[data-phase-card='Failed']").await;
    eventually("the matrix narrowed by the Failed card", || async {
        let phases = js(
            browser,
            "return document.getElementById('phase-filter') && document.getElementById('phase-filter').value",
        )
        .await;
        let cells =
            js(browser, "return [...document.querySelectorAll('#matrix td[data-phase]')].map(c => c.dataset.phase)")
                .await;
        let cells: Vec<String> = serde_json::from_value(cells).unwrap_or_default();
        phases == json!("Failed") && !cells.is_empty() && cells.iter().all(|p| p == "Failed")
    })
    .await;
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
    choose(browser, "phase-filter", "").await;
    eventually("the whole matrix again", || async {
        js(browser, "return document.querySelectorAll('#matrix td[data-phase]').length").await.as_u64() == Some(all)
    })
    .await;
}

async fn a_drill_down_shows_a_keys_resources(browser: &Client, hub: &Hub, shots: &Screenshots) {
    click(browser, "#matrix td[data-cluster='cluster-00001'][data-syncset='syncset-002'] a").await;
    let want: Vec<String> = hub.get("/v1/status?cluster=cluster-00001&syncset=syncset-002&limit=1").await["items"][0]
        ["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| {
            format!(
                "ConfigMap {}/{}",
                r["resource"]["namespace"].as_str().unwrap_or(""),
                r["resource"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(want.len(), SHAPE.resources);
    let shown = eventually_value("the key's resources", || async {
        let rows = js(
            browser,
            "return [...document.querySelectorAll('#resources tr[data-resource]')].map(r => r.dataset.resource)",
        )
        .await;
        let rows: Vec<String> = serde_json::from_value(rows).unwrap_or_default();
        (!rows.is_empty()).then_some(rows)
    })
    .await;
    assert_eq!(shown, want);
    let outcomes = js(browser, "return document.getElementById('resources').innerText").await;
    assert!(outcomes.as_str().is_some_and(|t| t.contains("Applied")), "{outcomes}");
    // The key's recent events, as the API lists them (newest first).
    let want: Vec<u64> = hub.get("/v1/status/clusters/cluster-00001/syncsets/syncset-002/events").await["items"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["seq"].as_u64())
        .collect();
    assert!(!want.is_empty(), "the key ran, so it has events");
    let shown = eventually_value("the key's events", || async {
        let rows = js(
            browser,
            "return [...document.querySelectorAll('#key-events tr[data-seq]')].map(r => Number(r.dataset.seq))",
        )
        .await;
        let rows: Vec<u64> = serde_json::from_value(rows).unwrap_or_default();
        (!rows.is_empty()).then_some(rows)
    })
    .await;
    assert_eq!(shown, want);
    shots.take(browser, "key").await;

    // The cluster and the SyncSet pages: a row per key, as the API lists them.
    for (hash, api, attr) in [
        ("#/cluster/cluster-00001", "/v1/status?cluster=cluster-00001&limit=100", "syncset"),
        ("#/syncset/syncset-002", "/v1/status?syncset=syncset-002&limit=100", "cluster"),
    ] {
        let want: Vec<String> = hub.get(api).await["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|k| k[attr].as_str().unwrap_or("").to_string())
            .collect();
        browser.goto(&hub.url(&format!("/{hash}"))).await.expect("open the page");
        let script =
            format!("return [...document.querySelectorAll('#key-list tr[data-{attr}]')].map(r => r.dataset.{attr})");
        let shown = eventually_value(hash, || async {
            let rows: Vec<String> = serde_json::from_value(js(browser, &script).await).unwrap_or_default();
            (rows.len() == want.len()).then_some(rows)
        })
        .await;
        let (mut shown, mut want) = (shown, want.clone());
        shown.sort();
        want.sort();
        assert_eq!(shown, want, "{hash}");
        shots.take(browser, hash.trim_start_matches("#/").replace('/', "-").as_str()).await;
    }

    browser.goto(&hub.url("/#/key/unreachable/broken")).await.expect("open the failed key");
    let error = eventually_value("the failed key's last error", || async {
        js(browser, "const e = document.getElementById('last-error'); return e ? e.textContent : null")
            .await
            .as_str()
            .map(str::to_string)
    })
    .await;
    assert!(!error.is_empty() && error != "none", "{error}");
    shots.take(browser, "key-failed").await;

    // A cluster's page says whether it can be reached, and why not, as its status does.
    for (cluster, state) in [("cluster-00001", "Reachable"), ("unreachable", "Unreachable")] {
        browser.goto(&hub.url(&format!("/#/cluster/{cluster}"))).await.expect("open the cluster");
        let api = hub.get(&format!("/v1/status/clusters/{cluster}")).await;
        assert_eq!(api["reachability"]["state"], state, "{api}");
        let shown = eventually_value("the cluster's reachability", || async {
            let script = "const r = document.getElementById('cluster-reachability'); return r ? [r.dataset.state, r.textContent] : null";
            serde_json::from_value::<(String, String)>(js(browser, script).await).ok()
        })
        .await;
        assert_eq!(shown.0, state, "{shown:?}");
        if let Some(message) = api["reachability"]["message"].as_str() {
            assert!(
                message.contains("127.0.0.1:9") && shown.1.ends_with(message),
                "the address and the cause: {shown:?} {message}"
            );
        }
        let condition = js(browser, "return document.getElementById('cluster-condition').dataset.reason").await;
        assert_eq!(condition, api["condition"]["reason"]);
    }
    shots.take(browser, "cluster-unreachable").await;
}

async fn an_apply_appears_without_a_reload(browser: &Client, hub: &Hub, shots: &Screenshots) {
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
    eventually("the fleet view", || async {
        js_bool(browser, "return !!document.getElementById('syncset-list')").await
    })
    .await;
    eventually("the live watch", || async {
        js_bool(browser, "return document.getElementById('live').classList.contains('on')").await
    })
    .await;
    js(browser, "window.notReloaded = true; return true").await;
    let before = page_totals(browser).await["total"].as_u64().unwrap_or(0);
    let mut late = hive_syncset(7, 1, "late");
    if let Document::SyncSet(s) = &mut late {
        s.metadata.name = "late-arrival".into();
    }
    hub.apply(&text(&[late])).await;
    eventually("the new SyncSet on the page", || async {
        js_bool(browser, "return !!document.querySelector('#syncset-list tr[data-syncset=\"late-arrival\"]')").await
    })
    .await;
    counts_match_the_api(browser, hub, "default", shots).await;
    let after = page_totals(browser).await["total"].as_u64().unwrap_or(0);
    assert_eq!(after, before + SHAPE.clusters as u64, "one key per hive cluster came in");
    assert!(js_bool(browser, "return window.notReloaded === true").await, "the page was reloaded");
    shots.take(browser, "live-apply").await;
}

async fn signing_out_ends_the_session(browser: &Client) {
    browser
        .find(fantoccini::Locator::Id("sign-out"))
        .await
        .expect("the sign-out button")
        .click()
        .await
        .expect("sign out");
    eventually("the sign-in form again", || async {
        js_bool(browser, "return !document.getElementById('sign-in').hidden").await
    })
    .await;
    let status = js(browser, "return fetch('/v1/whoami').then(r => r.status)").await;
    assert_eq!(status, json!(401), "the session has ended");
}

async fn a_viewer_of_b_sees_nothing_of_a(browser: &Client, hub: &Hub, token: &str, shots: &Screenshots) {
    sign_in(browser, hub, token, shots).await;
    let tenant = js(browser, "return document.getElementById('tenant').value").await;
    assert_eq!(tenant, json!("b"), "the viewer's own tenant is chosen");
    counts_match_the_api(browser, hub, "b", shots).await;
    eventually("tenant b's key in the matrix", || async {
        js_bool(browser, "return !!document.querySelector('#matrix td[data-cluster=\"tenant-b-cluster\"]')").await
    })
    .await;
    eventually("no rollouts in b", || async {
        js_bool(browser, "return !!document.getElementById('rollouts-empty')").await
    })
    .await;
    let members = js(browser, "return document.getElementById('members').innerText").await;
    assert!(members.as_str().is_some_and(|m| m.contains("fleet-admins")), "{members}");
    assert_eq!(shows_of_a(browser).await, Vec::<String>::new(), "the fleet view of b");
    // A viewer is offered no action (the hub would refuse it anyway).
    browser.goto(&hub.url("/#/key/tenant-b-cluster/tenant-b-base")).await.expect("open b's key");
    eventually("b's key", || async { js_bool(browser, "return !!document.getElementById('key-facts')").await }).await;
    assert!(js_bool(browser, "return !document.querySelector('#view button')").await, "a viewer is offered an action");
    // Drill-downs into the other tenant's objects, by URL: nothing of them is shown.
    for hash in ["#/syncset/syncset-000", "#/cluster/cluster-00000", "#/key/cluster-00000/syncset-000"] {
        browser.goto(&hub.url(&format!("/{hash}"))).await.expect("open a view");
        eventually(&format!("{hash}: refused"), || async {
            js_bool(browser, "return !document.getElementById('error').hidden").await
        })
        .await;
        assert_eq!(shows_of_a(browser).await, Vec::<String>::new(), "{hash}");
        assert_eq!(data_rows(browser).await, 0, "{hash}");
    }
    // And the other tenant itself, typed in: the API's refusal, and nothing else.
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
    js(browser, "const t = document.getElementById('tenant'); t.value = 'default'; t.dispatchEvent(new Event('change')); return true").await;
    let error = eventually_value("the refusal of tenant default", || async {
        let e = js(browser, "const e = document.getElementById('error'); return e.hidden ? null : e.textContent").await;
        e.as_str().map(str::to_string)
    })
    .await;
    assert!(error.contains("forbidden"), "{error}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(shows_of_a(browser).await, Vec::<String>::new(), "tenant default, typed in");
    assert_eq!(data_rows(browser).await, 0, "tenant default, typed in");
    shots.take(browser, "tenant-b-refused-default").await;
}
