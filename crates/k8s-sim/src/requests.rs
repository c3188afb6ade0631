//! One request to a cluster's objects, through its whole life: check it, open its
//! fenced flight, wait the simulated latency (no lock held), then fail it or commit
//! it under the cluster's lock. Watches are handed to [`crate::watching`] once their
//! latency is waited; writes to the `status` subresource are never fenced.
//!
//! Refusals found before the wait (bad body, stale token) are still answered after
//! it: a real API server takes its round trip to say no, too.

use crate::cluster::{Cluster, ClusterState, Flight};
use crate::discovery::{lookup, ResourceType};
use crate::faults::{failure, Faults};
use crate::manifest::{self, Incoming};
use crate::objects::{Apply, ObjectId, Owner, StatusWrite};
use crate::paths::ObjectPath;
use crate::record::{bump, FenceClaim, Verb, FENCE_HEADER, KEY_HEADER};
use crate::status::{ApiError, Result};
use crate::watching::{self, ListQuery, Scope};
use crate::Shared;
use axum::extract::Query;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use rand::Rng;
use serde::Deserialize;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A request to objects, as routed.
#[derive(Debug)]
pub struct ObjectRequest<'a> {
    pub cluster: &'a str,
    pub path: ObjectPath<'a>,
    pub method: &'a Method,
    pub uri: &'a Uri,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

/// The query of an apply.
#[derive(Debug, Deserialize)]
struct ApplyQuery {
    #[serde(rename = "fieldManager")]
    field_manager: Option<String>,
    force: Option<String>,
}

