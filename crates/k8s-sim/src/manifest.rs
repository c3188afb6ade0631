//! Reads a server-side apply request: checks its content type and body against the
//! path, and splits the object into what the store keeps.
//!
//! The object is split, not kept whole: its metadata (minus the fields the server
//! owns), its body (every other top-level field, shared between equal objects by
//! the interner), and its fencing claim. Each part is kept as compact JSON members,
//! so answering a request splices strings instead of re-serializing a tree.

use crate::discovery::ResourceType;
use crate::record::{
    FenceClaim, FENCE_ANNOTATION, GENERATION_ANNOTATION, INDEX_ANNOTATION, KEY_ANNOTATION, RUN_ANNOTATION,
};
use crate::status::{ApiError, Result};
use serde_json::{Map, Value};

/// The only patch type served: server-side apply.
pub const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// Metadata fields the server sets; whatever a client sends for them is dropped.
const SERVER_FIELDS: &[&str] =
    &["uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink", "deletionTimestamp"];

/// An applied object, split for storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// Metadata members without the enclosing braces (`"name":"a",...`).
    pub meta: String,
    /// Other members (`"data":{...}`), without braces; empty if there are none.
    pub body: String,
    pub claim: Option<FenceClaim>,
    /// The `metadata.resourceVersion` sent, if any: a precondition of the apply.
    pub precondition: Option<u64>,
}

/// Refuses any content type but server-side apply (415).
pub fn check_content_type(content_type: Option<&str>) -> Result<()> {
    let essence = content_type.and_then(|c| c.split(';').next()).map(str::trim).unwrap_or("");
    if essence.eq_ignore_ascii_case(APPLY_PATCH) {
        return Ok(());
    }
    Err(ApiError::UnsupportedMediaType(format!(
        "the body of the request was in an unknown format ({essence:?}) - accepted media types include: {APPLY_PATCH}"
    )))
}

/// Parses and checks an apply body sent to `kind`/`namespace`/`name`.
pub fn parse(raw: &[u8], kind: &ResourceType, namespace: Option<&str>, name: &str) -> Result<Incoming> {
    let mut obj = decode(raw)?;
    let invalid = |what: String| ApiError::Invalid(format!("{} \"{name}\" is invalid: {what}", kind.kind));
    match obj.remove("apiVersion") {
        Some(Value::String(v)) if v == kind.api_version => {}
        other => return Err(invalid(format!("apiVersion: expected {:?}, got {}", kind.api_version, shown(other)))),
    }
    match obj.remove("kind") {
        Some(Value::String(k)) if k == kind.kind => {}
        other => return Err(invalid(format!("kind: expected {:?}, got {}", kind.kind, shown(other)))),
    }
    let mut meta = match obj.remove("metadata") {
        Some(Value::Object(m)) => m,
        None => Map::new(),
        Some(_) => return Err(invalid("metadata: must be an object".into())),
    };
    let precondition = match meta.get("resourceVersion") {
        None | Some(Value::Null) => None,
        Some(Value::String(rv)) if rv.is_empty() => None,
        Some(Value::String(rv)) => Some(
            rv.parse()
                .map_err(|_| ApiError::BadRequest(format!("metadata.resourceVersion {rv:?} is not a version")))?,
        ),
        Some(other) => return Err(invalid(format!("metadata.resourceVersion: {other} is not a string"))),
    };
    for field in SERVER_FIELDS {
        meta.remove(*field);
    }
    match meta.get("name") {
        None => {
            meta.insert("name".into(), name.into());
        }
        Some(Value::String(n)) if n == name => {}
        Some(other) => {
            return Err(invalid(format!("metadata.name: {other} does not match the name in the path {name:?}")))
        }
    }
    match (namespace, meta.get("namespace")) {
        (None, _) => {
            meta.remove("namespace");
        }
        (Some(ns), None) => {
            meta.insert("namespace".into(), ns.into());
        }
        (Some(ns), Some(Value::String(n))) if n == ns => {}
        (Some(_), Some(_)) => {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ))
        }
    }
    // Status is not applied through the main resource.
    obj.remove("status");
    let claim = claim(&meta).map_err(invalid)?;
    Ok(Incoming { meta: members(meta), body: members(obj), claim, precondition })
}

/// JSON first (what kube-rs sends, and much faster to parse), YAML otherwise.
pub fn decode(raw: &[u8]) -> Result<Map<String, Value>> {
    let is_json = raw.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let value: Value = if is_json {
        serde_json::from_slice(raw).map_err(|e| ApiError::BadRequest(format!("error decoding JSON body: {e}")))?
    } else {
        serde_saphyr::from_slice(raw).map_err(|e| ApiError::BadRequest(format!("error decoding YAML body: {e}")))?
    };
    match value {
        Value::Object(m) => Ok(m),
        _ => Err(ApiError::BadRequest("the body must be one object".into())),
    }
}

