use super::decide::Human;
use super::*;
use serde_json::json;
use std::time::Duration;

const STABLE: i64 = 1;
const REV: i64 = 2;
const T0: Timestamp = Timestamp(1_000_000);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn at(s: u64) -> Timestamp {
    T0.plus(secs(s))
}

fn spec(v: serde_json::Value) -> RolloutSpec {
    let s: RolloutSpec = serde_json::from_value(v).expect("a rollout spec");
    assert_eq!(s.validate(), Ok(()), "fixture specs are valid");
    s
}

/// Canaries (ring=canary), then half, then all.
fn canary_spec(extra: serde_json::Value) -> RolloutSpec {
    let mut v =
        json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}}, {"percent": 50}, {"percent": 100}]});
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    spec(v)
}

/// A cluster whose key runs `generation`, applied and healthy.
fn cluster(name: &str, labels: &[(&str, &str)], generation: i64) -> ClusterView {
    ClusterView {
        name: name.into(),
        labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        key: Some(KeyView {
            generation,
            observed_generation: generation,
            phase: Phase::Applied,
            last_error: None,
            drifted: false,
            unready: None,
        }),
    }
}

/// a..f at the stable generation; c and e are canaries.
fn fleet() -> Vec<ClusterView> {
    ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|n| cluster(n, if matches!(*n, "c" | "e") { &[("ring", "canary")] } else { &[] }, STABLE))
        .collect()
}

fn names(clusters: &[ClusterView]) -> Vec<&str> {
    clusters.iter().map(|c| c.name.as_str()).collect()
}

fn key<'a>(clusters: &'a mut [ClusterView], name: &str) -> &'a mut KeyView {
    clusters.iter_mut().find(|c| c.name == name).and_then(|c| c.key.as_mut()).expect("a keyed cluster")
}

/// What the queue does with an enqueue: the key is told to run the generation.
fn enqueued(clusters: &mut [ClusterView], enqueue: &[(String, i64)]) {
    for (name, generation) in enqueue {
        let k = key(clusters, name);
        k.generation = *generation;
        k.phase = Phase::Pending;
    }
}

/// The agent applies what each named key is told to run.
fn apply(clusters: &mut [ClusterView], which: &[&str]) {
    for name in which {
        let k = key(clusters, name);
        k.observed_generation = k.generation;
        k.phase = Phase::Applied;
        k.last_error = None;
    }
}

/// The key failed for good: parked.
fn fail(clusters: &mut [ClusterView], name: &str, error: &str) {
    retrying(clusters, name, error);
    key(clusters, name).phase = Phase::Parked;
}

/// The key's last run failed; it is being retried.
fn retrying(clusters: &mut [ClusterView], name: &str, error: &str) {
    let k = key(clusters, name);
    k.phase = Phase::Failed;
    k.last_error = Some(error.into());
}

fn progressing(step: usize) -> RolloutState {
    RolloutState {
        tenant: "t".into(),
        syncset: "web".into(),
        phase: RolloutPhase::Progressing,
        step,
        revision: REV,
        stable: STABLE,
        reason: None,
        step_started_at: T0,
        healthy_since: None,
        promoted: false,
        version: 7,
        updated_at: T0,
    }
}

fn in_phase(phase: RolloutPhase) -> RolloutState {
    RolloutState { phase, ..progressing(0) }
}

fn run(
    spec: &RolloutSpec,
    state: &RolloutState,
    clusters: &[ClusterView],
    now: Timestamp,
    control: Option<RolloutControl>,
) -> Decision {
    decide(spec, state, clusters, now, control).expect("accepted")
}

/// The decision's state, which must be written.
fn written(d: &Decision) -> &RolloutState {
    d.state.as_ref().expect("a state to write")
}

/// Enqueues the canaries at the revision and lets them apply: step 0 is healthy.
fn canaries_applied(spec: &RolloutSpec) -> (RolloutState, Vec<ClusterView>) {
    let mut clusters = fleet();
    let d = run(spec, &progressing(0), &clusters, T0, None);
    enqueued(&mut clusters, &d.enqueue);
    apply(&mut clusters, &["c", "e"]);
    (written(&d).clone(), clusters)
}