/// What the request does, once its path is resolved.
enum Op<'a> {
    Get(&'a str),
    List(ListQuery),
    Watch(ListQuery),
    Apply(&'a str),
    Delete(&'a str),
    /// `PATCH` (merge = true) or `PUT` of `.../{name}/status`.
    WriteStatus {
        name: &'a str,
        merge: bool,
    },
}

/// Serves one object request.
pub async fn serve(sim: &Shared, req: ObjectRequest<'_>) -> Result<Response> {
    let path = &req.path;
    let (kind_id, kind) = lookup(&path.api_version, path.plural).ok_or_else(|| ApiError::no_such_path(path.plural))?;
    // Cluster-scoped kinds live outside namespaces; namespaced objects inside one
    // (a namespaced collection may be listed across all namespaces).
    let misplaced = matches!((kind.namespaced, path.namespace, path.name), (false, Some(_), _) | (true, None, Some(_)));
    if misplaced {
        return Err(ApiError::no_such_path(req.uri.path()));
    }
    if path.subresource.is_some_and(|sub| sub != "status" || !kind.status_subresource) {
        return Err(ApiError::no_such_path(req.uri.path()));
    }
    let op = match (req.method, path.name, path.subresource.is_some()) {
        (&Method::GET, Some(name), _) => Op::Get(name),
        (&Method::GET, None, _) => {
            let q = ListQuery::from_uri(req.uri)?;
            if q.is_watch() {
                Op::Watch(q)
            } else {
                Op::List(q)
            }
        }
        (&Method::PATCH, Some(name), false) => Op::Apply(name),
        (&Method::DELETE, Some(name), false) => Op::Delete(name),
        (&Method::PATCH, Some(name), true) => Op::WriteStatus { name, merge: true },
        (&Method::PUT, Some(name), true) => Op::WriteStatus { name, merge: false },
        (m, _, _) => return Err(ApiError::MethodNotAllowed(format!("{m} is not supported on {}", req.uri.path()))),
    };
    let cluster = sim.clusters.get_or_create(req.cluster);
    let faults = cluster.lock().faults.clone();
    let wait = faults.wait(|| sim.config.latency.sample(&mut rand::rng()));
    let id = |name: &str| ObjectId { kind: kind_id, namespace: path.namespace.unwrap_or("").into(), name: name.into() };
    match op {
        Op::Get(name) => {
            pause(sim, wait, &faults).await?;
            fail_read(&faults)?;
            Ok(json(StatusCode::OK, cluster.lock().objects.get(&id(name))?))
        }
        Op::List(q) => {
            let filter = q.filter()?;
            pause(sim, wait, &faults).await?;
            fail_read(&faults)?;
            let mut state = cluster.lock();
            state.objects.keep_history();
            Ok(json(StatusCode::OK, state.objects.list(kind_id, path.namespace, &filter)?))
        }
        Op::Watch(q) => {
            let namespace = path.namespace.map(str::to_string);
            let scope = Scope { kind_id, kind, namespace, filter: q.filter()? };
            pause(sim, wait, &faults).await?;
            fail_read(&faults)?;
            watching::serve(cluster, scope, &q, sim.closing.subscribe())
        }
        Op::WriteStatus { name, merge } => {
            let write = read_status_write(&req, merge, name);
            pause(sim, wait, &faults).await?;
            commit_status(sim, &cluster, &faults, &id(name), write?)
        }
        Op::Apply(name) => {
            let admitted = read_apply(&req, kind, name)
                .and_then(|apply| Ok((begin(sim, &cluster, apply.incoming.claim.as_ref(), Verb::Apply, wait)?, apply)));
            pause(sim, wait, &faults).await?;
            let (flight, apply) = admitted?;
            commit_apply(sim, &cluster, flight, &faults, id(name), apply)
        }
        Op::Delete(name) => {
            let admitted =
                claim_from_headers(req.headers).and_then(|c| begin(sim, &cluster, c.as_ref(), Verb::Delete, wait));
            pause(sim, wait, &faults).await?;
            commit_delete(sim, &cluster, admitted?, &faults, &id(name))
        }
    }
}

/// A checked apply: the split object, and who applies it how.
struct ReadApply {
    incoming: Incoming,
    manager: String,
    force: bool,
}

fn read_apply(req: &ObjectRequest<'_>, kind: &ResourceType, name: &str) -> Result<ReadApply> {
    manifest::check_content_type(req.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()))?;
    let Query(q) = Query::<ApplyQuery>::try_from_uri(req.uri).map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let manager = q.field_manager.filter(|m| !m.is_empty()).ok_or_else(|| {
        ApiError::BadRequest("PATCH with content type application/apply-patch+yaml requires a fieldManager".into())
    })?;
    let force = q.force.as_deref() == Some("true");
    let incoming = manifest::parse(req.body, kind, req.path.namespace, name)?;
    Ok(ReadApply { incoming, manager, force })
}

/// Reads a write to `.status`: a merge patch (or, as kube-rs's `patch_status` with
/// `Patch::Apply` sends, an apply) or a whole object (`PUT`). Only `.status` and
/// the `metadata.resourceVersion` precondition are taken from it.
fn read_status_write(req: &ObjectRequest<'_>, merge: bool, name: &str) -> Result<StatusWrite> {
    let content_type = req.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let merge = match (merge, essence.as_str()) {
        (true, "application/merge-patch+json") => true,
        (true, manifest::APPLY_PATCH) | (false, "application/json" | "") => false,
        _ => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "{essence:?} is not supported on a status subresource: use application/merge-patch+json or {}",
                manifest::APPLY_PATCH
            )))
        }
    };
    let mut body = manifest::decode(req.body)?;
    let meta = body.remove("metadata").unwrap_or_default();
    if let Some(n) = meta["name"].as_str().filter(|n| *n != name) {
        return Err(ApiError::BadRequest(format!("metadata.name {n:?} does not match the name in the path {name:?}")));
    }
    let precondition = match meta["resourceVersion"].as_str() {
        Some(rv) => Some(
            rv.parse()
                .map_err(|_| ApiError::BadRequest(format!("metadata.resourceVersion {rv:?} is not a version")))?,
        ),
        None => None,
    };
    let status = body.remove("status").unwrap_or(serde_json::Value::Null);
    Ok(StatusWrite { merge, status, precondition })
}

/// The key and token a delete carries in its headers; none without a key header.
fn claim_from_headers(headers: &HeaderMap) -> Result<Option<FenceClaim>> {
    let text = |name: &str| headers.get(name).map(|v| v.to_str().map_err(|_| format!("header {name} is not text")));
    let Some(key) = text(KEY_HEADER).transpose().map_err(ApiError::BadRequest)? else { return Ok(None) };
    let fence = text(FENCE_HEADER)
        .transpose()
        .map_err(ApiError::BadRequest)?
        .and_then(|f| f.trim().parse::<i64>().ok())
        .ok_or_else(|| ApiError::BadRequest(format!("header {FENCE_HEADER} must be an integer with {KEY_HEADER}")))?;
    Ok(Some(FenceClaim { key: key.to_string(), fence, generation: 0, index: None, run: 0 }))
}

/// Opens a fenced request (none for an unfenced one); refuses a stale token.
fn begin(
    sim: &Shared,
    cluster: &Arc<Cluster>,
    claim: Option<&FenceClaim>,
    verb: Verb,
    wait: Duration,
) -> Result<Option<Flight>> {
    let Some(claim) = claim else { return Ok(None) };
    let now = tokio::time::Instant::now();
    cluster.lock().record.begin(claim, verb, now, &sim.counters)?;
    Ok(Some(Flight::new(cluster.clone(), claim.key.clone(), claim.run_id(), wait)))
}

