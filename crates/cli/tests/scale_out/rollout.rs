//! Three workers drive a rollout of four steps, one of them killed by SIGKILL
//! mid-rollout.

use crate::fixture::{block_on, serial, Fixture, Sim, Worker};
use fleetsync_model::{parse_documents, Document, Phase, RolloutPhase, WorkKey};
use fleetsync_store::rollout::{step_of, ClusterView};
use fleetsync_store::StatusFilter;
use fleetsync_store::{EventLog, Objects, Rollouts, StatusRead};
use fleetsync_testkit::cluster_name;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How many clusters the rollout test stages (every tenth from the eighth a canary).
const ROLLOUT_CLUSTERS: usize = 40;
const ROLLOUT_STEPS: &str = "[{selector: {matchLabels: {ring: canary}}}, {percent: 25}, {percent: 50}, {percent: 100}]";
/// The rollout's `minSuccessTime`: each step stays healthy this long before the next.
const MIN_SUCCESS: Duration = Duration::from_secs(1);

/// Three workers drive a rollout of four steps; one dies by SIGKILL mid-rollout.
#[test]
fn a_rollout_survives_a_killed_worker_with_no_step_skipped_or_repeated() {
    let _one_at_a_time = serial();
    block_on(rollout_with_a_kill());
}

/// The clusters (`env: prod`, every tenth from the eighth `ring: canary`) on the sim,
/// and the SyncSet `app`: three ConfigMaps carrying `value`, staged by [`ROLLOUT_STEPS`].
fn rollout_fleet(sim: &Sim, value: &str) -> Vec<Document> {
    let mut yaml = String::new();
    for i in 0..ROLLOUT_CLUSTERS {
        let (name, ring) = (cluster_name(i), if i % 10 == 7 { "canary" } else { "main" });
        yaml += &format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{env: prod, ring: {ring}}}}}\n\
             spec: {{endpoint: {{http: {{url: '{}/clusters/{name}'}}}}}}\n---\n",
            sim.url
        );
    }
    yaml += &format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterSelector: {{matchLabels: {{env: prod}}}}\n  \
         resourceApplyMode: Upsert\n  rollout:\n    steps: {ROLLOUT_STEPS}\n    minSuccessTime: 1s\n  resources:\n"
    );
    for m in ["app-a", "app-b", "app-c"] {
        yaml += &format!("    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: {m}, namespace: apps}}, data: {{v: \"{value}\"}}}}\n");
    }
    parse_documents(&yaml).expect("the rollout fleet's YAML")
}

/// Cluster → the SyncSet generation of each of its `app` resources on the sim.
async fn app_on_sim(sim: &Sim) -> BTreeMap<String, Vec<i64>> {
    let keys = sim.get("/_sim/keys").await;
    (0..ROLLOUT_CLUSTERS)
        .map(|i| {
            let key = WorkKey::new("default", cluster_name(i), "app").to_string();
            let held =
                keys[&key].as_object().map(|r| r.values().filter_map(Value::as_i64).collect()).unwrap_or_default();
            (cluster_name(i), held)
        })
        .collect()
}

