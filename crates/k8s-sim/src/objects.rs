//! One cluster's objects: server-side apply, get, list, delete, and writes to the
//! `status` subresource.
//!
//! Apply is simplified to "the applied object replaces the stored one", keeping the
//! server's fields (uid, creation time) and its status. It still behaves as clients
//! expect where it matters: `resourceVersion` moves only when something changed,
//! `generation` only when something other than metadata changed (for custom
//! resources: `.spec`; status writes never move it), and another field manager's
//! object is a conflict unless the apply is forced. Every change is published to the
//! cluster's [`Feed`] for watchers.

use crate::discovery::{by_id, ResourceType};
use crate::feed::{Change, EventType, Feed};
use crate::manifest::Incoming;
use crate::record::RunId;
use crate::selector::Filter;
use crate::status::{ApiError, Result};
use serde_json::json;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

/// Which object: its kind (an index into the catalogue), namespace (`""` when
/// cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId {
    pub kind: u8,
    pub namespace: Box<str>,
    pub name: Box<str>,
}

/// Which key an object was last applied for, at which SyncSet generation, by which
/// run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub key: Arc<str>,
    pub generation: i64,
    pub run: RunId,
}

/// A stored object, kept as JSON members ready to splice into answers.
#[derive(Debug)]
struct Stored {
    uid: u64,
    created_secs: u64,
    resource_version: u64,
    generation: i64,
    manager: Box<str>,
    meta: Box<str>,
    /// Shared between equal objects (see `intern`).
    body: Arc<str>,
    /// The `.status` value as JSON, written through the `status` subresource only.
    status: Option<Box<str>>,
    owner: Option<Owner>,
}

/// An apply to perform: the split object and who applies it.
#[derive(Debug)]
pub struct Apply<'a> {
    pub incoming: &'a Incoming,
    pub body: Arc<str>,
    pub manager: &'a str,
    pub force: bool,
    pub owner: Option<Owner>,
    /// The uid to give the object if the apply creates it.
    pub new_uid: u64,
    pub now_secs: u64,
}

/// What an apply did: whether it created the object, the object as JSON, and who
/// had put it there before.
#[derive(Debug, PartialEq, Eq)]
pub struct Applied {
    pub created: bool,
    pub json: String,
    pub previous: Option<Owner>,
}

/// A write to the `status` subresource.
#[derive(Debug)]
pub struct StatusWrite {
    /// A JSON merge patch of `.status` (`PATCH`), or its replacement (`PUT`, apply).
    pub merge: bool,
    pub status: serde_json::Value,
    /// The `metadata.resourceVersion` the writer read, if it sent one: the write is
    /// refused (409) if the object has moved since.
    pub precondition: Option<u64>,
}

/// A cluster's objects, its resource version counter and its change feed.
#[derive(Debug, Default)]
pub struct ObjectStore {
    objects: HashMap<ObjectId, Stored>,
    resource_version: u64,
    pub feed: Feed,
}

impl ObjectStore {
    /// Creates or replaces the object `id`.
    pub fn apply(&mut self, id: ObjectId, a: Apply<'_>) -> Result<Applied> {
        let kind = kind_of(&id)?;
        // A `metadata.resourceVersion` in the applied object is a precondition, as on
        // an API server: the object must exist at that version.
        if let Some(rv) = a.incoming.precondition {
            if self.objects.get(&id).is_none_or(|old| old.resource_version != rv) {
                return Err(ApiError::Modified {
                    plural: format!("{}.{}", kind.plural, kind.group),
                    name: id.name.to_string(),
                });
            }
        }
        if let Some(old) = self.objects.get_mut(&id) {
            if !a.force && *old.manager != *a.manager {
                return Err(ApiError::Conflict(format!(
                    "Apply failed with 1 conflict: conflict with \"{}\" (use force to take over its fields)",
                    old.manager
                )));
            }
            let body_changed = *old.body != *a.body;
            let meta_changed = *old.meta != *a.incoming.meta;
            let changed = body_changed || meta_changed || *old.manager != *a.manager;
            if changed {
                self.resource_version += 1;
                old.resource_version = self.resource_version;
                old.generation += i64::from(body_changed);
                old.meta = a.incoming.meta.as_str().into();
                old.body = a.body;
                old.manager = a.manager.into();
            }
            let previous = std::mem::replace(&mut old.owner, a.owner);
            let json = render(kind, old);
            if changed {
                publish(&mut self.feed, &id, EventType::Modified, self.resource_version, &json);
            }
            return Ok(Applied { created: false, json, previous });
        }
        self.resource_version += 1;
        let stored = Stored {
            uid: a.new_uid,
            created_secs: a.now_secs,
            resource_version: self.resource_version,
            generation: 1,
            manager: a.manager.into(),
            meta: a.incoming.meta.as_str().into(),
            body: a.body,
            status: None,
            owner: a.owner,
        };
        let json = render(kind, &stored);
        publish(&mut self.feed, &id, EventType::Added, self.resource_version, &json);
        self.objects.insert(id, stored);
        Ok(Applied { created: true, json, previous: None })
    }

