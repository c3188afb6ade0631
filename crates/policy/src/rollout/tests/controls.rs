//! Operators' controls (pause, resume, abort, promote), reasons and the event log.

use super::*;

#[test]
fn pause_stops_and_resume_judges_the_step_afresh() {
    let s = canary_spec(json!({"progressDeadline": "5m"}));
    let clusters = fleet();
    let d = run(&s, &progressing(0), &clusters, T0, Some(RolloutControl::Pause));
    let paused = written(&d).clone();
    assert_eq!(
        (paused.phase, d.enqueue.clone(), d.wake_at),
        (RolloutPhase::Paused, vec![], None),
        "paused before enqueueing anything"
    );

    let d = run(&s, &paused, &clusters, at(3600), None);
    assert_eq!((d.state, d.enqueue), (None, vec![]), "paused: nothing, not even the deadline");

    let d = run(&s, &paused, &clusters, at(3600), Some(RolloutControl::Resume));
    let resumed = written(&d);
    assert_eq!(
        (resumed.phase, resumed.step_started_at, resumed.reason.clone()),
        (RolloutPhase::Progressing, at(3600), None)
    );
    assert_eq!(d.enqueue, pairs(&[("c", REV), ("e", REV)]));
    assert_eq!(d.wake_at, Some(at(3900)));
}

#[test]
fn resume_after_a_failure_fails_again_unless_fixed() {
    let s = canary_spec(json!({"onFailure": "Pause"}));
    let (state, mut clusters) = canaries_applied(&s);
    fail(&mut clusters, "c", "boom");
    let failed = written(&run(&s, &state, &clusters, at(5), None)).clone();
    assert_eq!(failed.phase, RolloutPhase::Failed);

    let d = run(&s, &failed, &clusters, at(60), Some(RolloutControl::Resume));
    assert_eq!(written(&d).phase, RolloutPhase::Failed, "still failed");

    apply(&mut clusters, &["c"]);
    let d = run(&s, &failed, &clusters, at(60), Some(RolloutControl::Resume));
    let st = written(&d);
    assert_eq!((st.phase, st.step, st.reason.clone()), (RolloutPhase::Progressing, 1, None));
}

#[test]
fn abort_rolls_back_from_any_running_phase() {
    let s = canary_spec(json!({}));
    let (state, clusters) = canaries_applied(&s);
    for phase in [RolloutPhase::Progressing, RolloutPhase::Paused, RolloutPhase::Failed] {
        let d = run(&s, &RolloutState { phase, ..state.clone() }, &clusters, at(5), Some(RolloutControl::Abort));
        let st = written(&d);
        assert_eq!((st.phase, st.reason.as_deref()), (RolloutPhase::RolledBack, Some("aborted")), "from {phase}");
        assert_eq!(d.enqueue, pairs(&[("c", STABLE), ("e", STABLE)]), "from {phase}");
    }
}

#[test]
fn controls_that_do_not_apply_are_refused() {
    use RolloutControl::{Abort, Pause, Promote, Resume};
    use RolloutPhase::{Completed, Failed, Paused, Progressing, RolledBack};
    let s = canary_spec(json!({}));
    let clusters = fleet();
    let refused = [
        (Completed, Promote),
        (Completed, Pause),
        (Completed, Resume),
        (Completed, Abort),
        (RolledBack, Resume),
        (RolledBack, Abort),
        (Progressing, Resume),
        (Paused, Pause),
        (Paused, Promote),
        (Failed, Pause),
        (Failed, Promote),
    ];
    for (phase, control) in refused {
        assert_eq!(decide(&s, &in_phase(phase), &clusters, T0, Some(control)), Err(ControlRefused { control, phase }));
    }
    let e = ControlRefused { control: Promote, phase: Completed };
    assert_eq!(e.to_string(), "cannot promote a rollout that is Completed");

    for phase in [Completed, RolledBack] {
        let d = run(&s, &in_phase(phase), &clusters, T0, None);
        assert_eq!((d.state, d.enqueue, d.wake_at, d.counts.len()), (None, vec![], None, 3), "{phase}: nothing to do");
    }
}

#[test]
fn a_long_error_is_shortened_in_the_reason() {
    let s = canary_spec(json!({}));
    let (state, mut clusters) = canaries_applied(&s);
    fail(&mut clusters, "c", &format!("first line\n{}", "é".repeat(1000)));
    let d = run(&s, &state, &clusters, at(5), None);
    let reason = written(&d).reason.clone().expect("a reason");
    assert!(reason.chars().count() <= MAX_REASON, "{} chars", reason.chars().count());
    assert!(reason.starts_with("step 1: 1 of 2 clusters failed (maxFailures 0); c: first line éé"), "{reason}");
    assert!(reason.ends_with('…'));
}

#[test]
fn durations_read_as_written() {
    assert_eq!(Human(secs(300)).to_string(), "5m");
    assert_eq!(Human(secs(5400)).to_string(), "1h 30m");
    assert_eq!(Human(secs(90_061)).to_string(), "1d 1h 1m 1s");
    assert_eq!(Human(Duration::from_millis(1500)).to_string(), "1s 500ms");
    assert_eq!(Human(Duration::ZERO).to_string(), "0s");
}