fn pairs(v: &[(&str, i64)]) -> Vec<(String, i64)> {
    v.iter().map(|(n, g)| (n.to_string(), *g)).collect()
}

#[test]
fn steps_reach_selected_then_counted_clusters_in_name_order() {
    let s = spec(
        json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}}, {"percent": 50}, {"count": 4}, {"percent": 100}]}),
    );
    let clusters = fleet();
    // Canaries c, e; 50% of 6 = 3 in all: a; 4 in all: b; the rest: d, f.
    assert_eq!(step_of(&s, &clusters), vec![Some(1), Some(2), Some(0), Some(3), Some(0), Some(3)]);
}

#[test]
fn percent_rounds_up_and_counts_clusters_earlier_steps_reached() {
    let three: Vec<_> = ["a", "b", "c"].iter().map(|n| cluster(n, &[], STABLE)).collect();
    let s = spec(json!({"steps": [{"percent": 34}, {"percent": 100}]}));
    assert_eq!(step_of(&s, &three), vec![Some(0), Some(0), Some(1)], "34% of 3 is 1.02: 2 clusters");

    // Two canaries of four: 50% is already reached, so that step adds none.
    let four: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| cluster(n, if *n >= "c" { &[("ring", "canary")] } else { &[] }, STABLE))
        .collect();
    assert_eq!(step_of(&canary_spec(json!({})), &four), vec![Some(2), Some(2), Some(0), Some(0)]);
    let s = spec(json!({"steps": [{"count": 1}, {"count": 1}, {"count": 3}, {"percent": 100}]}));
    assert_eq!(step_of(&s, &four), vec![Some(0), Some(2), Some(2), Some(3)], "a count already reached adds none");
}

#[test]
fn the_first_tick_enqueues_the_canaries_only() {
    let s = canary_spec(json!({"progressDeadline": "5m"}));
    let clusters = fleet();
    let d = run(&s, &progressing(0), &clusters, T0, None);
    assert_eq!(d.enqueue, pairs(&[("c", REV), ("e", REV)]));
    let st = written(&d);
    assert_eq!((st.version, st.updated_at, st.phase, st.step), (8, T0, RolloutPhase::Progressing, 0));
    assert_eq!(d.wake_at, Some(at(300)), "the step's deadline");
    assert_eq!(d.counts.len(), 3);
    assert_eq!(d.counts[0], StepCounts { clusters: 2, updated: 0, healthy: 0, failed: 0, pending: 2, rolled_back: 0 });
    assert_eq!(
        d.counts[1],
        StepCounts { clusters: 1, updated: 0, healthy: 0, failed: 0, pending: 0, rolled_back: 0 },
        "not reached: not pending"
    );
    assert_eq!(d.counts[2].clusters, 3);

    // Once enqueued nothing changes until the keys do.
    let mut after = clusters.clone();
    enqueued(&mut after, &d.enqueue);
    let again = run(&s, st, &after, at(10), None);
    assert_eq!((again.state, again.enqueue, again.wake_at), (None, vec![], Some(at(300))));
    assert_eq!(
        again.counts[0],
        StepCounts { clusters: 2, updated: 2, healthy: 0, failed: 0, pending: 2, rolled_back: 0 }
    );
}

#[test]
fn a_failing_canary_rolls_back_naming_the_cluster() {
    let s = canary_spec(json!({}));
    let mut clusters = fleet();
    let mut state = progressing(0);
    let mut at_revision = Vec::new();
    for tick in 0..3 {
        let d = run(&s, &state, &clusters, at(tick), None);
        at_revision.extend(d.enqueue.iter().filter(|(_, g)| *g == REV).map(|(n, _)| n.clone()));
        enqueued(&mut clusters, &d.enqueue);
        if let Some(st) = d.state {
            state = st;
        }
        if tick == 0 {
            apply(&mut clusters, &["e"]);
            fail(&mut clusters, "c", "admission webhook denied the Deployment");
        }
    }
    assert_eq!(state.phase, RolloutPhase::RolledBack);
    assert_eq!(
        state.reason.as_deref(),
        Some("step 1: 1 of 2 clusters failed (maxFailures 0); c: admission webhook denied the Deployment")
    );
    assert_eq!(at_revision, ["c", "e"], "no cluster of a later step is ever enqueued at the revision");
    for c in &clusters {
        assert_eq!(c.key.as_ref().map(|k| k.generation), Some(STABLE), "{} runs the stable generation again", c.name);
    }
}

