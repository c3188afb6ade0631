//! The process's own series (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_open_fds`, …), named as every Prometheus client library names them and read
//! from `/proc` at each scrape by `metrics-process`. The hub, a worker and an agent all
//! serve them.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// Reads the process's figures when the registry it is in is encoded.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessCollector;

impl ProcessCollector {
    /// Adds the process's series to `registry` (unprefixed, as Prometheus expects them).
    pub fn register(registry: &mut Registry) {
        registry.register_collector(Box::new(ProcessCollector));
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let m = metrics_process::collector::collect();
        if let Some(cpu) = m.cpu_seconds_total {
            let counter = ConstCounter::new(cpu);
            counter.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                counter.metric_type(),
            )?)?;
        }
        let gauges = [
            ("process_open_fds", "Number of open file descriptors", m.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", m.max_fds),
            ("process_virtual_memory_bytes", "Virtual memory size in bytes", m.virtual_memory_bytes),
            (
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes",
                m.virtual_memory_max_bytes,
            ),
            ("process_resident_memory_bytes", "Resident memory size in bytes", m.resident_memory_bytes),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                m.start_time_seconds,
            ),
            ("process_threads", "Number of OS threads in the process", m.threads),
        ];
        for (name, help, value) in gauges {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(text: &str, name: &str) -> f64 {
        let line =
            text.lines().find(|l| l.split(' ').next() == Some(name)).unwrap_or_else(|| panic!("no {name}: {text}"));
        line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("not a number: {line}"))
    }

    /// The figures are this process's: its memory is what `/proc/self/statm` says, it
    /// has started, holds files open, and has spent CPU.
    #[test]
    fn the_figures_are_this_processs() {
        let mut registry = Registry::default();
        ProcessCollector::register(&mut registry);
        let _spin: u64 = (0..2_000_000u64).map(|i| i.wrapping_mul(i)).fold(0, u64::wrapping_add);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: f64 = statm.split(' ').nth(1).and_then(|p| p.parse().ok()).expect("resident pages");
        let rss = sample(&text, "process_resident_memory_bytes");
        assert!((rss / (pages * 4096.0) - 1.0).abs() < 0.5, "rss {rss} vs {pages} pages: {text}");
        assert!(sample(&text, "process_cpu_seconds_total") > 0.0, "{text}");
        assert!(sample(&text, "process_open_fds") >= 3.0, "{text}");
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64();
        let start = sample(&text, "process_start_time_seconds");
        assert!(start <= now && now - start < 3_600.0, "started {start}, now {now}");
        assert!(text.contains("# TYPE process_cpu_seconds counter"), "{text}");
    }
}
