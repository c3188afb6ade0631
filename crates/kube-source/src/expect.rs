//! Own-write expectations: which state of an object the source may act on.
//!
//! After the source writes an object's status, the watch may still deliver states
//! older than that write (watches lag, and can lag by seconds). Acting on one of
//! them would act on a view the source knows is stale, and run a reconcile twice
//! for one change. So the tracker records the `resourceVersion` the write returned
//! and holds the object until the watch delivers that version (or newer), or until
//! a timeout passes (the version may never come: a watch cut off and re-listed past
//! it). Meanwhile it keeps the newest state it knows — from the watch or from the
//! write's answer — and acts on that one when the hold ends.
//!
//! A reconcile runs when the newest state's `metadata.generation` differs from the
//! one last reconciled: status writes (the source's own, or anyone's) do not move
//! the generation, so they never trigger a reconcile.
//!
//! Resource versions are compared as integers (the simulator and etcd issue them
//! so); a version that is not an integer is taken as newest and ends any hold.

use kube::api::DynamicObject;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;
use tokio::time::Instant;

/// One object's tracking.
#[derive(Debug)]
struct Tracked {
    /// The newest state known, and its version (`None`: not an integer).
    latest: DynamicObject,
    latest_version: Option<u64>,
    /// The generation last reconciled.
    acted: Option<i64>,
    /// The version the source's own write produced, and until when to wait for it.
    hold: Option<(u64, Instant)>,
}

/// The tracking of every object, by key.
#[derive(Debug)]
pub struct Tracker<K> {
    objects: HashMap<K, Tracked>,
    timeout: Duration,
}

/// The version of an object, if it is an integer.
pub fn version(o: &DynamicObject) -> Option<u64> {
    o.metadata.resource_version.as_deref().and_then(|v| v.parse().ok())
}

fn generation(o: &DynamicObject) -> i64 {
    o.metadata.generation.unwrap_or(0)
}

/// Whether `candidate` is newer than what `current` is at (unknown versions are).
fn newer(candidate: Option<u64>, current: Option<u64>) -> bool {
    match (candidate, current) {
        (Some(c), Some(cur)) => c > cur,
        _ => true,
    }
}

impl<K: Eq + Hash + Clone> Tracker<K> {
    /// `timeout`: how long to wait for the watch to deliver the source's own write.
    pub fn new(timeout: Duration) -> Self {
        Self { objects: HashMap::new(), timeout }
    }

    /// A state delivered by the watch. Answers the state to reconcile now, if any.
    pub fn observed(&mut self, key: &K, object: DynamicObject, now: Instant) -> Option<DynamicObject> {
        let v = version(&object);
        match self.objects.get_mut(key) {
            None => {
                let t = Tracked { latest: object, latest_version: v, acted: None, hold: None };
                self.objects.insert(key.clone(), t);
            }
            Some(t) => {
                if let Some((expected, _)) = t.hold {
                    if v.is_none_or(|v| v >= expected) {
                        t.hold = None;
                    }
                }
                if newer(v, t.latest_version) {
                    t.latest = object;
                    t.latest_version = v;
                }
            }
        }
        self.due(key, now)
    }

    /// The source wrote the object; `written` is the write's answer. Holds the object
    /// until the watch delivers that version or the timeout passes.
    pub fn wrote(&mut self, key: &K, written: DynamicObject, now: Instant) {
        let Some(t) = self.objects.get_mut(key) else { return };
        let v = version(&written);
        if let Some(v) = v {
            t.hold = Some((v, now + self.timeout));
        }
        if newer(v, t.latest_version) {
            t.latest = written;
            t.latest_version = v;
        }
    }

    /// The source reconciled `generation` of the object.
    pub fn acted(&mut self, key: &K, generation: i64) {
        if let Some(t) = self.objects.get_mut(key) {
            t.acted = Some(generation);
        }
    }

    /// The object is gone.
    pub fn forget(&mut self, key: &K) {
        self.objects.remove(key);
    }

    /// Whether the object is held, waiting for the source's own write to come back.
    pub fn is_held(&self, key: &K, now: Instant) -> bool {
        self.objects.get(key).and_then(|t| t.hold).is_some_and(|(_, until)| until > now)
    }