#[test]
fn rollback_enqueues_the_reached_clusters_at_stable_in_one_decision() {
    let s = canary_spec(json!({}));
    let (state, mut clusters) = canaries_applied(&s);
    fail(&mut clusters, "c", "boom");
    let d = run(&s, &state, &clusters, at(5), None);
    assert_eq!(d.enqueue, pairs(&[("c", STABLE), ("e", STABLE)]));
    let st = written(&d);
    assert_eq!((st.phase, st.healthy_since, d.wake_at), (RolloutPhase::RolledBack, None, None));
    assert_eq!(d.counts[0].failed, 1);
}

#[test]
fn rollback_also_undoes_a_superseded_generation() {
    let s = canary_spec(json!({}));
    let mut clusters = fleet();
    key(&mut clusters, "a").generation = 3; // ran a revision since superseded
    let state = RolloutState { revision: 4, ..progressing(0) };
    let d = run(&s, &state, &clusters, T0, Some(RolloutControl::Abort));
    assert_eq!(d.enqueue, pairs(&[("a", STABLE)]));
}

#[test]
fn with_on_failure_pause_a_failing_canary_stops_without_rolling_back() {
    let s = canary_spec(json!({"onFailure": "Pause"}));
    let (state, mut clusters) = canaries_applied(&s);
    fail(&mut clusters, "e", "quota exceeded");
    let d = run(&s, &state, &clusters, at(5), None);
    let st = written(&d);
    assert_eq!(st.phase, RolloutPhase::Failed);
    assert_eq!(st.reason.as_deref(), Some("step 1: 1 of 2 clusters failed (maxFailures 0); e: quota exceeded"));
    assert_eq!((d.enqueue.clone(), d.wake_at), (vec![], None), "nothing re-applied at stable");

    // Stopped: nothing happens without a control, even after the deadline.
    let still = run(&s, st, &clusters, at(3600), None);
    assert_eq!((still.state, still.enqueue), (None, vec![]));
}

#[test]
fn max_failures_as_a_percentage_tolerates_some_failed_clusters() {
    let s = spec(json!({"steps": [{"percent": 100}], "maxFailures": "34%"}));
    let mut clusters = fleet();
    for c in &mut clusters {
        let k = c.key.as_mut().expect("keyed");
        k.generation = REV;
        k.observed_generation = REV;
    }
    fail(&mut clusters, "a", "boom");
    fail(&mut clusters, "b", "boom");
    // 34% of 6 rounds down to 2: tolerated, and the others are healthy.
    let d = run(&s, &progressing(0), &clusters, T0, None);
    assert_eq!(written(&d).phase, RolloutPhase::Completed);

    fail(&mut clusters, "c", "boom");
    let d = run(&s, &progressing(0), &clusters, T0, None);
    let st = written(&d);
    assert_eq!(st.phase, RolloutPhase::RolledBack);
    assert_eq!(st.reason.as_deref(), Some("step 1: 3 of 6 clusters failed (maxFailures 34%); a: boom"));
}

#[test]
fn a_passing_step_waits_min_success_time_then_enqueues_the_next() {
    let s = canary_spec(json!({"minSuccessTime": "1m", "progressDeadline": "5m"}));
    let (state, mut clusters) = canaries_applied(&s);

    let d = run(&s, &state, &clusters, at(10), None);
    let st = written(&d).clone();
    assert_eq!((st.step, st.healthy_since), (0, Some(at(10))));
    assert_eq!((d.enqueue.clone(), d.wake_at), (vec![], Some(at(70))));
    assert_eq!(d.counts[0], StepCounts { clusters: 2, updated: 2, healthy: 2, failed: 0, pending: 0, rolled_back: 0 });

    let d = run(&s, &st, &clusters, at(69), None);
    assert_eq!((d.state, d.enqueue, d.wake_at), (None, vec![], Some(at(70))), "still baking");

    let d = run(&s, &st, &clusters, at(70), None);
    let next = written(&d);
    assert_eq!(
        (next.step, next.step_started_at, next.healthy_since, next.phase),
        (1, at(70), None, RolloutPhase::Progressing)
    );
    assert_eq!(d.enqueue, pairs(&[("a", REV)]), "50% of 6 is 3: the canaries and a");
    assert_eq!(d.wake_at, Some(at(370)), "the new step's deadline");
    enqueued(&mut clusters, &d.enqueue);
    assert_eq!(key(&mut clusters, "b").generation, STABLE);
}

