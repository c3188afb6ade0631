//! Spans over OpenTelemetry (built with `--features fleetsync/otel`): `fleetsync demo`
//! with `OTEL_EXPORTER_OTLP_ENDPOINT` set sends its key runs' spans, over OTLP/HTTP, to
//! a collector — here a loopback listener that records what it is sent.
#![cfg(feature = "otel")]

mod common;

use common::{bin, stderr};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

/// One request as the collector received it: its request line and its body.
struct Received {
    line: String,
    body: Vec<u8>,
}

/// A collector that answers every request 200 and passes each on.
fn collector() -> (String, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().expect("clone"));
            let (mut line, mut length) = (String::new(), 0usize);
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                continue;
            }
            let _ =
                conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n");
            let _ = tx.send(Received { line: line.trim().to_string(), body });
        }
    });
    (addr, rx)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn key_runs_are_exported_as_spans() {
    let (addr, received) = collector();
    let out = bin()
        .args(["demo", "--clusters", "2", "--syncsets", "2", "--resources", "1", "--latency-scale", "0"])
        .env("RUST_LOG", "info")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .output()
        .expect("run demo");
    assert!(out.status.success(), "{}", stderr(&out));
    let mut bodies = Vec::new();
    while let Ok(r) = received.recv_timeout(Duration::from_secs(10)) {
        assert_eq!(r.line, "POST /v1/traces HTTP/1.1", "OTLP/HTTP's traces path");
        bodies.push(r.body);
        if bodies.iter().map(|b| b.windows(3).filter(|w| w == b"run").count()).sum::<usize>() >= 4 {
            break;
        }
    }
    let all: Vec<u8> = bodies.concat();
    assert!(contains(&all, "fleetsync"), "the service is named");
    for key in ["default/cluster-00000/syncset-000", "default/cluster-00001/syncset-001"] {
        assert!(contains(&all, key), "a run span of {key} was exported");
    }
    assert!(contains(&all, "attempt") && contains(&all, "generation"), "with the run's fields");
}
