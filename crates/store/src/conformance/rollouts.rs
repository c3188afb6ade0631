//! Revisions and rollouts: a new generation is held back from the clusters a rollout
//! has not reached, each step moves exactly its clusters, waits run on the store's
//! clock, and controls and compare-and-set writes behave the same on every backend.

use super::{claim, cluster, open, Harness};
use crate::rollout::RolloutState;
use crate::rollout_drive::{drive, status};
use crate::{ClaimedItem, Completion, LiveRecord, Store};
use fleetsync_model::{ApplyMode, Document, LiveState, ResourceRef, RolloutControl, RolloutPhase, RolloutSpec};
use std::time::Duration;

/// SyncSet `s` on `env=prod` with one ConfigMap carrying `marker`, staged by `rollout` (JSON).
fn staged(marker: &str, rollout: &str) -> Document {
    let Document::SyncSet(mut s) = super::syncset("s", 1, marker) else { unreachable!("a SyncSet") };
    s.spec.resource_apply_mode = ApplyMode::Upsert;
    s.spec.rollout = Some(serde_json::from_str::<RolloutSpec>(rollout).expect("a rollout"));
    Document::SyncSet(s)
}

async fn fleet(s: &dyn Store) {
    let mut docs = vec![cluster("c1", &[("env", "prod"), ("ring", "canary")])];
    docs.extend(["c2", "c3", "c4"].map(|c| cluster(c, &[("env", "prod")])));
    s.objects_apply(docs).await.expect("clusters");
}

/// Claims every claimable key and completes it as applied; (cluster, generation) of each.
async fn run_all(s: &dyn Store) -> Vec<(String, i64)> {
    let items = claim(s, "w", 100).await;
    let done: Vec<Completion> = items.iter().map(super::applied_completion).collect();
    s.work_complete(done).await.expect("complete");
    let mut ran: Vec<(String, i64)> =
        items.iter().map(|i: &ClaimedItem| (i.key.cluster.clone(), i.generation)).collect();
    ran.sort();
    ran
}

fn at(clusters: &[&str], generation: i64) -> Vec<(String, i64)> {
    clusters.iter().map(|c| (c.to_string(), generation)).collect()
}

async fn step(s: &dyn Store, control: Option<RolloutControl>) -> (RolloutPhase, usize) {
    let driven =
        drive(s, "default", "s", control, control.map(|_| "token:ops")).await.expect("drive").expect("a rollout");
    (driven.status.phase, driven.status.step)
}

pub async fn a_rollout_moves_one_step_at_a_time_on_the_stores_clock(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    let spec =
        r#"{"steps": [{"selector": {"matchLabels": {"ring": "canary"}}}, {"percent": 100}], "minSuccessTime": "1m"}"#;
    fleet(&*s).await;
    s.objects_apply(vec![staged("v1", spec)]).await.expect("generation 1");
    assert_eq!(run_all(&*s).await, at(&["c1", "c2", "c3", "c4"], 1), "a first generation goes everywhere at once");
    assert_eq!(s.rollout_get("default", "s").await.expect("read").map(|r| r.phase), Some(RolloutPhase::Completed));

    s.objects_apply(vec![staged("v2", spec)]).await.expect("generation 2");
    assert!(claim(&*s, "w", 100).await.is_empty(), "held back: no key runs generation 2 before the rollout moves it");
    let r = s.rollout_get("default", "s").await.expect("read").expect("a rollout");
    assert_eq!((r.phase, r.step, r.revision, r.stable), (RolloutPhase::Progressing, 0, 2, 1));
    let kept = |g| {
        let s = s.clone();
        async move {
            s.revision_get("default", "s", g).await.expect("read").expect("kept").spec.resources[0].0["data"]["marker"]
                .clone()
        }
    };
    assert_eq!((kept(1).await, kept(2).await), ("v1".into(), "v2".into()), "each generation's content is kept");

    s.objects_apply(vec![cluster("c5", &[("env", "prod")])]).await.expect("a new cluster");
    assert_eq!(run_all(&*s).await, at(&["c5"], 1), "a new cluster gets the stable revision");

    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 0));
    assert_eq!(run_all(&*s).await, at(&["c1"], 2), "step 1 moves the canary alone");
    let report = |rv: &str, unready: Option<&str>| LiveRecord {
        resource: ResourceRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("apps".into()),
            name: "s-0".into(),
        },
        syncset: "s".into(),
        resource_version: rv.into(),
        state: LiveState::Present,
        object: None,
        drift: None,
        unready: unready.map(str::to_string),
    };
    s.live_record("default", "c1", vec![report("1", Some("Deployment: 0 of 1 replicas updated"))])
        .await
        .expect("the agent reports");
    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 0));
    let held = status(&*s, "default", "s").await.expect("status").expect("a rollout");
    assert!(held.healthy_since.is_none(), "an object not ready yet holds the step: {held:?}");
    assert_eq!((held.steps[0].healthy, held.steps[0].pending), (0, 1));
    s.live_record("default", "c1", vec![report("2", None)]).await.expect("ready now");
    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 0), "healthy from now on; the soak begins");
    clock.advance(Duration::from_secs(59));
    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 0), "minSuccessTime not over");
    assert!(claim(&*s, "w", 100).await.is_empty());
    clock.advance(Duration::from_secs(1));
    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 1));
    assert_eq!(run_all(&*s).await, at(&["c2", "c3", "c4", "c5"], 2), "step 2 moves the rest");
    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 1), "healthy from now on");
    clock.advance(Duration::from_secs(60));
    // A move to Completed decided before a cluster joined (at the stable revision) is refused.
    let before = s.rollout_get("default", "s").await.expect("read").expect("a rollout");
    s.objects_apply(vec![cluster("c6", &[("env", "prod")])]).await.expect("a cluster joins");
    let done = RolloutState {
        phase: RolloutPhase::Completed,
        stable: before.revision,
        version: before.version + 1,
        ..before.clone()
    };
    assert!(!s.rollout_write(&done, &[], None).await.expect("write"), "c6 is told the stable revision: not complete");
    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 1), "decided again: c6 is caught up");
    assert_eq!(run_all(&*s).await, at(&["c6"], 2), "the key coalesced: c6 runs the revision only");
    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 1), "healthy again from now on");
    clock.advance(Duration::from_secs(60));
    assert_eq!(step(&*s, None).await, (RolloutPhase::Completed, 1));
    let done = status(&*s, "default", "s").await.expect("status").expect("a rollout");
    assert_eq!((done.stable, done.steps.iter().map(|c| c.healthy).sum::<u64>()), (2, 6));

    let logged = rollout_events(&*s).await;
    assert_eq!(
        logged,
        [("Step 2".to_string(), None), ("Completed".to_string(), None)],
        "each move logged once, in order"
    );

    let stale = s.rollout_get("default", "s").await.expect("read").expect("a rollout");
    assert!(
        !s.rollout_write(&stale, &[], None).await.expect("write"),
        "a write decided from an older version is refused"
    );
    s.object_delete(fleetsync_model::Kind::SyncSet, "default", "s").await.expect("delete");
    assert!(s.rollout_get("default", "s").await.expect("read").is_none());
    assert!(
        s.revision_get("default", "s", 2).await.expect("read").is_none(),
        "a deleted SyncSet's revisions go with it"
    );
}