    /// The object as JSON.
    pub fn get(&self, id: &ObjectId) -> Result<String> {
        let kind = kind_of(id)?;
        self.objects.get(id).map(|s| render(kind, s)).ok_or_else(|| ApiError::not_found(kind.plural, &id.name))
    }

    /// Writes `.status` of an existing object; `generation` stays. Answers with the
    /// object.
    pub fn write_status(&mut self, id: &ObjectId, w: StatusWrite) -> Result<String> {
        let kind = kind_of(id)?;
        let old = self.objects.get_mut(id).ok_or_else(|| ApiError::not_found(kind.plural, &id.name))?;
        if w.precondition.is_some_and(|rv| rv != old.resource_version) {
            return Err(ApiError::Modified {
                plural: format!("{}.{}", kind.plural, kind.group),
                name: id.name.to_string(),
            });
        }
        let mut status = if w.merge {
            old.status.as_deref().and_then(|s| serde_json::from_str(s).ok()).unwrap_or(serde_json::Value::Null)
        } else {
            serde_json::Value::Null
        };
        merge_patch(&mut status, w.status);
        let status = (!status.is_null()).then(|| status.to_string().into_boxed_str());
        if status != old.status {
            self.resource_version += 1;
            old.resource_version = self.resource_version;
            old.status = status;
            let json = render(kind, old);
            publish(&mut self.feed, id, EventType::Modified, self.resource_version, &json);
            return Ok(json);
        }
        Ok(render(kind, old))
    }

    /// The objects of one kind (in one namespace or all) that `filter` selects, as
    /// JSON, sorted like the API server sorts (namespace, then name).
    pub fn items(&self, kind_id: u8, namespace: Option<&str>, filter: &Filter) -> Result<Vec<String>> {
        let kind = by_id(kind_id).ok_or_else(|| ApiError::no_such_path("list"))?;
        let mut items: Vec<(&ObjectId, &Stored)> = self
            .objects
            .iter()
            .filter(|(id, _)| id.kind == kind_id && namespace.is_none_or(|ns| *id.namespace == *ns))
            .collect();
        items.sort_unstable_by(|a, b| a.0.cmp(b.0));
        Ok(items.into_iter().map(|(_, s)| render(kind, s)).filter(|json| filter.matches_json(json)).collect())
    }

