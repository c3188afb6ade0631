//! The periodic resync: re-apply everything every so often (default 2 h), jittered so
//! that processes started together do not resync together. A safety net for drift the
//! hub did not hear about; no correctness depends on it.

use fleetsync_store::WorkQueue;
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// `every` ± 10%.
pub fn jittered(every: Duration) -> Duration {
    every.mul_f64(rand::rng().random_range(0.9..=1.1))
}

pub async fn resync_loop(store: Arc<dyn WorkQueue>, every: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(jittered(every)) => {}
            () = stop.cancelled() => return,
        }
        match store.work_resync().await {
            Ok(n) => tracing::info!(keys = n, "resync enqueued keys"),
            Err(e) => tracing::error!(error = %e, "resync failed; will try at the next interval"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_ten_percent() {
        for _ in 0..1000 {
            let d = jittered(Duration::from_secs(100));
            assert!(d >= Duration::from_secs(90) && d <= Duration::from_secs(110), "{d:?}");
        }
    }
}