/// Waits the simulated latency. A fault delay (possibly a simulated hang) is cut
/// short when the server shuts down; plain latency is short and needs no watching.
async fn pause(sim: &Shared, wait: Duration, faults: &Faults) -> Result<()> {
    if faults.delay_ms.is_none() {
        tokio::time::sleep(wait).await;
        return Ok(());
    }
    let mut closing = sim.closing.subscribe();
    tokio::select! {
        () = tokio::time::sleep(wait) => Ok(()),
        _ = closing.wait_for(|c| *c) => Err(ApiError::Injected { code: 503 }),
    }
}

/// Reads fail only by a cluster's override, not by the write failure rate.
fn fail_read(faults: &Faults) -> Result<()> {
    faults.status.map_or(Ok(()), |code| Err(ApiError::Injected { code }))
}

/// Whether a write fails by injection.
fn fail_write(sim: &Shared, faults: &Faults) -> Option<u16> {
    let roll = if sim.config.fail_rate > 0.0 { rand::rng().random::<f64>() } else { 1.0 };
    failure(faults, true, sim.config.fail_rate, sim.config.fail_status, roll)
}

/// Closes the flight and refuses a request overtaken by a newer token meanwhile.
fn settle(sim: &Shared, flight: Option<Flight>, state: &mut ClusterState) -> Result<()> {
    let Some(flight) = flight else { return Ok(()) };
    let (key, fence) = (flight.key().to_string(), flight.fence());
    let newest = flight.close(state);
    if newest > fence {
        bump(&sim.counters.fenced);
        return Err(ApiError::Fenced { key, fence, newest });
    }
    Ok(())
}

fn commit_apply(
    sim: &Shared,
    cluster: &Cluster,
    flight: Option<Flight>,
    faults: &Faults,
    id: ObjectId,
    apply: ReadApply,
) -> Result<Response> {
    let injected = faults.refused_apply(&id.name).or_else(|| fail_write(sim, faults));
    // Interned before taking the cluster's lock: the interner has a lock of its own.
    let body = sim.interner.intern(&apply.incoming.body);
    let now_secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut state = cluster.lock();
    settle(sim, flight, &mut state)?;
    if let Some(code) = injected {
        bump(&sim.counters.failures);
        return Err(ApiError::Injected { code });
    }
    let owner = apply.incoming.claim.as_ref().map(|c| Owner {
        key: state.record.shared_key(&c.key).unwrap_or_else(|| Arc::from(c.key.as_str())),
        generation: c.generation,
        run: c.run_id(),
    });
    let a = Apply {
        incoming: &apply.incoming,
        body,
        manager: &apply.manager,
        force: apply.force,
        owner,
        new_uid: sim.next_uid.fetch_add(1, Ordering::Relaxed),
        now_secs,
    };
    let state = &mut *state;
    match state.objects.apply(id, a) {
        Ok(applied) => {
            bump(&sim.counters.applies);
            if let Some(claim) = &apply.incoming.claim {
                state.record.applied(claim, applied.previous.as_ref(), &sim.counters);
            }
            let code = if applied.created { StatusCode::CREATED } else { StatusCode::OK };
            Ok(json(code, applied.json))
        }
        Err(e) => {
            bump(&sim.counters.failures);
            Err(e)
        }
    }
}

fn commit_status(
    sim: &Shared,
    cluster: &Cluster,
    faults: &Faults,
    id: &ObjectId,
    write: StatusWrite,
) -> Result<Response> {
    if let Some(code) = fail_write(sim, faults) {
        bump(&sim.counters.failures);
        return Err(ApiError::Injected { code });
    }
    let object = cluster.lock().objects.write_status(id, write)?;
    Ok(json(StatusCode::OK, object))
}

fn commit_delete(
    sim: &Shared,
    cluster: &Cluster,
    flight: Option<Flight>,
    faults: &Faults,
    id: &ObjectId,
) -> Result<Response> {
    let injected = fail_write(sim, faults);
    let mut state = cluster.lock();
    settle(sim, flight, &mut state)?;
    if let Some(code) = injected {
        bump(&sim.counters.failures);
        return Err(ApiError::Injected { code });
    }
    let status = state.objects.delete(id)?;
    bump(&sim.counters.deletes);
    Ok(json(StatusCode::OK, status))
}

fn json(code: StatusCode, body: String) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}