    /// When the earliest hold ends.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.objects.values().filter_map(|t| t.hold.map(|(_, until)| until)).min()
    }

    /// Ends the holds whose time ran out; answers the states to reconcile now.
    pub fn expire(&mut self, now: Instant) -> Vec<(K, DynamicObject)> {
        let ended: Vec<K> = self
            .objects
            .iter_mut()
            .filter(|(_, t)| t.hold.is_some_and(|(_, until)| until <= now))
            .map(|(k, t)| {
                t.hold = None;
                k.clone()
            })
            .collect();
        ended.into_iter().filter_map(|k| self.due(&k, now).map(|o| (k, o))).collect()
    }

    /// The newest state of an object that is neither held nor due for a reconcile:
    /// one whose status may be refreshed.
    pub fn settled(&self, key: &K, now: Instant) -> Option<&DynamicObject> {
        let t = self.objects.get(key)?;
        (!self.is_held(key, now) && t.acted == Some(generation(&t.latest))).then_some(&t.latest)
    }

    /// The state to reconcile now: not held, and at a generation not reconciled yet.
    fn due(&self, key: &K, now: Instant) -> Option<DynamicObject> {
        let t = self.objects.get(key)?;
        if self.is_held(key, now) || t.acted == Some(generation(&t.latest)) {
            return None;
        }
        Some(t.latest.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(rv: u64, generation: i64) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "fleetsync.io/v1", "kind": "SyncSet",
            "metadata": {"name": "s", "namespace": "t", "resourceVersion": rv.to_string(), "generation": generation},
        }))
        .expect("object")
    }

    fn rv(o: Option<DynamicObject>) -> Option<u64> {
        o.as_ref().and_then(version)
    }

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn acts_once_per_generation_not_on_status_writes() {
        let (mut t, now) = (Tracker::new(T), Instant::now());
        let first = t.observed(&"s", obj(1, 1), now).expect("new object");
        t.acted(&"s", 1);
        t.wrote(&"s", obj(2, 1), now);
        assert!(t.observed(&"s", obj(2, 1), now).is_none(), "our own status write");
        assert!(t.observed(&"s", obj(3, 1), now).is_none(), "someone's status write");
        assert_eq!(rv(t.observed(&"s", obj(4, 2), now)), Some(4), "a spec change");
        assert_eq!(version(&first), Some(1));
    }

    #[test]
    fn holds_older_states_until_the_own_write_arrives() {
        let (mut t, now) = (Tracker::new(T), Instant::now());
        t.observed(&"s", obj(10, 1), now);
        t.acted(&"s", 1);
        // A third party changed the spec (rv 11) before our status write (rv 12).
        t.wrote(&"s", obj(12, 2), now);
        assert!(t.is_held(&"s", now));
        assert!(t.observed(&"s", obj(11, 2), now).is_none(), "older than our write: stale");
        let acted = t.observed(&"s", obj(12, 2), now).expect("our write arrived: act on gen 2");
        assert_eq!((version(&acted), acted.metadata.generation), (Some(12), Some(2)));
        t.acted(&"s", 2);
        assert!(t.observed(&"s", obj(12, 2), now).is_none(), "once");
    }

    #[test]
    fn a_newer_version_than_expected_also_ends_the_hold() {
        let (mut t, now) = (Tracker::new(T), Instant::now());
        t.observed(&"s", obj(1, 1), now);
        t.acted(&"s", 1);
        t.wrote(&"s", obj(2, 1), now);
        assert_eq!(rv(t.observed(&"s", obj(5, 2), now)), Some(5));
    }

    #[test]
    fn the_hold_ends_after_the_timeout_with_the_newest_known_state() {
        let (mut t, now) = (Tracker::new(T), Instant::now());
        t.observed(&"s", obj(10, 1), now);
        t.acted(&"s", 1);
        t.wrote(&"s", obj(12, 2), now);
        assert_eq!(t.next_deadline(), Some(now + T));
        assert!(t.expire(now + T / 2).is_empty());
        let due = t.expire(now + T);
        assert_eq!(due.len(), 1);
        assert_eq!((version(&due[0].1), due[0].1.metadata.generation), (Some(12), Some(2)), "the write's answer");
        assert_eq!(t.next_deadline(), None);
        t.acted(&"s", 2);
        assert!(t.observed(&"s", obj(11, 2), now + T).is_none(), "a late stale state changes nothing");
    }

    #[test]
    fn forgotten_objects_start_over() {
        let (mut t, now) = (Tracker::new(T), Instant::now());
        t.observed(&"s", obj(1, 1), now);
        t.acted(&"s", 1);
        t.forget(&"s");
        assert!(t.observed(&"s", obj(7, 1), now).is_some(), "recreated");
    }
}
