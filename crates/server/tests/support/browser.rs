//! A real headless Chromium for the dashboard's tests, driven through `chromedriver`
//! (Debian's `chromium` and `chromium-driver`, which CI installs).

use fantoccini::{Client, ClientBuilder};
use fleetsync_testkit::tools::installed;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{json, Value};
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's packages of the browser and its driver.
const BROWSER: &[&str] = &["chromium", "chromium-driver"];

/// How long `chromedriver` may take to listen.
const STARTING: Duration = Duration::from_secs(30);

/// `chromedriver` on a free loopback port, ended when dropped.
pub struct ChromeDriver {
    child: Child,
    port: u16,
    chromium: PathBuf,
}

impl ChromeDriver {
    pub fn start() -> ChromeDriver {
        let driver = installed("chromedriver", BROWSER);
        let chromium = installed("chromium", BROWSER);
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < STARTING, "chromedriver did not listen on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        ChromeDriver { child, port, chromium }
    }

    /// A new headless Chromium with a fresh profile (no cookies).
    pub async fn browser(&self) -> Client {
        let args =
            ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"];
        let caps = json!({"goog:chromeOptions": {"binary": self.chromium, "args": args}});
        let Value::Object(caps) = caps else { unreachable!("an object") };
        ClientBuilder::new(HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a Chromium session")
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `script` returns in the page.
pub async fn js(browser: &Client, script: &str) -> Value {
    browser.execute(script, vec![]).await.unwrap_or_else(|e| panic!("running {script:?}: {e}"))
}

/// Whether `script` returns `true` in the page.
pub async fn js_bool(browser: &Client, script: &str) -> bool {
    js(browser, script).await.as_bool() == Some(true)
}

/// Types `token` into the dashboard's sign-in form and submits it.
pub async fn submit_token(browser: &Client, token: &str) {
    let field = browser.find(fantoccini::Locator::Id("token")).await.expect("the token field");
    field.send_keys(token).await.expect("type the token");
    browser
        .find(fantoccini::Locator::Css("#sign-in-form button[type=submit]"))
        .await
        .expect("the sign-in button")
        .click()
        .await
        .expect("sign in");
}

/// Polls `check` until it holds or `within` passes; answers whether it held.
pub async fn wait_until<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if start.elapsed() > within {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
