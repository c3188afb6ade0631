//! A Git server over smart HTTP on a loopback port: `git http-backend` (Git's own CGI
//! program) behind a small CGI host, with a log of every request, which tells the
//! `ls-refs` of a fetch apart from the `fetch` that downloads a pack.

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

/// What the server was asked: `GET info/refs`, `ls-refs`, `fetch`, or another request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    InfoRefs,
    LsRefs,
    Fetch,
    Other(String),
}

pub struct GitServer {
    /// `http://127.0.0.1:PORT`; repositories are under it by directory name.
    pub url: String,
    log: Arc<Mutex<Vec<Asked>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

#[derive(Clone)]
struct Host {
    root: PathBuf,
    log: Arc<Mutex<Vec<Asked>>>,
    /// `Basic …`, the only Authorization this server takes, if it takes one.
    auth: Option<String>,
}

impl GitServer {
    /// Serves the repositories under `root` to anyone.
    pub fn start(root: PathBuf) -> GitServer {
        GitServer::serve(root, None)
    }

    /// Serves them to `user` with `password` (HTTP Basic) only; `401` to anyone else.
    pub fn start_private(root: PathBuf, user: &str, password: &str) -> GitServer {
        use base64::Engine as _;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        GitServer::serve(root, Some(format!("Basic {token}")))
    }

    fn serve(root: PathBuf, auth: Option<String>) -> GitServer {
        let log = Arc::new(Mutex::new(Vec::new()));
        let host = Host { root, log: log.clone(), auth };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                addr_tx.send(listener.local_addr().expect("address")).expect("send the address");
                let app = axum::Router::new().fallback(cgi).with_state(host);
                let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                    let _ = stopped.await;
                });
                serve.await.expect("serve");
            });
        });
        let addr = addr_rx.recv().expect("the server started");
        GitServer { url: format!("http://{addr}"), log, stop: Some(stop), thread: Some(thread) }
    }

    /// Every request so far, in order.
    pub fn asked(&self) -> Vec<Asked> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many packs were asked for.
    pub fn fetches(&self) -> usize {
        self.asked().iter().filter(|a| **a == Asked::Fetch).count()
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs `git http-backend` for one request, as a CGI host does.
async fn cgi(State(host): State<Host>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = to_bytes(body, 64 << 20).await.unwrap_or_default();
    let asked = match (parts.method.as_str(), parts.uri.path()) {
        ("GET", p) if p.ends_with("/info/refs") => Asked::InfoRefs,
        ("POST", p) if p.ends_with("/git-upload-pack") => {
            let text = String::from_utf8_lossy(&body);
            if text.contains("command=ls-refs") {
                Asked::LsRefs
            } else {
                Asked::Fetch
            }
        }
        (m, p) => Asked::Other(format!("{m} {p}")),
    };
    host.log.lock().unwrap_or_else(PoisonError::into_inner).push(asked);
    if let Some(want) = &host.auth {
        if parts.headers.get("authorization").and_then(|v| v.to_str().ok()) != Some(want.as_str()) {
            let mut refused = Response::new(Body::empty());
            *refused.status_mut() = StatusCode::UNAUTHORIZED;
            refused.headers_mut().insert("www-authenticate", HeaderValue::from_static("Basic realm=\"git\""));
            return refused;
        }
    }
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
    let (content_type, encoding, protocol) =
        (header("content-type"), header("content-encoding"), header("git-protocol"));
    let output = tokio::task::spawn_blocking(move || {
        let mut child = Command::new("git")
            .arg("http-backend")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("GIT_PROJECT_ROOT", &host.root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("REQUEST_METHOD", parts.method.as_str())
            .env("PATH_INFO", parts.uri.path())
            .env("QUERY_STRING", parts.uri.query().unwrap_or(""))
            .env("CONTENT_TYPE", content_type)
            .env("CONTENT_LENGTH", body.len().to_string())
            .env("HTTP_CONTENT_ENCODING", encoding)
            .env("GIT_PROTOCOL", protocol)
            .env("REMOTE_ADDR", "127.0.0.1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run git http-backend");
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&body);
        }
        child.wait_with_output().expect("git http-backend's output")
    })
    .await
    .expect("the CGI task");
    respond(&output.stdout)
}

/// A CGI program's output as a response: its header lines (`Status:` among them), a
/// blank line, the body.
fn respond(out: &[u8]) -> Response {
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
    let split = split.or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
    let Some((end, gap)) = split else {
        return Response::builder().status(StatusCode::BAD_GATEWAY).body(Body::empty()).expect("a response");
    };
    let mut response = Response::new(Body::from(out[end + gap..].to_vec()));
    for line in String::from_utf8_lossy(&out[..end]).lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().and_then(|c| c.parse().ok()).unwrap_or(500);
            *response.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
        } else if let (Ok(name), Ok(value)) =
            (axum::http::HeaderName::try_from(name.trim()), HeaderValue::from_str(value))
        {
            response.headers_mut().append(name, value);
        }
    }
    response
}
