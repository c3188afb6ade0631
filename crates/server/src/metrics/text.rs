//! The classic Prometheus text format (version 0.0.4) from the OpenMetrics text that
//! `prometheus-client` writes (it writes no other format).
//!
//! The two differ in a few places only, and this is all that changes:
//! - A counter family `x` is announced as `x` in OpenMetrics and its samples are
//!   `x_total`; the classic format announces `x_total` (else `promtool check metrics`
//!   finds samples with no help text). An info family `x` (samples `x_info`) becomes
//!   the gauge `x_info`; `unknown` is `untyped`.
//! - `# UNIT` lines and the closing `# EOF` do not exist in the classic format.
//! - A counter's `_created` sample does not exist either.
//!
//! Histograms and gauges are the same in both.

/// The content type of the classic text format.
pub const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The content type of the OpenMetrics text format.
pub const OPEN_METRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Whether a scraper's `Accept` header asks for OpenMetrics (Prometheus does, by
/// default); anything else gets the classic format.
pub fn wants_open_metrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|choice| {
            let mut parts = choice.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let refused = parts.any(|p| p.replace(' ', "").eq_ignore_ascii_case("q=0"));
            media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
        })
    })
}

/// An answer's content type header and body.
pub type Encoded = ([(axum::http::HeaderName, &'static str); 1], String);

/// `registry` as an answer in the format `accept` asks for: OpenMetrics, or else the
/// classic text format.
pub fn encode(
    registry: &prometheus_client::registry::Registry,
    accept: Option<&str>,
) -> Result<Encoded, std::fmt::Error> {
    let mut body = String::new();
    prometheus_client::encoding::text::encode(&mut body, registry)?;
    let content_type = axum::http::header::CONTENT_TYPE;
    Ok(match wants_open_metrics(accept) {
        true => ([(content_type, OPEN_METRICS)], body),
        false => ([(content_type, CLASSIC)], classic(&body)),
    })
}

/// `open_metrics` in the classic text format.
pub fn classic(open_metrics: &str) -> String {
    let mut out = String::with_capacity(open_metrics.len());
    let mut help: Option<(&str, &str)> = None;
    // The counter family whose samples are being read (to drop its `_created`).
    let mut counter: Option<String> = None;
    for line in open_metrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').unwrap_or((rest, "")));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = match kind {
                "counter" => (format!("{family}_total"), "counter"),
                "info" => (format!("{family}_info"), "gauge"),
                "unknown" => (family.to_string(), "untyped"),
                other => (family.to_string(), other),
            };
            counter = (kind == "counter").then(|| family.to_string());
            if let Some((_, text)) = help.take().filter(|(h, _)| *h == family) {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
        } else if line.starts_with('#') {
            // `# UNIT`, `# EOF`: not in the classic format.
        } else if counter.as_deref().is_some_and(|c| line.strip_prefix(c).is_some_and(|s| s.starts_with("_created"))) {
            // A counter's creation time: not in the classic format.
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: &str = "# HELP fleetsync_runs Key runs by outcome.
# TYPE fleetsync_runs counter
fleetsync_runs_total{outcome=\"applied\"} 3
fleetsync_runs_created{outcome=\"applied\"} 1700000000.0
# HELP fleetsync_apply_duration_seconds Time one resource apply took.
# TYPE fleetsync_apply_duration_seconds histogram
# UNIT fleetsync_apply_duration_seconds seconds
fleetsync_apply_duration_seconds_sum 0.5
fleetsync_apply_duration_seconds_count 2
fleetsync_apply_duration_seconds_bucket{le=\"+Inf\"} 2
# HELP fleetsync_build Version of this build.
# TYPE fleetsync_build info
fleetsync_build_info{version=\"0.1.0\"} 1
# HELP fleetsync_keys Work keys by phase.
# TYPE fleetsync_keys gauge
fleetsync_keys{phase=\"Pending\"} 2
# EOF
";

    #[test]
    fn counters_and_infos_are_announced_by_their_sample_names_and_openmetrics_only_lines_go() {
        let want = "# HELP fleetsync_runs_total Key runs by outcome.
# TYPE fleetsync_runs_total counter
fleetsync_runs_total{outcome=\"applied\"} 3
# HELP fleetsync_apply_duration_seconds Time one resource apply took.
# TYPE fleetsync_apply_duration_seconds histogram
fleetsync_apply_duration_seconds_sum 0.5
fleetsync_apply_duration_seconds_count 2
fleetsync_apply_duration_seconds_bucket{le=\"+Inf\"} 2
# HELP fleetsync_build_info Version of this build.
# TYPE fleetsync_build_info gauge
fleetsync_build_info{version=\"0.1.0\"} 1
# HELP fleetsync_keys Work keys by phase.
# TYPE fleetsync_keys gauge
fleetsync_keys{phase=\"Pending\"} 2
";
        assert_eq!(classic(OPEN), want);
    }

    #[test]
    fn openmetrics_only_when_asked_for() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_open_metrics(Some(prometheus)));
        assert!(wants_open_metrics(Some("Application/OpenMetrics-Text")));
        for classic in
            [None, Some("text/plain;version=0.0.4"), Some("*/*"), Some("application/openmetrics-text; q=0, text/plain")]
        {
            assert!(!wants_open_metrics(classic), "{classic:?}");
        }
    }
}