#[test]
fn a_step_that_adds_no_clusters_is_looked_at_again_at_once() {
    let s = spec(json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}}, {"count": 2}, {"percent": 100}]}));
    let (state, clusters) = canaries_applied(&s);
    let d = run(&s, &state, &clusters, at(10), None);
    assert_eq!((written(&d).step, d.enqueue.clone(), d.wake_at), (1, vec![], Some(at(10))));
}

#[test]
fn manual_promote_waits_for_promote() {
    let s = spec(
        json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}, "manualPromote": true}, {"percent": 100}]}),
    );
    let (state, clusters) = canaries_applied(&s);
    let d = run(&s, &state, &clusters, at(10), None);
    let st = written(&d).clone();
    assert_eq!((st.step, st.healthy_since, d.wake_at), (0, Some(at(10)), None), "no time ends the wait");

    let d = run(&s, &st, &clusters, at(86_400), None);
    assert_eq!((d.state, d.enqueue), (None, vec![]));

    let d = run(&s, &st, &clusters, at(86_400), Some(RolloutControl::Promote));
    let next = written(&d);
    assert_eq!((next.step, next.promoted), (1, false));
    assert_eq!(d.enqueue, pairs(&[("a", REV), ("b", REV), ("d", REV), ("f", REV)]));
}

#[test]
fn promote_skips_min_success_time_and_waits_for_health_if_needed() {
    let s = canary_spec(json!({"minSuccessTime": "1h"}));
    let (state, mut clusters) = canaries_applied(&s);
    let d = run(&s, &state, &clusters, at(1), Some(RolloutControl::Promote));
    assert_eq!(written(&d).step, 1, "healthy: advances at once");

    // Promoted before it is healthy: remembered, and it advances once healthy.
    key(&mut clusters, "e").unready = Some("Deployment web: 0/3 ready".into());
    let d = run(&s, &state, &clusters, at(1), Some(RolloutControl::Promote));
    let st = written(&d).clone();
    assert_eq!((st.step, st.promoted), (0, true));
    key(&mut clusters, "e").unready = None;
    let d = run(&s, &st, &clusters, at(2), None);
    assert_eq!((written(&d).step, written(&d).promoted), (1, false));
}

#[test]
fn the_deadline_fails_a_step_with_a_pending_cluster() {
    let s = canary_spec(json!({"progressDeadline": "5m"}));
    let (state, mut clusters) = canaries_applied(&s);
    key(&mut clusters, "e").phase = Phase::Applying;
    let d = run(&s, &state, &clusters, at(299), None);
    assert_eq!((d.state, d.wake_at), (None, Some(at(300))));

    let d = run(&s, &state, &clusters, at(300), None);
    let st = written(&d);
    assert_eq!(st.phase, RolloutPhase::RolledBack);
    assert_eq!(st.reason.as_deref(), Some("step 1: 1 cluster not healthy within progressDeadline 5m; e: Applying"));
    assert_eq!(d.enqueue, pairs(&[("c", STABLE), ("e", STABLE)]));
}

#[test]
fn a_cluster_running_again_after_a_failed_run_is_reported_with_that_runs_error() {
    let s = canary_spec(json!({"progressDeadline": "5m"}));
    let (state, mut clusters) = canaries_applied(&s);
    let e = key(&mut clusters, "e");
    e.phase = Phase::Applying;
    e.last_error = Some("not ready after 3s: apps/v1/Deployment apps/web: Deployment: 0 of 2 replicas updated".into());
    let d = run(&s, &state, &clusters, at(300), None);
    assert_eq!(
        written(&d).reason.as_deref(),
        Some(
            "step 1: 1 cluster not healthy within progressDeadline 5m; e: Applying (last run: \
             not ready after 3s: apps/v1/Deployment apps/web: Deployment: 0 of 2 replicas updated)"
        )
    );
}

