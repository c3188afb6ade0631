//! Explicit retries: logged, naming who asked.

use super::*;

/// A retry is logged in its own transaction: a `Status` event `Retry` of the key, at
/// the generation it runs, naming who asked (none for the hub's own); a retry of an
/// unknown key logs nothing.
pub async fn retries_are_logged_naming_who_asked(h: &dyn Harness) {
    let (s, _clock) = open(h).await;
    one_key(&*s).await;
    let k = key("c1", "s1");
    let last = seqs(&*s, 0).await.last().copied().unwrap_or(0);
    s.work_retry_by(&k, Some("token:alice")).await.expect("retry");
    assert_eq!(phase(&*s, &k).await, Phase::Pending);
    s.work_retry(&k).await.expect("retry");
    let err = s.work_retry_by(&key("c1", "nope"), Some("token:alice")).await.expect_err("unknown key");
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");

    let events = s.events_read(last, 100).await.expect("events");
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.kind.as_str(), e.name.as_str(), e.action.as_str(), e.generation, e.actor.as_deref()))
        .collect();
    assert_eq!(seen, [("Status", "c1/s1", "Retry", 1, Some("token:alice")), ("Status", "c1/s1", "Retry", 1, None)]);
}