#[test]
fn a_new_phase_step_or_promote_is_logged_and_nothing_else() {
    let s = canary_spec(json!({}));
    let before = progressing(0);
    let healthy = RolloutState { healthy_since: Some(at(5)), version: before.version + 1, ..before.clone() };
    assert_eq!(event_action(&s, &before, &healthy), None, "health alone is no event");
    assert_eq!(event_action(&s, &before, &RolloutState { step: 1, ..before.clone() }), Some("Step 2"), "1-based");
    assert_eq!(event_action(&s, &before, &RolloutState { promoted: true, ..before.clone() }), Some("Promoted"));
    let rolled_back = RolloutState { phase: RolloutPhase::RolledBack, step: 1, ..before.clone() };
    assert_eq!(event_action(&s, &before, &rolled_back), Some("RolledBack"), "the phase names a move that changes both");
    let manual = spec(json!({"steps": [{"count": 1, "manualPromote": true}, {"percent": 100}]}));
    assert_eq!(
        event_action(&manual, &before, &healthy),
        Some("AwaitingPromote"),
        "a healthy step that waits for a promote says so"
    );
}

#[test]
fn clusters_a_superseded_rollout_reached_go_back_to_stable_until_their_step() {
    let spec = canary_spec(serde_json::json!({}));
    let mut clusters = fleet();
    // Stable 1; generation 2 reached every cluster, then 3 superseded it.
    let state = RolloutState { revision: 3, ..progressing(0) };
    for name in names(&clusters.clone()) {
        key(&mut clusters, name).generation = 2;
    }
    let d = run(&spec, &state, &clusters, at(1), None);
    let steps = step_of(&spec, &clusters);
    for (c, s) in clusters.iter().zip(&steps) {
        let want = if *s == Some(0) { 3 } else { STABLE };
        assert!(d.enqueue.contains(&(c.name.clone(), want)), "{} (step {s:?}) goes to {want}: {:?}", c.name, d.enqueue);
    }
}

#[test]
fn a_failure_that_its_retry_fixes_does_not_fail_the_step() {
    let s = canary_spec(json!({"progressDeadline": "5m"}));
    let (state, mut clusters) = canaries_applied(&s);
    retrying(&mut clusters, "c", "connection reset");
    let d = run(&s, &state, &clusters, at(5), None);
    let st = d.state.clone().unwrap_or_else(|| state.clone());
    assert_eq!(st.phase, RolloutPhase::Progressing, "a key being retried has not failed the revision");
    assert_eq!((d.counts[0].failed, d.counts[0].pending), (0, 1));
    assert_eq!(d.waiting.as_deref(), Some("waiting for 1 cluster to apply revision 2"));
    assert_eq!(d.wake_at, Some(at(300)), "looked at again at the deadline");

    // The retry succeeds: the step passes as if nothing happened.
    apply(&mut clusters, &["c"]);
    let d = run(&s, &st, &clusters, at(10), None);
    assert_eq!(written(&d).step, 1);
}

#[test]
fn a_failure_still_failing_at_the_deadline_fails_the_step() {
    let s = canary_spec(json!({"progressDeadline": "5m"}));
    let (state, mut clusters) = canaries_applied(&s);
    retrying(&mut clusters, "c", "connection reset");
    let d = run(&s, &state, &clusters, at(300), None);
    let st = written(&d);
    assert_eq!(st.phase, RolloutPhase::RolledBack);
    assert_eq!(st.reason.as_deref(), Some("step 1: 1 of 2 clusters failed (maxFailures 0); c: connection reset"));
}

#[test]
fn a_rolled_back_rollout_counts_what_it_rolled_back_not_pending_work() {
    let s = canary_spec(json!({}));
    let (state, mut clusters) = canaries_applied(&s);
    fail(&mut clusters, "c", "boom");
    let d = run(&s, &state, &clusters, at(5), None);
    enqueued(&mut clusters, &d.enqueue);
    let later = run(&s, written(&d), &clusters, at(6), None);
    assert_eq!(
        later.counts[0],
        StepCounts { clusters: 2, updated: 0, healthy: 0, failed: 0, pending: 0, rolled_back: 2 }
    );
    assert_eq!(later.counts[1].pending + later.counts[2].pending, 0);
    assert_eq!(later.waiting, None);
}

#[test]
fn a_step_says_what_it_waits_for() {
    let s = spec(
        json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}, "manualPromote": true}, {"percent": 100, "minSuccessTime": "1m"}]}),
    );
    let mut clusters = fleet();
    let mut state = progressing(0);
    let tick = |state: &mut RolloutState, clusters: &[ClusterView], t: u64, control: Option<RolloutControl>| {
        let d = run(&s, state, clusters, at(t), control);
        if let Some(next) = &d.state {
            *state = next.clone();
        }
        d
    };
    let d = tick(&mut state, &clusters, 0, None);
    assert_eq!(d.waiting.as_deref(), Some("waiting for 2 clusters to apply revision 2"));
    enqueued(&mut clusters, &d.enqueue);
    apply(&mut clusters, &["c", "e"]);
    key(&mut clusters, "e").unready = Some("Deployment/web: 0 of 1 replicas available".into());
    let d = tick(&mut state, &clusters, 1, None);
    assert_eq!(
        d.waiting.as_deref(),
        Some("waiting for 1 cluster to become ready (e: not ready: Deployment/web: 0 of 1 replicas available)")
    );
    key(&mut clusters, "e").unready = None;
    let d = tick(&mut state, &clusters, 2, None);
    assert_eq!(d.waiting.as_deref(), Some("waiting for promote"));
    tick(&mut state, &clusters, 3, Some(RolloutControl::Promote));
    assert_eq!(state.step, 1);
    let d = tick(&mut state, &clusters, 4, None);
    enqueued(&mut clusters, &d.enqueue);
    apply(&mut clusters, &["a", "b", "d", "f"]);
    let d = tick(&mut state, &clusters, 5, None);
    assert_eq!(d.waiting, Some(format!("waiting for minSuccessTime 1m (until {})", at(65).to_rfc3339())));
}