/// Steps: the first cluster by name, waiting for a promote; then every cluster.
const PROMOTED: &str = r#"{"steps": [{"count": 1, "manualPromote": true}, {"percent": 100}]}"#;

/// The fleet at generation 1 of `s` (staged by [`PROMOTED`]), then generation 2 on its
/// first step: c1 runs it, the others stay at 1.
async fn canary_at_two(s: &dyn Store) {
    fleet(s).await;
    s.objects_apply(vec![staged("v1", PROMOTED)]).await.expect("generation 1");
    run_all(s).await;
    s.objects_apply(vec![staged("v2", PROMOTED)]).await.expect("generation 2");
    step(s, None).await;
    assert_eq!(run_all(s).await, at(&["c1"], 2), "count 1: the first cluster by name");
}

pub async fn rollout_controls_pause_resume_promote_and_abort(h: &dyn Harness) {
    let (s, _clock) = open(h).await;
    canary_at_two(&*s).await;
    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 0), "healthy, waiting for a promote");
    assert_eq!(step(&*s, None).await, (RolloutPhase::Progressing, 0), "still waiting");

    assert_eq!(step(&*s, Some(RolloutControl::Pause)).await, (RolloutPhase::Paused, 0));
    let refused = drive(&*s, "default", "s", Some(RolloutControl::Promote), None).await;
    assert!(refused.is_err(), "no promote while paused");
    assert_eq!(step(&*s, Some(RolloutControl::Resume)).await, (RolloutPhase::Progressing, 0));
    assert_eq!(step(&*s, Some(RolloutControl::Promote)).await, (RolloutPhase::Progressing, 1));

    assert_eq!(step(&*s, Some(RolloutControl::Abort)).await, (RolloutPhase::RolledBack, 1));
    assert_eq!(
        run_all(&*s).await,
        at(&["c1", "c2", "c3", "c4"], 1),
        "abort: every key back at the stable revision, none ran 2 twice"
    );
    let r = status(&*s, "default", "s").await.expect("status").expect("a rollout");
    assert_eq!((r.phase, r.reason.as_deref()), (RolloutPhase::RolledBack, Some("aborted")));
    assert!(
        drive(&*s, "default", "s", Some(RolloutControl::Resume), None).await.is_err(),
        "a rolled-back rollout takes no control"
    );
    let ops = Some("token:ops".to_string());
    let logged = rollout_events(&*s).await;
    let want =
        [("AwaitingPromote", &None), ("Paused", &ops), ("Progressing", &ops), ("Step 2", &ops), ("RolledBack", &ops)]
            .map(|(a, o)| (a.to_string(), o.clone()));
    assert_eq!(logged, want, "the healthy canary waiting for its promote, then controls logged naming who asked");
}

/// The `Rollout` events of `s`: (action, actor), oldest first.
async fn rollout_events(s: &dyn Store) -> Vec<(String, Option<String>)> {
    let events = s.events_read(0, 10_000).await.expect("events");
    events.into_iter().filter(|e| e.kind == "Rollout" && e.name == "s").map(|e| (e.action, e.actor)).collect()
}

pub async fn revisions_kept_are_those_still_needed_and_the_last_ten(h: &dyn Harness) {
    let (s, _clock) = open(h).await;
    canary_at_two(&*s).await;
    for g in 3..=15 {
        s.objects_apply(vec![staged(&format!("v{g}"), PROMOTED)]).await.expect("a newer generation");
    }
    let mut kept = Vec::new();
    for g in 1..=15 {
        if s.revision_get("default", "s", g).await.expect("read").is_some() {
            kept.push(g);
        }
    }
    assert_eq!(
        kept,
        [1, 2, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        "stable (and c2-c4's), c1's, and the last ten: history stays bounded"
    );
}
