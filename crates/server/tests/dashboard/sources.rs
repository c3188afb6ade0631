//! The sources page: each GitRepository and OCIRepository of the tenant, with what it
//! follows and the revision its SyncSets read, as the API holds them.

use crate::browser::js;
use crate::hub::Hub;
use crate::page::{eventually_value, Screenshots};
use fantoccini::Client;
use serde_json::Value;

const SOURCES: &str = r#"
apiVersion: fleetsync.io/v1
kind: GitRepository
metadata: {name: fleet-git}
spec: {url: "https://git.example/fleet.git", ref: {branch: main}}
---
apiVersion: fleetsync.io/v1
kind: OCIRepository
metadata: {name: fleet-oci}
spec: {url: "oci://registry.example/fleet", ref: {semver: ">=1.0, <2"}}
"#;

/// (name, kind, url, ref, revision) of each source, as the API lists them.
async fn from_api(hub: &Hub) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for plural in ["gitrepositories", "ocirepositories"] {
        for s in hub.get(&format!("/v1/{plural}?tenant=default")).await["items"].as_array().into_iter().flatten() {
            let reference = s["spec"]["ref"].as_object().and_then(|r| r.iter().next());
            rows.push(vec![
                s["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                s["kind"].as_str().unwrap_or_default().to_string(),
                s["spec"]["url"].as_str().unwrap_or_default().to_string(),
                reference.map_or("tag latest".into(), |(k, v)| format!("{k} {}", v.as_str().unwrap_or_default())),
                s["status"]["revision"].as_str().unwrap_or_default().to_string(),
            ]);
        }
    }
    rows.sort();
    rows
}

pub(crate) async fn sources_show_what_the_api_holds(browser: &Client, hub: &Hub, shots: &Screenshots) {
    hub.apply(SOURCES).await;
    browser.goto(&hub.url("/#/sources")).await.expect("the sources page");
    let want = from_api(hub).await;
    assert_eq!(want.len(), 2, "{want:?}");
    let script = "return [...document.querySelectorAll('#source-list tbody tr')].map(r => [...r.cells].slice(0, 5).map(c => c.innerText))";
    let shown = eventually_value("the sources on the page", || async {
        let rows: Vec<Vec<String>> = serde_json::from_value(js(browser, script).await).unwrap_or_default();
        (rows == want).then_some(rows)
    })
    .await;
    let link = js(
        browser,
        "return document.querySelector('#source-list tr[data-source=\"fleet-oci\"] a').getAttribute('href')",
    )
    .await;
    assert_eq!(link, Value::from("#/key/source%3Afleet-oci/source%3Afleet-oci"), "{shown:?}");
    let text = js(browser, "return document.getElementById('view').innerText").await;
    assert!(!text.as_str().unwrap_or_default().contains("null"), "{text}");
    shots.take(browser, "sources").await;
}
