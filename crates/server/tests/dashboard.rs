//! The dashboard in a real browser: Debian's headless Chromium, driven through
//! `chromedriver` (WebDriver), against a hub served on a loopback port with the real
//! runtime applying to the simulated fleet.
//!
//! Signed in as a fleet-admin, the page's counts match the API, the phase filter
//! narrows the matrix, drill-downs show a cluster's and a SyncSet's keys and a key's
//! resources and recent events, the rollouts panel shows each rollout's phase, step and
//! counts as `/v1/rollouts` does and follows a promote, an apply made through the API
//! appears without a reload, and signing out ends the session; signed in as a viewer
//! of tenant `b`, the page shows nothing of the other tenant. Screenshots of each step
//! are kept in `target/dashboard-screenshots/`.
//!
//! Needs `chromium` and `chromium-driver`: when `chromedriver` is missing, the test
//! installs them (as root, with apt-get), or fails naming them. It never skips.

#[path = "support/browser.rs"]
mod browser;

use browser::{js, js_bool, submit_token, wait_until, ChromeDriver};
use fantoccini::Client;
use fleetsync_applier::egress::EgressPolicy;
use fleetsync_applier::kubernetes::{KubeApplier, KubeConfig};
use fleetsync_applier::ByEndpoint;
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_k8s_sim::LatencyModel;
use fleetsync_model::{Document, Endpoint, Grant};
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_server::{serve, AppState, QueueMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use fleetsync_testkit::{hive_fleet, hive_syncset, FleetShape};
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How long a step may take before the test fails (a bound on failure, not a delay).
const PATIENCE: Duration = Duration::from_secs(30);

const SHAPE: FleetShape = FleetShape { clusters: 5, syncsets: 3, resources: 2 };

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
        an_apply_appears_without_a_reload(&browser, &hub, &shots).await;
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
    let failures = js(browser, "return document.getElementById('failure-list').innerText").await;
    assert!(
        failures.as_str().is_some_and(|f| f.contains("broken on unreachable")),
        "failures first, with their reasons: {failures}"
    );
    shots.take(browser, "matrix-failed").await;
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

/// A SyncSet of three hive clusters staged by a rollout whose first step (one cluster)
/// waits for a promote; generation 1 goes out at once, a later one stops there.
fn staged(value: &str) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: staged}}\nspec:\n  \
         clusterNames: [cluster-00000, cluster-00001, cluster-00002]\n  \
         rollout: {{steps: [{{count: 1, manualPromote: true}}, {{percent: 100}}]}}\n  resources:\n    \
         - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: staged-cm, namespace: fleet-apps}}, data: {{v: \"{value}\"}}}}\n"
    )
}

/// A SyncSet rolled out to the cluster nobody can reach: a new generation fails its
/// only step (the key still failing at the step's deadline) and rolls back, with the
/// cluster's error in the reason.
fn doomed(value: &str) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: doomed}}\nspec:\n  clusterNames: [unreachable]\n  \
         rollout: {{steps: [{{percent: 100}}], progressDeadline: 2s}}\n  resources:\n    \
         - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: doomed-cm, namespace: fleet-apps}}, data: {{v: \"{value}\"}}}}\n"
    )
}

