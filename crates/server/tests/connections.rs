//! The API's connection discipline over real TCP: clients that open connections and
//! stall while sending a request head (slowloris) are closed after the header timeout
//! and cannot keep `/healthz` out, even at the connection cap; idle keep-alive
//! connections are closed after the idle timeout; a request whose body trickles is
//! answered `408` after the body timeout, and its connection closed.

use fleetsync_model::Grant;
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_server::{serve_with, AppState, ConnectionLimits, QueueMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A hub's API on a free port, over a real SQLite store, within `limits`.
struct Server {
    addr: SocketAddr,
    /// A fleet-admin's token.
    token: String,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(limits: ConnectionLimits) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open store"));
    let admin = TokenRequest { grant: Grant::Fleet, name: None, ttl: None, created_by: "test".into() };
    let (token, _) = issue(store.as_ref(), store.clock().as_ref(), admin).await.expect("a token");
    let mut registry = Registry::default();
    let queue_metrics = QueueMetrics::register(&mut registry);
    let state = AppState::new(store, Arc::new(registry), queue_metrics);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_with(listener, state, None, limits, async {
        let _ = stopped.await;
    }));
    Server { addr, token, _dir: dir, _stop: stop }
}

/// Reads one HTTP response (head and a `content-length` body) from `stream`.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).await.expect("read a response");
        assert!(n > 0, "the connection closed before a whole response: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().expect("length"))
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text;
            }
        }
    }
}

/// `GET /healthz` on a new connection; its status line, within `within`.
async fn healthz(addr: SocketAddr, within: Duration) -> String {
    let ask = async {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n").await.expect("write");
        read_response(&mut s).await
    };
    let answer = tokio::time::timeout(within, ask).await.expect("/healthz answers in time");
    answer.lines().next().unwrap_or_default().to_string()
}

/// A connection that sends part of a request head and stalls.
async fn slowloris(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: hub\r\nX-Slow: ").await.expect("write");
    s
}

/// Waits until the server closes `s` (end of stream or reset); how long that took from `since`.
async fn closed(mut s: TcpStream, since: Instant, patience: Duration) -> Duration {
    let mut buf = [0u8; 1024];
    let read =
        tokio::time::timeout(patience, s.read(&mut buf)).await.expect("the server closes the connection in time");
    match read {
        Ok(0) | Err(_) => since.elapsed(),
        Ok(n) => panic!("the server answered a partial request: {}", String::from_utf8_lossy(&buf[..n])),
    }
}

#[tokio::test]
async fn stalled_request_heads_are_closed_after_the_header_timeout() {
    let timeout = Duration::from_millis(800);
    let server = start(ConnectionLimits {
        max_connections: 100,
        header_read_timeout: timeout,
        idle_timeout: Duration::from_secs(60),
        ..ConnectionLimits::default()
    })
    .await;
    let started = Instant::now();
    let mut attackers = Vec::new();
    for _ in 0..30 {
        attackers.push(slowloris(server.addr).await);
    }
    // During the attack the API answers.
    assert_eq!(healthz(server.addr, Duration::from_millis(500)).await, "HTTP/1.1 200 OK");
    for s in attackers {
        let after = closed(s, started, Duration::from_secs(5)).await;
        assert!(after >= timeout - Duration::from_millis(50), "closed after {after:?}, before the header timeout");
    }
    assert!(started.elapsed() < Duration::from_secs(3), "all closed by {:?}", started.elapsed());
    assert_eq!(healthz(server.addr, Duration::from_millis(500)).await, "HTTP/1.1 200 OK");
}

#[tokio::test]
async fn healthz_answers_while_stalled_clients_hold_every_connection_slot() {
    // A header timeout far beyond the test: only the cap's eviction lets /healthz in.
    let limits = ConnectionLimits {
        max_connections: 8,
        header_read_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(60),
        ..ConnectionLimits::default()
    };
    let server = start(limits).await;
    let mut attackers = Vec::new();
    for round in 0..3 {
        for _ in 0..12 {
            attackers.push(slowloris(server.addr).await);
        }
        assert_eq!(healthz(server.addr, Duration::from_secs(2)).await, "HTTP/1.1 200 OK", "round {round}");
    }
    // The oldest stalled connections gave their slots up; at most the cap stayed open.
    let now = Instant::now();
    let mut open = 0;
    for s in attackers {
        let mut buf = [0u8; 16];
        let mut s = s;
        match tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
            Err(_) => open += 1,
            Ok(Ok(0) | Err(_)) => {}
            Ok(Ok(_)) => panic!("a partial request was answered"),
        }
    }
    assert!(open <= 8, "{open} stalled connections still open (cap 8), checked in {:?}", now.elapsed());
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(800);
    let server = start(ConnectionLimits {
        max_connections: 100,
        header_read_timeout: Duration::from_secs(30),
        idle_timeout: idle,
        ..ConnectionLimits::default()
    })
    .await;
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    for _ in 0..2 {
        s.write_all(b"GET /livez HTTP/1.1\r\nHost: hub\r\n\r\n").await.expect("write");
        let answer = read_response(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    }
    let since = Instant::now();
    let after = closed(s, since, Duration::from_secs(5)).await;
    assert!(
        after >= idle - Duration::from_millis(50) && after < Duration::from_secs(3),
        "closed after {after:?}, idle timeout {idle:?}"
    );
}

#[tokio::test]
async fn a_body_that_trickles_is_408_after_the_body_timeout_and_closes_the_connection() {
    let server =
        start(ConnectionLimits { body_read_timeout: Duration::from_secs(1), ..ConnectionLimits::default() }).await;
    let mut s = TcpStream::connect(server.addr).await.expect("connect");
    let head = format!(
        "POST /v1/apply HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer {}\r\nContent-Type: application/yaml\r\nContent-Length: 1000\r\n\r\nkind: Clu",
        server.token
    );
    s.write_all(head.as_bytes()).await.expect("write");
    let since = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(10), read_response(&mut s)).await.expect("an answer in time");
    let took = since.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("connection: close"), "{answer}");
    assert!(answer.contains("the request body did not arrive within 1 s (the limit)"), "{answer}");
    assert!(took >= Duration::from_millis(900), "answered after {took:?}, before the timeout");
    closed(s, since, Duration::from_secs(5)).await;
}
