//! The API's requests: counted by method, route and status code, and timed (to the
//! response head) by route. Routes are the router's patterns (`/v1/clusters/{name}`),
//! so the series stay few whatever the names asked for; a request no route matches is
//! `unmatched`.

use crate::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Instant;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    route: String,
    code: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

type Durations = Family<RouteLabel, Histogram, fn() -> Histogram>;

/// Handles to the request metrics; cheap to clone.
#[derive(Debug, Clone)]
pub struct HttpMetrics {
    requests: Family<RequestLabels, Counter>,
    durations: Durations,
}

impl HttpMetrics {
    /// Registers them in `r` (the caller's `fleetsync` prefix).
    pub(super) fn register(r: &mut Registry) -> HttpMetrics {
        // 1 ms to about 16 s.
        let durations: Durations = Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 15)));
        let m = HttpMetrics { requests: Family::default(), durations };
        r.register("http_requests", "API requests by method, route and status code", m.requests.clone());
        r.register(
            "http_request_duration_seconds",
            "Time to the response head of API requests, by route",
            m.durations.clone(),
        );
        m
    }
}

impl Default for HttpMetrics {
    fn default() -> Self {
        HttpMetrics::register(&mut Registry::default())
    }
}

/// The method as a label: the standard ones by name, any other as `other`.
fn method_label(m: &Method) -> &'static str {
    const KNOWN: [Method; 7] =
        [Method::GET, Method::HEAD, Method::POST, Method::PUT, Method::PATCH, Method::DELETE, Method::OPTIONS];
    KNOWN.iter().find(|k| *k == m).map_or("other", Method::as_str)
}

/// Middleware: counts and times every request.
pub async fn record(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_string();
    let method = method_label(req.method());
    let start = Instant::now();
    let resp = next.run(req).await;
    let m = &state.queue_metrics.http;
    m.durations.get_or_create(&RouteLabel { route: route.clone() }).observe(start.elapsed().as_secs_f64());
    m.requests.get_or_create(&RequestLabels { method, route, code: resp.status().as_u16() }).inc();
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_outside_the_standard_ones_share_one_label() {
        assert_eq!(method_label(&Method::DELETE), "DELETE");
        assert_eq!(method_label(&Method::from_bytes(b"PROPFIND").expect("a method")), "other");
    }
}