/// The rollouts panel: none at first; SyncSets with `spec.rollout` appear without a
/// reload, each row as `/v1/rollouts` tells it (phase, step counted from 1, revisions,
/// the current step's counts, the reason), completed ones folded away; and a promote
/// made through the API moves the waiting one on to Completed on the page.
async fn rollouts_show_their_phase_and_step(browser: &Client, hub: &Hub, shots: &Screenshots) {
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
    eventually("no rollouts yet", || async {
        js_bool(browser, "return !!document.getElementById('rollouts-empty')").await
    })
    .await;
    hub.apply(&format!("{}---\n{}", staged("1"), doomed("1"))).await;
    let first = rollouts_match_the_api(browser, hub, |api| api["items"].as_array().is_some_and(|i| i.len() == 2)).await;
    assert!(
        first.values().all(|r| r["listed"] == "folded" && r["revision"] == "1"),
        "a first generation completes at once: {first:?}"
    );

    hub.apply(&format!("{}---\n{}", staged("2"), doomed("2"))).await;
    let waiting = |r: &Value| {
        r["phase"] == "Progressing" && r["step"] == 0 && r["steps"][0]["clusters"] == 1 && r["steps"][0]["healthy"] == 1
    };
    let rows = rollouts_match_the_api(browser, hub, |api| {
        let by_name = |n: &str| {
            api["items"].as_array().and_then(|i| i.iter().find(|r| r["syncset"] == n)).cloned().unwrap_or_default()
        };
        waiting(&by_name("staged")) && by_name("doomed")["phase"] == "RolledBack"
    })
    .await;
    let staged = &rows["staged"];
    assert_eq!(
        (staged["phase"].as_str(), staged["step"].as_str(), staged["listed"].as_str()),
        (Some("Progressing"), Some("1 of 2"), Some("shown"))
    );
    assert_eq!(
        (staged["revision"].as_str(), staged["stable"].as_str(), staged["healthy"].as_str()),
        (Some("2"), Some("1"), Some("1"))
    );
    let doomed = &rows["doomed"];
    assert_eq!((doomed["phase"].as_str(), doomed["listed"].as_str()), (Some("RolledBack"), Some("shown")), "{doomed}");
    assert!(
        doomed["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("step 1: 1 of 1 clusters failed") && r.contains("unreachable: ")),
        "{doomed}"
    );
    shots.take(browser, "rollouts").await;

    js(browser, "window.notReloaded = true; return true").await;
    let promoted = hub.post("/v1/rollouts/staged/promote?tenant=default").await;
    assert_eq!(promoted["syncset"], "staged", "{promoted}");
    let rows = rollouts_match_the_api(browser, hub, |api| {
        api["items"].as_array().is_some_and(|i| i.iter().any(|r| r["syncset"] == "staged" && r["phase"] == "Completed"))
    })
    .await;
    assert_eq!((rows["staged"]["revision"].as_str(), rows["staged"]["listed"].as_str()), (Some("2"), Some("folded")));
    assert!(js_bool(browser, "return window.notReloaded === true").await, "the page was reloaded");
    shots.take(browser, "rollouts-promoted").await;

    // The SyncSet pages say what the fleet holds: generation 2 everywhere once promoted,
    // and generation 1 everywhere after the rollback, not "at the latest generation".
    let staged = syncset_page_matches_the_api(browser, hub, "staged", "Applied").await;
    assert_eq!(
        (staged["clusters"].as_u64(), staged["applied"].as_u64(), staged["held"].as_u64()),
        (Some(3), Some(3), Some(0)),
        "{staged}"
    );
    let doomed = syncset_page_matches_the_api(browser, hub, "doomed", "RolledBack").await;
    assert_eq!(
        (doomed["applied"].as_u64(), doomed["held"].as_u64(), doomed["heldAt"].as_i64()),
        (Some(0), Some(1), Some(1)),
        "{doomed}"
    );
    assert!(
        js_bool(browser, "return document.getElementById('syncset-rollout').textContent.includes('RolledBack')").await,
        "the rollout is named"
    );
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
}

/// Opens a SyncSet's page and waits until its condition reads `reason` and says what
/// the API's progress says; answers that progress.
async fn syncset_page_matches_the_api(browser: &Client, hub: &Hub, name: &str, reason: &str) -> Value {
    browser.goto(&hub.url(&format!("/#/syncset/{name}"))).await.expect("open the SyncSet");
    let start = Instant::now();
    loop {
        let api = hub.get(&format!("/v1/status/syncsets/{name}?tenant=default&limit=1")).await["progress"].clone();
        let page = js(
            browser,
            "const c = document.getElementById('syncset-condition');
             const n = (id) => Number((document.getElementById(id) || {}).textContent);
             return c ? {reason: c.dataset.reason, text: c.textContent, clusters: n('syncset-clusters'), applied: n('syncset-applied'), held: n('syncset-held')} : null;",
        )
        .await;
        let want_text = format!(
            "{}: {}",
            if api["done"] == true { "Applied" } else { api["reason"].as_str().unwrap_or("") },
            api["message"].as_str().unwrap_or("")
        );
        if api["reason"] == reason
            && page["reason"] == reason
            && page["text"] == want_text.as_str()
            && ["clusters", "applied", "held"].iter().all(|k| page[k] == api[k])
        {
            return api;
        }
        assert!(start.elapsed() < PATIENCE, "the SyncSet page of {name} never matched the API: API {api} page {page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `/v1/rollouts` is in the state `ready` looks for and the page's rollout
/// rows say what it says; answers the page's rows by SyncSet.
async fn rollouts_match_the_api(
    browser: &Client,
    hub: &Hub,
    ready: impl Fn(&Value) -> bool,
) -> serde_json::Map<String, Value> {
    let start = Instant::now();
    loop {
        let api = hub.get("/v1/rollouts?tenant=default").await;
        let page = page_rollouts(browser).await;
        if ready(&api) {
            let want: serde_json::Map<String, Value> =
                api["items"].as_array().expect("items").iter().map(rollout_row).collect();
            if page.as_object() == Some(&want) {
                return want;
            }
        }
        assert!(start.elapsed() < PATIENCE, "the page's rollouts never matched the API's: API {api} page {page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A rollout of `/v1/rollouts` as the panel should show it: one not completed with its
/// step counted from 1 and the current step's counts, a completed one folded away.
fn rollout_row(r: &Value) -> (String, Value) {
    let name = r["syncset"].as_str().expect("syncset").to_string();
    let text = |v: &Value| v.as_i64().expect("a number").to_string();
    if r["phase"] == "Completed" {
        return (name.clone(), json!({"SyncSet": name, "revision": text(&r["revision"]), "listed": "folded"}));
    }
    let step = r["step"].as_u64().expect("step");
    let steps = r["steps"].as_array().expect("steps");
    let counts = &steps[step as usize];
    let mut row = json!({
        "SyncSet": name,
        "phase": r["phase"],
        "step": format!("{} of {}", step + 1, steps.len()),
        "revision": text(&r["revision"]),
        "stable": if r["stable"] == 0 { "none".to_string() } else { text(&r["stable"]) },
        "reason": r["reason"].as_str().unwrap_or(""),
        "waiting for": r["waiting"].as_str().unwrap_or(""),
        "listed": "shown",
    });
    for n in ["clusters", "updated", "healthy", "failed", "pending"] {
        row[n] = json!(text(&counts[n]));
    }
    (name, row)
}

/// The rows of the rollouts panel by SyncSet, each cell under its column's heading
/// (ages aside), and whether the row is shown or folded away.
async fn page_rollouts(browser: &Client) -> Value {
    js(
        browser,
        "const rows = {};
         document.querySelectorAll('#rollouts tr[data-rollout]').forEach(r => {
           const head = [...r.closest('table').querySelectorAll('thead th')].map(h => h.textContent);
           const row = {};
           [...r.cells].forEach((c, i) => { if (head[i] !== 'step started' && head[i] !== 'completed') row[head[i]] = c.textContent; });
           row.listed = r.closest('details') ? 'folded' : 'shown';
           rows[r.dataset.rollout] = row;
         });
         return rows;",
    )
    .await
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

/// The names of tenant `default`'s objects the view shows (its heading aside, which
/// repeats the URL the user typed; the error line, which names what was refused).
async fn shows_of_a(browser: &Client) -> Vec<String> {
    let text = js(
        browser,
        "return [...document.querySelectorAll('#view > div > :not(h1)')].map(n => n.innerText).join('\\n')",
    )
    .await;
    let text = text.as_str().unwrap_or_default().to_string();
    ["cluster-0000", "syncset-00", "unreachable", "broken", "late-arrival", "staged", "doomed"]
        .into_iter()
        .filter(|n| text.contains(n))
        .map(String::from)
        .collect()
}

/// Rows and cells of data in the view.
async fn data_rows(browser: &Client) -> u64 {
    let script = "return document.querySelectorAll('#view td[data-phase], #view tr[data-cluster], #view tr[data-syncset], #view tr[data-resource]').length";
    js(browser, script).await.as_u64().unwrap_or(u64::MAX)
}

// ---- the browser -------------------------------------------------------------------

/// Runs `steps`; if one fails, keeps a screenshot of where it failed and closes the
/// browser (Chromium would outlive its killed driver) before failing the test.
async fn closing(browser: &Client, shots: &Screenshots, steps: impl Future<Output = ()>) {
    use futures_util::FutureExt;
    if let Err(panic) = std::panic::AssertUnwindSafe(steps).catch_unwind().await {
        if let Ok(png) = browser.screenshot().await {
            let _ = std::fs::write(shots.dir.join("failed.png"), png);
        }
        let _ = browser.clone().close().await;
        std::panic::resume_unwind(panic);
    }
}

/// Clicks the element `css` selects; found again if the page redrew it between the
/// find and the click (the matrix redraws as events come).
async fn click(browser: &Client, css: &str) {
    let start = Instant::now();
    loop {
        let clicked = match browser.find(fantoccini::Locator::Css(css)).await {
            Ok(e) => e.click().await.map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match clicked {
            Ok(()) => return,
            Err(e) => assert!(start.elapsed() < PATIENCE, "clicking {css}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Chooses `value` in the `<select>` with this id; found again if the page redrew it
/// between the find and the choice (a stale element).
async fn choose(browser: &Client, id: &str, value: &str) {
    let start = Instant::now();
    loop {
        let chosen = match browser.find(fantoccini::Locator::Id(id)).await {
            Ok(select) => select.select_by_value(value).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match chosen {
            Ok(_) => return,
            Err(e) => assert!(start.elapsed() < PATIENCE, "choosing {value:?} in #{id}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The totals on the fleet view, as the API's summaries write them.
async fn page_totals(browser: &Client) -> Value {
    js(
        browser,
        "const t = document.getElementById('total'); if (!t) return null;
         const phases = {};
         document.querySelectorAll('#totals [data-phase-total]').forEach(n => phases[n.dataset.phaseTotal] = Number(n.textContent));
         const clusters = {};
         document.querySelectorAll('#cluster-conditions [data-clusters]').forEach(n => clusters[n.dataset.clusters] = Number(n.textContent));
         return {total: Number(t.textContent), atGeneration: Number(document.getElementById('at-generation').textContent), phases, clusters};",
    )
    .await
}

/// Saves screenshots, numbered in order, in `target/dashboard-screenshots/`.
struct Screenshots {
    dir: PathBuf,
    next: std::sync::atomic::AtomicUsize,
}

impl Screenshots {
    fn new() -> Screenshots {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        let dir = target.join("dashboard-screenshots");
        std::fs::create_dir_all(&dir).expect("the screenshot directory");
        Screenshots { dir, next: Default::default() }
    }

    async fn take(&self, browser: &Client, name: &str) {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let png = browser.screenshot().await.expect("a screenshot");
        std::fs::write(self.dir.join(format!("{n:02}-{name}.png")), png).expect("save the screenshot");
    }
}

async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    assert!(wait_until(PATIENCE, check).await, "{what}: not within {PATIENCE:?}");
}

async fn eventually_value<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(start.elapsed() < PATIENCE, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---- the hub -----------------------------------------------------------------------

/// A hub on a loopback port over a SQLite store, with the runtime applying to the
/// simulated fleet.
struct Hub {
    base: String,
    store: Arc<dyn Store>,
    admin: String,
    http: reqwest::Client,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Hub {
    async fn start() -> Hub {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open"));
        let mut registry = Registry::default();
        let metrics = RuntimeMetrics::register(&mut registry);
        let queue_metrics = QueueMetrics::register(&mut registry);
        let state = AppState::new(store.clone(), Arc::new(registry), queue_metrics);
        let sim = SimFleet::new(SimFleetConfig { latency: LatencyModel::hive_fleet_scaled(0.02), fail_rate: 0.0 });
        // The cluster at 127.0.0.1:9 is reached through the Kubernetes applier (nothing
        // listens there: it is unreachable, with the cause).
        let egress = EgressPolicy::parse(&["127.0.0.1"], &[]).expect("rule");
        let kube =
            KubeApplier::new(KubeConfig { request_timeout: Duration::from_secs(5), egress, ..KubeConfig::default() });
        let applier = Arc::new(ByEndpoint {
            simulator: Some(Arc::new(sim)),
            http: Some(Arc::new(kube)),
            ..ByEndpoint::default()
        });
        let shutdown = CancellationToken::new();
        let runtime = Runtime::new(store.clone(), applier, RuntimeConfig::default(), metrics);
        let workers = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                runtime.run(shutdown).await.expect("the runtime");
            })
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let base = format!("http://127.0.0.1:{}", listener.local_addr().expect("address").port());
        let server = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                serve(listener, state, None, async move { shutdown.cancelled().await }).await.expect("serve");
            })
        };
        let admin = TokenRequest { grant: Grant::Fleet, name: None, ttl: None, created_by: "test".into() };
        let (admin, _) = issue(store.as_ref(), store.clock().as_ref(), admin).await.expect("a token");
        Hub { base, store, admin, http: reqwest::Client::new(), shutdown, tasks: vec![workers, server], _dir: dir }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn token(&self, grant: Grant) -> String {
        let req = TokenRequest { grant, name: None, ttl: None, created_by: "test".into() };
        issue(self.store.as_ref(), self.store.clock().as_ref(), req).await.expect("a token").0
    }

    async fn apply(&self, yaml: &str) {
        let resp = self
            .http
            .post(self.url("/v1/apply"))
            .bearer_auth(&self.admin)
            .header("content-type", "application/yaml")
            .body(yaml.to_string())
            .send()
            .await
            .expect("apply");
        let status = resp.status();
        assert!(status.is_success(), "apply: {status}: {}", resp.text().await.unwrap_or_default());
    }

    async fn get(&self, path: &str) -> Value {
        let resp = self.http.get(self.url(path)).bearer_auth(&self.admin).send().await.expect("GET");
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().await.expect("JSON")
    }

    async fn post(&self, path: &str) -> Value {
        let resp = self.http.post(self.url(path)).bearer_auth(&self.admin).send().await.expect("POST");
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        assert!(status.is_success(), "POST {path}: {status}: {body}");
        serde_json::from_str(&body).expect("JSON")
    }

    /// The sums of every SyncSet's summary in `tenant`, as the page shows them.
    async fn totals(&self, tenant: &str) -> Value {
        let mut total = (0, 0);
        let mut phases = serde_json::Map::new();
        let sets = self.get(&format!("/v1/syncsets?tenant={tenant}&limit=100")).await;
        for set in sets["items"].as_array().expect("items") {
            let name = set["metadata"]["name"].as_str().expect("name");
            let s = self.get(&format!("/v1/status/syncsets/{name}?tenant={tenant}&limit=1")).await;
            total.0 += s["summary"]["total"].as_u64().expect("total");
            total.1 += s["summary"]["atGeneration"].as_u64().expect("atGeneration");
            for (phase, n) in s["summary"]["phases"].as_object().expect("phases") {
                let sum = phases.get(phase).and_then(Value::as_u64).unwrap_or(0) + n.as_u64().unwrap_or(0);
                phases.insert(phase.clone(), json!(sum));
            }
        }
        // Clusters by condition, rolled up the long way from every key.
        let mut by_cluster: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for k in self.get(&format!("/v1/status?tenant={tenant}")).await["items"].as_array().expect("items") {
            by_cluster
                .entry(k["cluster"].as_str().unwrap_or("").into())
                .or_default()
                .push(k["phase"].as_str().unwrap_or("").into());
        }
        let mut clusters = json!({"ready": 0, "progressing": 0, "degraded": 0});
        for phases in by_cluster.values() {
            let condition = if phases.iter().any(|p| p == "Failed" || p == "Parked") {
                "degraded"
            } else if phases.iter().all(|p| p == "Applied") {
                "ready"
            } else {
                "progressing"
            };
            clusters[condition] = json!(clusters[condition].as_u64().unwrap_or(0) + 1);
        }
        // Staleness is a matter of time the keys do not show: the API's own count.
        clusters["stale"] = self.get(&format!("/v1/status/summary?tenant={tenant}")).await["clusters"]["stale"].clone();
        json!({"total": total.0, "atGeneration": total.1, "phases": phases, "clusters": clusters})
    }

    /// Waits until every reachable key has applied (the unreachable one keeps failing).
    async fn settle(&self) {
        let want = SHAPE.keys() + 1;
        let settled = wait_until(PATIENCE, || async {
            let all = self.get("/v1/status?tenant=default").await;
            let items = all["items"].as_array().cloned().unwrap_or_default();
            let applied = items.iter().filter(|k| k["phase"] == "Applied").count();
            let b = self.get("/v1/status?tenant=b").await;
            items.len() == want && applied == want - 1 && b["items"][0]["phase"] == "Applied"
        })
        .await;
        assert!(settled, "the fleet did not settle: {}", self.get("/v1/status?tenant=default").await);
    }

    async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            task.await.expect("join");
        }
    }
}

/// Documents as one multi-document text (JSON is YAML).
fn text(docs: &[Document]) -> String {
    docs.iter().map(|d| d.to_value().to_string()).collect::<Vec<_>>().join("\n---\n")
}
