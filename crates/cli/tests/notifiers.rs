//! Notifiers through the `fleetsync` binary: a webhook receiver on loopback gets each
//! event, goes down while more happen, and once back on the same port gets every one
//! it missed, in order; a Slack target's URL (from its Secret) never shows in status
//! or `describe`; a target the egress policy denies parks the notifier with a message
//! saying so.

mod common;

use common::{database_url, http_get, run, stderr, stdout, wait_for, Hub, Schema};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// An HTTP server on loopback that answers every request 200 and keeps each JSON body.
struct Receiver {
    addr: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    fn start(addr: &str, got: Arc<Mutex<Vec<Value>>>) -> Receiver {
        let listener = TcpListener::bind(addr).expect("bind the receiver");
        let addr = listener.local_addr().expect("address").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(v) = stream.ok().and_then(answer) {
                    got.lock().expect("lock").push(v);
                }
            }
        });
        Receiver { addr, stop, thread: Some(thread) }
    }

    /// Stops listening: connections to its port are refused from now on.
    fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            t.join().expect("receiver thread");
        }
    }
}

/// Reads one request and answers 200 (closing the connection); its body as JSON.
fn answer(stream: TcpStream) -> Option<Value> {
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let mut stream = stream;
    stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").ok()?;
    serde_json::from_slice(&body).ok()
}

fn cluster(name: &str) -> String {
    format!("apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {name}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n")
}

/// The notifier's key in `get status`, as one line (`""` while it has none).
fn status_of(hub: &Hub, name: &str) -> String {
    let out = stdout(&hub.cli(&["get", "status", "-o", "json"]));
    let items: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    let key = format!("notifier:{name}");
    let found = items["items"]
        .as_array()
        .or(items.as_array())
        .and_then(|a| a.iter().find(|k| k["cluster"] == key.as_str()).cloned());
    found.map(|k| k.to_string()).unwrap_or_default()
}

/// Flags that make a failed send retry quickly; two failed attempts would park any
/// other key, but a notifier retries until its receiver is back.
const RETRY_FAST: [&str; 6] = ["--backoff-base", "200ms", "--backoff-cap", "1s", "--max-attempts", "2"];

#[test]
fn a_webhook_down_for_a_while_gets_every_missed_event_in_order() {
    missed_events_arrive_in_order(&Hub::start_flags(&RETRY_FAST));
}

