//! A SyncSet's page shows its spec and manifests as the API holds them (a Secret's
//! values redacted), and its rendering for one cluster against what that cluster last
//! applied.

use crate::browser::js;
use crate::hub::Hub;
use crate::page::{click, eventually, eventually_value, Screenshots};
use fantoccini::Client;

/// A templated SyncSet on two hive clusters and the one nobody can reach, with a Secret
/// among its manifests.
fn templated(greeting: &str) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: greeter}}\nspec:\n  \
         clusterNames: [cluster-00000, cluster-00001, unreachable]\n  templated: true\n  values: {{greeting: {greeting}}}\n  resources:\n    \
         - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: greeter, namespace: fleet-apps}}, data: {{text: \"{{{{ values.greeting }}}} from {{{{ cluster.name }}}}\"}}}}\n    \
         - {{apiVersion: v1, kind: Secret, metadata: {{name: greeter-key, namespace: fleet-apps}}, stringData: {{key: TOP-SECRET-VALUE-9}}}}\n"
    )
}

pub(crate) async fn a_syncset_shows_its_spec_manifests_and_rendering(browser: &Client, hub: &Hub, shots: &Screenshots) {
    hub.apply(&templated("hello")).await;
    browser.goto(&hub.url("/#/syncset/greeter")).await.expect("open the SyncSet");
    let manifests = eventually_value("the manifests", || async {
        let rows = js(
            browser,
            "return [...document.querySelectorAll('#manifest-list tr[data-manifest]')].map(r => r.dataset.manifest)",
        )
        .await;
        let rows: Vec<String> = serde_json::from_value(rows).unwrap_or_default();
        (!rows.is_empty()).then_some(rows)
    })
    .await;
    assert_eq!(manifests, ["ConfigMap fleet-apps/greeter", "Secret fleet-apps/greeter-key"]);
    let spec = js(browser, "return document.getElementById('syncset-spec').textContent").await;
    assert!(spec.as_str().is_some_and(|s| s.contains("\"templated\": true") && s.contains("cluster-00001")), "{spec}");
    let page = browser.source().await.expect("the page's source");
    assert!(!page.contains("TOP-SECRET-VALUE-9"), "a Secret's value is on the page");
    let shown = js(browser, "return document.getElementById('syncset-doc').textContent").await;
    assert!(shown.as_str().is_some_and(|t| t.contains("<redacted>")), "the Secret's value is shown redacted: {shown}");

    // Once a cluster has applied it, its rendering is the one the cluster holds.
    let render = |cluster: &'static str| async move {
        js(browser, &format!("document.getElementById('render-cluster').value = '{cluster}'; return true")).await;
        click(browser, "#render-form button[type=submit]").await;
    };
    let applied = eventually_value("cluster-00001's rendering applied", || async {
        let k = hub.get("/v1/status?tenant=default&cluster=cluster-00001&syncset=greeter&limit=1").await;
        k["items"][0]["renderedHash"].as_str().map(str::to_string)
    })
    .await;
    render("cluster-00001").await;
    let output = eventually_value("the rendering for cluster-00001, the one it holds", || async {
        let shown = js(
            browser,
            "const v = document.getElementById('render-verdict'), o = document.getElementById('render-output');
             return v && o && v.dataset.same === 'true' ? o.textContent : null",
        )
        .await;
        shown.as_str().map(str::to_string)
    })
    .await;
    assert!(output.contains("hello from cluster-00001") && !output.contains("TOP-SECRET"), "{output}");
    shots.take(browser, "syncset-rendered").await;

    // A cluster that never applied it, and one it does not select.
    render("unreachable").await;
    eventually("the unreachable cluster has applied no rendering", || async {
        let v = js(browser, "const v = document.getElementById('render-verdict'); return v ? v.textContent : ''").await;
        v.as_str().is_some_and(|t| t.starts_with("unreachable has not applied a rendering"))
    })
    .await;
    render("cluster-00002").await;
    eventually("a cluster the SyncSet does not select", || async {
        let v = js(browser, "const v = document.getElementById('render-verdict'); return v ? v.textContent : ''").await;
        v.as_str().is_some_and(|t| t == "The SyncSet does not select cluster-00002.")
    })
    .await;
    let verdict = js(browser, "return document.getElementById('render-verdict').textContent").await;
    assert!(verdict.as_str().is_some_and(|v| v.contains("does not select")), "{verdict}");
    assert_eq!(applied.len(), 12, "a rendered hash: {applied}");
    browser.goto(&hub.url("/#/")).await.expect("back to the fleet");
}
