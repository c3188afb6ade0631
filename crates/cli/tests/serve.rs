//! `fleetsync serve` as a process: what it leaves behind when it cannot start.

mod common;

use common::{bin, stderr};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A hub whose address is taken exits non-zero naming the address, and issues no
/// token: no `<db>.admin-token` file is left for a hub that never listened.
#[test]
fn serve_on_a_port_in_use_fails_and_writes_no_token() {
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = held.local_addr().expect("addr").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("hub.db");
    let mut child = bin()
        .args(["serve", "--listen", &address, "--db", db.to_str().expect("utf-8")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("serve kept running on an address in use");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    assert!(!status.success(), "serve exits non-zero");
    let err = stderr(&out);
    assert!(err.contains(&format!("cannot listen on {address}")), "{err}");
    let token = dir.path().join("hub.db.admin-token");
    assert!(!token.exists(), "a hub that never listened left {}", token.display());
}