#[test]
fn a_webhook_down_for_a_while_gets_every_missed_event_in_order_on_postgresql() {
    let schema = Schema(format!("fs_notify_{}", std::process::id()));
    let url = database_url();
    let out = run(&["migrate", "--database-url", &url, "--schema", &schema.0]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut flags = vec!["--database-url", url.as_str(), "--schema", schema.0.as_str(), "--no-migrate"];
    flags.extend(RETRY_FAST);
    missed_events_arrive_in_order(&Hub::start_with(tempfile::tempdir().expect("tempdir"), &flags));
}

/// A receiver gets c1's event, goes down while c2…c6 are created (the notifier fails
/// several times, never parked, its status naming the target without its query), and
/// once back on the same port gets every missed event, in order; deleted and created
/// again, the notifier starts at its new creation.
fn missed_events_arrive_in_order(hub: &Hub) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let receiver = Receiver::start("127.0.0.1:0", got.clone());
    let addr = receiver.addr.clone();
    let notifier = format!(
        "apiVersion: fleetsync.io/v1\nkind: Notifier\nmetadata: {{name: ops}}\n\
         spec: {{webhook: {{url: 'http://{addr}/hook?token=s3cret'}}, filters: {{kinds: [Cluster]}}, template: '{{{{kind}}}} {{{{name}}}} {{{{action}}}}'}}\n"
    );
    hub.apply(&notifier);
    hub.apply(&cluster("c1"));
    let names = |got: &Arc<Mutex<Vec<Value>>>| -> Vec<String> {
        got.lock().expect("lock").iter().map(|v| v["name"].as_str().unwrap_or_default().to_string()).collect()
    };
    wait_for("c1's event at the receiver", Duration::from_secs(30), || names(&got).contains(&"c1".to_string()));
    let first = got.lock().expect("lock")[0].clone();
    assert_eq!((first["kind"].as_str(), first["action"].as_str()), (Some("Cluster"), Some("Created")), "{first}");
    assert_eq!(
        (first["text"].as_str(), first["severity"].as_str()),
        (Some("Cluster c1 Created"), Some("info")),
        "{first}"
    );

    receiver.stop();
    for name in ["c2", "c3", "c4", "c5", "c6"] {
        hub.apply(&cluster(name));
    }
    // Down for several attempts, retried with backoff.
    wait_for("the notifier's failures in its status", Duration::from_secs(30), || {
        let status: Value = serde_json::from_str(&status_of(hub, "ops")).unwrap_or(Value::Null);
        status["phase"] == "Failed" && status["attempts"].as_u64() >= Some(3)
    });
    let status = status_of(hub, "ops");
    assert!(status.contains("sending event") && status.contains("http://127.0.0.1"), "{status}");
    assert!(!status.contains("s3cret") && !status.contains("token="), "{status}");
    assert!(!names(&got).contains(&"c2".to_string()), "nothing is received while down");
    let address = hub.url.trim_start_matches("http://").to_string();
    wait_for("the failing notifier in the metrics", Duration::from_secs(30), || {
        let metrics = http_get(&address, "/metrics").map(|(_, body)| body).unwrap_or_default();
        metrics.contains(r#"fleetsync_syncset_keys{tenant="default",syncset="notifier:ops",phase="Failed"} 1"#)
    });

    let back = Receiver::start(&addr, got.clone());
    let out = hub.cli(&["reconcile", "notifier", "ops"]);
    assert!(out.status.success() && stdout(&out).contains("notifier/ops queued to send now"), "{}", stderr(&out));
    let want = ["c1", "c2", "c3", "c4", "c5", "c6"];
    wait_for("every missed event", Duration::from_secs(60), || names(&got).contains(&"c6".to_string()));
    back.stop();
    let received = got.lock().expect("lock").clone();
    let seqs: Vec<u64> = received.iter().map(|v| v["seq"].as_u64().expect("seq")).collect();
    // At least once: a repeat can only be of the event sent last; otherwise in order.
    let mut distinct: Vec<u64> = Vec::new();
    for seq in seqs {
        match distinct.last() {
            Some(&last) if seq == last => {}
            Some(&last) => assert!(seq > last, "out of order: {received:?}"),
            None => {}
        }
        if distinct.last() != Some(&seq) {
            distinct.push(seq);
        }
    }
    let mut order: Vec<String> = names(&got);
    order.dedup();
    assert_eq!(order, want, "{received:?}");
    assert!(received.iter().all(|v| v["kind"] == "Cluster" && v["notifier"] == "ops"), "the filter: {received:?}");

    let shown = stdout(&hub.cli(&["get", "notifiers"]));
    assert!(
        shown.contains("TARGET") && shown.contains("webhook 127.0.0.1") && shown.contains("kinds=Cluster"),
        "{shown}"
    );
    for args in [&["get", "notifier", "ops", "-o", "yaml"][..], &["describe", "notifier", "ops"]] {
        let out = hub.cli(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(!stdout(&out).contains("s3cret"), "{args:?}: {}", stdout(&out));
    }
    let out = hub.cli(&["delete", "notifier", "ops"]);
    assert!(out.status.success() && stdout(&out).contains("notifier/ops deleted"), "{}", stderr(&out));

    // Its removal forgets the cursor: created again, it starts at its creation, not
    // where the deleted one left off.
    wait_for("the deleted notifier's key gone", Duration::from_secs(30), || status_of(hub, "ops").is_empty());
    hub.apply(&cluster("c7"));
    let again = Arc::new(Mutex::new(Vec::new()));
    let back = Receiver::start(&addr, again.clone());
    hub.apply(&notifier);
    hub.apply(&cluster("c8"));
    wait_for("c8's event", Duration::from_secs(30), || names(&again).contains(&"c8".to_string()));
    back.stop();
    assert_eq!(names(&again), ["c8"], "nothing from before its creation");
}

#[test]
fn a_slack_url_never_shows_and_a_denied_target_parks_the_notifier() {
    let hub = Hub::start_flags(&["--backoff-base", "200ms", "--backoff-cap", "1s", "--egress-deny", "127.0.0.2"]);
    let got = Arc::new(Mutex::new(Vec::new()));
    let receiver = Receiver::start("127.0.0.1:0", got.clone());
    let addr = receiver.addr.clone();
    hub.apply(&format!(
        "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: slack}}\n\
         stringData: {{address: 'http://{addr}/services/T000/B000/XSECRETX'}}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: Notifier\nmetadata: {{name: chat}}\n\
         spec: {{slack: {{secretRef: {{name: slack}}}}, template: '{{{{name}}}} {{{{action}}}}'}}\n"
    ));
    hub.apply(&cluster("c1"));
    wait_for("c1's event in Slack's words", Duration::from_secs(30), || {
        got.lock().expect("lock").iter().any(|v| v["text"] == "c1 Created")
    });
    assert!(got.lock().expect("lock").iter().all(|v| v.as_object().is_some_and(|o| o.len() == 1)), "only `text`");
    receiver.stop();
    hub.apply(&cluster("c2"));
    wait_for("the failure in the status", Duration::from_secs(30), || status_of(&hub, "chat").contains("Failed"));
    let described = stdout(&hub.cli(&["describe", "notifier", "chat"]));
    assert!(
        described.contains("slack (Secret slack)") && described.contains("Slack webhook at 127.0.0.1"),
        "{described}"
    );
    for shown in [described, status_of(&hub, "chat"), stdout(&hub.cli(&["get", "status"]))] {
        assert!(!shown.contains("XSECRETX") && !shown.contains("/services/"), "{shown}");
    }

    hub.apply(
        "apiVersion: fleetsync.io/v1\nkind: Notifier\nmetadata: {name: denied}\n\
         spec: {webhook: {url: 'http://127.0.0.2:9/hook'}}\n",
    );
    wait_for("the denied notifier parked", Duration::from_secs(30), || {
        let status = status_of(&hub, "denied");
        status.contains("Parked") && status.contains("egress to 127.0.0.2 is denied")
    });
}
