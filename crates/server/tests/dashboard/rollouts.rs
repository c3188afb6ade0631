//! The rollouts panel and a SyncSet's page, against `/v1/rollouts` and
//! `/v1/syncsets/{name}`.

use crate::browser::{js, js_bool};
use crate::hub::Hub;
use crate::page::{eventually, Screenshots};
use crate::PATIENCE;
use fantoccini::Client;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A SyncSet of three hive clusters staged by a rollout whose first step (one cluster)
/// waits for a promote; generation 1 goes out at once, a later one stops there.
pub(crate) fn staged(value: &str) -> String {
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
pub(crate) fn doomed(value: &str) -> String {
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
pub(crate) async fn rollouts_show_their_phase_and_step(browser: &Client, hub: &Hub, shots: &Screenshots) {
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
pub(crate) async fn syncset_page_matches_the_api(browser: &Client, hub: &Hub, name: &str, reason: &str) -> Value {
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
pub(crate) async fn rollouts_match_the_api(
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
pub(crate) fn rollout_row(r: &Value) -> (String, Value) {
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
        // What a fleet-admin may do with it, as its phase allows.
        "actions": match r["phase"].as_str() {
            Some("Progressing") => "PausePromoteAbort",
            Some("Paused") => "ResumeAbort",
            _ => "",
        },
    });
    for n in ["clusters", "updated", "healthy", "failed", "pending"] {
        row[n] = json!(text(&counts[n]));
    }
    let bars: Vec<String> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| format!("{}{}/{}", if i as u64 == step { ">" } else { "" }, s["healthy"], s["clusters"]))
        .collect();
    row["steps"] = json!(bars.join(" "));
    (name, row)
}

/// The rows of the rollouts panel by SyncSet, each cell under its column's heading
/// (ages aside), and whether the row is shown or folded away.
pub(crate) async fn page_rollouts(browser: &Client) -> Value {
    js(
        browser,
        "const rows = {};
         document.querySelectorAll('#rollouts tr[data-rollout]').forEach(r => {
           const head = [...r.closest('table').querySelectorAll('thead th')].map(h => h.textContent);
           const row = {};
           [...r.cells].forEach((c, i) => { if (head[i] !== 'step started' && head[i] !== 'completed') row[head[i]] = c.textContent; });
           // A bar per step: its healthy clusters of all, the current one marked.
           if (head.includes('steps')) row.steps = [...r.cells[head.indexOf('steps')].querySelectorAll('.step')]
             .map(s => (s.classList.contains('current') ? '>' : '') + s.dataset.summary).join(' ');
           row.listed = r.closest('details') ? 'folded' : 'shown';
           rows[r.dataset.rollout] = row;
         });
         return rows;",
    )
    .await
}