#[test]
fn a_cluster_that_loses_health_resets_healthy_since() {
    let s = canary_spec(json!({"minSuccessTime": "10m", "progressDeadline": "30m"}));
    let (state, mut clusters) = canaries_applied(&s);
    let st = written(&run(&s, &state, &clusters, at(10), None)).clone();
    assert_eq!(st.healthy_since, Some(at(10)));

    key(&mut clusters, "c").drifted = true;
    let d = run(&s, &st, &clusters, at(300), None);
    let lost = written(&d).clone();
    assert_eq!((lost.healthy_since, lost.step, d.wake_at), (None, 0, Some(at(1800))));

    key(&mut clusters, "c").drifted = false;
    let d = run(&s, &lost, &clusters, at(400), None);
    assert_eq!((written(&d).healthy_since, d.wake_at), (Some(at(400)), Some(at(1000))), "the wait starts again");
}

#[test]
fn drift_unready_or_an_old_observed_generation_keep_a_cluster_pending() {
    let s = canary_spec(json!({}));
    let (state, clusters) = canaries_applied(&s);
    type Spoil = fn(&mut KeyView);
    let cases: [(&str, Spoil); 4] = [
        ("drifted", |k| k.drifted = true),
        ("unready", |k| k.unready = Some("Service web: no endpoints".into())),
        ("observed behind", |k| k.observed_generation = STABLE),
        ("applying", |k| k.phase = Phase::Applying),
    ];
    for (what, spoil) in cases {
        let mut clusters = clusters.clone();
        spoil(key(&mut clusters, "c"));
        let d = run(&s, &state, &clusters, at(10), None);
        assert_eq!(d.state, None, "{what}: the step does not pass");
        assert_eq!(
            d.counts[0],
            StepCounts { clusters: 2, updated: 2, healthy: 1, failed: 0, pending: 1, rolled_back: 0 },
            "{what}"
        );
    }
    let d = run(&s, &state, &clusters, at(10), None);
    assert_eq!(written(&d).step, 1, "unspoiled, the step passes");
}

#[test]
fn a_cluster_joining_a_reached_step_catches_up() {
    let s = canary_spec(json!({}));
    let (state, mut clusters) = canaries_applied(&s);
    clusters.insert(0, cluster("b0", &[("ring", "canary")], STABLE));
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    let mut keyless = cluster("d0", &[("ring", "canary")], STABLE);
    keyless.key = None;
    clusters.push(keyless);
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    let d = run(&s, &state, &clusters, at(10), None);
    assert_eq!(d.enqueue, pairs(&[("b0", REV)]), "a keyless cluster cannot be enqueued");
    assert_eq!(d.counts[0].pending, 2, "both newcomers are pending");
    assert_eq!(written(&d).step, 0);
}

#[test]
fn the_last_step_completes_with_the_revision_stable() {
    let s = canary_spec(json!({}));
    let mut clusters = fleet();
    let mut state = progressing(0);
    let mut ticks = 0;
    while state.phase == RolloutPhase::Progressing {
        ticks += 1;
        assert!(ticks < 20, "completes: {state:?}");
        let d = run(&s, &state, &clusters, at(ticks), None);
        enqueued(&mut clusters, &d.enqueue);
        let everyone: Vec<String> = names(&clusters).iter().map(|s| s.to_string()).collect();
        apply(&mut clusters, &everyone.iter().map(String::as_str).collect::<Vec<_>>());
        if let Some(st) = d.state {
            state = st;
        }
    }
    assert_eq!((state.phase, state.step, state.stable, state.reason.clone()), (RolloutPhase::Completed, 2, REV, None));
    assert!(clusters.iter().all(|c| c.key.as_ref().is_some_and(|k| k.generation == REV)));
    let d = run(&s, &state, &clusters, at(100), None);
    assert_eq!((d.state, d.wake_at), (None, None));
    assert_eq!(d.counts.iter().map(|c| c.healthy).sum::<u64>(), 6);
}

mod controls;
