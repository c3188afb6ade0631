//! Spans over OpenTelemetry (the `otel` cargo feature): when `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, the spans the log filter lets
//! through — one `run` span per key run, with its key, attempt and generation — are
//! batched and sent with OTLP over HTTP (protobuf) to that collector. The SDK reads the
//! standard variables (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`); the service is `fleetsync` unless named.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::registry::LookupSpan;

/// Sends the spans still batched when dropped (at the process's end).
pub struct Exporter(SdkTracerProvider);

impl Drop for Exporter {
    fn drop(&mut self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("warning: OpenTelemetry: the last spans were not sent: {e}");
        }
    }
}

/// The layer that exports spans, and what flushes it, if an endpoint is configured.
pub fn layer<S>() -> Option<(tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>, Exporter)>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let configured = ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !configured {
        return None;
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder().with_http().build() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("warning: OpenTelemetry export is off: {e}");
            return None;
        }
    };
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("fleetsync");
    }
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build();
    let tracer = provider.tracer("fleetsync");
    Some((tracing_opentelemetry::layer().with_tracer(tracer), Exporter(provider)))
}