async fn rollout_with_a_kill() {
    let sim = Sim::start(0.2);
    let fx = Fixture::new("scale_rollout").await;
    let docs = rollout_fleet(&sim, "1");
    let spec = docs
        .iter()
        .find_map(|d| match d {
            Document::SyncSet(s) => s.spec.rollout.clone(),
            _ => None,
        })
        .expect("a rollout spec");
    // Which step first reaches each cluster, as the decision computes it (names sorted).
    let views: Vec<ClusterView> = docs
        .iter()
        .filter_map(|d| match d {
            Document::Cluster(c) => {
                Some(ClusterView { name: c.metadata.name.clone(), labels: c.metadata.labels.clone(), key: None })
            }
            _ => None,
        })
        .collect();
    assert!(views.windows(2).all(|w| w[0].name < w[1].name), "clusters in name order");
    let step_of: BTreeMap<String, usize> = views
        .iter()
        .zip(step_of(&spec, &views))
        .map(|(c, s)| (c.name.clone(), s.expect("every cluster is reached")))
        .collect();
    let per_step: Vec<usize> = (0..spec.steps.len()).map(|j| step_of.values().filter(|s| **s == j).count()).collect();
    assert_eq!(per_step, [4, 6, 10, 20], "canaries, then up to 25 %, 50 % and 100 % of {ROLLOUT_CLUSTERS}");

    fx.store.objects_apply(docs).await.expect("apply generation 1");
    fx.analyze().await;
    let knobs = ["--lease-ttl", "2s", "--renew-every", "500ms", "--member-ttl", "1s", "--max-in-flight", "16"];
    let mut workers: Vec<Worker> =
        ["roll-01", "roll-02", "roll-03"].iter().map(|id| Worker::start(&fx, id, &knobs)).collect();

    // Generation 1 goes everywhere at once: a first generation is not staged.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let statuses = fx.store.status_list(&StatusFilter::default()).await.expect("status");
        if statuses.len() == ROLLOUT_CLUSTERS
            && statuses.iter().all(|s| s.phase == Phase::Applied && s.observed_generation == 1)
        {
            break;
        }
        assert!(Instant::now() < deadline, "generation 1 was not applied everywhere\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = fx.store.rollout_get("default", "app").await.expect("read the rollout").expect("a rollout");
    assert_eq!(
        (r.phase, r.revision, r.stable),
        (RolloutPhase::Completed, 1, 1),
        "a first generation is not staged: {r:?}"
    );

    // Generation 2, staged. Watched from the clusters' side every ~50 ms: when each
    // first holds generation 2 on any resource.
    fx.store.objects_apply(rollout_fleet(&sim, "2")).await.expect("apply generation 2");
    let t0 = Instant::now();
    let mut first_at: BTreeMap<String, Duration> = BTreeMap::new();
    let mut last_look = Duration::ZERO;
    let mut widest_look = Duration::ZERO;
    let mut killed: Option<(Worker, usize, usize, Duration)> = None;
    let mut taken_over: Option<Duration> = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    let done = loop {
        // The clusters first, then the rollout: a cluster of step k holding generation 2
        // means the rollout had reached step k before this look, so the state read
        // after it is at step k or later.
        let held = app_on_sim(&sim).await;
        let now = t0.elapsed();
        widest_look = widest_look.max(now - last_look);
        last_look = now;
        let r = fx.store.rollout_get("default", "app").await.expect("read the rollout").expect("a rollout");
        assert!(
            r.revision == 2 && matches!(r.phase, RolloutPhase::Progressing | RolloutPhase::Completed),
            "the rollout left its course: {r:?}\n{}",
            fx.logs()
        );
        for (cluster, generations) in &held {
            assert!(generations.iter().all(|g| *g == 1 || *g == 2), "{cluster} holds {generations:?}");
            if generations.contains(&2) {
                first_at.entry(cluster.clone()).or_insert(now);
                assert!(
                    step_of[cluster] <= r.step,
                    "{cluster} of step index {} holds generation 2 while the rollout is at step index {}: {r:?}",
                    step_of[cluster],
                    r.step
                );
            }
        }
        if r.phase == RolloutPhase::Completed {
            break r;
        }

        match &killed {
            // Mid-rollout, once the step's clusters are being written to: kill the
            // worker running the most keys.
            None if (1..=2).contains(&r.step) && first_at.keys().any(|c| step_of[c] == r.step) => {
                let leases = fx.lease_counts().await;
                let busiest =
                    workers.iter().enumerate().map(|(i, w)| (leases.get(&w.id).copied().unwrap_or(0), i)).max();
                if let Some((n, i)) = busiest.filter(|(n, _)| *n > 0) {
                    let mut victim = workers.swap_remove(i);
                    victim.kill9();
                    killed = Some((victim, n, r.step, t0.elapsed()));
                    workers.push(Worker::start(&fx, "roll-04", &knobs));
                }
            }
            None => assert!(
                r.step < 3,
                "the rollout passed step index 2 before any worker could be killed holding a lease: {r:?}"
            ),
            Some((dead, _, _, at)) if taken_over.is_none() => {
                if fx.lease_counts().await.get(&dead.id).copied().unwrap_or(0) == 0 {
                    taken_over = Some(t0.elapsed() - *at);
                }
            }
            Some(_) => {}
        }
        assert!(Instant::now() < deadline, "the rollout did not complete: {r:?}\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let completed = t0.elapsed();
    let (dead, held, kill_step, kill_at) = killed.expect("a worker was killed mid-rollout");
    let taken_over = taken_over.unwrap_or(completed - kill_at);
    assert_eq!(
        (done.revision, done.stable, done.step),
        (2, 2, 3),
        "completed at revision 2, now the stable one: {done:?}"
    );

    // Each move logged once, in order, whichever process made it: none skipped, none
    // taken twice (generation 2 started at step 1 without an event; generation 1
    // completed at once without one).
    let events = fx.store.events_read(0, 100_000).await.expect("events");
    let moves: Vec<(String, i64, Option<String>)> = events
        .into_iter()
        .filter(|e| e.kind == "Rollout" && e.name == "app")
        .map(|e| (e.action, e.generation, e.actor))
        .collect();
    let want: Vec<(String, i64, Option<String>)> =
        ["Step 2", "Step 3", "Step 4", "Completed"].iter().map(|a| (a.to_string(), 2, None)).collect();
    assert_eq!(moves, want, "the rollout's events\n{}", fx.logs());

    // From the clusters' side: every cluster took generation 2, each step's clusters
    // all after every cluster of the steps before, at least minSuccessTime later
    // (less what one look may lag behind).
    assert_eq!(first_at.len(), ROLLOUT_CLUSTERS, "clusters that took generation 2: {first_at:?}");
    let span = |j: usize| {
        let times = first_at.iter().filter(|(c, _)| step_of[*c] == j).map(|(_, t)| *t);
        (times.clone().min().expect("a cluster"), times.max().expect("a cluster"))
    };
    let spans: Vec<(Duration, Duration)> = (0..spec.steps.len()).map(span).collect();
    let slack = widest_look;
    for j in 1..spans.len() {
        let gap = spans[j].0.checked_sub(spans[j - 1].1);
        assert!(
            gap.is_some_and(|g| g + slack >= MIN_SUCCESS),
            "step {} first wrote at {:?}, {gap:?} after step {} last did (minSuccessTime {MIN_SUCCESS:?}, looks up to {slack:?} apart): {spans:?}",
            j + 1,
            spans[j].0,
            j
        );
    }

    // Never two runs of a key at once, order kept, and at the end every key applied at
    // generation 2, in the store and whole on the clusters.
    let report = sim.get("/_sim/report").await;
    assert_eq!(report["totals"]["overlaps"], 0, "two applies of one key at once: {}", report["totals"]);
    assert_eq!(report["totals"]["order_violations"], 0, "{}", report["totals"]);
    let statuses = fx.store.status_list(&StatusFilter::default()).await.expect("status");
    assert_eq!(statuses.len(), ROLLOUT_CLUSTERS);
    for s in &statuses {
        assert!(s.phase == Phase::Applied && s.generation == 2 && s.observed_generation == 2, "{s:?}");
    }
    for (cluster, generations) in app_on_sim(&sim).await {
        assert_eq!(generations, vec![2; 3], "{cluster} on the sim");
    }

    let ms = |d: Duration| d.as_millis();
    let steps: Vec<String> =
        spans.iter().enumerate().map(|(j, (a, b))| format!("step {}: {}–{} ms", j + 1, ms(*a), ms(*b))).collect();
    println!(
        "rollout of {ROLLOUT_CLUSTERS} clusters in 4 steps over 3 workers: {} (running {held} keys) killed at step {} ({} ms), its leases taken over \
         {} ms later; first writes of generation 2 {}; completed at {} ms; {} applies ({} refused as fenced), looks up to {} ms apart",
        dead.id,
        kill_step + 1,
        ms(kill_at),
        ms(taken_over),
        steps.join(", "),
        ms(completed),
        report["totals"]["applies"],
        report["totals"]["fenced"],
        ms(widest_look)
    );
}
