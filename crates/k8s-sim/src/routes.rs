//! The HTTP surface: cluster APIs under `/clusters/{cluster}/`, the control and
//! report endpoints under `/_sim/`, and `/healthz`.
//!
//! Everything under a cluster goes through one wildcard route and [`crate::paths`],
//! and every refusal there is a Kubernetes `Status`, so clients see one grammar.

use crate::cluster::valid_name;
use crate::paths::{self, Target};
use crate::requests::{self, ObjectRequest};
use crate::status::ApiError;
use crate::{Faults, SimServer};
use axum::body::{to_bytes, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, put};
use axum::{Json, Router};

pub fn router(sim: SimServer) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/_sim/report", get(report))
        .route("/_sim/keys", get(keys))
        .route("/_sim/keys/summary", get(key_summary))
        .route("/_sim/clusters/{cluster}/faults", put(set_faults).get(get_faults))
        .route("/clusters/{cluster}/{*rest}", any(cluster_request))
        .fallback(|uri: Uri| async move { ApiError::no_such_path(uri.path()) })
        .with_state(sim)
}

async fn report(State(sim): State<SimServer>) -> Response {
    Json(sim.report()).into_response()
}

async fn keys(State(sim): State<SimServer>) -> Response {
    Json(sim.key_generations()).into_response()
}

/// The query of `/_sim/keys/summary`.
#[derive(Debug, serde::Deserialize)]
struct SummaryQuery {
    #[serde(default)]
    prefix: String,
}

async fn key_summary(State(sim): State<SimServer>, Query(q): Query<SummaryQuery>) -> Response {
    Json(sim.key_summary(&q.prefix)).into_response()
}

async fn set_faults(State(sim): State<SimServer>, Path(cluster): Path<String>, body: Bytes) -> Response {
    let set = serde_json::from_slice::<Faults>(&body)
        .map_err(|e| ApiError::BadRequest(format!("faults: {e}")))
        .and_then(|f| sim.set_faults(&cluster, f.clone()).map(|()| f));
    match set {
        Ok(f) => Json(f).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn get_faults(State(sim): State<SimServer>, Path(cluster): Path<String>) -> Response {
    if !valid_name(&cluster) {
        return ApiError::BadRequest(format!("{cluster:?} is not a DNS-1123 label")).into_response();
    }
    Json(sim.shared.clusters.get_or_create(&cluster).lock().faults.clone()).into_response()
}

/// The most a request body may hold (the API server's own limit is 3 MiB).
const BODY_LIMIT: usize = 3 * 1024 * 1024;

async fn cluster_request(
    State(sim): State<SimServer>,
    Path((cluster, rest)): Path<(String, String)>,
    request: Request,
) -> Response {
    // Taken apart rather than extracted piece by piece: no copy of the headers.
    let (parts, body) = request.into_parts();
    let (method, uri, headers) = (&parts.method, &parts.uri, &parts.headers);
    if !valid_name(&cluster) {
        let message = format!("no cluster {cluster:?}: cluster names are DNS-1123 labels");
        return ApiError::NotFound { message, name: cluster, kind: "clusters".into() }.into_response();
    }
    let Some(target) = paths::parse(&rest) else { return ApiError::no_such_path(uri.path()).into_response() };
    let discovery = &sim.shared.discovery;
    let document = match &target {
        Target::CoreVersions => Some(&discovery.core_versions),
        Target::Groups => Some(&discovery.groups),
        Target::Version => Some(&discovery.version),
        Target::Resources { api_version } => match discovery.resources.get(api_version.as_str()) {
            Some(doc) => Some(doc),
            None => return ApiError::no_such_path(uri.path()).into_response(),
        },
        Target::Object(_) => None,
    };
    if let Some(doc) = document {
        if method != Method::GET {
            return ApiError::MethodNotAllowed(format!("{method} is not supported on {}", uri.path())).into_response();
        }
        return (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], doc.clone()).into_response();
    }
    let Target::Object(path) = target else { return ApiError::no_such_path(uri.path()).into_response() };
    let body = match to_bytes(body, BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return ApiError::BadRequest(format!("reading the request body: {e}")).into_response(),
    };
    let req = ObjectRequest { cluster: &cluster, path, method, uri, headers, body: &body };
    match requests::serve(&sim.shared, req).await {
        Ok(response) => response,
        Err(e) => {
            tracing::debug!(cluster, method = %method, path = uri.path(), code = e.code(), error = %e, "refused");
            e.into_response()
        }
    }
}