    /// The `<Kind>List` of [`ObjectStore::items`], at the cluster's resource version.
    pub fn list(&self, kind_id: u8, namespace: Option<&str>, filter: &Filter) -> Result<String> {
        let kind = by_id(kind_id).ok_or_else(|| ApiError::no_such_path("list"))?;
        let mut out = format!(
            r#"{{"kind":"{}List","apiVersion":"{}","metadata":{{"resourceVersion":"{}"}},"items":["#,
            kind.kind, kind.api_version, self.resource_version
        );
        for (i, item) in self.items(kind_id, namespace, filter)?.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(item);
        }
        out.push_str("]}");
        Ok(out)
    }

    /// Starts keeping the cluster's changes for watchers (see [`Feed`]).
    pub fn keep_history(&mut self) {
        self.feed.activate(self.resource_version);
    }

    /// The version of the cluster's latest change.
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// Removes the object; answers with a `Status` of success, as the API server
    /// does for a deletion that completed at once.
    pub fn delete(&mut self, id: &ObjectId) -> Result<String> {
        let kind = kind_of(id)?;
        let mut gone = self.objects.remove(id).ok_or_else(|| ApiError::not_found(kind.plural, &id.name))?;
        self.resource_version += 1;
        if self.feed.is_active() {
            gone.resource_version = self.resource_version;
            publish(&mut self.feed, id, EventType::Deleted, self.resource_version, &render(kind, &gone));
        }
        let status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": &*id.name, "group": kind.group, "kind": kind.plural, "uid": uid(gone.uid)},
        });
        Ok(status.to_string())
    }

    /// Every object applied for a key: (key, `apiVersion/Kind/namespace/name`,
    /// SyncSet generation).
    /// Who put each object there (objects applied without a key left out).
    pub fn owners(&self) -> impl Iterator<Item = &Owner> + '_ {
        self.objects.values().filter_map(|s| s.owner.as_ref())
    }

    pub fn owned(&self) -> impl Iterator<Item = (&Arc<str>, String, i64)> + '_ {
        self.objects.iter().filter_map(|(id, s)| {
            let owner = s.owner.as_ref()?;
            let kind = by_id(id.kind)?;
            Some((
                &owner.key,
                format!("{}/{}/{}/{}", kind.api_version, kind.kind, id.namespace, id.name),
                owner.generation,
            ))
        })
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// Publishes a change to the feed (building it only if someone watches).
fn publish(feed: &mut Feed, id: &ObjectId, event: EventType, resource_version: u64, json: &str) {
    if feed.is_active() {
        let at = tokio::time::Instant::now();
        let (kind, namespace, object) = (id.kind, id.namespace.clone(), Arc::from(json));
        feed.publish(Change { resource_version, kind, namespace, event, object, at });
    }
}

/// Applies a JSON merge patch (RFC 7386) to `target`.
fn merge_patch(target: &mut serde_json::Value, patch: serde_json::Value) {
    use serde_json::Value;
    let Value::Object(patch) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(map) = target {
        for (k, v) in patch {
            if v.is_null() {
                map.remove(&k);
            } else {
                merge_patch(map.entry(k).or_insert(Value::Null), v);
            }
        }
    }
}

fn kind_of(id: &ObjectId) -> Result<&'static ResourceType> {
    by_id(id.kind).ok_or_else(|| ApiError::no_such_path("unknown kind"))
}

/// A uid in the usual UUID shape, unique within the simulator.
fn uid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{:012x}", n & 0xffff_ffff_ffff)
}

