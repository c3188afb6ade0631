//! Reading and driving the page: its rows and totals, clicks and choices that survive
//! a redraw, screenshots, and waiting for a condition.

use crate::browser::{js, wait_until};
use crate::PATIENCE;
use fantoccini::Client;
use serde_json::Value;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The names of tenant `default`'s objects the view shows (its heading aside, which
/// repeats the URL the user typed; the error line, which names what was refused).
pub(crate) async fn shows_of_a(browser: &Client) -> Vec<String> {
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
pub(crate) async fn data_rows(browser: &Client) -> u64 {
    let script = "return document.querySelectorAll('#view td[data-phase], #view tr[data-cluster], #view tr[data-syncset], #view tr[data-resource]').length";
    js(browser, script).await.as_u64().unwrap_or(u64::MAX)
}

// ---- the browser -------------------------------------------------------------------

/// Runs `steps`; if one fails, keeps a screenshot of where it failed and closes the
/// browser (Chromium would outlive its killed driver) before failing the test.
pub(crate) async fn closing(browser: &Client, shots: &Screenshots, steps: impl Future<Output = ()>) {
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
pub(crate) async fn click(browser: &Client, css: &str) {
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
pub(crate) async fn choose(browser: &Client, id: &str, value: &str) {
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
pub(crate) async fn page_totals(browser: &Client) -> Value {
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
pub(crate) struct Screenshots {
    dir: PathBuf,
    next: std::sync::atomic::AtomicUsize,
}

impl Screenshots {
    pub(crate) fn new() -> Screenshots {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        let dir = target.join("dashboard-screenshots");
        std::fs::create_dir_all(&dir).expect("the screenshot directory");
        Screenshots { dir, next: Default::default() }
    }

    pub(crate) async fn take(&self, browser: &Client, name: &str) {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let png = browser.screenshot().await.expect("a screenshot");
        std::fs::write(self.dir.join(format!("{n:02}-{name}.png")), png).expect("save the screenshot");
    }
}

pub(crate) async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    assert!(wait_until(PATIENCE, check).await, "{what}: not within {PATIENCE:?}");
}

pub(crate) async fn eventually_value<T, F, Fut>(what: &str, mut check: F) -> T
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
