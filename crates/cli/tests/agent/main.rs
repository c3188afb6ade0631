//! `fleetsync agent` with real processes: a hub, a `fleetsync sim` cluster, the agent,
//! and a TCP proxy between the agent and the hub that can blackhole or reset.
//!
//! A "third party" (this test) changes objects in the sim behind fleetsync's back;
//! the hub must end up with the latest state of every resource, whatever happened to
//! the hub, the agent or the link meanwhile, and re-apply what drifted.

#[path = "../common/mod.rs"]
mod common;
mod harness;

use common::{bin, free_address, http_get, stderr};
use harness::{applied, fleet, setup, wait_for, Agent, Proxy, BLACKHOLE, PASS, RESET};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 10,000 third-party changes of 500 applied objects (none drifts: each keeps every
/// field fleetsync set) while the hub is killed -9 and restarted and the agent's link
/// to the hub is blackholed and then reset: afterwards the hub holds the latest
/// version of every object, each version stored at most once, and no key re-ran.
#[test]
fn kill_hub_and_cut_the_link_during_10k_events() {
    const OBJECTS: usize = 500;
    const CHANGES: usize = 10_000;
    let (mut hub, sim, http, dir) = setup(OBJECTS);
    let proxy = Proxy::start(hub.url.trim_start_matches("http://"));
    let _agent = Agent::start(
        &format!("http://{}", proxy.addr),
        &sim.addr,
        &dir.path().join("token"),
        &dir.path().join("agent.log"),
    );
    let full = wait_for("the full state", Duration::from_secs(60), || http.hub_live(&hub.url).len() == OBJECTS);
    let rate = OBJECTS as f64 / full.as_secs_f64();
    println!(
        "full state of {OBJECTS} resources persisted {full:?} after the agent started: {rate:.0} events/s acknowledged"
    );

    let done = Arc::new(AtomicUsize::new(0));
    let changes: Vec<(String, &'static str, String)> =
        (0..CHANGES).map(|i| (format!("cm-{}", i % OBJECTS), "v", format!("n{i}"))).collect();
    let stream_start = Instant::now();
    std::thread::scope(|s| {
        let d = done.clone();
        let meddler = s.spawn(|| {
            http.meddle(&sim.addr, changes, move |_| {
                d.fetch_add(1, Ordering::Relaxed);
            })
        });
        wait_for("a quarter of the changes", Duration::from_secs(60), || done.load(Ordering::Relaxed) >= CHANGES / 4);
        hub.restart(false);
        wait_for("half of the changes", Duration::from_secs(60), || done.load(Ordering::Relaxed) >= CHANGES / 2);
        proxy.set(BLACKHOLE);
        std::thread::sleep(Duration::from_secs(2));
        proxy.set(RESET);
        std::thread::sleep(Duration::from_millis(500));
        proxy.set(PASS);
        meddler.join().expect("meddler");
    });
    let settle = wait_for("the hub to hold every latest version", Duration::from_secs(60), || {
        http.converged(&hub.url, &sim.addr)
    });
    println!(
        "{CHANGES} changes made in {:?}; the hub held every latest version {settle:?} after the last",
        stream_start.elapsed() - settle
    );

    let live = http.hub_live(&hub.url);
    let per_object = (CHANGES / OBJECTS) as u64;
    for (name, (_, state, versions, drift)) in &live {
        assert_eq!((state.as_str(), drift), ("present", &None), "{name}");
        // The first report, then at most one per change (the outbox coalesces some).
        assert!(*versions >= 2 && *versions <= 1 + per_object, "{name}: {versions} versions stored");
    }
    let stored: u64 = live.values().map(|l| l.2).sum();
    println!(
        "versions stored: {stored} of {} made (each at most once; the outbox keeps only the newest)",
        CHANGES + OBJECTS
    );
    assert!(applied(&hub), "changes that do not drift re-run nothing");
    let log = std::fs::read_to_string(dir.path().join("agent.log")).expect("agent log");
    assert!(
        log.contains("will resend") && log.contains("the hub acknowledges again"),
        "the outages reached the agent:\n{log}"
    );
}

/// kill -9 of the agent while objects change and one is deleted: the restarted agent
/// sends its full state, the hub converges and re-creates the deleted object; then
/// drifted objects are repaired, and the time from drift to repair is measured.
#[test]
fn agent_restart_resends_full_state_and_drift_is_repaired() {
    let (hub, sim, http, dir) = setup(20);
    let mut agent = Agent::start(&hub.url, &sim.addr, &dir.path().join("token"), &dir.path().join("agent.log"));
    wait_for("the full state", Duration::from_secs(30), || http.converged(&hub.url, &sim.addr));
    agent.kill9();
    let changes = (0..5).map(|i| (format!("cm-{i}"), "v", format!("while-down-{i}"))).collect();
    http.meddle(&sim.addr, changes, |_| {});
    http.delete(&sim.addr, "cm-19");
    agent.restart();
    wait_for("the deleted object to be re-applied", Duration::from_secs(30), || {
        http.sim_state(&sim.addr).contains_key("cm-19")
    });
    wait_for("the hub to converge", Duration::from_secs(30), || {
        http.converged(&hub.url, &sim.addr) && applied(&hub) && http.hub_live(&hub.url).values().all(|l| l.3.is_none())
    });

    let mut repairs = Vec::new();
    for i in 0..10 {
        let name = format!("cm-{i}");
        let start = Instant::now();
        http.meddle(&sim.addr, vec![(name.clone(), "intruder", format!("drift-{i}"))], |_| {});
        wait_for("the drift to be repaired", Duration::from_secs(30), || http.sim_state(&sim.addr)[&name].1 == "v");
        repairs.push(start.elapsed());
    }
    let start = Instant::now();
    http.delete(&sim.addr, "cm-10");
    wait_for("the deletion to be repaired", Duration::from_secs(30), || {
        http.sim_state(&sim.addr).contains_key("cm-10")
    });
    let deletion = start.elapsed();
    repairs.sort();
    println!(
        "drift to repair (agent watching): p50 {:?}, max {:?}; deletion to re-creation {deletion:?}",
        repairs[5], repairs[9]
    );
    wait_for("drift to clear in status", Duration::from_secs(30), || {
        common::status_items(&hub).iter().all(|k| k.drift.is_empty())
    });
}

/// The agent's link to the target is reset (its watch breaks) while an object
/// changes and another is deleted: once the link is back the agent re-lists, reports
/// the change and the vanished object as deleted, and the hub re-creates it.
#[test]
fn a_broken_watch_is_followed_by_a_relist_that_reports_vanished_objects() {
    let (hub, sim, http, dir) = setup(5);
    let link = Proxy::start(&sim.addr);
    let log = dir.path().join("agent.log");
    let _agent = Agent::start(&hub.url, &link.addr, &dir.path().join("token"), &log);
    wait_for("the full state", Duration::from_secs(30), || http.converged(&hub.url, &sim.addr));
    link.set(RESET);
    std::thread::sleep(Duration::from_millis(200));
    http.meddle(&sim.addr, vec![("cm-0".to_string(), "v", "while-cut".to_string())], |_| {});
    http.delete(&sim.addr, "cm-4");
    std::thread::sleep(Duration::from_millis(300));
    link.set(PASS);
    wait_for("the vanished object to be re-applied", Duration::from_secs(30), || {
        http.sim_state(&sim.addr).contains_key("cm-4")
    });
    wait_for("the hub to converge", Duration::from_secs(30), || http.converged(&hub.url, &sim.addr));
    let text = std::fs::read_to_string(&log).expect("agent log");
    assert!(text.contains("cannot watch the target; will re-list"), "the watch should have broken: {text}");
}

/// A Sync-mode SyncSet drops a resource: fleetsync deletes it from the cluster and the
/// hub's live state no longer holds it (the agent's report of the deletion is dropped:
/// fleetsync no longer applies it). Once the SyncSet is deleted, its removal leaves no
/// live state of the cluster at all.
#[test]
fn live_state_follows_what_fleetsync_stops_applying() {
    let (hub, sim, http, dir) = setup(3);
    let _agent = Agent::start(&hub.url, &sim.addr, &dir.path().join("token"), &dir.path().join("agent.log"));
    wait_for("the full state", Duration::from_secs(30), || http.converged(&hub.url, &sim.addr));
    let file = dir.path().join("dropped.yaml");
    let sync = fleet(&sim.addr, 2).replace("spec:\n  clusterNames", "spec:\n  resourceApplyMode: Sync\n  clusterNames");
    std::fs::write(&file, sync).expect("write");
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for("cm-2 to be deleted from the cluster", Duration::from_secs(30), || {
        !http.sim_state(&sim.addr).contains_key("cm-2")
    });
    hub.wait_until(Duration::from_secs(30), applied);
    wait_for("the hub to hold the rest", Duration::from_secs(30), || http.converged(&hub.url, &sim.addr));
    let live = http.hub_live(&hub.url);
    assert_eq!(live.keys().collect::<Vec<_>>(), ["cm-0", "cm-1"], "{live:?}");

    let out = hub.cli(&["delete", "syncset", "base"]);
    assert!(out.status.success(), "{}", stderr(&out));
    wait_for("the removal", Duration::from_secs(30), || {
        http.sim_state(&sim.addr).is_empty() && common::status_items(&hub).is_empty()
    });
    let live = http.hub_live(&hub.url);
    assert!(live.is_empty(), "{live:?}");
}

/// A credential reports for its own cluster only: the agent of c2 with c1's credential
/// is refused (403) and exits saying so; a wrong token is 401; bad flags say what to fix.
#[test]
fn credentials_are_per_cluster_and_bad_flags_are_named() {
    let (hub, sim, _http, dir) = setup(1);
    let other = dir.path().join("c2.yaml");
    let c2 = format!(
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c2}}\n\
         spec: {{endpoint: {{http: {{url: \"http://{}/clusters/c2\"}}}}}}\n",
        sim.addr
    );
    std::fs::write(&other, c2).expect("write");
    assert!(hub.cli(&["apply", "-f", other.to_str().expect("utf-8")]).status.success());
    let token = dir.path().join("token");
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "fst_not-a-token").expect("write");
    let target = format!("http://{}/clusters/c2", sim.addr);
    let agent = |cluster: &str, token: &Path| {
        bin()
            .args([
                "agent",
                "--hub",
                &hub.url,
                "--cluster",
                cluster,
                "--token-file",
                token.to_str().expect("utf-8"),
                "--target",
                &target,
            ])
            .output()
            .expect("run agent")
    };
    let forbidden = agent("c2", &token);
    assert!(!forbidden.status.success());
    let err = stderr(&forbidden);
    assert!(err.contains("403") && err.contains("is not the agent of cluster default/c2"), "{err}");
    let unauthorized = agent("c2", &wrong);
    assert!(!unauthorized.status.success());
    assert!(stderr(&unauthorized).contains("401"), "{}", stderr(&unauthorized));

    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").expect("write");
    let e = agent("c2", &empty);
    assert!(!e.status.success() && stderr(&e).contains("is empty"), "{}", stderr(&e));
    let bad = bin()
        .args(["agent", "--hub", "localhost:1", "--cluster", "c2", "--token-file", "x", "--target", &target])
        .output()
        .expect("run");
    assert!(!bad.status.success() && stderr(&bad).contains("--hub must be an http://"), "{}", stderr(&bad));
}

#[test]
fn without_a_target_outside_a_pod_the_agent_says_what_is_missing() {
    let home = tempfile::tempdir().expect("an empty home: no ~/.kube/config");
    let agent = |more: &[&str]| {
        bin()
            .args(["agent", "--hub", "http://127.0.0.1:1", "--cluster", "c1", "--token-file", "x"])
            .args(more)
            .env("HOME", home.path())
            .env_remove("KUBECONFIG")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("FLEETSYNC_AGENT_TARGET")
            .env_remove("FLEETSYNC_AGENT_KUBECONFIG")
            .env_remove("FLEETSYNC_AGENT_CONTEXT")
            .output()
            .expect("run")
    };
    let out = agent(&[]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("--target") && err.contains("--kubeconfig") && err.contains("service account"), "{err}");
    let missing = home.path().join("no-such-kubeconfig");
    let out = agent(&["--kubeconfig", missing.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains(&format!("cannot use the kubeconfig {}", missing.display())), "{err}");
}

/// The agent finds its cluster through a kubeconfig (`--kubeconfig`, `--context`), as
/// kubectl would, and reports the live state as it does with `--target`.
#[test]
fn an_agent_given_a_kubeconfig_reports_live_state_like_with_a_target() {
    let (hub, sim, http, dir) = setup(3);
    let kubeconfig = dir.path().join("kubeconfig");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: elsewhere\n\
         clusters:\n- {{name: nowhere, cluster: {{server: 'http://127.0.0.1:1'}}}}\n\
         - {{name: sim, cluster: {{server: 'http://{}/clusters/c1'}}}}\n\
         users:\n- {{name: agent, user: {{}}}}\n\
         contexts:\n- {{name: elsewhere, context: {{cluster: nowhere, user: agent}}}}\n\
         - {{name: c1, context: {{cluster: sim, user: agent}}}}\n",
        sim.addr
    );
    std::fs::write(&kubeconfig, yaml).expect("write");
    let token = dir.path().join("token");
    let args: Vec<String> = [
        "agent",
        "--hub",
        &hub.url,
        "--cluster",
        "c1",
        "--token-file",
        token.to_str().expect("utf-8"),
        "--kubeconfig",
        kubeconfig.to_str().expect("utf-8"),
        "--context",
        "c1",
        "--resources-interval",
        "1s",
        "--request-timeout",
        "1s",
        "--backoff-base",
        "20ms",
        "--backoff-cap",
        "400ms",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let log = dir.path().join("agent.log");
    let _agent = Agent { child: Agent::spawn(&args, &log), args, log: log.clone() };
    let full = || http.converged(&hub.url, &sim.addr);
    wait_for("the full state through the kubeconfig", Duration::from_secs(30), full);
    http.meddle(&sim.addr, vec![("cm-1".to_string(), "v", "changed".to_string())], |_| {});
    wait_for("the change through the kubeconfig's watch", Duration::from_secs(30), full);
    let text = std::fs::read_to_string(&log).expect("agent log");
    assert!(
        text.contains(&format!("http://{}/clusters/c1", sim.addr)),
        "the agent should name the context's server: {text}"
    );
}

/// The agent's probes and metrics (`--listen`) follow what it does: ready and with
/// nothing pending once the hub has its full state; while the link to the hub is cut,
/// not ready, with the change made meanwhile pending and failed sends counted; ready
/// again, with nothing pending, once the link is back.
#[test]
fn the_agents_probes_and_metrics_follow_its_link_to_the_hub() {
    let (hub, sim, http, dir) = setup(5);
    let proxy = Proxy::start(hub.url.trim_start_matches("http://"));
    let probes = free_address();
    let (token, log) = (dir.path().join("token"), dir.path().join("agent.log"));
    let _agent = Agent::start_with(&format!("http://{}", proxy.addr), &sim.addr, &token, &log, &["--listen", &probes]);
    let metric = |name: &str| -> f64 {
        let (_, text) = http_get(&probes, "/metrics").expect("the agent's /metrics");
        let line =
            text.lines().find(|l| l.split(' ').next() == Some(name)).unwrap_or_else(|| panic!("no {name}:\n{text}"));
        line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a number")
    };
    let ready = || http_get(&probes, "/readyz").map(|a| a.0);
    wait_for("the full state", Duration::from_secs(30), || http.converged(&hub.url, &sim.addr));
    wait_for("readiness", Duration::from_secs(10), || ready() == Some(200));
    assert_eq!(http_get(&probes, "/livez").map(|a| a.0), Some(200));
    assert!(metric("fleetsync_agent_reports_acknowledged_total") >= 5.0);
    assert_eq!(metric("fleetsync_agent_pending_reports"), 0.0);
    assert_eq!(metric("fleetsync_agent_watched_kinds"), 1.0);
    assert!(metric("fleetsync_agent_last_acknowledged_timestamp_seconds") > 0.0);
    assert!(metric("process_resident_memory_bytes") > 0.0);

    proxy.set(BLACKHOLE);
    // A read the proxy had begun before may still pass: let it end first.
    std::thread::sleep(Duration::from_millis(200));
    http.meddle(&sim.addr, vec![("cm-0".to_string(), "v", "while-cut".to_string())], |_| {});
    wait_for("a failed send", Duration::from_secs(20), || metric("fleetsync_agent_send_failures_total") >= 1.0);
    assert_eq!(ready(), Some(503), "not ready while the hub is cut off");
    assert!(metric("fleetsync_agent_pending_reports") >= 1.0);
    assert_eq!(http_get(&probes, "/livez").map(|a| a.0), Some(200), "alive all the same");

    proxy.set(RESET);
    std::thread::sleep(Duration::from_millis(300));
    proxy.set(PASS);
    wait_for("the hub to hold the change", Duration::from_secs(30), || http.converged(&hub.url, &sim.addr));
    wait_for("ready again", Duration::from_secs(10), || ready() == Some(200));
    assert_eq!(metric("fleetsync_agent_pending_reports"), 0.0);
}