/// The object as JSON: the stored members spliced with the server's fields.
fn render(kind: &ResourceType, s: &Stored) -> String {
    let created = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(s.created_secs));
    let mut out = String::with_capacity(s.meta.len() + s.body.len() + 240);
    let _ = write!(out, r#"{{"apiVersion":"{}","kind":"{}","metadata":{{"#, kind.api_version, kind.kind);
    out.push_str(&s.meta);
    if !s.meta.is_empty() {
        out.push(',');
    }
    let _ = write!(
        out,
        r#""uid":"{}","resourceVersion":"{}","generation":{},"creationTimestamp":"{created}"}}"#,
        uid(s.uid),
        s.resource_version,
        s.generation
    );
    if !s.body.is_empty() {
        out.push(',');
        out.push_str(&s.body);
    }
    if let Some(status) = &s.status {
        out.push_str(r#","status":"#);
        out.push_str(status);
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::lookup;
    use crate::manifest::parse;
    use serde_json::Value;

    fn id(name: &str) -> ObjectId {
        let (kind, _) = lookup("v1", "configmaps").expect("configmaps");
        ObjectId { kind, namespace: "app".into(), name: name.into() }
    }

    fn incoming(name: &str, data: &str, note: &str) -> Incoming {
        let (_, kind) = lookup("v1", "configmaps").expect("configmaps");
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","labels":{{"n":"{note}"}}}},"data":{{"k":"{data}"}}}}"#
        );
        parse(body.as_bytes(), kind, Some("app"), name).expect("valid")
    }

    fn apply(store: &mut ObjectStore, inc: &Incoming, manager: &str, force: bool) -> Result<Value> {
        let a = Apply {
            incoming: inc,
            body: inc.body.as_str().into(),
            manager,
            force,
            owner: None,
            new_uid: 7,
            now_secs: 0,
        };
        let applied = store.apply(id("a"), a)?;
        let mut v: Value = serde_json::from_str(&applied.json).expect("json");
        v["created"] = applied.created.into();
        Ok(v)
    }

    #[test]
    fn versions_move_only_with_changes() {
        let mut s = ObjectStore::default();
        let v1 = apply(&mut s, &incoming("a", "1", "x"), "m", false).expect("create");
        assert_eq!((v1["created"].as_bool(), v1["metadata"]["resourceVersion"].as_str()), (Some(true), Some("1")));
        assert_eq!(v1["metadata"]["creationTimestamp"], "1970-01-01T00:00:00Z");
        let same = apply(&mut s, &incoming("a", "1", "x"), "m", false).expect("no-op");
        assert_eq!((same["created"].as_bool(), same["metadata"]["resourceVersion"].as_str()), (Some(false), Some("1")));
        let relabel = apply(&mut s, &incoming("a", "1", "y"), "m", false).expect("metadata only");
        assert_eq!(
            (relabel["metadata"]["resourceVersion"].as_str(), relabel["metadata"]["generation"].as_i64()),
            (Some("2"), Some(1))
        );
        let change = apply(&mut s, &incoming("a", "2", "y"), "m", false).expect("data");
        assert_eq!((change["metadata"]["generation"].as_i64(), change["data"]["k"].as_str()), (Some(2), Some("2")));
        assert_eq!(change["metadata"]["uid"], v1["metadata"]["uid"]);
    }

    #[test]
    fn another_manager_conflicts_unless_forced() {
        let mut s = ObjectStore::default();
        apply(&mut s, &incoming("a", "1", "x"), "one", false).expect("create");
        let err = apply(&mut s, &incoming("a", "1", "x"), "two", false).expect_err("conflict");
        assert_eq!(err.code(), 409);
        apply(&mut s, &incoming("a", "1", "x"), "two", true).expect("forced");
    }

    #[test]
    fn a_resource_version_in_the_applied_object_is_a_precondition() {
        let mut s = ObjectStore::default();
        let with_rv = |rv: &str| {
            let (_, kind) = lookup("v1", "configmaps").expect("configmaps");
            let body = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"a","resourceVersion":"{rv}"}},"data":{{"k":"{rv}"}}}}"#
            );
            parse(body.as_bytes(), kind, Some("app"), "a").expect("valid")
        };
        assert_eq!(apply(&mut s, &with_rv("1"), "m", false).map_err(|e| e.code()).err(), Some(409), "none yet");
        let v1 = apply(&mut s, &incoming("a", "1", "x"), "m", false).expect("create");
        assert_eq!(v1["metadata"]["resourceVersion"], "1");
        let v2 = apply(&mut s, &with_rv("1"), "m", false).expect("at the version read");
        assert_eq!(v2["metadata"]["resourceVersion"], "2");
        assert_eq!(apply(&mut s, &with_rv("1"), "m", false).map_err(|e| e.code()).err(), Some(409), "moved since");
    }

    #[test]
    fn get_list_delete() {
        let mut s = ObjectStore::default();
        apply(&mut s, &incoming("a", "1", "x"), "m", false).expect("create");
        assert!(s.get(&id("a")).is_ok());
        assert_eq!(s.get(&id("b")).map_err(|e| e.code()), Err(404));
        let all = Filter::default();
        let list: Value = serde_json::from_str(&s.list(id("a").kind, Some("app"), &all).expect("list")).expect("json");
        assert_eq!((list["kind"].as_str(), list["items"].as_array().map(Vec::len)), (Some("ConfigMapList"), Some(1)));
        let other: Value =
            serde_json::from_str(&s.list(id("a").kind, Some("other"), &all).expect("list")).expect("json");
        assert_eq!(other["items"].as_array().map(Vec::len), Some(0));
        let status: Value = serde_json::from_str(&s.delete(&id("a")).expect("delete")).expect("json");
        assert_eq!(status["status"], "Success");
        assert_eq!(s.delete(&id("a")).map_err(|e| e.code()), Err(404));
        assert!(s.is_empty());
    }
}