fn shown(v: Option<Value>) -> String {
    v.map_or_else(|| "nothing".into(), |v| v.to_string())
}

/// The fencing claim in the fleetsync annotations; none without a key annotation.
fn claim(meta: &Map<String, Value>) -> std::result::Result<Option<FenceClaim>, String> {
    let Some(annotations) = meta.get("annotations").and_then(Value::as_object) else { return Ok(None) };
    let text = |name: &str| annotations.get(name).and_then(Value::as_str);
    let Some(key) = text(KEY_ANNOTATION) else { return Ok(None) };
    let number = |name: &str| -> std::result::Result<Option<i64>, String> {
        text(name)
            .map(|v| v.parse::<i64>().map_err(|_| format!("metadata.annotations[{name}]: {v:?} is not an integer")))
            .transpose()
    };
    let fence = number(FENCE_ANNOTATION)?
        .ok_or_else(|| format!("metadata.annotations[{FENCE_ANNOTATION}]: required with {KEY_ANNOTATION}"))?;
    let generation = number(GENERATION_ANNOTATION)?.unwrap_or(0);
    let index = match number(INDEX_ANNOTATION)? {
        Some(i) => Some(usize::try_from(i).map_err(|_| format!("metadata.annotations[{INDEX_ANNOTATION}]: negative"))?),
        None => None,
    };
    let run = number(RUN_ANNOTATION)?.unwrap_or(0);
    Ok(Some(FenceClaim { key: key.to_string(), fence, generation, index, run }))
}

/// A map's JSON members without the enclosing braces.
fn members(map: Map<String, Value>) -> String {
    if map.is_empty() {
        return String::new();
    }
    let mut text = Value::Object(map).to_string();
    text.pop();
    text.remove(0);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::lookup;

    fn configmaps() -> &'static ResourceType {
        lookup("v1", "configmaps").map(|(_, r)| r).expect("configmaps")
    }

    #[test]
    fn content_types() {
        assert!(check_content_type(Some("application/apply-patch+yaml; charset=utf-8")).is_ok());
        let err = check_content_type(Some("application/merge-patch+json")).expect_err("merge patch");
        assert_eq!(err.code(), 415);
        assert_eq!(check_content_type(None).map_err(|e| e.code()), Err(415));
    }

    #[test]
    fn splits_yaml_and_drops_server_fields() {
        let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  uid: forged\n  resourceVersion: '12'\n  annotations:\n    fleetsync.io/key: t/c1/s1\n    fleetsync.io/fence: '7'\n    fleetsync.io/generation: '3'\n    fleetsync.io/index: '2'\n    fleetsync.io/run: '5'\ndata: {k: v}\nstatus: {x: 1}\n";
        let inc = parse(yaml, configmaps(), Some("app"), "a").expect("valid");
        let meta: Value = serde_json::from_str(&format!("{{{}}}", inc.meta)).expect("json");
        assert_eq!(meta["namespace"], "app");
        assert!(meta.get("uid").is_none());
        assert_eq!(inc.body, r#""data":{"k":"v"}"#);
        let claim = FenceClaim { key: "t/c1/s1".into(), fence: 7, generation: 3, index: Some(2), run: 5 };
        assert_eq!((inc.claim, inc.precondition), (Some(claim), Some(12)));
        assert!(meta.get("resourceVersion").is_none(), "the server's field, not kept");
    }

    #[test]
    fn refuses_what_does_not_match_the_path() {
        let cm =
            |name: &str, kind: &str| format!(r#"{{"apiVersion":"v1","kind":"{kind}","metadata":{{"name":"{name}"}}}}"#);
        let code = |body: String, ns| parse(body.as_bytes(), configmaps(), ns, "a").map(|_| ()).map_err(|e| e.code());
        assert_eq!(code(cm("b", "ConfigMap"), Some("app")), Err(422));
        assert_eq!(code(cm("a", "Secret"), Some("app")), Err(422));
        assert_eq!(code(cm("a", "ConfigMap"), Some("app")), Ok(()));
        let other_ns = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"x"}}"#;
        assert_eq!(code(other_ns.into(), Some("app")), Err(400));
        assert_eq!(code("- a list".into(), Some("app")), Err(400));
        let bad_fence = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":{"fleetsync.io/key":"k","fleetsync.io/fence":"x"}}}"#;
        assert_eq!(code(bad_fence.into(), Some("app")), Err(422));
    }
}
