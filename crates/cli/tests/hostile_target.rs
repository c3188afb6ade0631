//! A cluster endpoint that answers without end must not cost the hub more than the
//! limit of one answer: a real hub applies to a loopback server that answers every
//! request `200` with an endless body, and the hub's peak memory is read from /proc.

mod common;

use common::{status_items, stderr, Hub};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

/// Bytes an endless answer sends before it stops (so a hub that reads everything
/// fails the test instead of exhausting the machine).
const SENT_AT_MOST: usize = 768 << 20;

/// A server on 127.0.0.1 answering every request `200` with a JSON body that does not
/// end (chunked, 64 KiB a chunk, up to [`SENT_AT_MOST`] per connection).
fn endless_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            std::thread::spawn(move || {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request);
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, "[".repeat(64 << 10));
                let mut sent = 0;
                let _ = socket.write_all(head.as_bytes());
                while sent < SENT_AT_MOST && socket.write_all(chunk.as_bytes()).is_ok() {
                    sent += 64 << 10;
                }
            });
        }
    });
    addr
}

/// The peak resident memory of process `pid`, in bytes (`VmHWM`).
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).expect("kB") * 1024
}

#[test]
fn an_endless_answer_costs_the_hub_one_bounded_read_and_names_the_limit() {
    let addr = endless_server();
    let hub = Hub::start();
    let file = hub.dir.path().join("fleet.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: endless, labels: {{env: prod}}}}\n\
             spec: {{endpoint: {{http: {{url: 'http://{addr}'}}}}}}\n---\n\
             apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: base}}\n\
             spec:\n  clusterSelector: {{matchLabels: {{env: prod}}}}\n  resources:\n\
             \x20   - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: a, namespace: default}}}}\n"
        ),
    )
    .expect("write");
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));

    // Two attempts (the first and a retry), each cut at the limit.
    hub.wait_until(Duration::from_secs(60), |h| status_items(h).iter().any(|k| k.attempts >= 2));
    let key = status_items(&hub).into_iter().next().expect("the key");
    let error = key.last_error.unwrap_or_default();
    assert!(
        error.contains(&format!(
            "http://{addr}/api/v1: the answer is longer than 8388608 bytes, the most the hub reads of one answer"
        )),
        "{error}"
    );
    let peak = peak_memory(hub.pid());
    assert!(peak < 160 << 20, "the hub's peak memory was {} MiB", peak >> 20);
}
