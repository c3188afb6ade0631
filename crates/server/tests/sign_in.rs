//! Signing in to the dashboard over real TCP: sign-ins are rate-limited per client and
//! per credential (429 with `Retry-After`), an agent's credential opens no session, and
//! a burst of sign-ins by one identity ends nobody else's session — checked with a
//! plain HTTP client and in a headless Chromium signed in as an admin. Also: a `413`
//! closes its connection.
//!
//! The Chromium test needs `chromium` and `chromium-driver` (installed as root with
//! apt-get when missing, as the dashboard's test does); it never skips.

#[path = "support/browser.rs"]
mod browser;

use browser::{js, js_bool, submit_token, wait_until, ChromeDriver};
use fleetsync_model::Grant;
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_server::{serve, AppState, QueueMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The finding's burst: more sign-ins than the hub keeps sessions.
const BURST: usize = 10_050;

/// A hub's API on a loopback port over a SQLite store (no runtime: nothing applies).
struct Hub {
    base: String,
    addr: std::net::SocketAddr,
    store: Arc<dyn Store>,
    http: reqwest::Client,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Hub {
    async fn start() -> Hub {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open"));
        let mut registry = Registry::default();
        let queue_metrics = QueueMetrics::register(&mut registry);
        let state = AppState::new(store.clone(), Arc::new(registry), queue_metrics);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("address");
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            serve(listener, state, None, async move { stopped.cancelled().await }).await.expect("serve");
        });
        Hub { base: format!("http://{addr}"), addr, store, http: reqwest::Client::new(), stop, _dir: dir }
    }

    async fn token(&self, grant: &str) -> String {
        let req = TokenRequest {
            grant: Grant::parse(grant).expect("grant"),
            name: None,
            ttl: None,
            created_by: "test".into(),
        };
        issue(self.store.as_ref(), self.store.clock().as_ref(), req).await.expect("a token").0
    }

    /// `POST /ui/session` as the hub's page sends it.
    async fn sign_in(&self, token: &str) -> reqwest::Response {
        self.http
            .post(format!("{}/ui/session", self.base))
            .header("origin", &self.base)
            .json(&json!({"token": token}))
            .send()
            .await
            .expect("sign in")
    }

    /// `GET /v1/whoami` with the session `cookie` only.
    async fn whoami_with(&self, cookie: &str) -> reqwest::StatusCode {
        self.http
            .get(format!("{}/v1/whoami", self.base))
            .header("cookie", cookie)
            .send()
            .await
            .expect("whoami")
            .status()
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The `name=value` of a response's session cookie.
fn cookie_of(resp: &reqwest::Response) -> String {
    let set = resp.headers().get("set-cookie").and_then(|v| v.to_str().ok()).expect("a session cookie");
    set.split(';').next().expect("name=value").to_string()
}

/// Signs in `BURST` times with `token`, 64 at a time; counts the answers by status and
/// returns one 429 answer's `Retry-After`.
async fn burst(hub: &Hub, token: &str) -> (std::collections::BTreeMap<u16, usize>, Option<u64>) {
    use futures_util::StreamExt;
    let answers: Vec<(u16, Option<u64>)> = futures_util::stream::iter(0..BURST)
        .map(|_| async {
            let resp = hub.sign_in(token).await;
            let retry = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
            (resp.status().as_u16(), retry)
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let mut by_status = std::collections::BTreeMap::new();
    for (status, _) in &answers {
        *by_status.entry(*status).or_default() += 1;
    }
    (by_status, answers.iter().find_map(|(s, r)| if *s == 429 { *r } else { None }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_sign_ins_is_429_and_ends_no_one_elses_session() {
    let hub = Hub::start().await;
    let admin_a = hub.token("team-a:admin").await;
    let agent_b = hub.token("team-b:agent:c1").await;
    let viewer_b = hub.token("team-b:viewer").await;

    let signed_in = hub.sign_in(&admin_a).await;
    assert_eq!(signed_in.status(), 200);
    let admin_cookie = cookie_of(&signed_in);
    assert_eq!(hub.whoami_with(&admin_cookie).await, 200);

    let agent = hub.sign_in(&agent_b).await;
    assert_eq!(agent.status(), 403, "an agent's credential opens no session");
    let message: Value = agent.json().await.expect("JSON");
    assert!(message["error"].as_str().unwrap_or_default().contains("agent"), "{message}");

    let (by_status, retry_after) = burst(&hub, &viewer_b).await;
    let ok = by_status.get(&200).copied().unwrap_or(0);
    assert!(ok <= 5, "the credential's burst is 5 sign-ins: {by_status:?}");
    assert_eq!(by_status.get(&429).copied().unwrap_or(0), BURST - ok, "the rest are 429: {by_status:?}");
    assert!(retry_after.is_some_and(|s| (1..=12).contains(&s)), "Retry-After: {retry_after:?}");

    assert_eq!(hub.whoami_with(&admin_cookie).await, 200, "the admin of team-a is still signed in");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_413_closes_its_connection() {
    let hub = Hub::start().await;
    let mut tcp = tokio::net::TcpStream::connect(hub.addr).await.expect("connect");
    let body = format!(r#"{{"token": "{}"}}"#, "x".repeat(17 * 1024));
    let head = format!(
        "POST /ui/session HTTP/1.1\r\nhost: {}\r\norigin: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        hub.addr,
        hub.base,
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.expect("head");
    tcp.write_all(body.as_bytes()).await.expect("body");
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(read.is_ok(), "the hub kept the connection open after: {text}");
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.to_ascii_lowercase().contains("\r\nconnection: close\r\n"), "{text}");
}

/// Signed in in Chromium as an admin, the page stays signed in while another
/// identity signs in thousands of times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_in_admin_stays_signed_in_in_the_browser() {
    let hub = Hub::start().await;
    let admin_a = hub.token("team-a:admin").await;
    let viewer_b = hub.token("team-b:viewer").await;
    let driver = ChromeDriver::start();
    let browser = driver.browser().await;
    let steps = async {
        browser.goto(&format!("{}/", hub.base)).await.expect("open the page");
        eventually("the sign-in form", || async {
            js_bool(&browser, "return !document.getElementById('sign-in').hidden").await
        })
        .await;
        submit_token(&browser, &admin_a).await;
        eventually("signed in", || async {
            js_bool(&browser, "return !document.getElementById('session').hidden").await
        })
        .await;
        assert_eq!(js(&browser, "return fetch('/v1/whoami').then(r => r.status)").await, json!(200));

        let (by_status, _) = burst(&hub, &viewer_b).await;
        assert!(by_status.get(&429).copied().unwrap_or(0) >= BURST - 5, "{by_status:?}");

        assert_eq!(
            js(&browser, "return fetch('/v1/whoami').then(r => r.status)").await,
            json!(200),
            "the session survived"
        );
        browser.refresh().await.expect("reload");
        eventually("still signed in after a reload", || async {
            js_bool(&browser, "return document.readyState === 'complete' && !document.getElementById('session').hidden")
                .await
        })
        .await;
        let who = js(&browser, "return fetch('/v1/whoami').then(r => r.json())").await;
        assert!(who["subject"].as_str().unwrap_or_default().starts_with("token:team-a-admin"), "{who}");
    };
    steps.await;
    browser.close().await.expect("close the browser");
}

// ---- the browser --------------------------------------------------------------------

const PATIENCE: Duration = Duration::from_secs(60);

async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    assert!(wait_until(PATIENCE, check).await, "{what}: not within {PATIENCE:?}");
}
